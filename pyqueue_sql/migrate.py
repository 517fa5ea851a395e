"""Installing and upgrading the schema with alembic.

Each revision in migrations/versions runs a frozen SQL file of the current
dialect (migrations/sql/<dialect>/<revision>.up.sql / .down.sql); sql/<dialect>/
holds the current state, and a test proves both build the same catalog.

From an application's own alembic setup, call ``upgrade(op.get_bind())`` in one
of your revisions (or in your env.py after your own migrations): our revisions
are recorded in ``pyqueue_alembic_version`` and never mix with yours.
"""

from __future__ import annotations

import contextlib
import warnings
from typing import Any, Iterator

from alembic import command, op
from alembic.config import Config
from alembic.runtime.migration import MigrationContext
from alembic.script import ScriptDirectory
from sqlalchemy import create_engine, pool
from sqlalchemy.engine import Connection

from . import dialects
from ._resources import migrations_dir
from .queries import queries, split_script

VERSION_TABLE = "pyqueue_alembic_version"


def _dialect_of(connection: Connection) -> dialects.Dialect:
    return dialects.for_name("postgresql" if connection.dialect.name == "postgresql" else "mysql")


@contextlib.contextmanager
def migration_lock(connection: Connection) -> Iterator[None]:
    """Serialises concurrent migrators with a database lock: a transaction-level
    advisory lock on PostgreSQL (gone at commit), GET_LOCK on MySQL (released
    after the block, which commits first when the connection is ours)."""
    names = queries(_dialect_of(connection).name)
    connection.exec_driver_sql(names["migration_lock"])
    try:
        yield
    finally:
        if "migration_unlock" in names:
            connection.exec_driver_sql(names["migration_unlock"])


def run_sql_file(filename: str, undo: tuple[str, ...] | None = None) -> None:
    """Runs migrations/sql/<dialect>/<filename> on the connection of the running migration.

    PostgreSQL runs it inside the migration's transaction. MySQL commits every
    DDL statement at once, so when an ``.up.sql`` fails half-way its
    ``.down.sql`` (which drops only what exists) puts the database back before
    the error is raised, and the next migrate starts clean. ``undo`` names
    other files to run instead (in order) for a file that is not an ``.up.sql``.
    """
    connection = op.get_bind()
    dialect = _dialect_of(connection)
    folder = migrations_dir() / "sql" / dialect.name
    path = folder / filename
    if not path.is_file():
        raise FileNotFoundError(f"migration file {path} is missing: is this installation complete?")
    saved = _mysql_routine_grants(connection) if dialect.name == "mysql" else None
    try:
        _execute_script(connection, dialect, path.read_text(encoding="utf-8"))
        if saved:
            _mysql_restore_routine_grants(connection, saved)
    except Exception:
        if undo is None:
            undo = (filename.replace(".up.sql", ".down.sql"),) if filename.endswith(".up.sql") else ()
        if dialect.name == "mysql":
            for name in undo:
                if (folder / name).is_file():
                    with contextlib.suppress(Exception):
                        _execute_script(connection, dialect, (folder / name).read_text(encoding="utf-8"))
            if saved:  # the undo re-created the previous routines: their grants come back too
                with contextlib.suppress(Exception):
                    _mysql_restore_routine_grants(connection, saved)
        raise


def _mysql_routine_grants(connection: Connection) -> list[tuple] | None:
    """The grants on this database's routines (mysql.procs_priv), or None when
    the migrating account may not read them (a warning then says to re-grant)."""
    cursor = connection.connection.cursor()
    try:
        cursor.execute(queries("mysql")["routine_grants"])
        return [tuple(_text(v) for v in row) for row in cursor.fetchall()]
    except Exception as exc:  # no SELECT on mysql.procs_priv
        warnings.warn(f"pyqueue-sql: cannot read the grants on the routines ({exc}); an upgrade that "
                      "re-creates them drops them: run `pyqueue-sql grant ... --apply` again afterwards",
                      stacklevel=3)
        return None
    finally:
        cursor.close()


def _text(value: Any) -> Any:
    if isinstance(value, (set, frozenset)):  # Proc_priv, a SET column
        return ",".join(sorted(value))
    return value.decode() if isinstance(value, (bytes, bytearray)) else value


