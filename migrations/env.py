"""Alembic environment of pyqueue-sql.

Runs against a connection handed over by pyqueue_sql.migrate (config attribute
"connection"), or against the URL in sqlalchemy.url. Our revisions are
recorded in their own version table (pyqueue_alembic_version), so they never
touch an application's alembic_version. Migrators are serialised by a
database lock, so running migrate from several processes at once is safe.
"""

from __future__ import annotations

from alembic import context
from sqlalchemy import engine_from_config, pool

from pyqueue_sql.migrate import VERSION_TABLE, migration_lock

config = context.config


def run_migrations(connection, owned: bool) -> None:
    context.configure(connection=connection, version_table=VERSION_TABLE)
    with migration_lock(connection):
        with context.begin_transaction():
            context.run_migrations()
        if owned:
            # Commit while still holding the lock: the next migrator must see our version row.
            connection.commit()


def main() -> None:
    if context.is_offline_mode():
        raise SystemExit("pyqueue-sql migrations run online only; `pyqueue-sql sql --dialect X` prints the SQL")
    connection = config.attributes.get("connection")
    if connection is not None:
        run_migrations(connection, owned=config.attributes.get("owned", False))
        return
    engine = engine_from_config(config.get_section(config.config_ini_section, {}),
                                prefix="sqlalchemy.", poolclass=pool.NullPool)
    with engine.connect() as connection:
        run_migrations(connection, owned=True)


main()
