"""Installing and upgrading the schema: the alembic revisions in migrations/versions.

``0001_baseline`` is 0.1.0's schema, frozen (RELEASES; tests/schema/test_releases.py): its
upgrade runs sql/<dialect>/schema.sql and asks for the routines, its downgrade runs
sql/<dialect>/uninstall.sql. Each later table change is one revision whose upgrade runs
sql/<dialect>/revisions/<revision>.up.sql (:func:`run_sql_file`) and asks for the routines
(:func:`run_routines`). The routines (sql/<dialect>/routines/, what `pyqueue-sql sql` prints after
the tables) are installed once, after the last revision of a run, so a routine may use what any
revision adds; the statements of a revision file after its line AFTER_ROUTINES_MARKER run after
them, in a step of their own (what the previous release's routines use until they are replaced).
A run with no revision to apply installs them again when the SQL it last installed was another
version's, or a routine differs from what it installed. At the end of a run, what it installed is
recorded in ``pyqueue_installed`` (:func:`check`: `pyqueue-sql migrate --check`). On PostgreSQL (a
DSN, or a connection not inside a transaction) the revisions are committed before the routines
are installed, so their table locks last their DDL only (unless a revision has statements after
the routines: then the run is one transaction, so that none of it stays without the others).

Our revisions are recorded in their own version table, ``pyqueue_alembic_version``,
and never mix with an application's.

The revisions are driven here with alembic's ScriptDirectory and MigrationContext
directly, never through ``alembic.command`` / env.py, so a run never touches
alembic's global ``op`` and ``context`` proxies: calling ``upgrade(op.get_bind())``
from an application's own alembic revision (or at the end of its env.py) leaves the
application's alembic run intact. In alembic's offline mode (``--sql``) the same
call writes the SQL into alembic's output instead (see :func:`upgrade`).

Transactions and interruptions:

* PostgreSQL: the revisions of a run are one transaction, the routines a second one; each
  applies completely or not at all (a connection handed in inside a transaction: both are
  part of that one, and so is everything else).
* MySQL/MariaDB commit every DDL statement at once. A run therefore records
  its progress in ``pyqueue_alembic_progress`` (the revision step in progress,
  the file of that step and how many of its statements are applied, committed
  after each statement of a DDL file; a routine file is recorded once done, and
  run again from its start when resumed) and, before it drops anything, a
  snapshot of the routine grants in ``pyqueue_alembic_grants`` (DROP PROCEDURE
  drops the grants on it). When a run stops half-way (an error, Ctrl-C, a kill,
  a lost connection) nothing is undone and both tables stay; the next run
  resumes at the statement that was not recorded (re-running it, and taking
  exactly the "already exists" / "does not exist" errors of that one statement
  as "it was applied"), and gives the grants of the snapshot back at the end.
  Both tables are dropped when a run finishes. Nothing here ever drops a table
  on failure.

A schema that exists but is not recorded (installed from ``pyqueue-sql sql``)
is refused (UnrecordedSchemaError) unless ``adopt=True``: its tables must then
match the fingerprint of one revision exactly (FINGERPRINTS in the revision
file: tables, columns, indexes, constraints, views and triggers, no routine),
which is recorded before the rest is applied. The routines are not compared:
whatever the script installed, routines/ is installed again, by the later
revisions or, when the schema is adopted at the head, by a step of its own.

Test hook (tests/schema/test_migrate_interrupted.py): the environment variable
PYQUEUE_SQL_MIGRATE_TEST_KILL="<n>[:unrecorded][:<SIGNAL>]" makes the process
send itself SIGNAL (default SIGKILL) after the n-th unit of work of the run
(MySQL: a statement, once recorded - or, with ``unrecorded``, once applied but
before it is recorded; PostgreSQL: a file). Unset, it costs one dict lookup.
"""

from __future__ import annotations

import contextlib
import contextvars
import dataclasses
import hashlib
import json
import logging
import os
import re
import signal
import sys
import warnings
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, NamedTuple, TypeAlias

from alembic.config import Config
from alembic.runtime.migration import MigrationContext
from alembic.script import ScriptDirectory
from sqlalchemy import create_engine, pool
from sqlalchemy.engine import Connection

from . import dialects, schema_version
from ._resources import migrations_dir, sql_file
from .dialects import Params, Row, RowValue
from .errors import LiveMessagesError as LiveMessagesError
from .errors import MigrationError as MigrationError
from .errors import MigrationInterrupted as MigrationInterrupted
from .errors import MigrationLockTimeout as MigrationLockTimeout
from .errors import SchemaMismatchError as SchemaMismatchError
from .errors import SchemaNotInstalledError as SchemaNotInstalledError
from .errors import UnrecordedSchemaError as UnrecordedSchemaError
from .queries import migration_queries, script, split_script

# What a migration runs on: a DSN, or a SQLAlchemy Connection (an alembic revision's op.get_bind(),
# a mock one when alembic runs offline).
Target: TypeAlias = str | Connection

VERSION_TABLE = "pyqueue_alembic_version"
# Test hook: "N[:unrecorded][:SIGNAL]" kills the run (SIGKILL unless named) after its N-th statement,
# once recorded (or applied only, ":unrecorded"); "step:N" after the N-th step's end is committed,
# before the next step starts.
TEST_KILL_VARIABLE = "PYQUEUE_SQL_MIGRATE_TEST_KILL"
log = logging.getLogger("pyqueue_sql.migrate")
INTERRUPTED = "migrate was interrupted; run it again to resume"
# The step that installs routines/ over a schema adopted at the head (the name is recorded
# in the progress table of an interrupted run, so it stays as it was).
ADOPTED_ROUTINES = "routines.sql over the adopted schema"


class MigrationResult(NamedTuple):
    """Revisions recorded before and after a run; ``adopted`` is the revision an
    adopt recognised (then ``before`` is that revision), else None."""

    before: tuple[str, ...]
    after: tuple[str, ...]
    adopted: str | None = None

    @property
    def changed(self) -> bool:
        return self.before != self.after


# ---- the revision being applied (read by run_sql_file and run_routines) -----


@dataclasses.dataclass
class _Step:
    connection: Connection | None  # None: offline, the SQL goes to ``output``
    dialect: dialects.Dialect
    run: _Run | None  # None: run by alembic itself through env.py (no resume)
    output: Callable[[str], None] | None = None
    files: int = 0
    # run_routines() in a revision only asks for the routines (routines_due): they are
    # installed once, after the last revision of the run (_install_routines).
    defer_routines: bool = True
    routines_due: bool = False
    # The files whose statements after AFTER_ROUTINES_MARKER are still to run, after the routines
    # (run_sql_file adds them; the run's after-routines step runs them): shared by every step of a run.
    after_routines: list[str] = dataclasses.field(default_factory=list)


_STEP: contextvars.ContextVar[_Step | None] = contextvars.ContextVar(
    "pyqueue_sql_migration_step", default=None
)


def _current_step() -> _Step:
    step = _STEP.get()
    if step is None:
        raise RuntimeError(
            "run_sql_file() and run_routines() run inside pyqueue_sql.migrate.upgrade()/downgrade()"
        )
    return step


