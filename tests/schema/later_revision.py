"""A revision after the baseline that runs routines.sql again, as the first change after the
release will (CONTRIBUTING.md, "Changing the schema after 0.1.0"): what re-creates every
routine in a database that already holds grants. For the tests that check that an upgrade keeps
them (here and in tests/security)."""

from __future__ import annotations

import shutil
from pathlib import Path

from pyqueue_sql import migrate

REVISION = "9999_routines_again"

DOWN = migrate.head()

SOURCE = f"""
from pyqueue_sql.migrate import run_routines

revision = {REVISION!r}
down_revision = {DOWN!r}
branch_labels = None
depends_on = None


def upgrade():
    run_routines()


def downgrade():
    run_routines()
"""

# Where such a migrations folder is, for a migrate run in a subprocess (which then sets
# pyqueue_sql.migrate.migrations_dir to it).
MIGRATIONS_VARIABLE = "PYQUEUE_SQL_TEST_MIGRATIONS"


def with_later_revision(tmp_path: Path, monkeypatch) -> str:
    """Makes pyqueue_sql.migrate (and migrate subprocesses) use our migrations plus REVISION;
    returns REVISION (on top of the head). `migrate.upgrade(dsn, DOWN)`, then
    `migrate.upgrade(dsn)` re-creates every routine."""
    folder = tmp_path / "migrations"
    shutil.copytree(migrate.migrations_dir(), folder, ignore=shutil.ignore_patterns("__pycache__"))
    (folder / "versions" / f"{REVISION}.py").write_text(SOURCE)
    monkeypatch.setattr(migrate, "migrations_dir", lambda: folder)
    monkeypatch.setenv(MIGRATIONS_VARIABLE, str(folder))
    return REVISION
