"""The pyqueue-sql command, run in-process against the test databases."""

from __future__ import annotations

import datetime as dt
import json
import pathlib
import re
import uuid

import pytest

from pyqueue_sql import cli, migrate

from ..helpers import run_cli


@pytest.mark.parametrize("name", ["postgresql", "mysql"])
def test_sql_prints_the_install_and_uninstall_scripts(capsys, name):
    code, out, _ = run_cli(capsys, "sql", "--dialect", name)
    assert code == 0
    assert "queue_reserve" in out and "pyqueue_message" in out
    assert ("--single-transaction" in out) == (name == "postgresql")
    code, out, _ = run_cli(capsys, "sql", "--dialect", name, "--uninstall")
    assert code == 0 and "DROP" in out


def test_create_push_reserve_commit_stats(capsys, dsn):
    queue = f"cli.{uuid.uuid4().hex[:8]}"
    assert run_cli(capsys, "create", queue, "--max-attempts", "4", "--dsn", dsn)[0] == 0
    code, out, _ = run_cli(capsys, "push", queue, "k1", "greet", '{"to": "x"}', "--dsn", dsn)
    assert code == 0 and "inserted" in out
    code, out, _ = run_cli(capsys, "push", queue, "k1", "greet", '{"to": "x"}', "--dsn", dsn)
    assert code == 0 and "duplicate" in out
    run_cli(capsys, "push", queue, "k2", "greet", "[1, 2]", "--priority", "3", "--dsn", dsn)
    code, out, _ = run_cli(capsys, "reserve", queue, "-n", "5", "--commit", "--dsn", dsn)
    assert code == 0
    lines = [json.loads(line) for line in out.splitlines() if line.startswith("{")]
    assert [(m["key"], m["payload"]) for m in lines] == [("k2", [1, 2]), ("k1", {"to": "x"})]
    code, out, _ = run_cli(capsys, "stats", queue, "--dsn", dsn)
    assert code == 0 and queue in out and "ready" in out
    row = next(line for line in out.splitlines() if line.startswith(queue)).split()
    assert row[1:5] == ["0", "0", "0", "0"]  # committed: nothing left


def test_stats_takes_several_queues_and_says_what_left_each_in_the_last_minute(capsys, dsn, db):
    kept, plain, other = (f"st.{uuid.uuid4().hex[:8]}" for _ in range(3))
    db.queue(kept).create(history_retention=3600)
    db.queue(plain).create()
    db.queue(other).create()
    for name in (kept, plain):
        for n in range(3):
            db.queue(name).push(f"k{n}", "job", {})
        for r in db.queue(name).reserve(n=3):
            db.queue(name).commit(r)
    code, out, err = run_cli(capsys, "stats", kept, plain, "--dsn", dsn)
    assert code == 0, err
    header, _, *rows = out.splitlines()
    assert header.split()[-2:] == ["last", "minute"]
    assert [(r.split()[0], r.split()[-1]) for r in rows] == [(kept, "3"), (plain, "-")]  # not `other`
    code, out, err = run_cli(capsys, "stats", plain, kept, "--json", "--dsn", dsn)
    assert [(o["queue"], o["last_minute"]) for o in map(json.loads, out.splitlines())] == [
        (plain, None),
        (kept, 3),
    ]