# A line of a revision's up file: the statements below it run after the routines of the run are
# installed (a fresh install, `pyqueue-sql sql`, runs the whole file before the routines). What the
# previous release's routines still use while migrate runs (an index they FORCE) goes there.
AFTER_ROUTINES_MARKER = "-- pyqueue-sql migrate: the statements below run after the routines"


def run_sql_file(filename: str, folder: str | Path | None = None) -> None:
    """Runs the DDL file ``<folder>/<dialect>/<filename>`` (default folder: sql/, the
    current state) on the connection of the running migration (called by the revision
    files). PostgreSQL: the whole file inside the run's transaction. MySQL: statement
    by statement, each one recorded, so an interrupted run resumes after the last
    recorded statement. The statements after a line AFTER_ROUTINES_MARKER run later, after
    the routines of the run are installed (the run's last step; MySQL: recorded as above)."""
    step = _current_step()
    label = filename if folder is None else str(Path(folder).resolve() / step.dialect.name / filename)
    before, after = _split_after_routines(_read_sql_file(step.dialect.name, label))
    _run_script(step, before, rerunnable=False)
    if after is not None and label not in step.after_routines:
        step.after_routines.append(label)


def _read_sql_file(dialect: str, label: str) -> str:
    """A revision's file by its label: a name under sql/<dialect>/, or an absolute path."""
    path = Path(label) if Path(label).is_absolute() else sql_file(dialect, label)
    if not path.is_file():
        raise FileNotFoundError(f"migration file {path} is missing: is this installation complete?")
    return path.read_text(encoding="utf-8")


def _split_after_routines(text: str) -> tuple[str, str | None]:
    """A file's statements before AFTER_ROUTINES_MARKER, and those after it (None: no marker)."""
    lines = text.splitlines(keepends=True)
    for i, line in enumerate(lines):
        if line.strip() == AFTER_ROUTINES_MARKER:
            return "".join(lines[:i]), "".join(lines[i + 1 :])
    return text, None


def _run_after_routines() -> None:
    """The step after the routines: the statements after AFTER_ROUTINES_MARKER of each revision
    file of the run, one file after the other, in the order the revisions ran them."""
    step = _current_step()
    for label in list(step.after_routines):
        _before, after = _split_after_routines(_read_sql_file(step.dialect.name, label))
        _run_script(step, after or "", rerunnable=False)


def run_routines() -> None:
    """Asks for sql/<dialect>/routines/ (called by a revision's upgrade()): the routines of
    this version are installed once, at the END of the run, after its last revision, since
    they may use what any revision of the run adds (so 0001_baseline, frozen, still calls
    this). Every routine is dropped if it exists and created again (PostgreSQL: CREATE OR
    REPLACE, which keeps the grants). MySQL: an interrupted run runs the script again from
    its start, and the routine grants that DROP PROCEDURE took are given back when the run
    finishes."""
    step = _current_step()
    if step.defer_routines:
        step.routines_due = True
        return
    replace = step.connection is not None and step.dialect.admin.replaces_routines_in_place(
        step.connection.connection
    )
    _run_script(step, routines_script(step.dialect.name, replace_in_place=replace), rerunnable=True)


_DROP_THEN_CREATE = re.compile(
    r"^DROP (PROCEDURE|FUNCTION) IF EXISTS (\w+) //\n((?:--[^\n]*\n|[ \t]*\n)*)CREATE \1 \2\(", re.MULTILINE
)


def routines_script(dialect: str, replace_in_place: bool = False) -> str:
    """routines/ as one script. ``replace_in_place`` (MariaDB): each ``DROP ... IF EXISTS x`` +
    ``CREATE ... x(`` pair becomes one ``CREATE OR REPLACE ... x(``, which MariaDB runs under the
    routine's metadata lock: a call that comes meanwhile waits for the new routine instead of
    failing (1305, "does not exist") between the DROP and the CREATE, so the workers and
    producers of the previous release never see a routine missing during an upgrade. MySQL 8.0
    has no CREATE OR REPLACE PROCEDURE (docs/operations.md, Upgrading)."""
    text = script(dialect, "routines")
    return _DROP_THEN_CREATE.sub(r"\3CREATE OR REPLACE \1 \2(", text) if replace_in_place else text


def _install_routines() -> None:
    """The last step of a run that applied a revision (or whose routines are stale)."""
    step = _current_step()
    step.defer_routines = False
    run_routines()


def _run_script(step: _Step, text: str, rerunnable: bool) -> None:
    if step.output is not None:
        step.output(text.rstrip("\n"))
        return
    file_no = step.files
    step.files += 1
    if step.run is not None and step.run.progress is not None:
        step.run.progress.run_file(file_no, split_script(text), step.run.count, rerunnable)
        return
    # The DB-API cursor, called without parameters, leaves '%' in the SQL alone.
    cursor = step.connection.connection.cursor()
    try:
        step.dialect.run_script(cursor, text)
    finally:
        cursor.close()
    if step.run is not None:
        step.run.count(False)
        step.run.count(True)


# ---- small helpers ----------------------------------------------------------


def _dialect_of(connection: Connection) -> dialects.Dialect:
    return dialects.for_name(connection.dialect.name)


def _text(value: RowValue) -> RowValue:
    if isinstance(value, (set, frozenset)):  # Proc_priv, a SET column
        return ",".join(sorted(value))
    return value.decode() if isinstance(value, (bytes, bytearray)) else value


def _rows(
    connection: Connection, dialect: dialects.Dialect, name: str, params: Params | None = None
) -> list[Row]:
    """Runs a named statement of sql/<dialect>/migration.sql on the DB-API connection."""
    cursor = connection.connection.cursor()
    try:
        cursor.execute(migration_queries(dialect.name)[name], params or {})
        return [tuple(_text(v) for v in row) for row in cursor.fetchall()] if cursor.description else []
    finally:
        cursor.close()


def _mysql_code(exc: BaseException) -> int | None:
    orig = getattr(exc, "orig", exc)
    args = getattr(orig, "args", ())
    return args[0] if args and isinstance(args[0], int) else None


def _interruption(exc: BaseException, dialect: dialects.Dialect) -> bool:
    """Ctrl-C, or the connection was lost / broken under the run."""
    if isinstance(exc, KeyboardInterrupt):
        return True
    return dialect.is_connection_lost(getattr(exc, "orig", exc))


# The pool of migrate's own engine logs under a name of its own. A Ctrl-C that lands while the pool
# returns the connection (its reset) is logged there as an error with its traceback before it goes on
# up to _migrate, which reports it in one line (INTERRUPTED): that record is dropped.
_POOL_LOGGING_NAME = "pyqueue_sql.migrate"


def _not_an_interrupt(record: logging.LogRecord) -> bool:
    return not (record.exc_info and isinstance(record.exc_info[1], KeyboardInterrupt))


