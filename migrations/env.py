"""Alembic environment of pyqueue-sql, for `alembic` run by hand on this folder.

pyqueue-sql itself never goes through this file: pyqueue_sql.migrate drives the
revisions with alembic's ScriptDirectory and MigrationContext directly (so it
never touches alembic's global op/context proxies, and on MySQL it records its
progress so an interrupted run resumes). Use `pyqueue-sql migrate` or
pyqueue_sql.migrate.upgrade(); this file only lets `alembic -c ... upgrade`
work against the URL in sqlalchemy.url, under the same migration lock, in our
own version table (pyqueue_alembic_version), and `alembic ... --sql` print the
SQL the revisions run.
"""

from __future__ import annotations

from alembic import context
from sqlalchemy import engine_from_config, pool

from pyqueue_sql.migrate import VERSION_TABLE, alembic_env_offline, alembic_env_run

config = context.config


def main() -> None:
    if context.is_offline_mode():
        url = config.get_main_option("sqlalchemy.url")
        context.configure(url=url, literal_binds=True, version_table=VERSION_TABLE)
        with context.begin_transaction(), alembic_env_offline(context.get_context()):
            context.run_migrations()
        return
    engine = engine_from_config(
        config.get_section(config.config_ini_section, {}), prefix="sqlalchemy.", poolclass=pool.NullPool
    )
    with engine.connect() as connection:
        context.configure(connection=connection, version_table=VERSION_TABLE)
        with context.begin_transaction():
            with alembic_env_run(connection):
                context.run_migrations()
        connection.commit()


main()
