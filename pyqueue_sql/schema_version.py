"""Whether a database's schema is older than this version's, without alembic or SQLAlchemy.

`pyqueue-sql worker` asks this before it starts (:func:`require_schema`), so a worker's start
loads neither: the revisions are read from their ``revision =`` / ``down_revision =`` lines in
migrations/versions, the recorded revision and what the last migrate installed with the
driver's own connection. pyqueue_sql.migrate.require_schema (a DSN or a SQLAlchemy Connection)
gives the same answer through :func:`refuse_older`.
"""

from __future__ import annotations

import contextlib
import functools
import logging
import re
from collections.abc import Mapping
from typing import Any

from . import dialects
from ._resources import migrations_dir
from .errors import SchemaNotInstalledError
from .queries import migration_queries

VERSION_TABLE = "pyqueue_alembic_version"  # migrate.VERSION_TABLE
PACKAGE = "package"  # migrate.PACKAGE: the kind of the record of the package's SQL digest
log = logging.getLogger("pyqueue_sql.migrate")

_ASSIGNMENT = re.compile(r"^(revision|down_revision)\s*(?::[^=]*)?=\s*(.+?)\s*$", re.MULTILINE)
_NAME = re.compile(r"""["']([^"']+)["']""")


@functools.cache
def revisions() -> tuple[frozenset[str], str | None]:
    """Every revision of migrations/versions and the head (None unless there is exactly one)."""
    known: set[str] = set()
    below: set[str] = set()
    for path in sorted(migrations_dir().joinpath("versions").glob("*.py")):
        found = dict(m.groups() for m in _ASSIGNMENT.finditer(path.read_text(encoding="utf-8")))
        if "revision" not in found:
            continue
        known.update(_NAME.findall(found["revision"]))
        below.update(_NAME.findall(found.get("down_revision", "None")))
    heads = known - below
    return frozenset(known), (next(iter(heads)) if len(heads) == 1 else None)


def head() -> str | None:
    return revisions()[1]


def version_tuple(text: str) -> tuple[int, ...]:
    """'pyqueue-sql 0.2.0' or '0.2.0.dev1' -> (0, 2, 0): the numbers before anything else."""
    numbers = []
    for part in text.rsplit(" ", 1)[-1].split("."):
        if not part.isdigit():
            break
        numbers.append(int(part))
    return tuple(numbers)


def sources_digest(dialect: str) -> str:
    """The digest of the SQL this version installs on a dialect (the install script: schema.sql,
    the revisions' DDL, routines/): recorded by migrate, compared by migrate --check."""
    import hashlib

    from .queries import install_script

    return hashlib.sha256(install_script(dialect).encode()).hexdigest()[:32]


def _package_version() -> str:
    from . import __version__

    return __version__


def _shown(heads: tuple[str, ...]) -> str:
    return ", ".join(heads) if heads else "none"


def refuse_older(
    heads: tuple[str, ...], recorded: Mapping[tuple[str, str], str] | None, dialect: str
) -> None:
    """SchemaNotInstalledError when the recorded revisions (`heads`) are known ones before this
    version's head, or (`recorded`: what the last migrate recorded, read at the head) the routines
    were installed by an older release. A newer or unknown revision is fine."""
    known, ours = revisions()
    version = _package_version()
    older = [h for h in heads if h in known and h != ours]
    if older and not any(h not in known for h in heads):
        raise SchemaNotInstalledError(
            f"pyqueue-sql {version} needs schema revision {ours}, this database is at "
            f"{_shown(heads)}: run `pyqueue-sql migrate` first (docs/operations.md, Upgrading)"
        )
    # an older release's record, unless its SQL is this version's (the digest, read from the package's
    # SQL files, only then: a worker's start at the current release skips it)
    package = [
        n
        for (k, n), d in (recorded or {}).items()
        if k == PACKAGE and version_tuple(n) < version_tuple(version) and d != sources_digest(dialect)
    ]
    if package:
        raise SchemaNotInstalledError(
            f"pyqueue-sql {version} needs its routines, this database has those of {package[0]}: "
            "run `pyqueue-sql migrate` first (docs/operations.md, Upgrading)"
        )


def _text(value: object) -> str:
    return value.decode() if isinstance(value, (bytes, bytearray)) else str(value)


def _read(dsn: str) -> tuple[tuple[str, ...], dict[tuple[str, str], str] | None, str]:
    """The recorded revisions, what the last migrate recorded (None unless at the head and
    pyqueue_installed exists) and the dialect's name, on an autocommit connection of the driver:
    one statement (schema_state) when both tables can be read, else the three below it.
    Raises when the version table cannot be read (absent, or not readable by the role)."""
    dialect = dialects.for_dsn(dsn)
    queries = migration_queries(dialect.name)
    connection = dialect.connect(dsn)
    try:
        cursor = connection.cursor()
        try:
            try:
                cursor.execute(queries["schema_state"])
                rows = cursor.fetchall()
            except Exception:  # a table absent or unreadable: asked one at a time below
                rows = None
            if rows is not None:
                heads = tuple(sorted(_text(k) for what, k, _, _ in rows if _text(what) == "revision"))
                if heads != (head(),):
                    return heads, None, dialect.name
                recorded = {
                    (_text(k), _text(n)): _text(d) for what, k, n, d in rows if _text(what) == "installed"
                }
                return heads, recorded, dialect.name
            return _read_apart(cursor, queries, dialect.name)
        finally:
            cursor.close()
    finally:
        with contextlib.suppress(Exception):
            connection.close()


def _read_apart(
    cursor: Any, queries: Mapping[str, str], dialect: str
) -> tuple[tuple[str, ...], dict[tuple[str, str], str] | None, str]:
    """_read one table at a time, when schema_state failed: no version table (not installed, or
    unreadable) raises, so nothing is refused; no pyqueue_installed: nothing recorded."""
    cursor.execute("SELECT version_num FROM pyqueue_alembic_version")  # VERSION_TABLE
    heads = tuple(sorted(_text(v) for (v,) in cursor.fetchall()))
    if heads != (head(),):
        return heads, None, dialect
    cursor.execute(queries["installed_table"])
    [(count,)] = cursor.fetchall()
    if not int(count):
        return heads, None, dialect
    cursor.execute(queries["installed_records"])
    return heads, {(_text(k), _text(n)): _text(d) for k, n, d in cursor.fetchall()}, dialect


def require_schema(dsn: str) -> None:
    """Refuses to go on (SchemaNotInstalledError, one line saying to run `pyqueue-sql migrate`) when
    the database's schema is older than this version's: its revision is one before this version's
    head, or (same revision) its routines were installed by an older release. Called by `pyqueue-sql
    worker` before it starts. A newer schema is fine (a release keeps the previous one's routines),
    and so is what cannot be read (a role without SELECT on the version table, a schema installed
    from `pyqueue-sql sql`): nothing is refused on a guess."""
    try:
        heads, recorded, dialect = _read(dsn)
    except Exception as exc:  # unreadable here: the worker's own calls say what is wrong
        log.debug("pyqueue-sql: the schema revision could not be read: %s", exc)
        return
    refuse_older(heads, recorded, dialect)