@contextlib.contextmanager
def _migration_lock(connection: Connection, dialect: dialects.Dialect) -> Iterator[None]:
    """PostgreSQL: a transaction-level advisory lock (gone at commit/rollback).
    MySQL: GET_LOCK named after the database, released after the run."""
    [(got,)] = _rows(connection, dialect, "migration_lock")
    if dialect.session_migration_lock and got != 1:
        raise MigrationLockTimeout(
            "another pyqueue-sql migrate has held this database's migration lock "
            "for 600 s; try again when it is done"
        )
    try:
        yield
    except BaseException as exc:
        # After an interruption the connection is dropped, and the lock with its session.
        if dialect.session_migration_lock and not _interruption(exc, dialect):
            with contextlib.suppress(Exception):
                _rows(connection, dialect, "migration_unlock")
        raise
    if dialect.session_migration_lock:
        _rows(connection, dialect, "migration_unlock")


# ---- MySQL: durable progress -------------------------------------------------

# The errors a statement gives when it had been applied already (run again
# after an interruption between applying it and recording it): exactly these,
# and only for that one statement, count as "applied".
_ALREADY_APPLIED = frozenset(
    {
        1050,  # table / view already exists
        1304,  # procedure / function already exists
        1359,  # trigger already exists
        1060,  # duplicate column name
        1061,  # duplicate key name
        1068,  # multiple primary key defined
        1826,  # duplicate foreign key / constraint name
        3822,  # duplicate check constraint name (MySQL 8)
        1091,  # can't drop column / key: it does not exist (a DROP applied before)
        1051,  # unknown table (DROP TABLE without IF EXISTS applied before)
        1305,  # procedure / function does not exist (DROP without IF EXISTS applied before)
        1360,  # trigger does not exist
    }
)


def _is_session_setting(statement: str) -> bool:
    """A statement that only sets session state (sql_mode, user variables, the
    connection character set, which a procedure keeps from its creation):
    replayed when resuming, so the statements after it run as they would have."""
    code = " ".join(line for line in statement.splitlines() if not line.strip().startswith("--")).split()
    return (
        len(code) >= 2
        and code[0].upper() == "SET"
        and (code[1].startswith("@") or code[1].upper() in ("SESSION", "NAMES"))
    )


class _MySQLProgress:
    """pyqueue_alembic_progress: one row (step, file_no, statement_no) committed
    after every statement of a step; pyqueue_alembic_grants: the routine grants
    as they were before the run dropped anything."""

    def __init__(self, connection: Connection, dialect: dialects.Dialect, row: tuple) -> None:
        self.connection, self.dialect = connection, dialect
        step, file_no, statement_no, grants_saved = row
        self.step: str | None = step
        self.file_no, self.statement_no = int(file_no), int(statement_no)
        self.grants_saved = bool(grants_saved)
        self.resume: tuple[int, int] | None = None

    # -- life cycle ------------------------------------------------------
    @classmethod
    def load(cls, connection: Connection, dialect: dialects.Dialect) -> _MySQLProgress | None:
        """The progress an unfinished run left, or None."""
        [(progress, grants)] = _rows(connection, dialect, "bookkeeping_tables")
        if not int(progress):
            if int(grants):  # a run that ended just before dropping it
                _rows(connection, dialect, "drop_grants_table")
            return None
        rows = _rows(connection, dialect, "read_progress")
        if not rows:  # stopped while starting, before anything was changed
            return cls._snapshot(connection, dialect)
        return cls(connection, dialect, rows[0])

    @staticmethod
    def pending(connection: Connection, dialect: dialects.Dialect) -> bool:
        """Whether an interrupted run left its progress table (read only)."""
        [(progress, _grants)] = _rows(connection, dialect, "bookkeeping_tables")
        return bool(int(progress))

    @classmethod
    def start(cls, connection: Connection, dialect: dialects.Dialect) -> _MySQLProgress:
        """Creates the progress table, then takes the grant snapshot (once, before
        anything is dropped) and commits both with the first progress row."""
        _rows(connection, dialect, "create_progress_table")
        return cls._snapshot(connection, dialect)

    @classmethod
    def _snapshot(cls, connection: Connection, dialect: dialects.Dialect) -> _MySQLProgress:
        _rows(connection, dialect, "drop_grants_table")
        _rows(connection, dialect, "create_grants_table")
        saved = True
        try:
            _rows(connection, dialect, "save_routine_grants")
        except Exception as exc:  # no SELECT on mysql.procs_priv
            if _interruption(exc, dialect):
                raise
            saved = False
            warnings.warn(
                f"pyqueue-sql: cannot read the grants on the routines ({exc}); an upgrade that "
                "re-creates them drops them: run `pyqueue-sql grant ... --apply` again afterwards",
                stacklevel=4,
            )
        _rows(connection, dialect, "start_progress", {"grants_saved": saved})
        connection.connection.commit()
        return cls(connection, dialect, (None, 0, 0, saved))

    def _record(self) -> None:
        _rows(
            self.connection,
            self.dialect,
            "record_progress",
            {"step": self.step, "file_no": self.file_no, "statement_no": self.statement_no},
        )
        self.connection.connection.commit()

    def begin_step(self, name: str) -> None:
        if self.step == name:  # resuming this very step
            self.resume = (self.file_no, self.statement_no)
            return
        if self.step is not None:
            raise MigrationError(
                f"an earlier migrate stopped during {self.step!r} and this one would start with {name!r}: "
                "run the interrupted migrate again (same direction and target) to finish it first"
            )
        self.resume = None
        self.step, self.file_no, self.statement_no = name, 0, 0
        self._record()

    def end_step(self, following: str | None) -> None:
        """After the version table is updated, in the same commit: the step is done and ``following``
        (the run's next step, None: none) is the one in progress, from its start. So a run stopped
        between two steps resumes the next one by its recorded name, which says what it has to do
        (the routines step: the statements to run after it) when the revisions are all recorded."""
        self.step, self.file_no, self.statement_no, self.resume = following, 0, 0, None
        self._record()

    def check_first_step(self, name: str | None) -> None:
        if self.step is not None and self.step != name:
            raise MigrationError(
                f"an earlier migrate stopped during {self.step!r}; "
                + (f"this one would start with {name!r}: " if name else "this one has nothing to do there: ")
                + "run the interrupted migrate again (same direction and target) to finish it first"
            )

    # -- statements ------------------------------------------------------
    def run_file(
        self, file_no: int, statements: list[str], count: Callable[[bool], None], rerunnable: bool
    ) -> None:
        """A DDL file is recorded after each statement and resumed after the last one
        recorded; a ``rerunnable`` one (routines/) is recorded once done, and run
        again from its start when the run stopped inside it."""
        start, tolerant_at = 0, None
        if self.resume is not None:
            done_file, done_statement = self.resume
            if file_no < done_file:
                return  # applied completely before the interruption
            if file_no == done_file and not (rerunnable and done_statement < len(statements)):
                start = tolerant_at = done_statement
        self.file_no, self.statement_no = file_no, start
        self._record()
        cursor = self.connection.connection.cursor()
        try:
            for i, statement in enumerate(statements):
                if i < start:
                    if _is_session_setting(statement):
                        cursor.execute(statement)
                    continue
                try:
                    cursor.execute(statement)
                except Exception as exc:
                    if not (i == tolerant_at and _mysql_code(exc) in _ALREADY_APPLIED):
                        raise
                count(False)
                if not rerunnable or i == len(statements) - 1:
                    self.statement_no = i + 1
                    self._record()
                count(True)
        finally:
            cursor.close()
        if self.resume is not None and file_no >= self.resume[0]:
            self.resume = None

    # -- grants ----------------------------------------------------------
    def finish(self) -> None:
        """Gives back the routine grants of the snapshot that are gone, then drops both tables."""
        if self.grants_saved:
            saved = _rows(self.connection, self.dialect, "saved_routine_grants")
            _mysql_restore_routine_grants(self.connection, self.dialect, saved)
        _rows(self.connection, self.dialect, "drop_progress_table")
        _rows(self.connection, self.dialect, "drop_grants_table")


