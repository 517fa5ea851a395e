"""migrate never loses data, and an interrupted migrate is resumed by running it again.

Covers: a schema installed from the SQL script is refused (and kept) until
adopted; adopt checks the catalog against the baseline's fingerprint; a
migration failing half-way keeps what it had and completes after the fix; a
SIGKILL at any point (the migrate.TEST_KILL_VARIABLE hook) or Ctrl-C is
resumed by the next run, with rows, routines and routine grants all there.
What re-creates routines in a database that holds grants is a revision after
the baseline that runs routines.sql again (later_revision.py), as the first
change after the release will.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest

import pyqueue_sql
from pyqueue_sql import dialects, migrate, privileges
from pyqueue_sql._resources import sql_file
from pyqueue_sql.queries import install_files, script, split_script

from .later_revision import (
    AFTER_UP,
    DOWN,
    MIGRATIONS_VARIABLE,
    with_after_routines_revision,
    with_later_revision,
)
from .releases import ROOT, latest, released_file, require_history
from .test_migrations import break_sql_file, catalog, install_from_sql, smoke

pytestmark = pytest.mark.slow

RUN = """
import os
import pathlib
import signal
import sys
from pyqueue_sql import migrate
if os.environ.get("%s"):
    migrate.migrations_dir = lambda: pathlib.Path(os.environ["%s"])
# Ctrl-C as in a terminal's foreground: a suite started in the background by a shell without job
# control runs with SIGINT ignored, which this process would inherit, and the signal would be lost
signal.signal(signal.SIGINT, signal.default_int_handler)
print("go", flush=True)
try:
    if sys.argv[3:] == ["down"]:
        result = migrate.downgrade(sys.argv[1], sys.argv[2])
    else:
        result = migrate.upgrade(sys.argv[1], sys.argv[2], adopt=sys.argv[3:] == ["adopt"])
except migrate.MigrationInterrupted as exc:
    print("INTERRUPTED:", exc, file=sys.stderr)
    sys.exit(3)
