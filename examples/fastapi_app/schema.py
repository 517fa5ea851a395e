"""The example's own tables (the same SQL on PostgreSQL and MySQL/MariaDB) and its queue."""

from __future__ import annotations

import pyqueue_sql

EMAIL_QUEUE = "order_emails"
EMAIL_KIND = "order_confirmation"

# A quantity below 1 is refused by the table itself: that is the failing order write whose
# transaction takes the e-mail's push down with it.
TABLES = (
    """CREATE TABLE IF NOT EXISTS shop_orders (
        id VARCHAR(64) PRIMARY KEY,
        customer VARCHAR(255) NOT NULL,
        item VARCHAR(255) NOT NULL,
        quantity INTEGER NOT NULL CHECK (quantity > 0)
    )""",
    """CREATE TABLE IF NOT EXISTS shop_sent_emails (
        order_id VARCHAR(64) PRIMARY KEY,
        recipient VARCHAR(255) NOT NULL,
        subject VARCHAR(255) NOT NULL
    )""",
)
INSERT_ORDER = "INSERT INTO shop_orders (id, customer, item, quantity) VALUES (%s, %s, %s, %s)"
SENT_ALREADY = "SELECT 1 FROM shop_sent_emails WHERE order_id = %s"
RECORD_SENT = "INSERT INTO shop_sent_emails (order_id, recipient, subject) VALUES (%s, %s, %s)"

# MySQL/MariaDB codes of a row the table refuses: duplicate key, NULL, CHECK (MySQL 8, MariaDB).
_MYSQL_REFUSED = {1062, 1048, 3819, 4025}


def refused(exc: BaseException) -> bool:
    """Whether a driver error says the table refused the row (a constraint), not a failure."""
    try:
        import psycopg

        if isinstance(exc, psycopg.errors.IntegrityError):
            return True
    except ImportError:
        pass
    code = exc.args[0] if exc.args and isinstance(exc.args[0], int) else None
    return type(exc).__module__.startswith("pymysql") and code in _MYSQL_REFUSED


def setup(dsn: str) -> None:
    """Creates the tables and the e-mail queue (the pyqueue-sql schema must be installed:
    `pyqueue-sql migrate --dsn DSN`)."""
    with pyqueue_sql.connect(dsn) as db:
        cur = db.connection.cursor()
        try:
            for statement in TABLES:
                cur.execute(statement)
        finally:
            cur.close()
        if EMAIL_QUEUE not in {s.name for s in db.settings()}:
            db.queue(EMAIL_QUEUE).create(max_attempts=5)