_ROUTINE_PRIVILEGES = {"execute": "EXECUTE", "alter routine": "ALTER ROUTINE"}


def _mysql_restore_routine_grants(connection: Connection, saved: list[tuple]) -> None:
    """Gives back the routine grants that re-creating the procedures dropped
    (only those that are gone, only on routines that exist again). Names come
    from the server's catalog and are validated and backtick-quoted; a grant
    whose account is gone meanwhile fails (no account is ever created here) and
    is reported as a warning."""
    from .privileges import Account, _mysql_account, _mysql_quote, no_account_creation

    now = set(_mysql_routine_grants(connection) or ())
    template = queries("mysql")["regrant_routine"]
    cursor = connection.connection.cursor()
    try:
        with no_account_creation("mysql", connection.connection):
            for row in saved:
                if row in now:
                    continue
                user, host, routine, routine_type, privileges = row
                granted = {p.strip().lower() for p in str(privileges).split(",")}
                chosen = [_ROUTINE_PRIVILEGES[p] for p in _ROUTINE_PRIVILEGES if p in granted]
                if not chosen or str(routine_type).upper() not in ("PROCEDURE", "FUNCTION"):
                    continue
                try:
                    # Host '' is a MariaDB role: granted as `role`, without a host part
                    statement = template.format(
                        privilege=", ".join(chosen), routine_type=str(routine_type).upper(),
                        routine=_mysql_quote(routine), role=_mysql_account(Account(user, host)),
                        grant_option=" WITH GRANT OPTION" if "grant" in granted else "")
                    cursor.execute(statement)
                except Exception as exc:  # a routine this revision no longer has (1305), an odd name
                    if getattr(exc, "args", (None,))[0] != 1305:
                        warnings.warn(f"pyqueue-sql: could not give {user}@{host} back {', '.join(chosen)} "
                                      f"on {routine}: {exc}", stacklevel=3)
    finally:
        cursor.close()


def _execute_script(connection: Connection, dialect: dialects.Dialect, text: str) -> None:
    # The DB-API cursor, called without parameters, leaves '%' in the SQL alone.
    if not split_script(text):
        return  # comments only: psycopg would refuse an empty query
    cursor = connection.connection.cursor()
    try:
        if dialect.name == "postgresql":
            cursor.execute(text)  # without parameters psycopg runs the whole script at once
        else:
            for statement in split_script(text):
                cursor.execute(statement)
    finally:
        cursor.close()


def alembic_config(connection: Connection | None = None, owned: bool = False) -> Config:
    config = Config()
    config.set_main_option("script_location", str(migrations_dir()))
    if connection is not None:
        config.attributes["connection"] = connection
        config.attributes["owned"] = owned
    return config


@contextlib.contextmanager
def _connection(target: Any) -> Iterator[Connection]:
    """A SQLAlchemy connection from a DSN (ours: committed here) or the caller's own."""
    if isinstance(target, Connection):
        yield target
        return
    dialect = dialects.for_dsn(target)
    engine = create_engine(f"{dialect.sqlalchemy_dialect}://", poolclass=pool.NullPool,
                           creator=lambda: dialect.connect(target, autocommit=False))
    try:
        with engine.connect() as connection:
            yield connection
            connection.commit()
    finally:
        engine.dispose()


def upgrade(target: Any, revision: str = "heads") -> None:
    """Brings the schema to ``revision``; target is a DSN or a SQLAlchemy Connection."""
    with _connection(target) as connection:
        command.upgrade(alembic_config(connection, owned=connection is not target), revision)


def downgrade(target: Any, revision: str = "base") -> None:
    """Takes the schema back to ``revision`` ('base' removes everything pyqueue-sql installed)."""
    with _connection(target) as connection:
        command.downgrade(alembic_config(connection, owned=connection is not target), revision)


def current(target: Any) -> tuple[str, ...]:
    """The revisions recorded in the database (empty when not installed)."""
    with _connection(target) as connection:
        context = MigrationContext.configure(connection, opts={"version_table": VERSION_TABLE})
        return tuple(context.get_current_heads())


def head() -> str:
    return ScriptDirectory.from_config(alembic_config()).get_current_head()