def _mysql_restore_routine_grants(
    connection: Connection, dialect: dialects.Dialect, saved: list[tuple]
) -> None:
    """Gives back the routine grants that re-creating the procedures dropped
    (the dialect's routine_regrants says which: only those that are gone), only
    on routines that exist. A grant whose account is gone meanwhile fails
    (no account is ever created here) and is reported as a warning."""
    try:
        current = _rows(connection, dialect, "routine_grants")
    except Exception as exc:  # cannot read them now: give every saved one back (a no-op when held)
        if _interruption(exc, dialect):
            raise
        current = []
    cursor = connection.connection.cursor()
    try:
        with dialect.admin.no_account_creation(connection.connection):
            for statement in dialect.admin.routine_regrants(saved, current):
                try:
                    cursor.execute(statement)
                except Exception as exc:  # a routine this revision no longer has (1305), an odd name
                    if _interruption(exc, dialect):
                        raise
                    if _mysql_code(exc) != 1305:
                        warnings.warn(
                            f"pyqueue-sql: could not give back a routine grant ({statement}): {exc}",
                            stacklevel=3,
                        )
    finally:
        cursor.close()


# ---- catalog fingerprints (adopt) ---------------------------------------------


def flavor(connection: Connection) -> str:
    """'postgresql', 'mariadb' or 'mysql': the key of a revision's FINGERPRINTS."""
    return _dialect_of(connection).admin.server_flavor(connection.connection)


def fingerprint(target: Target) -> str:
    """The catalog fingerprint of the tables pyqueue-sql installed in a database:
    tables, columns, indexes, constraints, views and triggers (no routine, owner
    or grant), hashed: a change of a routine leaves it alone."""
    with _session(target) as (connection, _dialect):
        return _fingerprint(connection)


def _fingerprint(connection: Connection) -> str:
    dialect = _dialect_of(connection)
    named = migration_queries(dialect.name)
    parts = {
        name: [[None if v is None else str(v) for v in row] for row in _rows(connection, dialect, name)]
        for name in named
        if name.startswith("fingerprint_")
    }
    return hashlib.sha256(json.dumps(parts, sort_keys=True).encode()).hexdigest()[:32]


def _adopt(connection: Connection, script: ScriptDirectory, found: list[str]) -> str:
    kind = flavor(connection)
    mine = _fingerprint(connection)
    known = {}
    for rev in script.walk_revisions():  # newest first: of two with one fingerprint, keep the oldest
        value = getattr(rev.module, "FINGERPRINTS", {}).get(kind)
        if value:
            known[value] = rev.revision
    if not known:
        raise SchemaMismatchError(
            f"no catalog fingerprints ship for {kind} yet: the existing schema cannot be checked, so it "
            "is not adopted (nothing was changed). Either keep installing and upgrading it with the "
            "script (`pyqueue-sql sql`), or move its messages out, remove it (`pyqueue-sql sql "
            "--uninstall`) and install with `pyqueue-sql migrate`"
        )
    if mine not in known:
        raise SchemaMismatchError(
            f"the pyqueue-sql objects in this database ({_summary(found)}) match no released revision "
            f"exactly (fingerprint {mine}), so they are not adopted and nothing was changed; compare them "
            "with `pyqueue-sql sql`, or move the data out and install afresh"
        )
    return known[mine]


def _summary(found: list[str]) -> str:
    first = ("table pyqueue_queue", "table pyqueue_message")
    tables = [n for n in first if n in found] + [
        n for n in found if n.startswith("table ") and n not in first
    ]
    routines = [n for n in found if n.startswith("routine ")]
    shown = ", ".join(n.split(" ", 1)[1] for n in tables[:4]) + (", ..." if len(tables) > 4 else "")
    return f"{len(tables)} tables ({shown}) and {len(routines)} routines"


# ---- what migrate installed (drift) --------------------------------------------

# The kinds of object a drift_* statement of migration.sql returns; the tables' kinds are
# recorded when a revision created them, the routines' (and their grants) whenever
# routines/ is installed.
TABLE_KINDS = ("table", "index", "constraint", "trigger", "view")
PACKAGE = "package"


def sources_digest(dialect: str) -> str:
    """The digest of the SQL this version installs on a dialect (the install script: schema.sql,
    the revisions' DDL, routines/): recorded by migrate, compared by migrate --check."""
    return schema_version.sources_digest(dialect)


def _package_version() -> str:
    from . import __version__

    return __version__


def _objects(connection: Connection, dialect: dialects.Dialect) -> dict[tuple[str, str], str]:
    """(kind, name) -> digest of its definition, for every object pyqueue-sql installed."""
    rows: dict[tuple[str, str], list[str]] = {}
    for name in migration_queries(dialect.name):
        if name.startswith("drift_"):
            for row in _rows(connection, dialect, name):
                detail = json.dumps([None if v is None else str(v) for v in row[2:]])
                rows.setdefault((str(row[0]), str(row[1])), []).append(detail)
    return {
        key: hashlib.sha256("\n".join(sorted(parts)).encode()).hexdigest()[:32] for key, parts in rows.items()
    }


def _has_installed_table(connection: Connection, dialect: dialects.Dialect) -> bool:
    [(count,)] = _rows(connection, dialect, "installed_table")
    return int(count) > 0


def _recorded(connection: Connection, dialect: dialects.Dialect) -> dict[tuple[str, str], str] | None:
    """What the last migrate recorded (None: no pyqueue_installed, before the revision that adds it)."""
    if not _has_installed_table(connection, dialect):
        return None
    return {(str(k), str(n)): str(d) for k, n, d in _rows(connection, dialect, "installed_records")}


def _routines_stale(connection: Connection, dialect: dialects.Dialect) -> bool:
    """Whether routines/ is to be installed again by a run with no revision to apply: the last
    migrate was of other SQL sources (a release that changed only routines), or a routine (or
    its grant) differs from what it installed. False before the revision that adds pyqueue_installed."""
    recorded = _recorded(connection, dialect)
    if recorded is None:
        return False
    package = [d for (k, _n), d in recorded.items() if k == PACKAGE]
    if package != [sources_digest(dialect.name)]:
        return True
    now = _objects(connection, dialect)
    mine = {key: d for key, d in now.items() if key[0] not in TABLE_KINDS}
    return mine != {key: d for key, d in recorded.items() if key[0] not in TABLE_KINDS + (PACKAGE,)}