def test_stats_kinds_shows_each_queue_s_messages_by_task_kind(capsys, dsn, db):
    busy, empty = (f"st.{uuid.uuid4().hex[:8]}" for _ in range(2))
    db.queue(busy).create()
    db.queue(empty).create()
    db.queue(busy).push_many(
        [dict(key=f"e{n}", kind="email", payload={}) for n in range(3)]
        + [
            dict(key="r0", kind="report", payload={}),
            dict(key="r1", kind="report", payload={}, run_at=dt.timedelta(hours=1)),
        ]
    )
    db.queue(busy).reserve(n=1, kinds=["report"])
    code, out, err = run_cli(capsys, "stats", busy, empty, "--kinds", "--dsn", dsn)
    assert code == 0, err
    depths, by_kind = out.split("\n\n")
    assert [r.split()[:2] for r in depths.splitlines()[2:]] == [[busy, "3"], [empty, "0"]]
    header, _, *rows = by_kind.splitlines()
    assert [header.split(), *(r.split() for r in rows)] == [
        ["queue", "kind", "ready", "delayed", "reserved"],
        [busy, "email", "3", "0", "0"],
        [busy, "report", "0", "1", "1"],
    ]
    code, out, err = run_cli(capsys, "stats", busy, empty, "--kinds", "--json", "--dsn", dsn)
    assert code == 0, err
    assert [(o["queue"], o["kinds"]) for o in map(json.loads, out.splitlines())] == [
        (
            busy,
            {
                "email": {"ready": 3, "delayed": 0, "reserved": 0},
                "report": {"ready": 0, "delayed": 1, "reserved": 1},
            },
        ),
        (empty, {}),
    ]
    # without --kinds: no per-kind read, the table alone
    code, out, err = run_cli(capsys, "stats", busy, "--dsn", dsn)
    assert code == 0 and "kind" not in out and '"kinds"' not in out


def test_user_errors_are_one_line_and_non_zero(capsys, dsn):
    code, _, err = run_cli(capsys, "push", "no-such-queue", "k", "kind", "{}", "--dsn", dsn)
    assert code == 1 and "does not exist" in err and "Traceback" not in err
    code, _, err = run_cli(capsys, "push", "q", "k", "kind", "{not json", "--dsn", dsn)
    assert code == 2 and "JSON" in err


def test_no_dsn_is_a_usage_error(capsys, monkeypatch):
    monkeypatch.delenv("PYQUEUE_DSN", raising=False)
    code, _, err = run_cli(capsys, "stats")
    assert code == 2 and "PYQUEUE_DSN" in err


def test_no_import_cycle_between_cli_and_demo():
    """The helpers both use live in pyqueue_sql.display: demo never imports cli, and cli imports
    demo only inside the `demo` command."""
    import ast
    import pathlib

    package = pathlib.Path(cli.__file__).parent.parent

    def imports(tree):
        found = {node.module for node in ast.walk(tree) if isinstance(node, ast.ImportFrom)}
        return found | {a.name for node in ast.walk(tree) if isinstance(node, ast.Import) for a in node.names}

    demo_tree = ast.parse((package / "demo.py").read_text())
    assert not imports(demo_tree) & {"cli", "pyqueue_sql.cli"} and not any(
        m and m.startswith(("cli.", "pyqueue_sql.cli.")) for m in imports(demo_tree)
    )
    users = []
    for path in sorted((package / "cli").glob("*.py")):
        tree = ast.parse(path.read_text())
        users += [f.name for f in tree.body if isinstance(f, ast.FunctionDef) and imports(f) & {"demo"}]
        top = ast.Module(body=[n for n in tree.body if not isinstance(n, ast.FunctionDef)], type_ignores=[])
        assert not imports(top) & {"demo"}, path
    assert users == ["cmd_demo"]


def test_help_lists_every_command_in_order(capsys):
    """`pyqueue-sql --help` is the CLI's reference: every command of every group is in it, in
    the order of cli.COMMANDS, dashboard included."""
    with pytest.raises(SystemExit):
        cli.main(["--help"])
    out = capsys.readouterr().out
    listed = [line.split()[0] for line in out.splitlines() if line.startswith("    ") and line[4] != " "]
    assert listed == list(cli.COMMANDS)
    assert "dashboard" in listed and "cancel" in listed and len(set(listed)) == 35