print(result)
""" % (MIGRATIONS_VARIABLE, MIGRATIONS_VARIABLE)

# Account grants differ on purpose between the databases compared.
GRANT_PARTS = ("routine_grants", "table_grants", "relation_acls")


def _run_migrate(
    dsn: str, revision: str = "heads", kill: str | None = None, downgrade: bool = False, adopt: bool = False
) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k != migrate.TEST_KILL_VARIABLE}
    if kill is not None:
        env[migrate.TEST_KILL_VARIABLE] = kill
    argv = [sys.executable, "-c", RUN, dsn, revision] + (
        ["down"] if downgrade else ["adopt"] if adopt else []
    )
    return subprocess.run(argv, capture_output=True, text=True, timeout=300, env=env)


def _sql(dsn: str, statement: str, params=None) -> list[tuple]:
    conn = dialects.for_dsn(dsn).connect(dsn)
    try:
        cur = conn.cursor()
        cur.execute(statement, params)
        rows = (
            [tuple(v.decode() if isinstance(v, bytes) else v for v in r) for r in cur.fetchall()]
            if cur.description
            else []
        )
        cur.close()
        return rows
    finally:
        conn.close()


def _push(dsn: str, queue: str = "kept", n: int = 1) -> None:
    with pyqueue_sql.connect(dsn) as db:
        q = db.queue(queue).create()
        for i in range(n):
            assert q.push(f"k{i}", "kind", {"i": i})


def _ready(dsn: str, queue: str = "kept") -> int:
    with pyqueue_sql.connect(dsn) as db:
        return db.queue(queue).stats().ready


def _assert_like_a_clean_install(dsn: str, clean_catalog) -> None:
    a, b = clean_catalog(dsn), catalog(dsn)
    for part in a:
        if part not in GRANT_PARTS:
            assert a[part] == b[part], part
    schema = "current_schema()" if dialects.for_dsn(dsn).name == "postgresql" else "DATABASE()"
    leftovers = _sql(
        dsn,
        "SELECT table_name FROM information_schema.tables WHERE table_name IN "
        f"('pyqueue_alembic_progress', 'pyqueue_alembic_grants') AND table_schema = {schema}",
    )
    assert leftovers == [], "the progress tables are dropped when a run finishes"


@pytest.fixture(scope="session")
def _clean_catalogs(tmp_path_factory) -> Path:
    """Where the catalogs of clean installs are kept, for every test process of the run."""
    base = tmp_path_factory.getbasetemp()
    return base.parent if os.environ.get("PYTEST_XDIST_WORKER") else base


@pytest.fixture
def clean_catalog(fresh_database, _clean_catalogs):
    """The catalog of what `migrate.upgrade` makes of an empty database, with the migrations and
    SQL files in use (second_revision's included) on the server of ``dsn``: installed and read
    once per run for each set of them (on MySQL/MariaDB an install takes seconds), by the first
    test process that needs it, under a lock; the others read it from a file."""
    import fcntl
    import hashlib
    import json

    def read(dsn: str) -> dict[str, list[tuple]]:
        if migrate.sql_file is not sql_file:  # a test's broken routines.sql: nothing to share
            clean = fresh_database("clean")
            migrate.upgrade(clean)
            return catalog(clean)
        name = dialects.for_dsn(dsn).name
        digest = hashlib.sha256(f"{name}|{_flavor(dsn)}".encode())
        folder = migrate.migrations_dir()
        files = sorted(folder.rglob("*.py")) + sorted(sql_file(name, "x").parent.rglob("*.sql"))
        for path in files:
            digest.update(f"|{path.relative_to(path.parents[1])}|".encode() + path.read_bytes())
        digest.update((Path(__file__).parent / f"catalog_{name}.sql").read_bytes())
        kept = _clean_catalogs / f"clean-catalog-{digest.hexdigest()[:16]}.json"
        with open(f"{kept}.lock", "w") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            if not kept.is_file():
                clean = fresh_database("clean")
                migrate.upgrade(clean)
                kept.write_text(json.dumps(catalog(clean)))
        return {part: [tuple(row) for row in rows] for part, rows in json.loads(kept.read_text()).items()}

    return read


def _routine_statements(dsn: str) -> int:
    """How many statements migrate runs to install routines/ on MySQL/MariaDB (MariaDB: a CREATE
    OR REPLACE for each DROP + CREATE pair, migrate.routines_script)."""
    return len(split_script(migrate.routines_script("mysql", replace_in_place=_flavor(dsn) == "mariadb")))


def _unit_count(dialect: str, dsn: str) -> int:
    """How many units of work (MySQL statements, PostgreSQL files) a fresh install runs."""
    if dialect == "postgresql":
        return len(install_files(dialect))
    tables = sum(len(split_script(script(dialect, name))) for name in install_files(dialect)[:-1])
    return tables + _routine_statements(dsn)


@pytest.fixture
def second_revision(tmp_path, monkeypatch) -> str:
    """Our migrations plus a revision that runs routines.sql again (later_revision.py)."""
    return with_later_revision(tmp_path, monkeypatch)


# ---- a schema installed from the script -----------------------------------------


def test_a_script_install_is_refused_and_its_messages_survive(fresh_database):
    dsn = fresh_database("script")
    install_from_sql(dsn)
    _push(dsn)
    before = catalog(dsn)
    with pytest.raises(migrate.UnrecordedSchemaError) as caught:
        migrate.upgrade(dsn)
    text = str(caught.value)
    assert "pyqueue-sql migrate --adopt" in text and "pyqueue_queue" in text and "Nothing was changed" in text
    assert isinstance(caught.value, pyqueue_sql.QueueError)
    assert _ready(dsn) == 1
    assert catalog(dsn) == before
    assert migrate.current(dsn) == ()


def _adopted_as(dsn: str, revision: str) -> str:
    """The revision adopt records for a script install at ``revision``: the oldest one with its
    fingerprint on this server flavor (a later revision that changes no table of this dialect, as
    0003_ready_order on PostgreSQL, has its predecessor's; adopt then applies it)."""
    kind = _flavor(dsn)
    value = _fingerprints(revision)[kind]
    return next(r for r in _revisions() if _fingerprints(r).get(kind) == value)


def test_adopt_records_a_script_install_and_keeps_its_messages(fresh_database):
    dsn = fresh_database("adopt")
    install_from_sql(dsn)
    _push(dsn)
    result = migrate.upgrade(dsn, adopt=True)
    adopted = _adopted_as(dsn, migrate.head())
    assert result == migrate.MigrationResult((adopted,), (migrate.head(),), adopted)
    assert migrate.current(dsn) == (migrate.head(),)
    assert _ready(dsn) == 1
    assert migrate.upgrade(dsn) == migrate.MigrationResult((migrate.head(),), (migrate.head(),))
    smoke(dsn)


def test_adopt_then_upgrade_to_a_later_revision(fresh_database, second_revision, clean_catalog):
    """A schema installed from the script of the revision before (DOWN, today's head) is adopted
    as that revision, and the revisions after it are applied."""
    dsn = fresh_database("later")
    install_from_sql(dsn)
    _push(dsn, n=3)
    result = migrate.upgrade(dsn, adopt=True)
    adopted = _adopted_as(dsn, DOWN)
    assert result == migrate.MigrationResult((adopted,), (second_revision,), adopted)
    assert _ready(dsn) == 3
    _assert_like_a_clean_install(dsn, clean_catalog)


def test_adopt_refuses_a_schema_that_matches_no_revision(fresh_database):
    dsn = fresh_database("odd")
    install_from_sql(dsn)
    _push(dsn)
    _sql(dsn, "CREATE TABLE pyqueue_extra (id integer)")
    with pytest.raises(migrate.SchemaMismatchError, match="match no released revision"):
        migrate.upgrade(dsn, adopt=True)
    assert migrate.current(dsn) == ()
    assert _ready(dsn) == 1


# Opt-in: writes the value into the revision's file (after a change of the tables; routines do
# not count). 0001_baseline is frozen (tests/schema/test_releases.py): only new revisions change.
UPDATE_FINGERPRINTS = "PYQUEUE_SQL_UPDATE_FINGERPRINTS"


def _revisions() -> list[str]:
    return [r.revision for r in reversed(list(migrate._script().walk_revisions()))]


@pytest.mark.parametrize("revision", _revisions())
def test_each_revisions_fingerprint_is_current(fresh_database, dialect, revision):
    """FINGERPRINTS in each revision is what the migrations build up to it on this server
    flavor, and the head's also what the script install (`pyqueue-sql sql`) builds. When it
    fails, the message says the value to put in."""
    migrated = fresh_database("fp")
    migrate.upgrade(migrated, revision)
    value = migrate.fingerprint(migrated)
    if revision == migrate.head():
        script_install = fresh_database("fpsql")
        install_from_sql(script_install)
        assert migrate.fingerprint(script_install) == value, "sql/ and the migrations differ"
    kind = _flavor(migrated)
    path = migrate.migrations_dir() / "versions" / f"{revision}.py"
    line = re.compile(r'^(    "%s": )"[0-9a-f]*",$' % re.escape(kind), re.MULTILINE)
    text = path.read_text()
    assert line.search(text), f"{path}: no FINGERPRINTS line for {kind}"
    shipped = _fingerprints(revision).get(kind)
    if shipped != value and os.environ.get(UPDATE_FINGERPRINTS):
        path.write_text(line.sub(lambda m: f'{m.group(1)}"{value}",', text, count=1))
        shipped = value
    assert shipped == value, (
        f'set FINGERPRINTS["{kind}"] = "{value}" in {path} '
        f"(or run this test with {UPDATE_FINGERPRINTS}=1 to write it)"
    )


def test_a_script_install_of_0_1_0_is_adopted_as_the_baseline_and_upgraded(fresh_database, clean_catalog):
    """The 0.1.0 tables (schema.sql alone, as 0.1.0's `pyqueue-sql sql` printed them) with their
    messages: adopt recognises 0001_baseline and applies every revision after it."""
    dsn = fresh_database("adopt010")
    dialect = dialects.for_dsn(dsn)
    conn = dialect.connect(dsn)
    try:
        cur = conn.cursor()
        text = script(dialect.name, "schema.sql") + "\n" + _released_routines(dialect.name)
        for statement in [text] if dialect.name == "postgresql" else split_script(text):
            cur.execute(statement)
        cur.close()
    finally:
        conn.close()
    _push(dsn, n=2)
    result = migrate.upgrade(dsn, adopt=True)
    assert result == migrate.MigrationResult(("0001_baseline",), (migrate.head(),), "0001_baseline")
    assert _ready(dsn) == 2
    _assert_like_a_clean_install(dsn, clean_catalog)


def test_adopt_reads_no_routine_and_installs_routines_sql_again(fresh_database, dialect, clean_catalog):
    """The fingerprint reads the tables only: a routine with another body, and one missing,
    change the catalog but not the fingerprint; adopt recognises the baseline and installs
    routines.sql again, so the routines are the current ones."""
    dsn = fresh_database("body")
    install_from_sql(dsn)
    fingerprint, before = migrate.fingerprint(dsn), catalog(dsn)
    if dialect == "postgresql":
        [(definition,)] = _sql(
            dsn, "SELECT pg_get_functiondef(p.oid) FROM pg_proc p WHERE p.proname = 'queue_stats'"
        )
        _sql(dsn, definition.replace("$function$", "$function$\n-- another body", 1))
        _sql(dsn, "DROP FUNCTION queue_schedules(text)")
    else:
        [row] = _sql(dsn, "SHOW CREATE PROCEDURE queue_stats")
        sql_mode, definition = row[1], row[2]
        conn = dialects.for_dsn(dsn).connect(dsn)
        try:
            cur = conn.cursor()
            cur.execute("SET SESSION sql_mode = %s", (sql_mode,))
            cur.execute("DROP PROCEDURE queue_stats")
            cur.execute(definition.replace("BEGIN", "BEGIN\n-- another body", 1))
            cur.execute("DROP PROCEDURE queue_schedules")
        finally:
            conn.close()
    after = catalog(dsn)
    assert after["routines"] != before["routines"], "the routines in the catalog changed"
    assert migrate.fingerprint(dsn) == fingerprint
    assert migrate.upgrade(dsn, adopt=True).adopted == _adopted_as(dsn, migrate.head())
    _assert_like_a_clean_install(dsn, clean_catalog)
    smoke(dsn)


def _released_routines(dialect: str) -> str:
    """routines/ of the newest release (RELEASES) as one script, read from git: what runs in a
    database that release installed, until migrate replaces it."""
    release = latest()
    require_history(release.commit)
    folder = f"sql/{dialect}/routines"
    names = subprocess.run(
        ["git", "-C", str(ROOT), "ls-tree", "--name-only", f"{release.commit}:{folder}"],
        capture_output=True,
        text=True,
        check=True,
        timeout=60,
    ).stdout.split()
    return "\n".join(
        released_file(release.commit, f"{folder}/{name}").decode().rstrip("\n") + "\n"
        for name in sorted(names)
        if name.endswith(".sql")
    )


def _install_0002_with_the_releases_routines(dsn: str, monkeypatch) -> None:
    """0002_installed with the newest release's routines (head's need the tables of head), as a
    database upgraded to 0002_installed by a build of that time holds them."""
    text = _released_routines(dialects.for_dsn(dsn).name)

    def released(dialect: str, replace_in_place: bool = False) -> str:
        return (
            migrate._DROP_THEN_CREATE.sub(r"\3CREATE OR REPLACE \1 \2(", text) if replace_in_place else text
        )

    with monkeypatch.context() as patched:
        patched.setattr(migrate, "routines_script", released)
        migrate.upgrade(dsn, "0002_installed")


def _flavor(dsn: str) -> str:
    with migrate._session(dsn) as (connection, _dialect):
        return migrate.flavor(connection)


def _fingerprints(revision: str) -> dict:
    return getattr(migrate._script().get_revision(revision).module, "FINGERPRINTS", {})


# ---- failures half-way ------------------------------------------------------------


def _break_routines(monkeypatch, tmp_path, dialect: str) -> None:
    """routines.sql with a bad statement: MySQL, in its last procedure (after the others
    were dropped and created again); PostgreSQL, first."""

    def edit(text: str) -> str:
        if dialect == "postgresql":
            return "SELECT no_such_column FROM pyqueue_queue;\n" + text
        last = re.findall(r"^CREATE PROCEDURE (\w+)", text, re.M)[-1]
        at = text.index(f"\nCREATE PROCEDURE {last}(")
        at = text.index("\nBEGIN\n", at) + len("\nBEGIN\n")
        return text[:at] + "    SELECT FROM no_such_column;\n" + text[at:]

    break_sql_file(monkeypatch, tmp_path, "routines", edit)


def test_a_migration_failing_half_way_keeps_data_and_a_rerun_completes(
    fresh_database, tmp_path, monkeypatch, dialect, second_revision, clean_catalog
):
    """The revisions' DDL is applied and recorded (PostgreSQL: committed before the routines),
    the routines (the run's last step) stay to do, and the next run does them."""
    dsn = fresh_database("half")
    migrate.upgrade(dsn, DOWN)
    _push(dsn, n=5)
    _break_routines(monkeypatch, tmp_path, dialect)
    with pytest.raises(Exception, match="no_such_column"):
        migrate.upgrade(dsn)
    assert migrate.current(dsn) == (second_revision,)
    assert _ready(dsn) == 5
    monkeypatch.setattr(migrate, "sql_file", sql_file)
    monkeypatch.setattr(migrate, "script", script)
    assert migrate.upgrade(dsn).after == (second_revision,)
    assert _ready(dsn) == 5
    _assert_like_a_clean_install(dsn, clean_catalog)
    smoke(dsn)


# ---- SIGKILL and Ctrl-C --------------------------------------------------------------


@pytest.mark.parametrize("where", [0.02, "0.3:unrecorded", 0.5, "0.97:unrecorded"])
def test_a_fresh_install_killed_anywhere_is_completed_by_the_next_run(
    fresh_database, dialect, where, clean_catalog
):
    dsn = fresh_database("kill")
    fraction, _, flag = str(where).partition(":")
    n = max(1, int(_unit_count(dialect, dsn) * float(fraction)))
    killed = _run_migrate(dsn, kill=f"{n}{':' + flag if flag else ''}")
    assert killed.returncode == -signal.SIGKILL, killed.stderr
    done = _run_migrate(dsn)
    assert done.returncode == 0, done.stderr
    assert migrate.current(dsn) == (migrate.head(),)
    _assert_like_a_clean_install(dsn, clean_catalog)
    smoke(dsn)


class MySQLAccount:
    def __init__(self, dsn: str) -> None:
        self.dsn = dsn
        self.name = f"pq_mig_{uuid.uuid4().hex[:10]}"
        _sql(dsn, f"CREATE USER `{self.name}`@`%` IDENTIFIED BY 'pw-Migrate-1'")

    def grant_consumer(self) -> set[str]:
        """EXECUTE on each consumer routine that exists (queue_move too: consumer had it before)."""
        wanted = set(privileges.CONSUMER) | {"queue_move"}
        present = {
            r
            for (r,) in _sql(
                self.dsn,
                "SELECT ROUTINE_NAME FROM information_schema.ROUTINES WHERE ROUTINE_SCHEMA = DATABASE()",
            )
        }
        for routine in sorted(wanted & present):
            _sql(self.dsn, f"GRANT EXECUTE ON PROCEDURE `{routine}` TO `{self.name}`@`%`")
        return wanted & present

    def granted(self) -> set[str]:
        return {
            r
            for (r,) in _sql(
                self.dsn,
                "SELECT Routine_name FROM mysql.procs_priv WHERE Db = DATABASE() AND User = %s",
                (self.name,),
            )
        }

    def drop(self) -> None:
        _sql(self.dsn, f"DROP USER IF EXISTS `{self.name}`@`%`")


@pytest.mark.only_dialect("mysql")
@pytest.mark.parametrize(
    "where", ["routine+1", "routine+20", "routine+21:unrecorded", "last-1:unrecorded", "twice"]
)
def test_an_upgrade_killed_in_the_routine_phase_gives_every_grant_back(
    fresh_database, dialect, where, second_revision, clean_catalog
):
    """A revision that runs routines.sql again drops every procedure with its grants
    (MySQL): killed anywhere, the next run finishes and gives every grant back."""
    dsn = fresh_database("grants")
    migrate.upgrade(dsn, DOWN)
    _push(dsn, n=4)
    account = MySQLAccount(dsn)
    try:
        before = account.grant_consumer()
        assert account.granted() == before and len(before) >= 10
        routines = _routine_statements(dsn)
        points = {
            "routine+1": ["1"],
            "routine+20": ["20"],
            "routine+21:unrecorded": ["21:unrecorded"],
            "last-1:unrecorded": [f"{routines - 1}:unrecorded"],
            # killed, then the resuming run (which runs routines.sql from its start) killed again
            "twice": ["10", f"{routines // 2}:unrecorded"],
        }[where]
        for point in points:
            killed = _run_migrate(dsn, kill=point)
            assert killed.returncode == -signal.SIGKILL, killed.stderr
            assert _ready(dsn) == 4
        done = _run_migrate(dsn)
        assert done.returncode == 0, done.stderr
        assert migrate.current(dsn) == (second_revision,)
        assert account.granted() >= before, "grants lost: %s" % sorted(before - account.granted())
        assert _ready(dsn) == 4
        _assert_like_a_clean_install(dsn, clean_catalog)
    finally:
        account.drop()


@pytest.mark.only_dialect("mysql")
@pytest.mark.parametrize("where", ["1", "40:unrecorded"])
def test_an_adopt_killed_while_it_installs_the_routines_is_finished_with_every_grant(
    fresh_database, where, clean_catalog
):
    """Adopting a script install runs routines.sql again (every procedure dropped and created):
    killed there, the next migrate (without --adopt) finishes that step and gives the grants back."""
    dsn = fresh_database("adoptkill")
    install_from_sql(dsn)
    _push(dsn, n=2)
    account = MySQLAccount(dsn)
    try:
        before = account.grant_consumer()
        killed = _run_migrate(dsn, kill=where, adopt=True)
        assert killed.returncode == -signal.SIGKILL, killed.stderr
        assert migrate.current(dsn) == (migrate.head(),)
        done = _run_migrate(dsn)
        assert done.returncode == 0, done.stderr
        assert account.granted() >= before, "grants lost: %s" % sorted(before - account.granted())
        assert _ready(dsn) == 2
        _assert_like_a_clean_install(dsn, clean_catalog)
    finally:
        account.drop()


@pytest.mark.only_dialect("mysql")
def test_a_killed_downgrade_is_finished_by_the_next_one_and_nothing_else_runs_first(fresh_database):
    dsn = fresh_database("down")
    migrate.upgrade(dsn)
    killed = _run_migrate(dsn, "base", kill="30", downgrade=True)
    assert killed.returncode == -signal.SIGKILL, killed.stderr
    with pytest.raises(migrate.MigrationError, match="run the interrupted migrate again"):
        migrate.upgrade(dsn)  # the other direction waits until the interrupted one is finished
    assert migrate.downgrade(dsn).after == ()
    assert _sql(dsn, "SELECT table_name FROM information_schema.tables WHERE table_schema = DATABASE()") == []
    assert (
        _sql(dsn, "SELECT routine_name FROM information_schema.routines WHERE routine_schema = DATABASE()")
        == []
    )


def test_ctrl_c_says_it_was_interrupted_and_the_next_run_resumes(fresh_database, dialect, clean_catalog):
    dsn = fresh_database("intr")
    n = max(2, _unit_count(dialect, dsn) // 3)
    stopped = _run_migrate(dsn, kill=f"{n}:SIGINT")
    assert stopped.returncode == 3, stopped.stderr
    assert "INTERRUPTED: migrate was interrupted; run it again to resume" in stopped.stderr
    assert "error 0" not in stopped.stderr and "Traceback" not in stopped.stderr
    done = _run_migrate(dsn)
    assert done.returncode == 0, done.stderr
    _assert_like_a_clean_install(dsn, clean_catalog)


def _spawn_migrate(dsn: str) -> subprocess.Popen:
    """`migrate` to head in a child process (RUN), without the test kill hook; it prints "go" once its imports
    are done."""
    env = {k: v for k, v in os.environ.items() if k != migrate.TEST_KILL_VARIABLE}
    return subprocess.Popen(
        [sys.executable, "-c", RUN, dsn, "heads"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
    )


@pytest.mark.parametrize("delay", [0.1, 0.6])
def test_ctrl_c_from_the_terminal_while_the_server_works(fresh_database, dialect, delay, clean_catalog):
    """SIGINT from outside, most likely while the driver waits for the server's reply."""
    dsn = fresh_database("sigint")
    proc = _spawn_migrate(dsn)
    assert proc.stdout.readline() == "go\n"  # imports done: migrate.upgrade starts now
    time.sleep(delay)
    proc.send_signal(signal.SIGINT)
    out, err = proc.communicate(timeout=120)
    finished = "MigrationResult" in out  # done before the signal came (it may then hit the exit)
    assert proc.returncode == 3 or (finished and proc.returncode in (0, -signal.SIGINT)), (
        proc.returncode,
        err,
    )
    if err.startswith("Exception ignored in: <function _get_module_lock.<locals>.cb"):
        # the signal came while the import system's weakref callback ran (alembic loads the revision
        # scripts as modules): CPython reports a KeyboardInterrupt raised there as unraisable and drops
        # it, so the migration never saw it and must have finished whole
        assert finished and proc.returncode == 0 and err.count("Traceback") == 1, (proc.returncode, err)
    else:
        assert "error 0" not in err and "Traceback" not in err, err
    done = _run_migrate(dsn)
    assert done.returncode == 0, done.stderr
    _assert_like_a_clean_install(dsn, clean_catalog)


# ---- statements after the routines ------------------------------------------------------


@pytest.fixture
def after_revision(tmp_path, monkeypatch) -> str:
    """Our migrations plus a revision with statements after the routines (later_revision.py)."""
    return with_after_routines_revision(tmp_path, monkeypatch)


def _after_probe(dsn: str) -> list[tuple]:
    """What the after-routines statements of AFTER_REVISION found: 1 when queue_stats, which its
    statements before the routines dropped, was there again."""
    return _sql(dsn, "SELECT n FROM pyqueue_after_probe")


def _split_units(dialect: str, text: str) -> tuple[int, int]:
    """How many statements of a revision file run before the routines and after them (MySQL)."""
    before, after = migrate._split_after_routines(text)
    return len(split_script(before)), len(split_script(after or ""))


def test_statements_after_the_routines_run_after_them(fresh_database, dialect, after_revision, clean_catalog):
    """A revision file's statements after AFTER_ROUTINES_MARKER run once this version's routines
    are installed (what the previous release's routines use, such as an index they force, goes
    there), and --check then finds what a clean install has."""
    dsn = fresh_database("after")
    migrate.upgrade(dsn, DOWN)
    _push(dsn, n=2)
    assert migrate.upgrade(dsn).after == (after_revision,)
    assert _after_probe(dsn) == [(1,)]
    assert _ready(dsn) == 2
    assert migrate.check(dsn).problems == []
    _assert_like_a_clean_install(dsn, clean_catalog)


def test_a_failure_in_the_routines_leaves_the_after_statements_to_the_next_run(
    fresh_database, dialect, after_revision, tmp_path, monkeypatch, clean_catalog
):
    """PostgreSQL: a revision with statements after the routines is applied in the routines'
    transaction (nothing of it stays when they fail). MySQL: the revision stays applied and
    recorded, and the next run installs the routines, then runs the statements after them."""
    dsn = fresh_database("afterfail")
    migrate.upgrade(dsn, DOWN)
    _push(dsn, n=2)
    _break_routines(monkeypatch, tmp_path, dialect)
    with pytest.raises(Exception, match="no_such_column"):
        migrate.upgrade(dsn)
    assert migrate.current(dsn) == ((DOWN,) if dialect == "postgresql" else (after_revision,))
    missing = _sql(
        dsn,
        "SELECT count(*) FROM information_schema.tables WHERE table_name = 'pyqueue_after_probe' AND "
        + ("table_schema = current_schema()" if dialect == "postgresql" else "table_schema = DATABASE()"),
    )
    assert missing == [(0,)], "nothing after the routines ran"
    monkeypatch.setattr(migrate, "sql_file", sql_file)
    monkeypatch.setattr(migrate, "script", script)
    assert migrate.upgrade(dsn).after == (after_revision,)
    assert _after_probe(dsn) == [(1,)]
    assert _ready(dsn) == 2
    assert migrate.check(dsn).problems == []
    _assert_like_a_clean_install(dsn, clean_catalog)


@pytest.mark.only_dialect("mysql")
@pytest.mark.parametrize(
    "where",
    [
        "revision:1",
        "revision:2:unrecorded",
        "routines:5",
        "routines:-1:unrecorded",
        "after:1:unrecorded",
        "after:1",
        "after:2:unrecorded",
        "after:2",
        "twice",
    ],
)
def test_an_upgrade_killed_around_the_statements_after_the_routines_is_finished(
    fresh_database, dialect, where, after_revision, clean_catalog
):
    """Killed in the revision's statements, in the routines or in the statements after them (each
    statement of them, recorded or not), the next run resumes where it was: the routines, then the
    statements after them, each once; then --check finds what a clean install has."""
    dsn = fresh_database("afterkill")
    migrate.upgrade(dsn, DOWN)
    _push(dsn, n=3)
    before, after = _split_units(dialect, AFTER_UP["mysql"])
    routines = _routine_statements(dsn)
    start = {"revision": 0, "routines": before, "after": before + routines}

    def unit(point: str) -> str:
        phase, n, *flag = point.split(":")
        number = int(n) if int(n) > 0 else {"routines": routines}[phase] + int(n)
        return ":".join([str(start[phase] + number), *flag])

    points = ["routines:3", "after:1:unrecorded"] if where == "twice" else [where]
    for point in points:
        # a resumed run counts from its own start: the routines again, then the statements after them
        killed = _run_migrate(
            dsn, kill=unit(point) if point == points[0] else str(routines + 1) + ":unrecorded"
        )
        assert killed.returncode == -signal.SIGKILL, killed.stderr
        assert _sql(dsn, "SELECT COUNT(*) FROM pyqueue_message") == [(3,)]  # queue_stats may be gone now
        assert migrate.check(dsn).problems == [f"{migrate.INTERRUPTED} (pyqueue_alembic_progress is there)"]
    done = _run_migrate(dsn)
    assert done.returncode == 0, done.stderr
    assert migrate.current(dsn) == (after_revision,)
    assert _after_probe(dsn) == [(1,)]
    assert _ready(dsn) == 3
    assert migrate.check(dsn).problems == []
    _assert_like_a_clean_install(dsn, clean_catalog)


# ---- 0003_ready_order (MySQL/MariaDB): the reserve order's column, backfilled online ---------

READY_ORDER = "0003_ready_order"
READY_ORDER_UP = sql_file("mysql", f"revisions/{READY_ORDER}.up.sql").read_text(encoding="utf-8")


def _fill(dsn: str, queue: str, n: int) -> None:
    """n live messages written straight into pyqueue_message (only their number matters)."""
    with pyqueue_sql.connect(dsn) as db:
        db.queue(queue).create()
    conn = dialects.for_dsn(dsn).connect(dsn)
    try:
        cur = conn.cursor()
        for start in range(0, n, 2000):
            cur.executemany(
                "INSERT INTO pyqueue_message (queue_name, p_key, p_kind, payload, scheduled_at,"
                " scheduled_at_initially, created_at) VALUES (%s, %s, 'job', '{}', NOW(6), NOW(6), NOW(6))",
                [(queue, f"k{i}") for i in range(start, min(n, start + 2000))],
            )
        conn.commit()
    finally:
        conn.close()


def _leases(dsn: str, queue: str, n: int) -> list:
    """n messages pushed and reserved for an hour (the leases live across the migrate)."""
    with pyqueue_sql.connect(dsn) as db:
        q = db.queue(queue).create()
        for i in range(n):
            q.push(f"leased{i}", "job", {})
        return q.reserve(n, timeout=3600)


def _assert_backfilled(dsn: str) -> None:
    """Every message written before the revision has ready_at = scheduled_at (none at the default:
    no migrate of these tests runs beside a producer), and the backfill's procedure is gone."""
    assert _sql(dsn, "SELECT COUNT(*) FROM pyqueue_message WHERE ready_at <> scheduled_at") == [(0,)]
    assert _sql(
        dsn,
        "SELECT COUNT(*) FROM information_schema.ROUTINES WHERE ROUTINE_SCHEMA = DATABASE()"
        " AND ROUTINE_NAME = 'pyqueue__backfill_ready_at'",
    ) == [(0,)]


def _ready_order_points() -> list[str]:
    before, after = _split_units("mysql", READY_ORDER_UP)
    points = [f"{n}{flag}" for n in range(1, before + 1) for flag in ("", ":unrecorded")]
    points += [f"after:{n}{flag}" for n in range(1, after + 1) for flag in ("", ":unrecorded")]
    # between steps: the revision, the routines and the statements after them each ended, the next not begun
    return points + ["step:1", "step:2", "step:3"]


@pytest.mark.only_dialect("mysql")
@pytest.mark.parametrize("where", _ready_order_points())
def test_0003_ready_order_killed_at_each_statement_is_finished_by_the_next_run(
    fresh_database, where, clean_catalog, monkeypatch
):
    """From 0002_installed with messages, some of them leased: killed after each statement of the
    revision, applied and recorded or applied only (and, after the routines, each statement there), or
    between two steps, the next run finishes it: the column backfilled, the indexes of a clean install, the leases
    still held (their holders commit them), nothing left over."""
    dsn = fresh_database("readyorder")
    _install_0002_with_the_releases_routines(dsn, monkeypatch)
    _fill(dsn, "big", 12)
    leases = _leases(dsn, "held", 3)
    if where.startswith("after:"):
        before, _after = _split_units("mysql", READY_ORDER_UP)
        point = where.split(":", 1)[1]
        n, _, flag = point.partition(":")
        where = ":".join([str(before + _routine_statements(dsn) + int(n))] + ([flag] if flag else []))
    killed = _run_migrate(dsn, kill=where)
    assert killed.returncode == -signal.SIGKILL, killed.stderr
    assert _sql(dsn, "SELECT COUNT(*) FROM pyqueue_message") == [(15,)]
    done = _run_migrate(dsn)
    assert done.returncode == 0, done.stderr
    assert migrate.current(dsn) == (migrate.head(),)
    _assert_backfilled(dsn)
    assert migrate.check(dsn).problems == []
    _assert_like_a_clean_install(dsn, clean_catalog)
    with pyqueue_sql.connect(dsn) as db:
        assert [db.queue("held").commit(lease) for lease in leases] == [True] * 3, "a lease was lost"
    assert _ready(dsn, "big") == 12


@pytest.mark.only_dialect("mysql")
def test_0003_sets_ready_at_of_rows_the_old_routines_wrote_after_the_backfill(fresh_database, monkeypatch):
    """Rows written without ready_at (as 0.1.0's routines write them) once the backfill has run and
    before the routines are replaced keep the column's default until the statements after the
    routines set them as the backfill does: none is left first in reserve order."""
    dsn = fresh_database("readyrest")
    _install_0002_with_the_releases_routines(dsn, monkeypatch)
    _fill(dsn, "early", 7)
    before, _after = _split_units("mysql", READY_ORDER_UP)
    killed = _run_migrate(dsn, kill=str(before))  # every statement before the routines ran
    assert killed.returncode == -signal.SIGKILL, killed.stderr
    _fill(dsn, "late", 12)
    _sql(dsn, "UPDATE pyqueue_message SET priority = 3 WHERE queue_name = 'late' AND p_key IN ('k1', 'k2')")
    default = "SELECT COUNT(*) FROM pyqueue_message WHERE ready_at = '1970-01-01 00:00:01'"
    assert _sql(dsn, default) == [(12,)]
    done = _run_migrate(dsn)
    assert done.returncode == 0, done.stderr
    assert _sql(dsn, default) == [(0,)]
    _assert_backfilled(dsn)
    assert _sql(
        dsn,
        "SELECT COUNT(*) FROM information_schema.ROUTINES WHERE ROUTINE_SCHEMA = DATABASE()"
        " AND ROUTINE_NAME IN ('pyqueue__backfill_ready_at', 'pyqueue__backfill_ready_at_rest')",
    ) == [(0,)]
    assert _ready(dsn, "late") == 12


@pytest.mark.only_dialect("mysql")
@pytest.mark.parametrize("between", [1, 2, 3])
def test_two_revisions_with_statements_after_the_routines_killed_between_steps_both_finish(
    fresh_database, between, after_revision, clean_catalog, monkeypatch
):
    """From 0002_installed to a later revision over 0003_ready_order, each with statements after the
    routines: killed once a step has ended and before the next begins (after 0003, after the later
    revision, after the routines), the next run runs the statements after the routines of both
    revisions, the one it resumes in and the one the killed run had applied."""
    dsn = fresh_database("twoafter")
    _install_0002_with_the_releases_routines(dsn, monkeypatch)
    _push(dsn, n=3)
    killed = _run_migrate(dsn, kill=f"step:{between}")
    assert killed.returncode == -signal.SIGKILL, killed.stderr
    done = _run_migrate(dsn)
    assert done.returncode == 0, done.stderr
    assert migrate.current(dsn) == (after_revision,)
    assert _after_probe(dsn) == [(1,)]
    assert _sql(
        dsn,
        "SELECT COUNT(*) FROM information_schema.STATISTICS WHERE TABLE_SCHEMA = DATABASE()"
        " AND INDEX_NAME = 'pyqueue_message_ready_idx'",
    ) == [(0,)]
    assert _ready(dsn) == 3
    assert migrate.check(dsn).problems == []
    _assert_like_a_clean_install(dsn, clean_catalog)


@pytest.mark.only_dialect("mysql")
def test_0003_backfill_commits_each_batch_holds_one_batchs_locks_and_resumes_after_a_kill(
    fresh_database, monkeypatch
):
    """The backfill (ready_at = scheduled_at) runs in batches of 5,000 rows in id order, each its
    own transaction: while a batch waits for a row another transaction holds, the batches before it
    are committed (seen from another session) and the migrate's transaction holds the row locks of
    that one batch only. Its query killed there, migrate fails, and the next run finishes it."""
    dsn = fresh_database("backfill")
    _install_0002_with_the_releases_routines(dsn, monkeypatch)
    _fill(dsn, "big", 12_000)
    # the column first (its ALTER would wait for the holder's open transaction: a metadata lock)
    killed = _run_migrate(dsn, kill="1")
    assert killed.returncode == -signal.SIGKILL, killed.stderr
    holder = dialects.for_dsn(dsn).connect(dsn, autocommit=False)
    try:
        cur = holder.cursor()
        [(held,)] = _sql(dsn, "SELECT id FROM pyqueue_message ORDER BY id LIMIT 1 OFFSET 11000")
        cur.execute("SELECT id FROM pyqueue_message WHERE id = %s FOR UPDATE", (held,))
        proc = _spawn_migrate(dsn)
        waiting, deadline = [], time.monotonic() + 120
        while not waiting and time.monotonic() < deadline and proc.poll() is None:
            time.sleep(0.1)
            waiting = _sql(
                dsn,
                "SELECT trx_mysql_thread_id, trx_rows_locked, trx_state FROM information_schema.INNODB_TRX"
                " WHERE trx_state = 'LOCK WAIT' AND (trx_query LIKE 'CALL pyqueue__backfill_ready_at%'"
                " OR trx_query LIKE 'UPDATE pyqueue_message SET ready_at%')",
            )
        assert waiting, ("the backfill never waited for the held row", proc.poll())
        [(thread, rows_locked, _state)] = waiting
        committed = _sql(dsn, "SELECT COUNT(*) FROM pyqueue_message WHERE ready_at = scheduled_at")
        assert committed == [(10_000,)], "the two batches before the held row are committed"
        assert rows_locked <= 5_002, rows_locked  # its own batch's rows (and the lock it waits for)
        _sql(dsn, f"KILL QUERY {int(thread)}")
        _out, err = proc.communicate(timeout=120)
        assert proc.returncode not in (0, -signal.SIGKILL) and "interrupted" in err.lower(), err[-2000:]
    finally:
        holder.close()
    assert _sql(dsn, "SELECT COUNT(*) FROM pyqueue_message WHERE ready_at = scheduled_at") == [(10_000,)]
    done = _run_migrate(dsn)
    assert done.returncode == 0, done.stderr
    _assert_backfilled(dsn)
    assert migrate.check(dsn).problems == []


# ---- the lock, the result, downgrade ---------------------------------------------------


@pytest.mark.only_dialect("mysql")
def test_the_migration_lock_is_per_database(fresh_database):
    held, other = fresh_database("held"), fresh_database("other")
    conn = dialects.for_dsn(held).connect(held)
    try:
        cur = conn.cursor()
        from pyqueue_sql.queries import migration_queries

        cur.execute(migration_queries("mysql")["migration_lock"], {})
        assert cur.fetchone()[0] == 1
        started = time.monotonic()
        done = _run_migrate(other)
        assert done.returncode == 0, done.stderr
        assert time.monotonic() - started < 60
    finally:
        conn.close()


def test_upgrade_and_downgrade_say_what_they_applied(fresh_database):
    dsn = fresh_database("result")
    assert migrate.upgrade(dsn) == migrate.MigrationResult((), (migrate.head(),))
    assert not migrate.upgrade(dsn).changed
    _push(dsn, n=2)
    assert migrate.live_messages(dsn) == 2
    assert migrate.downgrade(dsn) == migrate.MigrationResult((migrate.head(),), ())
    assert migrate.live_messages(dsn) == 0
    name = dialects.for_dsn(dsn).name
    schema = "current_schema()" if name == "postgresql" else "DATABASE()"
    assert (
        _sql(dsn, f"SELECT table_name FROM information_schema.tables WHERE table_schema = {schema}") == []
    ), "a downgrade to base leaves no table behind"


def test_ctrl_c_while_the_pool_returns_the_connection_is_one_line(
    fresh_database, dialect, monkeypatch, caplog
):
    """A Ctrl-C may land while SQLAlchemy's pool resets the connection it takes back, after the run:
    the pool logs it as an error with its traceback and raises it on. migrate reports it in its one
    line (INTERRUPTED) and nothing else is logged (with no handler set, Python prints a record of
    that level to stderr). The interrupt is raised from the pool's own reset event here, where a
    terminal's SIGINT lands by chance."""
    from sqlalchemy import event

    dsn = fresh_database("resetintr")
    made = migrate.create_engine

    def engine_whose_reset_is_interrupted(*args, **kwargs):
        engine = made(*args, **kwargs)

        def interrupted(dbapi_connection, record, reset_state):
            raise KeyboardInterrupt

        event.listen(engine.pool, "reset", interrupted)
        return engine

    monkeypatch.setattr(migrate, "create_engine", engine_whose_reset_is_interrupted)
    with (
        caplog.at_level("WARNING"),
        pytest.raises(migrate.MigrationInterrupted, match="migrate was interrupted"),
    ):
        migrate.upgrade(dsn)
    logged = [(r.name, r.getMessage()) for r in caplog.records if r.levelname in ("WARNING", "ERROR")]
    assert logged == [], logged
    monkeypatch.undo()
    assert migrate.upgrade(dsn).after  # the next run resumes, or finds it done