def _record_installed(connection: Connection, dialect: dialects.Dialect, tables_too: bool) -> None:
    """Records in pyqueue_installed what this run leaves: every object's digest and this package's
    version with the digest of its SQL. A run that applied no revision keeps the tables' record
    (a dropped index stays reported by --check until it is rebuilt) unless there was none."""
    recorded = _recorded(connection, dialect)
    if recorded is None:
        return
    now = _objects(connection, dialect)
    if not tables_too and any(k in TABLE_KINDS for k, _n in recorded):
        now = {key: d for key, d in now.items() if key[0] not in TABLE_KINDS}
        now.update({key: d for key, d in recorded.items() if key[0] in TABLE_KINDS})
    now[(PACKAGE, f"pyqueue-sql {_package_version()}")] = sources_digest(dialect.name)
    _rows(connection, dialect, "installed_clear")
    cursor = connection.connection.cursor()
    try:
        for (kind, name), digest in sorted(now.items()):
            cursor.execute(
                migration_queries(dialect.name)["installed_insert"],
                {"kind": kind, "name": name, "digest": digest},
            )
    finally:
        cursor.close()
    if not dialect.transactional_ddl:
        # MySQL: committed now, as every statement of the run before it (its DDL commits at once):
        # inside a caller's transaction that is never committed (an env.py's), it would be lost
        connection.connection.commit()


def require_schema(target: Target) -> None:
    """Refuses to go on (SchemaNotInstalledError, one line saying to run `pyqueue-sql migrate`) when
    the database's schema is older than this version's: its revision is one before this version's
    head, or (same revision) its routines were installed by an older release. Called by `pyqueue-sql
    worker` before it starts. A newer schema is fine (a release keeps the previous one's routines),
    and so is what cannot be read (a role without SELECT on the version table, a schema installed
    from `pyqueue-sql sql`): nothing is refused on a guess."""
    if isinstance(target, str):
        schema_version.require_schema(target)  # without SQLAlchemy: what `pyqueue-sql worker` calls
        return
    try:
        with _session(target) as (connection, dialect):
            context = MigrationContext.configure(connection, opts={"version_table": VERSION_TABLE})
            heads = tuple(context.get_current_heads())
            recorded = _recorded(connection, dialect) if heads == (head(),) else None
    except Exception as exc:  # unreadable here: the worker's own calls say what is wrong
        log.debug("pyqueue-sql: the schema revision could not be read: %s", exc)
        return
    schema_version.refuse_older(heads, recorded, dialect.name)


class Drift(NamedTuple):
    """What `pyqueue-sql migrate --check` reports: ``problems`` is empty when the database holds
    exactly what this version's migrate installs."""

    revision: tuple[str, ...]
    recorded_by: str | None
    problems: list[str]

    @property
    def ok(self) -> bool:
        return not self.problems


def check(target: Target) -> Drift:
    """Compares the database with what this version's migrate installs: the revision, the SQL
    sources of the last migrate, and every routine, table, index, constraint, trigger, view and
    (PostgreSQL) grant to PUBLIC, each by the digest of its definition recorded by migrate; then
    what least privilege forbids whatever was recorded (_exposures)."""
    with _session(target) as (connection, dialect):
        context = MigrationContext.configure(connection, opts={"version_table": VERSION_TABLE})
        heads = tuple(context.get_current_heads())
        head_revision = head()
        if not heads:
            return Drift(
                heads,
                None,
                ["pyqueue-sql is not installed here (no revision recorded): run `pyqueue-sql migrate`"],
            )
        if not dialect.transactional_ddl and _MySQLProgress.pending(connection, dialect):
            return Drift(heads, None, [f"{INTERRUPTED} (pyqueue_alembic_progress is there)"])
        if heads != (head_revision,):
            return Drift(
                heads,
                None,
                [
                    f"the schema is at revision {_revisions(heads)}, this version ({_package_version()}) "
                    f"installs {head_revision}: run `pyqueue-sql migrate`"
                ],
            )
        recorded = _recorded(connection, dialect) or {}
        package = [(n, d) for (k, n), d in recorded.items() if k == PACKAGE]
        if not package:
            return Drift(heads, None, ["no record of what migrate installed: run `pyqueue-sql migrate`"])
        [(by, digest)] = package
        if digest != sources_digest(dialect.name):
            return Drift(
                heads,
                by,
                [
                    f"the routines were installed by {by}, whose SQL differs from this version's "
                    f"(pyqueue-sql {_package_version()}): run `pyqueue-sql migrate`"
                ],
            )
        now = _objects(connection, dialect)
        problems = []
        for key in sorted(set(recorded) | set(now)):
            kind, name = key
            if kind == PACKAGE:
                continue
            if key not in now:
                problems.append(f"{kind} {name} is missing")
            elif key not in recorded:
                problems.append(f"{kind} {name} was not installed by migrate")
            elif now[key] != recorded[key]:
                problems.append(f"{kind} {name} differs from what migrate installed")
        problems.extend(_exposures(connection, dialect))
        return Drift(heads, by, problems)


def _exposures(connection: Connection, dialect: dialects.Dialect) -> list[str]:
    """What breaks least privilege, one line each, whatever migrate recorded (the exposure_*
    statements of migration.sql): a table privilege no capability gives (the ingest capability's
    INSERT and SELECT on the ingest tables are the only ones), EXECUTE on an internal helper, and on
    PostgreSQL a trigger that does not fire and a rule. On MySQL/MariaDB, an account that cannot read
    the grant tables of the mysql database gets one line saying so (the check cannot be complete)."""
    allowed = {(p.upper(), t) for grants in dialect.grant_tables.values() for p, t in grants}
    names = migration_queries(dialect.name)
    problems: list[str] = []
    try:
        table_grants = _rows(connection, dialect, "exposure_table_grants")
        helper_grants = _rows(connection, dialect, "exposure_helper_grants")
    except Exception as exc:  # MySQL/MariaDB: no SELECT on the mysql database's grant tables
        if dialect.transactional_ddl or _interruption(exc, dialect):
            raise
        return [f"the grants could not be read ({exc}): table privileges and helpers' grants not checked"]
    for grantee, privileges, obj, what in table_grants:
        for privilege in str(privileges).upper().split(","):
            if what == "table" and (privilege, obj) in allowed:
                continue
            problems.append(
                f"grant {privilege} on {what} {obj} to {grantee}: application accounts hold no table "
                "privilege but the ingest capability's (INSERT and SELECT on queue_ingest)"
            )
    for grantee, routine in helper_grants:
        helpers = "every pyqueue__* helper (EXECUTE on the database)" if routine == "*" else routine
        problems.append(
            f"grant EXECUTE on {helpers} to {grantee}: the internal pyqueue__* helpers are granted to nobody"
        )
    if "exposure_disabled_triggers" in names:
        for trigger, state in _rows(connection, dialect, "exposure_disabled_triggers"):
            how = "fires only in replica sessions" if state == "R" else "is disabled"
            problems.append(f"trigger {trigger} {how}: ALTER TABLE ... ENABLE TRIGGER puts it back")
    if "exposure_rules" in names:
        for table, rule in _rows(connection, dialect, "exposure_rules"):
            problems.append(f"rule {rule} on {table} was not installed by migrate: DROP RULE removes it")
    return problems