@pytest.mark.slow
def test_migrate_says_what_it_applied(capsys, fresh_database):
    target = fresh_database()
    code, out, err = run_cli(capsys, "migrate", "--dsn", target)
    assert code == 0, err
    assert out.splitlines()[0] == f"(none) -> {migrate.head()}"
    assert f"revision: {migrate.head()} (head)" in out
    code, out, err = run_cli(capsys, "migrate", "--dsn", target)
    assert code == 0, err
    assert out.splitlines()[0] == f"already at {migrate.head()}"


def test_migrate_check_on_an_empty_database_says_so_in_one_line(capsys, fresh_database):
    target = fresh_database()
    code, out, err = run_cli(capsys, "migrate", "--check", "--dsn", target)
    assert code == 1
    assert out == ""
    assert (
        err
        == "pyqueue-sql: pyqueue-sql is not installed here (no revision recorded): run `pyqueue-sql migrate`\n"
    )
    assert migrate.current(target) == ()  # the schema's revisions, for a program: none here


def test_migrate_help_names_no_revision(capsys):
    """The help says what migrate prints without naming a revision, which would go stale."""
    with pytest.raises(SystemExit):
        cli.main(["migrate", "--help"])
    out = capsys.readouterr().out
    assert "(none) -> REVISION" in out
    assert not re.search(r"\b\d{4}_[a-z]", out)


def test_no_revision_is_named_in_the_package():
    """No module of the package, migrate.py included, names a schema revision (NNNN_name) but
    the baseline: what the CLI prints comes from the migrations (pyqueue_sql.migrate.head() and
    the version table)."""
    package = pathlib.Path(cli.__file__).parent.parent
    named = [
        f"{path.relative_to(package)}:{n}: {line.strip()}"
        for path in sorted(package.rglob("*.py"))
        if "migrations" not in path.relative_to(package).parts  # Django's, named as Django names them
        for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1)
        if re.search(r"\b\d{4}_[a-z]", line.replace("0001_baseline", ""))
    ]
    assert named == []


def test_migrate_refuses_a_script_installed_schema_until_adopted(capsys, fresh_database):
    import pyqueue_sql
    from pyqueue_sql import dialects
    from pyqueue_sql.queries import install_script

    target = fresh_database()
    dialect = dialects.for_dsn(target)
    connection = dialect.connect(target)
    try:
        cursor = connection.cursor()
        dialect.run_script(cursor, install_script(dialect.name))
        cursor.close()
    finally:
        connection.close()
    with pyqueue_sql.connect(target) as db:
        db.queue("kept").create()
        db.queue("kept").push("k", "kind", {"n": 1})
    code, out, err = run_cli(capsys, "migrate", "--dsn", target)
    assert code == 1 and "--adopt" in err and "Traceback" not in err
    code, out, err = run_cli(capsys, "migrate", "--adopt", "--dsn", target)
    assert code == 0, err
    assert out.splitlines()[0].startswith("recorded the existing schema as ")
    assert f"revision: {migrate.head()} (head)" in out
    with pyqueue_sql.connect(target) as db:
        assert db.queue("kept").stats().ready == 1


