"""Where the SQL files and the alembic migrations are.

An installed wheel carries them in ``pyqueue_sql/_data``; a source checkout
(editable install) has them at the top of the repository.
"""

from __future__ import annotations

from pathlib import Path

_PACKAGE = Path(__file__).resolve().parent


def data_dir(name: str) -> Path:
    """The folder ``sql`` or ``migrations``, wherever this installation keeps it."""
    for candidate in (_PACKAGE / "_data" / name, _PACKAGE.parent / name):
        if candidate.is_dir():
            return candidate
    raise FileNotFoundError(f"pyqueue-sql installation is incomplete: no {name}/ folder found")


def sql_file(dialect: str, filename: str) -> Path:
    return data_dir("sql") / dialect / filename


def migrations_dir() -> Path:
    return data_dir("migrations")