def _revisions(revisions: tuple[str, ...]) -> str:
    return ", ".join(revisions) if revisions else "none"


# ---- connections ----------------------------------------------------------------


# connection.info key: the transaction _session began (absent inside a caller's transaction), which a
# PostgreSQL run commits after its revisions (_Run.commit_revisions).
_OWN_TRANSACTION = "pyqueue_sql.migrate transaction"


@contextlib.contextmanager
def _session(target: Target) -> Iterator[tuple[Connection, dialects.Dialect]]:
    """The connection to migrate and its dialect. A DSN: a connection of ours in
    one transaction, committed at the end (dropped, not rolled back, after an
    interruption); errors.DriverNotInstalledError when the DSN's driver is missing. A
    caller's Connection inside a transaction: run inside it (never committed here); one not
    in a transaction: our own transaction on it."""
    if isinstance(target, Connection):
        dialect = _dialect_of(target)
        if target.in_transaction():
            yield target, dialect
            return
        target.info[_OWN_TRANSACTION] = target.begin()
        try:
            yield target, dialect
        except BaseException as exc:
            if _interruption(exc, dialect):
                with contextlib.suppress(Exception):
                    target.invalidate()
            else:
                with contextlib.suppress(Exception):
                    target.info[_OWN_TRANSACTION].rollback()
            raise
        finally:
            transaction = target.info.pop(_OWN_TRANSACTION, None)
        transaction.commit()
        return
    dialect = dialects.for_dsn(target)
    dialect.import_driver()  # DriverNotInstalledError naming the extra, not SQLAlchemy's ImportError
    engine = create_engine(
        f"{dialect.sqlalchemy_dialect}://",
        poolclass=pool.NullPool,
        pool_logging_name=_POOL_LOGGING_NAME,
        creator=lambda: dialect.connect(target, autocommit=False),
    )
    engine.pool.logger.addFilter(_not_an_interrupt)  # a logging.Logger of this pool's own name: added once
    try:
        connection = engine.connect()
        try:
            connection.info[_OWN_TRANSACTION] = connection.begin()
            try:
                yield connection, dialect
            except BaseException as exc:
                if _interruption(exc, dialect):
                    with contextlib.suppress(Exception):
                        connection.invalidate()  # no rollback on a connection cut mid-reply
                else:
                    with contextlib.suppress(Exception):
                        connection.info[_OWN_TRANSACTION].rollback()
                raise
            connection.info.pop(_OWN_TRANSACTION).commit()
        finally:
            with contextlib.suppress(Exception):
                connection.close()
    finally:
        engine.dispose()


def alembic_config() -> Config:
    config = Config()
    config.set_main_option("script_location", str(migrations_dir()))
    return config


def _script() -> ScriptDirectory:
    return ScriptDirectory.from_config(alembic_config())


# ---- a run ----------------------------------------------------------------------


def _test_kill_plan() -> tuple[int, bool, int] | None:
    value = os.environ.get(TEST_KILL_VARIABLE)
    if not value or value.startswith("step:"):
        return None
    parts = value.split(":")
    unrecorded = "unrecorded" in parts[1:]
    names = [p for p in parts[1:] if p != "unrecorded"]
    return int(parts[0]), unrecorded, int(getattr(signal, names[0] if names else "SIGKILL"))


@dataclasses.dataclass
class _Plan:
    name: str
    run: Callable[[], None]
    version_after: str | None  # None: the version table is left as it is


# The last step of an upgrade: routines/ once, after every revision of the run (the name is
# recorded in the progress table of an interrupted run on MySQL, so it stays as it is).
ROUTINES_STEP = "routines after the revisions"
# The same step of a run that applies no revision (the routines differ from those recorded): its
# own name, so that a run resuming it keeps the tables' record as that run would have.
ROUTINES_AGAIN_STEP = "routines again, no revision to apply"
# The step after the routines, when a revision file of the run has statements after
# AFTER_ROUTINES_MARKER: named after those files (labels, as run_sql_file was given them). Every
# step of the run after such a revision is recorded with them too ("upgrade to X; after the
# routines: ..."), so that a run interrupted in any later step, or between two, resumes with them
# from the progress table alone (the revisions that added them are recorded as applied by then).
AFTER_ROUTINES_STEP = "after the routines: "
_STEP_NAME_LENGTH = 255  # pyqueue_alembic_progress.step


def _after_routines_step(labels: list[str]) -> str:
    return AFTER_ROUTINES_STEP + ", ".join(labels)


def _with_after_routines(base: str, labels: list[str]) -> str:
    return f"{base}; {_after_routines_step(labels)}" if labels else base


def _after_routines_of(resumed: str | None) -> tuple[str | None, str | None, list[str]]:
    """The step an interrupted run stopped in, read back: (kind, its name without the labels, the
    labels of the statements still to run after the routines); kind is 'after' for the
    after-routines step, 'routines' for the routines step with statements after it, else None."""
    if resumed is None:
        return None, None, []
    if resumed.startswith(AFTER_ROUTINES_STEP):
        return "after", None, resumed[len(AFTER_ROUTINES_STEP) :].split(", ")
    base, marker, labels = resumed.partition(f"; {AFTER_ROUTINES_STEP}")
    if not marker:
        return None, base, []
    return ("routines" if base == ROUTINES_STEP else None), base, labels.split(", ")


