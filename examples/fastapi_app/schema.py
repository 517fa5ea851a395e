"""The example's own tables (the same SQL on PostgreSQL and MySQL/MariaDB) and its queue.

    python -m examples.fastapi_app.schema "$PYQUEUE_DSN"

creates the DSN's database when it does not exist yet, installs pyqueue-sql in it (as
`pyqueue-sql migrate` does), then the tables and the queue: everything the app and its worker use.
"""

from __future__ import annotations

import sys
from urllib.parse import unquote, urlsplit

import pyqueue_sql
from pyqueue_sql import dialects, migrate

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


def create_database(dsn: str) -> bool:
    """Creates the database the DSN names when the server has none of that name (connecting to the
    server's own database: postgres on PostgreSQL, none on MySQL/MariaDB); True if it made one."""
    parts = urlsplit(dsn)
    name = unquote(parts.path.lstrip("/"))
    if not name or '"' in name or "`" in name:
        raise ValueError(f"the DSN must name a database (a plain name): {dsn!r}")
    dialect = dialects.for_dsn(dsn)
    postgresql = dialect.name == "postgresql"
    server = parts._replace(path="/postgres" if postgresql else "/").geturl()
    connection = dialect.connect(server)
    try:
        cur = connection.cursor()
        if postgresql:
            cur.execute("SELECT count(*) FROM pg_database WHERE datname = %s", (name,))
        else:
            cur.execute("SELECT count(*) FROM information_schema.schemata WHERE schema_name = %s", (name,))
        if cur.fetchone()[0]:
            return False
        cur.execute(f'CREATE DATABASE "{name}"' if postgresql else f"CREATE DATABASE `{name}`")
        return True
    finally:
        connection.close()


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
        if EMAIL_QUEUE not in {s.queue for s in db.settings()}:
            db.queue(EMAIL_QUEUE).create(max_attempts=5)


def main(argv: list[str]) -> int:
    if len(argv) != 1:
        print("usage: python -m examples.fastapi_app.schema DSN", file=sys.stderr)
        return 2
    dsn = argv[0]
    if create_database(dsn):
        print(f"created the database {urlsplit(dsn).path.lstrip('/')}")
    result = migrate.upgrade(dsn)
    print(f"pyqueue-sql schema: {', '.join(result.after)}")
    setup(dsn)
    print(f"tables shop_orders and shop_sent_emails, queue {EMAIL_QUEUE}: ready")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
