"""migrate never loses data, and an interrupted migrate is resumed by running it again.

Covers: a schema installed from the SQL script is refused (and kept) until
adopted; adopt checks the catalog against each revision's fingerprint; a
migration failing half-way keeps what it had and completes after the fix; a
SIGKILL at any point (the migrate.TEST_KILL_VARIABLE hook) or Ctrl-C is
resumed by the next run, with rows, routines and routine grants all there.
"""

from __future__ import annotations

import dataclasses
import os
import re
import shutil
import signal
import subprocess
import sys
import time
import uuid

import pytest

import pyqueue_sql
from pyqueue_sql import dialects, migrate, privileges, routine_sets
from pyqueue_sql.queries import split_script

from .test_migrations import catalog, install_from_sql, smoke

pytestmark = pytest.mark.slow

RUN = """
import signal
import sys
from pyqueue_sql import migrate
# Ctrl-C as in a terminal's foreground: a suite started in the background by a shell without job
# control runs with SIGINT ignored, which this process would inherit, and the signal would be lost
signal.signal(signal.SIGINT, signal.default_int_handler)
print("go", flush=True)
try:
    if len(sys.argv) > 3:
        result = migrate.downgrade(sys.argv[1], sys.argv[2])
    else:
        result = migrate.upgrade(sys.argv[1], sys.argv[2])
except migrate.MigrationInterrupted as exc:
    print("INTERRUPTED:", exc, file=sys.stderr)
    sys.exit(3)
print(result)
"""

# Account grants differ on purpose between the databases compared.
GRANT_PARTS = ("routine_grants", "table_grants", "relation_acls")


def _revisions() -> list[str]:
    return sorted(p.stem for p in (migrate.migrations_dir() / "versions").glob("0*.py"))


def _run_migrate(
    dsn: str, revision: str = "heads", kill: str | None = None, downgrade: bool = False
) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k != migrate.TEST_KILL_VARIABLE}
    if kill is not None:
        env[migrate.TEST_KILL_VARIABLE] = kill
    argv = [sys.executable, "-c", RUN, dsn, revision] + (["down"] if downgrade else [])
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


def _assert_like_a_clean_install(dsn: str, clean: str) -> None:
    migrate.upgrade(clean)
    a, b = catalog(clean), catalog(dsn)
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


def _routine_step(dialect: str, revision: str) -> str:
    """The script the routine step of the upgrade to ``revision`` runs."""
    return migrate.routine_chain(dialect).upgrade_script(revision)


def _unit_count(dialect: str, revisions: list[str]) -> int:
    """How many units of work (MySQL statements, PostgreSQL files) an upgrade through revisions runs."""
    folder = migrate.migrations_dir() / "sql" / dialect
    total = 0
    for rev in revisions:
        for text in ((folder / f"{rev}.up.sql").read_text(), _routine_step(dialect, rev)):
            total += len(split_script(text)) if dialect == "mysql" else 1
    return total


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


def test_adopt_records_a_script_install_and_keeps_its_messages(fresh_database):
    dsn = fresh_database("adopt")
    install_from_sql(dsn)
    _push(dsn)
    result = migrate.upgrade(dsn, adopt=True)
    adopted = _first_of_its_fingerprint(dsn, migrate.head())
    assert result.adopted == adopted
    assert (result.before, result.after) == ((adopted,), (migrate.head(),))
    assert migrate.current(dsn) == (migrate.head(),)
    assert _ready(dsn) == 1
    assert migrate.upgrade(dsn) == migrate.MigrationResult((migrate.head(),), (migrate.head(),))
    smoke(dsn)