class _Run:
    def __init__(self, connection: Connection, dialect: dialects.Dialect) -> None:
        self.connection, self.dialect = connection, dialect
        self.progress: _MySQLProgress | None = None
        self.units = 0
        self.kill = _test_kill_plan()
        value = os.environ.get(TEST_KILL_VARIABLE, "")
        self.kill_after_step = int(value.split(":")[1]) if value.startswith("step:") else None
        self.after_routines: list[str] = []  # _Step.after_routines of every step of the run

    def count(self, recorded: bool) -> None:
        """Test hook: see TEST_KILL_VARIABLE."""
        if self.kill is None:
            return
        if not recorded:
            self.units += 1
        n, unrecorded, signum = self.kill
        if self.units == n and recorded != unrecorded:
            os.kill(os.getpid(), signum)

    def commit_revisions(self) -> None:
        """PostgreSQL, in a transaction of our own: commits the revisions (their DDL and the version
        table) before the routines are installed, so the locks the DDL took (ALTER TABLE: ACCESS
        EXCLUSIVE on the table) are held for the DDL only, not for the second or so the routines
        take; then takes the migration lock again. Should the routines then fail, the revisions
        stay, with the routines of the version before (which a release keeps working on the new
        tables), and the next migrate installs them (_routines_stale). Inside a caller's
        transaction everything stays in that one."""
        transaction = self.connection.info.get(_OWN_TRANSACTION)
        if transaction is None or not self.dialect.transactional_ddl:
            return
        if self.after_routines:
            # statements to run after the routines: all in one transaction, or a failure of the
            # routines would leave them undone behind revisions already committed
            return
        transaction.commit()
        self.connection.info[_OWN_TRANSACTION] = self.connection.begin()
        _rows(self.connection, self.dialect, "migration_lock")

    def _name(self, step: _Plan) -> str:
        """A step's name as recorded: after a revision that left statements to run after the
        routines, with their files' labels (the after-routines step is named by them alone)."""
        if step.run is _run_after_routines:
            return step.name
        name = _with_after_routines(step.name, self.after_routines)
        if len(name) > _STEP_NAME_LENGTH:
            raise MigrationError(f"the step name {name!r} is longer than {_STEP_NAME_LENGTH} characters")
        return name

    def steps(
        self, script: ScriptDirectory, direction: str, revision: str, heads: tuple[str, ...]
    ) -> list[_Plan]:
        if direction == "downgrade" and not heads:
            return []
        if direction == "upgrade":
            revs = list(reversed(list(script.iterate_revisions(revision, heads, implicit_base=True))))
            return [_Plan(f"upgrade to {r.revision}", r.module.upgrade, r.revision) for r in revs]
        revs = list(script.iterate_revisions(heads, revision, select_for_downgrade=True))
        return [
            _Plan(f"downgrade from {r.revision}", r.module.downgrade, r.down_revision or "base") for r in revs
        ]

    def migrate(self, direction: str, revision: str, adopt: bool) -> MigrationResult:
        connection, dialect = self.connection, self.dialect
        script = _script()
        context = MigrationContext.configure(connection, opts={"version_table": VERSION_TABLE})
        with _migration_lock(connection, dialect):
            before = tuple(context.get_current_heads())
            if not dialect.transactional_ddl:
                self.progress = _MySQLProgress.load(connection, dialect)
            adopted = None
            if not before and self.progress is None and direction == "upgrade":
                found = [f"{kind} {name}" for kind, name in _rows(connection, dialect, "installed_objects")]
                if found:
                    if not adopt:
                        held = ""
                        if "table pyqueue_message" in found:
                            [(count,)] = _rows(connection, dialect, "live_messages")
                            held = f", {count} messages in pyqueue_message"
                        raise UnrecordedSchemaError(
                            f"this database already holds pyqueue-sql objects ({_summary(found)}{held}) but "
                            f"{VERSION_TABLE} records no revision: installed from `pyqueue-sql sql` or by "
                            "hand. Nothing was changed. Run `pyqueue-sql migrate --adopt` to check that it "
                            "matches a released revision exactly, record it and upgrade "
                            "(Python: migrate.upgrade(target, adopt=True))",
                            found,
                        )
                    adopted = _adopt(connection, script, found)
                    context.stamp(script, adopted)
                    if not dialect.transactional_ddl:
                        connection.connection.commit()
                    before = (adopted,)
            heads = tuple(context.get_current_heads())
            steps = self.steps(script, direction, revision, heads)
            resumed = self.progress.step if self.progress is not None else None
            resumed_kind, resumed_base, self.after_routines = _after_routines_of(resumed)
            # a run resuming the routines step (or the one after it) of a run that applied revisions,
            # or adopted the schema, records the tables as that run would have
            revisions_run = (
                bool(steps) or resumed_base in (ROUTINES_STEP, ADOPTED_ROUTINES) or resumed_kind is not None
            )
            if direction == "upgrade" and resumed_kind == "after" and not steps:
                steps.append(_Plan(resumed, _run_after_routines, None))  # the routines are done
            elif direction == "upgrade" and (
                steps
                or adopted  # the fingerprint reads no routine: an adopted schema gets ours
                or resumed_base in (ROUTINES_STEP, ADOPTED_ROUTINES, ROUTINES_AGAIN_STEP)
                or _routines_stale(connection, dialect)
            ):
                if steps or resumed_kind == "routines":
                    name = ROUTINES_STEP
                elif resumed_base in (ADOPTED_ROUTINES, ROUTINES_STEP, ROUTINES_AGAIN_STEP):
                    name = resumed_base
                else:
                    name = ADOPTED_ROUTINES if adopted else ROUTINES_AGAIN_STEP
                steps.append(_Plan(name, _install_routines, None))
            if not dialect.transactional_ddl:
                if self.progress is not None:
                    self.progress.check_first_step(self._name(steps[0]) if steps else None)
                elif steps:
                    self.progress = _MySQLProgress.start(connection, dialect)
            for i, step in enumerate(steps):  # the after-routines step is added while the routines step runs
                if step.run is _install_routines:
                    self.commit_revisions()
                name = self._name(step)
                log.info("pyqueue-sql: %s", name)
                if self.progress is not None:
                    self.progress.begin_step(name)
                token = _STEP.set(_Step(connection, dialect, self, after_routines=self.after_routines))
                try:
                    step.run()
                finally:
                    _STEP.reset(token)
                if step.version_after is not None:
                    context.stamp(script, step.version_after)
                if step.run is _install_routines and self.after_routines:
                    steps.append(_Plan(_after_routines_step(self.after_routines), _run_after_routines, None))
                last = i + 1 == len(steps)
                if last and direction == "upgrade":
                    # before the last step is recorded as done: a run stopped after it resumes that
                    # step (nothing left to run in it) and records again
                    _record_installed(connection, dialect, tables_too=revisions_run or adopted is not None)
                if self.progress is not None:
                    self.progress.end_step(None if last else self._name(steps[i + 1]))
                if self.kill_after_step == i + 1:
                    os.kill(os.getpid(), signal.SIGKILL)
            if self.progress is not None:
                self.progress.finish()
            after = tuple(context.get_current_heads())
            if direction == "downgrade" and not after and steps:
                [(rows,)] = _rows(connection, dialect, "version_table_rows")
                if not rows:
                    _rows(connection, dialect, "drop_version_table")
            return MigrationResult(before, after, adopted)


def _migrate(target: Target, direction: str, revision: str, adopt: bool = False) -> MigrationResult:
    offline = _alembic_offline(target)
    if offline is not None:
        return _write_sql(offline, direction, revision)
    dialect = None
    try:
        with _session(target) as (connection, dialect):
            return _Run(connection, dialect).migrate(direction, revision, adopt)
    except KeyboardInterrupt as exc:  # also while connecting: nothing or part done, a re-run resumes
        raise MigrationInterrupted(INTERRUPTED) from exc
    except Exception as exc:
        if dialect is not None and not isinstance(exc, MigrationError) and _interruption(exc, dialect):
            raise MigrationInterrupted(INTERRUPTED) from exc
        raise


# ---- alembic's offline mode (--sql) ---------------------------------------------


def _alembic_offline(target: Target) -> MigrationContext | None:
    """The running alembic migration when ``target`` is the bind of an alembic run in
    offline mode (`alembic upgrade --sql`, where op.get_bind() is a mock connection)."""
    if isinstance(target, (str, Connection)):
        return None
    try:
        from alembic import op

        context = op.get_context()
    except Exception:  # not inside an alembic migration
        return None
    return context if context.as_sql else None