@pytest.mark.slow
def test_downgrade_refuses_without_yes_when_messages_would_be_dropped(capsys, monkeypatch, fresh_database):
    import io

    import pyqueue_sql

    target = fresh_database()
    migrate.upgrade(target)
    with pyqueue_sql.connect(target) as db:
        db.queue("q").create()
        db.queue("q").push("k", "kind", {})
    monkeypatch.setattr("sys.stdin", io.StringIO(""))  # no terminal
    code, out, err = run_cli(capsys, "migrate", "--downgrade", "--dsn", target)
    assert code == 1 and "refusing" in err and "1 live message" in err and "--yes" in err
    assert migrate.current(target) == (migrate.head(),)

    class Terminal(io.StringIO):
        def isatty(self):
            return True

    monkeypatch.setattr("sys.stdin", Terminal("no\n"))
    code, out, err = run_cli(capsys, "migrate", "--downgrade", "--dsn", target)
    assert code == 1 and "continue? [y/N]" in err and "cancelled" in err
    assert migrate.current(target) == (migrate.head(),)

    code, out, err = run_cli(capsys, "migrate", "--downgrade", "--yes", "--dsn", target)
    assert code == 0, err
    assert out.splitlines()[0] == f"{migrate.head()} -> base"
    assert "removed pyqueue-sql" in out and "1 message(s)" in out
    assert migrate.current(target) == ()
    from pyqueue_sql import dialects

    dialect = dialects.for_dsn(target)
    connection = dialect.connect(target)
    try:
        cursor = connection.cursor()
        schema = "current_schema()" if dialect.name == "postgresql" else "database()"
        cursor.execute(
            "SELECT table_name FROM information_schema.tables "
            f"WHERE table_schema = {schema} AND table_name LIKE 'pyqueue%%'"
        )
        assert cursor.fetchall() in ([], ())  # no table left behind
        cursor.close()
    finally:
        connection.close()
    code, out, _ = run_cli(capsys, "migrate", "--downgrade", "--dsn", target)
    assert code == 0 and "not installed" in out


@pytest.mark.slow
def test_downgrade_of_an_empty_install_asks_nothing(capsys, monkeypatch, fresh_database):
    import io

    target = fresh_database()
    migrate.upgrade(target)
    monkeypatch.setattr("sys.stdin", io.StringIO(""))
    code, out, err = run_cli(capsys, "migrate", "--downgrade", "--dsn", target)
    assert code == 0, err
    assert "held no messages" in out