def test_adopt_an_older_unrecorded_schema_then_upgrade_it(fresh_database):
    """A schema of an older release that is not recorded (its version row lost):
    adopt recognises the revision and applies the rest."""
    dsn, clean = fresh_database("older"), fresh_database("clean")
    # the newest revision whose catalog differs from the head's on this server flavor (one that
    # changed no structure here shares the head's fingerprint), and the oldest revision with its
    # fingerprint, which adopt records
    head_print = _module_fingerprints(migrate.head()).get(_flavor(dsn))
    newest = [r for r in _revisions() if _module_fingerprints(r).get(_flavor(dsn)) != head_print][-1]
    older = _first_of_its_fingerprint(dsn, newest)
    migrate.upgrade(dsn, newest)
    _push(dsn, n=3)
    _sql(dsn, "DELETE FROM pyqueue_alembic_version")
    with pytest.raises(migrate.UnrecordedSchemaError):
        migrate.upgrade(dsn)
    result = migrate.upgrade(dsn, adopt=True)
    assert (result.adopted, result.before, result.after) == (older, (older,), (migrate.head(),))
    assert _ready(dsn) == 3
    _assert_like_a_clean_install(dsn, clean)


def test_adopt_a_schema_of_the_revision_before_the_head_gives_the_heads_routine_bodies(fresh_database):
    """An unrecorded schema of the revision before the head. Where the head changed routine
    bodies only (MySQL at 0008 and 0009), the two catalogs have one fingerprint: adopt records the oldest
    revision with it and upgrades from there, so the routines end up with the head's bodies."""
    dsn, clean = fresh_database("before"), fresh_database("clean")
    before_head = _revisions()[-2]
    migrate.upgrade(dsn, before_head)
    _push(dsn, n=2)
    _sql(dsn, "DELETE FROM pyqueue_alembic_version")
    result = migrate.upgrade(dsn, adopt=True)
    assert result.adopted == _first_of_its_fingerprint(dsn, before_head)
    assert result.after == (migrate.head(),)
    assert _ready(dsn) == 2
    _assert_like_a_clean_install(dsn, clean)


def test_adopt_refuses_a_schema_that_matches_no_revision(fresh_database):
    dsn = fresh_database("odd")
    install_from_sql(dsn)
    _push(dsn)
    _sql(dsn, "CREATE TABLE pyqueue_extra (id integer)")
    with pytest.raises(migrate.SchemaMismatchError, match="match no released revision"):
        migrate.upgrade(dsn, adopt=True)
    assert migrate.current(dsn) == ()
    assert _ready(dsn) == 1


def _changes_no_structure(dialect: str, revision: str) -> bool:
    """True when the upgrade to ``revision`` runs no DDL on this dialect (it may create
    routines again with other bodies, which the fingerprint does not read)."""
    up = migrate.migrations_dir() / "sql" / dialect / f"{revision}.up.sql"
    return not split_script(up.read_text())


def _first_of_its_fingerprint(dsn: str, revision: str) -> str:
    """The oldest revision whose fingerprint on this server flavor is that of ``revision``:
    the one adopt records for such a catalog (and then upgrades from)."""
    kind = _flavor(dsn)
    value = _module_fingerprints(revision).get(kind)
    return next(r for r in _revisions() if _module_fingerprints(r).get(kind) == value)


def test_each_revision_fingerprint_is_current(fresh_database, dialect):
    """FINGERPRINTS in each revision file is what that revision builds (regenerated here
    from a fresh database, one revision at a time), and the script install matches the head."""
    dsn, script = fresh_database("fp"), fresh_database("fpsql")
    kind = None
    computed, shipped = {}, {}
    for rev in _revisions():
        migrate.upgrade(dsn, rev)
        kind = kind or _flavor(dsn)
        computed[rev] = migrate.fingerprint(dsn)
        shipped[rev] = _module_fingerprints(rev).get(kind)
    install_from_sql(script)
    assert migrate.fingerprint(script) == computed[_revisions()[-1]], (
        "schema.sql/routines.sql and the head differ"
    )
    # A revision that changes no structure on this dialect (0007 only drops a PostgreSQL foreign
    # key; 0008 and 0009 change MySQL routine bodies only) share the fingerprint of the one before,
    # and adopting picks the older of the two, then upgrades (creating the later one's routines
    # again). Any other two revisions must differ.
    revisions = list(computed)
    for i, rev in enumerate(revisions):
        first = i  # the first of the run of revisions that end in this fingerprint
        while first > 0 and computed[revisions[first - 1]] == computed[rev]:
            first -= 1
        if first < i:
            assert _changes_no_structure(dialect, rev), f"{rev} changes the catalog but not its fingerprint"
        assert computed[rev] not in {computed[r] for r in revisions[:first]}, (
            "two revisions cannot be told apart"
        )
    stale = {rev: value for rev, value in computed.items() if shipped[rev] != value}
    if stale and os.environ.get(UPDATE_FINGERPRINTS):
        for rev, value in stale.items():
            _write_fingerprint(rev, kind, value)
        stale = {}
    assert not stale, (
        f"set FINGERPRINTS[{kind!r}] in migrations/versions/<rev>.py to: {stale} "
        f"(or run this test with {UPDATE_FINGERPRINTS}=1 to write them)"
    )