def _write_sql(outer: MigrationContext, direction: str, revision: str) -> MigrationResult:
    """Writes our revisions into the SQL of an application's offline alembic run,
    recorded in our own version table: an upgrade from nothing, a downgrade from
    the head (offline, nothing tells what the database holds)."""
    script = _script()
    start = script.get_current_head() if direction == "downgrade" else None

    def steps(heads: tuple[str, ...], _context: MigrationContext) -> list[Any]:
        if direction == "upgrade":
            return script._upgrade_revs(revision, heads)
        return script._downgrade_revs(revision, heads)

    ours = MigrationContext.configure(
        dialect_name=outer.dialect.name,
        opts={
            "as_sql": True,
            "output_buffer": outer.output_buffer,
            "version_table": VERSION_TABLE,
            "literal_binds": True,
            "transactional_ddl": False,  # inside the application's transaction
            "fn": steps,
            "starting_rev": start,
            "destination_rev": revision,
        },
    )
    with alembic_env_offline(ours):
        ours.run_migrations()
    if direction == "downgrade" and revision == "base":  # as downgrade() does online
        ours.impl.static_output(
            migration_queries(dialects.for_name(outer.dialect.name).name)["drop_version_table"] + ";"
        )
        return MigrationResult((start,), ())
    return MigrationResult((start,) if start else (), (script.get_current_head(),))


# ---- the API ----------------------------------------------------------------------


def upgrade(target: Target, revision: str = "heads", *, adopt: bool = False) -> MigrationResult:
    """Brings the schema to ``revision``; target is a DSN or a SQLAlchemy Connection.

    Refuses (UnrecordedSchemaError) a schema that exists but is not recorded,
    unless ``adopt``: then the catalog must match a known revision exactly
    (else SchemaMismatchError), which is recorded before the rest is applied.
    An interrupted run (MigrationInterrupted, or any error on MySQL) is resumed
    by running upgrade again. Called with op.get_bind() in an alembic revision run
    offline (``alembic upgrade --sql``), it writes the SQL of our revisions (from
    nothing, recorded in our version table) into alembic's output instead."""
    return _migrate(target, "upgrade", revision, adopt)


def downgrade(
    target: Target, revision: str = "base", *, drop_messages: bool | None = None
) -> MigrationResult:
    """Takes the schema back to ``revision`` ('base' removes everything
    pyqueue-sql installed, its version table included). Messages in dropped
    tables are lost: see live_messages().

    On a SQLAlchemy Connection (``migrate.downgrade(op.get_bind())`` in an application's
    alembic revision), a downgrade that would drop live messages asks first, as
    `pyqueue-sql migrate --downgrade` does: on the terminal when there is one (LiveMessagesError
    unless the answer is yes), and without one it refuses (LiveMessagesError) unless confirmed,
    by ``alembic -x yes downgrade ...`` or by ``drop_messages=True``. On a DSN (str) it drops
    without asking unless ``drop_messages=False`` (the command line asks before it calls this).
    ``drop_messages=False`` refuses whenever live messages would be dropped."""
    if revision == "base" and _alembic_offline(target) is None:
        _check_live_messages(target, drop_messages)
    return _migrate(target, "downgrade", revision)


def _check_live_messages(target: Target, drop_messages: bool | None) -> None:
    """LiveMessagesError when a downgrade to base would drop live messages without the
    confirmation downgrade() asks for."""
    if drop_messages or (drop_messages is None and not isinstance(target, Connection)):
        return
    live = live_messages(target)
    if not live:
        return
    if drop_messages is False:
        raise LiveMessagesError(f"refusing to drop {live} live message(s): drop_messages=False", live)
    if _confirmed_on_alembic_command_line():
        return
    answer = _ask(f"this removes pyqueue-sql and drops its {live} live message(s); continue?")
    if answer is None:
        raise LiveMessagesError(
            f"refusing to drop {live} live message(s) without confirmation: run "
            "`alembic -x yes downgrade REVISION` (no terminal to ask on), or call "
            "migrate.downgrade(..., drop_messages=True)",
            live,
        )
    if not answer:
        raise LiveMessagesError("downgrade cancelled; nothing changed", live)


def _confirmed_on_alembic_command_line() -> bool:
    """Whether the running alembic command was given ``-x yes`` (False outside alembic)."""
    try:
        from alembic import context

        arguments = context.get_x_argument()
    except Exception:  # not inside an alembic command's run
        return False
    return any(str(argument).strip().lower() == "yes" for argument in arguments)


def _ask(question: str) -> bool | None:
    """A yes/no question on the terminal (stderr, then a line of stdin); None without one."""
    stdin = sys.stdin
    if stdin is None or not stdin.isatty():
        return None
    sys.stderr.write(f"{question} [y/N] ")
    sys.stderr.flush()
    return stdin.readline().strip().lower() in ("y", "yes")


def current(target: Target) -> tuple[str, ...]:
    """The revisions recorded in the database (empty when not installed)."""
    with _session(target) as (connection, _dialect):
        context = MigrationContext.configure(connection, opts={"version_table": VERSION_TABLE})
        return tuple(context.get_current_heads())


def head() -> str:
    return _script().get_current_head()


def live_messages(target: Target) -> int:
    """How many messages pyqueue_message holds (0 when it is not installed): what
    a downgrade to base would delete."""
    with _session(target) as (connection, dialect):
        names = {name for kind, name in _rows(connection, dialect, "installed_objects") if kind == "table"}
        if "pyqueue_message" not in names:
            return 0
        [(count,)] = _rows(connection, dialect, "live_messages")
        return int(count)


@contextlib.contextmanager
def alembic_env_run(connection: Connection) -> Iterator[None]:
    """For migrations/env.py, when alembic itself runs our revisions (`alembic -c`
    on this folder): run_sql_file works, under the migration lock, without
    MySQL's resume bookkeeping (pyqueue-sql migrate has it)."""
    dialect = _dialect_of(connection)
    with _migration_lock(connection, dialect):
        step = _Step(connection, dialect, None)
        token = _STEP.set(step)
        try:
            yield
            if step.routines_due:
                _install_routines()
            if step.after_routines:
                _run_after_routines()
            if step.routines_due:
                _record_installed(connection, dialect, tables_too=True)
        finally:
            _STEP.reset(token)


@contextlib.contextmanager
def alembic_env_offline(context: MigrationContext) -> Iterator[None]:
    """For migrations/env.py in alembic's offline mode (``--sql``): the revisions write
    their SQL files, as `pyqueue-sql sql` prints them (MySQL: with their DELIMITER
    lines), into alembic's output instead of running them."""
    step = _Step(None, dialects.for_name(context.dialect.name), None, context.impl.static_output)
    token = _STEP.set(step)
    try:
        yield
        if step.routines_due:
            _install_routines()
        if step.after_routines:
            _run_after_routines()
    finally:
        _STEP.reset(token)