def test_migrate_interrupted_says_to_run_it_again(capsys, monkeypatch, fresh_database):
    target = fresh_database()

    def interrupted(*args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(migrate, "upgrade", interrupted)
    code, _, err = run_cli(capsys, "migrate", "--dsn", target)
    assert code == 130 and "migrate was interrupted; run it again to resume" in err

    def lost(*args, **kwargs):
        raise migrate.MigrationInterrupted("migrate was interrupted; run it again to resume")

    monkeypatch.setattr(migrate, "upgrade", lost)
    code, _, err = run_cli(capsys, "migrate", "--dsn", target)
    assert code == 130 and err.count("run it again") == 1


def test_ctrl_c_inside_a_finalizer_still_interrupts_the_command():
    """A Ctrl-C that lands in a finalizer (a driver result's __del__) cannot propagate from there;
    the command must still stop with 130 and its one-line message, not print an ignored
    exception's traceback and carry on."""
    import os
    import subprocess
    import sys

    script = """
import argparse, signal, sys, time
from pyqueue_sql import cli

# Ctrl-C handled as in a terminal's foreground (a suite started in the background by a shell
# without job control runs with SIGINT ignored, and this process would inherit that)
signal.signal(signal.SIGINT, signal.default_int_handler)

class Finalized:
    def __del__(self):
        raise KeyboardInterrupt  # as if SIGINT arrived while this finalizer ran

def command(args):
    Finalized()
    for _ in range(200):
        time.sleep(0.01)
    print("went on after the interrupt")
    return 0

class Parser:
    def parse_args(self, argv):
        return argparse.Namespace(handler=command)

cli.build_parser = Parser
sys.exit(cli.main([]))
"""
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    proc = subprocess.run(
        [sys.executable, "-c", script], cwd=root, capture_output=True, text=True, timeout=60
    )
    assert proc.returncode == 130, (proc.stdout, proc.stderr)
    assert proc.stderr == "pyqueue-sql: interrupted\n", proc.stderr
    assert "went on" not in proc.stdout


@pytest.mark.parametrize("logged", [True, False], ids=["in-the-cli", "without-it"])
def test_ctrl_c_while_sqlalchemy_closes_a_connection_is_no_traceback(dsn, logged):
    """SQLAlchemy's pool logs a Ctrl-C that lands while it gives a connection back ("Exception
    during reset or similar", with the traceback) and raises it again; the CLI reports it in one
    line. The interrupt is raised by the pool's reset event, on a real connection made as migrate
    makes it; run outside the CLI's main, the same code prints the traceback (the test sees it)."""
    import os
    import subprocess
    import sys

    script = """
import argparse, sys
from sqlalchemy import create_engine, event, pool
from pyqueue_sql import cli, dialects

dsn, in_cli = sys.argv[1], sys.argv[2] == "1"
dialect = dialects.for_dsn(dsn)

def command(args):
    engine = create_engine(f"{dialect.sqlalchemy_dialect}://", poolclass=pool.NullPool,
                           creator=lambda: dialect.connect(dsn, autocommit=False))

    @event.listens_for(engine.pool, "reset")
    def interrupted(dbapi_connection, record, reset_state):
        raise KeyboardInterrupt  # as if SIGINT arrived while the pool reset the connection

    connection = engine.connect()
    connection.exec_driver_sql("SELECT 1")
    connection.close()
    print("went on after the interrupt")
    return 0

class Parser:
    def parse_args(self, argv):
        return argparse.Namespace(handler=command)

if in_cli:
    cli.build_parser = Parser
    sys.exit(cli.main([]))
try:
    command(None)
except KeyboardInterrupt:
    sys.exit(130)
"""
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    proc = subprocess.run(
        [sys.executable, "-c", script, dsn, "1" if logged else "0"],
        cwd=root,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 130, (proc.stdout, proc.stderr)
    assert "went on" not in proc.stdout
    if logged:
        assert proc.stderr == "pyqueue-sql: interrupted\n", proc.stderr
    else:  # what the CLI keeps out of sight
        assert "Exception during reset or similar" in proc.stderr and "Traceback" in proc.stderr, proc.stderr


@pytest.mark.slow
def test_ctrl_c_during_a_real_migrate_is_resumable(fresh_database):
    """SIGINT at several moments of a fresh install: each run either finished (0) or
    says to run it again (130, no traceback); running it again then reaches the head."""
    import os
    import signal
    import subprocess
    import sys
    import time

    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    outcomes = []
    for delay in (0.5, 0.65, 0.8, 1.0):
        target = fresh_database()
        command = [sys.executable, "-m", "pyqueue_sql.cli", "migrate", "--dsn", target]
        proc = subprocess.Popen(
            command,
            cwd=root,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            # SIGINT as in a terminal's foreground, even when the suite runs with it ignored
            # (started in the background by a shell without job control)
            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
        )
        time.sleep(delay)
        proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(timeout=120)
        outcomes.append(proc.returncode)
        # A SIGINT that lands inside the import system's own lock callback is reported and
        # dropped by the interpreter itself ("Exception ignored in"), before any code of ours
        # runs; the run then goes on as if no signal had come. Not a traceback of the CLI.
        err = re.sub(
            r"Exception ignored in: <function _get_module_lock\.<locals>\.cb at 0x[0-9a-f]+>\n"
            r"Traceback \(most recent call last\):\n(?:  .*\n)*KeyboardInterrupt: ?\n",
            "",
            err,
        )
        if proc.returncode == -signal.SIGINT:
            # the signal came while Python was still starting or importing: nothing ran yet
            assert "pyqueue_sql/migrate.py" not in err and "cmd_migrate" not in err, err
        else:
            assert proc.returncode in (0, 130), err
            assert "Traceback" not in err, err
        if proc.returncode == 130:  # (or plain "interrupted" when it came before migrate started)
            assert (
                "migrate was interrupted; run it again to resume" in err
                or err == "pyqueue-sql: interrupted\n"
            )
        again = subprocess.run(command, cwd=root, capture_output=True, text=True, timeout=120)
        assert again.returncode == 0, again.stderr
        assert migrate.current(target) == (migrate.head(),)
    print("exit codes by delay:", outcomes)