def test_a_comment_inside_a_routine_body_leaves_the_fingerprint_alone(fresh_database, dialect):
    """Released routine files lost comments inside routine bodies (the tracker's numbers
    were taken out of 0002's and 0003's), so a database installed from the text as first
    released has other bodies. The fingerprint reads no routine body: a routine created
    again with a comment added inside its body changes the body in the catalog, not the
    fingerprint, and adopt still recognises the revision."""
    dsn = fresh_database("comment")
    install_from_sql(dsn)
    fingerprint, before = migrate.fingerprint(dsn), catalog(dsn)
    current = routine_sets.parse(dialect, migrate.current_routines_file(dialect).read_text(), "routines.sql")
    stats = current.routines["queue_stats"]
    statements = [
        dataclasses.replace(
            s, code=s.code.replace("\nBEGIN\n", "\nBEGIN\n    -- not in the released text\n", 1)
        )
        for s in stats.statements
    ]
    assert statements != stats.statements
    text = routine_sets.script(dialect, [dataclasses.replace(stats, statements=statements)])
    conn = dialects.for_dsn(dsn).connect(dsn)
    try:
        cur = conn.cursor()
        for statement in [text] if dialect == "postgresql" else split_script(text):
            cur.execute(statement)
        cur.close()
    finally:
        conn.close()
    after = catalog(dsn)
    assert after["routines"] != before["routines"], "the body in the catalog changed"
    assert {k: v for k, v in after.items() if k != "routines"} == {
        k: v for k, v in before.items() if k != "routines"
    }
    assert migrate.fingerprint(dsn) == fingerprint
    result = migrate.upgrade(dsn, adopt=True)
    assert (result.adopted, result.after) == (
        _first_of_its_fingerprint(dsn, migrate.head()),
        (migrate.head(),),
    )
    smoke(dsn)


# Opt-in: rewrites the stale values in migrations/versions/*.py (after a schema change
# of the newest revision), like `make freeze` does for its routines.
UPDATE_FINGERPRINTS = "PYQUEUE_SQL_UPDATE_FINGERPRINTS"


def _write_fingerprint(rev: str, kind: str, value: str) -> None:
    import re

    path = migrate.migrations_dir() / "versions" / f"{rev}.py"
    text = path.read_text()
    line = re.compile(r'^(    "%s": )"[0-9a-f]*",$' % re.escape(kind), re.MULTILINE)
    assert line.search(text), f"{path}: no FINGERPRINTS line for {kind}"
    path.write_text(line.sub(lambda m: f'{m.group(1)}"{value}",', text, count=1))


def _flavor(dsn: str) -> str:
    with migrate._session(dsn) as (connection, _dialect):
        return migrate.flavor(connection)


def _module_fingerprints(rev: str) -> dict:
    from alembic.script import ScriptDirectory

    script = ScriptDirectory(str(migrate.migrations_dir()))
    return getattr(script.get_revision(rev).module, "FINGERPRINTS", {})


# ---- failures half-way ------------------------------------------------------------


