"""The one module that holds SQL for Python: named statements loaded from
``sql/<dialect>/queries.sql`` (and ``migration.sql``, the migrator's own).

A file is a sequence of blocks, each introduced by a line ``-- name: NAME``;
the block's text up to the next such line is the statement. Parameters use
the ``%(name)s`` style that both psycopg and PyMySQL accept; PostgreSQL's
array parameters ``%(name)b``, psycopg's binary format (see its queries.sql).
"""

from __future__ import annotations

import functools
import re

from ._resources import sql_file

_NAME_LINE = re.compile(r"^--\s*name:\s*(\w+)\s*$", re.MULTILINE)


def parse_named(text: str) -> dict[str, str]:
    statements: dict[str, str] = {}
    matches = list(_NAME_LINE.finditer(text))
    for i, match in enumerate(matches):
        end = matches[i + 1].start() if i + 1 < len(matches) else len(text)
        body = (
            "\n".join(
                line
                for line in text[match.end() : end].strip().splitlines()
                if not line.lstrip().startswith("--")
            )
            .strip()
            .rstrip(";")
            .strip()
        )
        if match.group(1) in statements:
            raise ValueError(f"statement {match.group(1)!r} is defined twice")
        statements[match.group(1)] = body
    return statements


@functools.cache
def queries(dialect: str) -> dict[str, str]:
    """All named statements of a dialect ('postgresql' or 'mysql')."""
    return parse_named(sql_file(dialect, "queries.sql").read_text(encoding="utf-8"))


@functools.cache
def migration_queries(dialect: str) -> dict[str, str]:
    """The named statements pyqueue_sql.migrate runs around the revisions
    (``sql/<dialect>/migration.sql``: its lock, progress and catalog checks)."""
    return parse_named(sql_file(dialect, "migration.sql").read_text(encoding="utf-8"))


def script(dialect: str, filename: str) -> str:
    """A whole SQL file of a dialect (schema.sql, uninstall.sql), or a folder of them
    (routines: one file per topic) as one script, its files in name order."""
    path = sql_file(dialect, filename)
    if path.is_dir():
        return "\n".join(
            p.read_text(encoding="utf-8").rstrip("\n") + "\n" for p in sorted(path.glob("*.sql"))
        )
    return path.read_text(encoding="utf-8")


def revision_files(dialect: str) -> list[str]:
    """The DDL of the revisions after 0.1.0 (``revisions/<revision>.up.sql``), oldest first."""
    folder = sql_file(dialect, "revisions")
    return sorted(f"revisions/{p.name}" for p in folder.glob("*.up.sql")) if folder.is_dir() else []


def install_files(dialect: str) -> list[str]:
    """What a fresh install runs, in order: the tables of 0.1.0 (schema.sql, frozen), the DDL of
    every later revision, then the routines (routines/, its files in name order)."""
    return ["schema.sql", *revision_files(dialect), "routines"]


def install_script(dialect: str) -> str:
    """The whole current schema of a dialect (install_files) as one script any SQL client can run."""
    return "\n".join(script(dialect, name).rstrip("\n") + "\n" for name in install_files(dialect))


def _has_code(lines: list[str]) -> bool:
    return any(l.strip() and not l.strip().startswith("--") for l in lines)


def split_script(text: str) -> list[str]:
    """Splits a SQL script into statements the way the mysql client does for
    our files: a statement ends where a line ends with the current delimiter,
    and ``DELIMITER x`` lines change the delimiter. Comment-only chunks are dropped.
    """
    statements: list[str] = []
    delimiter = ";"
    current: list[str] = []
    for line in text.splitlines():
        stripped = line.strip()
        if stripped.upper().startswith("DELIMITER ") and not _has_code(current):
            delimiter = stripped.split(None, 1)[1]
            current = []
            continue
        current.append(line)
        if stripped.endswith(delimiter) and not stripped.startswith("--"):
            current[-1] = line.rstrip()[: -len(delimiter)]
            if _has_code(current):
                statements.append("\n".join(current).strip())
            current = []
    if _has_code(current):
        statements.append("\n".join(current).strip())
    return statements
