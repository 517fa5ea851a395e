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


# A revision after the head whose up file has statements after the routines (migrate's step after
# them, AFTER_ROUTINES_MARKER): before the line it drops a routine that routines/ creates again; after
# it, a table records whether that routine exists, which it does only once the routines are installed.
AFTER_REVISION = "9999_after_routines"
AFTER_UP = {
    "mysql": (
        "ALTER TABLE pyqueue_queue ADD COLUMN after_probe INT NULL;\n"
        "DROP PROCEDURE IF EXISTS queue_stats;\n"
        f"{migrate.AFTER_ROUTINES_MARKER}\n"
        "CREATE TABLE pyqueue_after_probe AS SELECT COUNT(*) AS n FROM information_schema.ROUTINES\n"
        " WHERE ROUTINE_SCHEMA = DATABASE() AND ROUTINE_NAME = 'queue_stats';\n"
        "ALTER TABLE pyqueue_queue DROP COLUMN after_probe;\n"
    ),
    "postgresql": (
        "ALTER TABLE pyqueue_queue ADD COLUMN after_probe integer NULL;\n"
        "DROP FUNCTION IF EXISTS queue_stats;\n"
        f"{migrate.AFTER_ROUTINES_MARKER}\n"
        "CREATE TABLE pyqueue_after_probe AS SELECT count(*)::integer AS n FROM pg_proc\n"
        " WHERE proname = 'queue_stats' AND pronamespace = current_schema()::regnamespace;\n"
        "ALTER TABLE pyqueue_queue DROP COLUMN after_probe;\n"
    ),
}
AFTER_DOWN = "DROP TABLE IF EXISTS pyqueue_after_probe;\n"
AFTER_SOURCE = f"""
from pyqueue_sql.migrate import run_routines, run_sql_file

revision = {AFTER_REVISION!r}
down_revision = {DOWN!r}
branch_labels = None
depends_on = None

FOLDER = {{folder!r}}


def upgrade():
    run_sql_file("after.up.sql", folder=FOLDER)
    run_routines()


def downgrade():
    run_sql_file("after.down.sql", folder=FOLDER)
"""


def with_after_routines_revision(tmp_path: Path, monkeypatch) -> str:
    """As with_later_revision, with AFTER_REVISION on top of the head instead; returns it."""
    folder = tmp_path / "migrations"
    shutil.copytree(migrate.migrations_dir(), folder, ignore=shutil.ignore_patterns("__pycache__"))
    sql = tmp_path / "after_sql"
    for dialect, text in AFTER_UP.items():
        (sql / dialect).mkdir(parents=True)
        (sql / dialect / "after.up.sql").write_text(text)
        (sql / dialect / "after.down.sql").write_text(AFTER_DOWN)
    source = AFTER_SOURCE.replace("{folder!r}", repr(str(sql)))
    (folder / "versions" / f"{AFTER_REVISION}.py").write_text(source)
    monkeypatch.setattr(migrate, "migrations_dir", lambda: folder)
    monkeypatch.setenv(MIGRATIONS_VARIABLE, str(folder))
    return AFTER_REVISION