def _newest_with_routines(dialect: str) -> tuple[str, str]:
    """The newest revision whose upgrade re-creates routines on this dialect, and the one before
    it (a revision may change nothing on one dialect: 0007 only drops a PostgreSQL foreign key)."""
    revisions = _revisions()
    for i in range(len(revisions) - 1, 0, -1):
        if re.search(r"^CREATE ", _routine_step(dialect, revisions[i]), re.M):
            return revisions[i - 1], revisions[i]
    raise AssertionError(f"no revision re-creates routines on {dialect}")


def _break_routines(tmp_path, monkeypatch, dialect: str, revision: str) -> None:
    """The routine step of ``revision`` reads a copy of its routines with a bad statement: MySQL,
    in the last routine that step re-creates (after the others were dropped and created again);
    PostgreSQL, first. The newest revision reads sql/<dialect>/routines.sql; an older one its
    released file, here in a copy of the migrations folder."""
    step = _routine_step(dialect, revision)
    if revision == migrate.head():
        source = migrate.current_routines_file(dialect)
        path = tmp_path / "routines.sql"
        monkeypatch.setattr(migrate, "current_routines_file", lambda _dialect: path)
    else:
        folder = tmp_path / "migrations"
        shutil.copytree(migrate.migrations_dir(), folder)
        source = path = folder / "sql" / dialect / f"{revision}.routines.sql"
        monkeypatch.setattr(migrate, "migrations_dir", lambda: folder)
    text = source.read_text()
    if dialect == "mysql":
        last = re.findall(r"^CREATE PROCEDURE (\w+)", step, re.M)[-1]
        at = text.index(f"\nCREATE PROCEDURE {last}(")
        at = text.index("\nBEGIN\n", at) + len("\nBEGIN\n")
        text = text[:at] + "    SELECT FROM no_such_column;\n" + text[at:]
    else:
        text = "SELECT no_such_column FROM pyqueue_queue;\n" + text
    path.write_text(text)


def test_a_migration_failing_half_way_keeps_data_and_a_rerun_completes(
    fresh_database, tmp_path, monkeypatch, dialect
):
    older, newest = _newest_with_routines(dialect)
    dsn, clean = fresh_database("half"), fresh_database("clean")
    migrate.upgrade(dsn, older)
    _push(dsn, n=5)
    _break_routines(tmp_path, monkeypatch, dialect, newest)
    with pytest.raises(Exception, match="no_such_column"):
        migrate.upgrade(dsn)
    assert migrate.current(dsn) == (older,)
    assert _ready(dsn) == 5
    monkeypatch.undo()
    assert migrate.upgrade(dsn).after == (migrate.head(),)
    assert _ready(dsn) == 5
    _assert_like_a_clean_install(dsn, clean)
    smoke(dsn)


# ---- SIGKILL and Ctrl-C --------------------------------------------------------------


@pytest.mark.parametrize("where", [0.02, "0.3:unrecorded", 0.5, "0.97:unrecorded"])
def test_a_fresh_install_killed_anywhere_is_completed_by_the_next_run(fresh_database, dialect, where):
    dsn, clean = fresh_database("kill"), fresh_database("clean")
    fraction, _, flag = str(where).partition(":")
    total = _unit_count(dialect, _revisions())
    n = max(1, int(total * float(fraction)))
    killed = _run_migrate(dsn, kill=f"{n}{':' + flag if flag else ''}")
    assert killed.returncode == -signal.SIGKILL, killed.stderr
    done = _run_migrate(dsn)
    assert done.returncode == 0, done.stderr
    assert migrate.current(dsn) == (migrate.head(),)
    _assert_like_a_clean_install(dsn, clean)
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
def test_an_upgrade_killed_in_the_routine_phase_gives_every_grant_back(fresh_database, dialect, where):
    # the revision that re-creates the most procedures, from the one before it (then on to the head)
    revisions = _revisions()
    newest = max(revisions[1:], key=lambda rev: len(split_script(_routine_step("mysql", rev))))
    older = revisions[revisions.index(newest) - 1]
    dsn, clean = fresh_database("grants"), fresh_database("clean")
    migrate.upgrade(dsn, older)
    _push(dsn, n=4)
    account = MySQLAccount(dsn)
    try:
        before = account.grant_consumer()
        assert account.granted() == before and len(before) >= 10
        up = _unit_count("mysql", [newest])
        routines = len(split_script(_routine_step("mysql", newest)))
        first_routine = up - routines
        points = {
            "routine+1": [f"{first_routine + 1}"],
            "routine+20": [f"{first_routine + 20}"],
            "routine+21:unrecorded": [f"{first_routine + 21}:unrecorded"],
            "last-1:unrecorded": [f"{up - 1}:unrecorded"],
            # killed, then the resuming run killed again further on
            "twice": [f"{first_routine + 10}", f"{routines // 2}:unrecorded"],
        }[where]
        for point in points:
            killed = _run_migrate(dsn, kill=point)
            assert killed.returncode == -signal.SIGKILL, killed.stderr
            assert _ready(dsn) == 4
        done = _run_migrate(dsn)
        assert done.returncode == 0, done.stderr
        assert migrate.current(dsn) == (migrate.head(),)
        assert account.granted() >= before, "grants lost: %s" % sorted(before - account.granted())
        assert _ready(dsn) == 4
        _assert_like_a_clean_install(dsn, clean)
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


def test_ctrl_c_says_it_was_interrupted_and_the_next_run_resumes(fresh_database, dialect):
    dsn, clean = fresh_database("intr"), fresh_database("clean")
    n = max(2, _unit_count(dialect, _revisions()) // 3)
    stopped = _run_migrate(dsn, kill=f"{n}:SIGINT")
    assert stopped.returncode == 3, stopped.stderr
    assert "INTERRUPTED: migrate was interrupted; run it again to resume" in stopped.stderr
    assert "error 0" not in stopped.stderr and "Traceback" not in stopped.stderr
    done = _run_migrate(dsn)
    assert done.returncode == 0, done.stderr
    _assert_like_a_clean_install(dsn, clean)


@pytest.mark.parametrize("delay", [0.1, 0.6])
def test_ctrl_c_from_the_terminal_while_the_server_works(fresh_database, dialect, delay):
    """SIGINT from outside, most likely while the driver waits for the server's reply."""
    dsn, clean = fresh_database("sigint"), fresh_database("clean")
    env = {k: v for k, v in os.environ.items() if k != migrate.TEST_KILL_VARIABLE}
    proc = subprocess.Popen(
        [sys.executable, "-c", RUN, dsn, "heads"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
    )
    assert proc.stdout.readline() == "go\n"  # imports done: migrate.upgrade starts now
    time.sleep(delay)
    proc.send_signal(signal.SIGINT)
    out, err = proc.communicate(timeout=120)
    finished = "MigrationResult" in out  # done before the signal came (it may then hit the exit)
    assert proc.returncode == 3 or (finished and proc.returncode in (0, -signal.SIGINT)), (
        proc.returncode,
        err,
    )
    assert "error 0" not in err and "Traceback" not in err, err
    done = _run_migrate(dsn)
    assert done.returncode == 0, done.stderr
    _assert_like_a_clean_install(dsn, clean)


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
    first = _revisions()[0]
    assert migrate.upgrade(dsn, first) == migrate.MigrationResult((), (first,))
    result = migrate.upgrade(dsn)
    assert (result.before, result.after, result.changed) == ((first,), (migrate.head(),), True)
    assert not migrate.upgrade(dsn).changed
    _push(dsn, n=2)
    assert migrate.live_messages(dsn) == 2
    assert migrate.downgrade(dsn).after == ()
    assert migrate.live_messages(dsn) == 0
    name = dialects.for_dsn(dsn).name
    schema = "current_schema()" if name == "postgresql" else "DATABASE()"
    assert (
        _sql(dsn, f"SELECT table_name FROM information_schema.tables WHERE table_schema = {schema}") == []
    ), "a downgrade to base leaves no table behind"
