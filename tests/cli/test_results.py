"""`pyqueue-sql result`, `cancel`, `show` and `create --result-retention` typed as a user types
them, on both dialects: what each prints, its exit status, --json and --wait, and who may cancel."""

from __future__ import annotations

import datetime as dt
import json
import os
import signal
import subprocess
import sys
import threading
import time
import uuid

import pytest

from ..helpers import run_cli
from ..security.test_privileges import Accounts


def one_line(err: str) -> str:
    lines = err.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in err, err
    return lines[0]


def fields(out: str) -> dict[str, str]:
    """The `label: value` lines of show/result."""
    return {k.strip(): v.strip() for k, _, v in (line.partition(":") for line in out.splitlines()) if _}


def test_create_sets_shows_and_resets_the_result_retention(capsys, dsn):
    name = f"cli.res.{uuid.uuid4().hex[:8]}"
    code, out, err = run_cli(capsys, "create", name, "--result-retention", "3600", "--dsn", dsn)
    assert code == 0, err
    assert out.strip().endswith("history retention -, result retention 3600s"), out
    code, out, _ = run_cli(capsys, "settings", name, "--dsn", dsn)
    header, _, row = out.splitlines()
    assert "result retention" in header and "3600s" in row.split(), out
    code, out, err = run_cli(capsys, "create", name, "--reset", "result_retention", "--dsn", dsn)
    assert code == 0 and "result retention" not in out, out
    code, out, _ = run_cli(capsys, "settings", name, "--dsn", dsn)
    column = out.splitlines()[0].index("result retention")
    assert out.splitlines()[2][column:].split()[0] == "-", out
    for bad in ("0", "-5", str(3651 * 86400)):
        code, _, err = run_cli(capsys, "create", name, "--result-retention", bad, "--dsn", dsn)
        assert code == 1 and "result_retention" in one_line(err), err
    code, out, _ = run_cli(capsys, "settings", name, "--dsn", dsn)
    assert out.splitlines()[2][column:].split()[0] == "-", out  # nothing changed


def test_cancel_result_and_show_through_a_messages_life(capsys, dsn, db, make_queue):
    queue = make_queue()
    queue.set_result_retention(dt.timedelta(hours=1))
    queue.push("waiting", "mail", {"to": "a"})
    queue.push("running", "mail", {"to": "b"})
    code, out, err = run_cli(capsys, "cancel", queue.name, "waiting", "mail", "--dsn", dsn)
    assert code == 0 and out.startswith("cancelled: waiting/mail was waiting"), (out, err)
    assert len(out.strip().splitlines()) == 1
    code, out, err = run_cli(capsys, "result", queue.name, "waiting", "mail", "--dsn", dsn)
    assert code == 0, err
    shown = fields(out)
    assert shown["state"] == "cancelled" and shown["result"] == "-" and shown["finished at"].endswith("UTC")

    [held] = queue.reserve(n=1, timeout=3600)
    assert held.key == "running"
    assert queue.set_progress(held, {"done": 3, "of": 10})
    code, out, err = run_cli(capsys, "cancel", queue.name, "running", "mail", "--dsn", dsn)
    assert code == 0 and out.startswith("requested: running/mail is being handled"), (out, err)
    code, out, _ = run_cli(capsys, "cancel", queue.name, "running", "mail", "--dsn", dsn)
    assert code == 0 and out.startswith("requested:")  # asking twice says the same
    code, out, err = run_cli(capsys, "show", queue.name, "running", "mail", "--dsn", dsn)
    assert code == 0, err
    shown = fields(out)
    assert shown["state"] == "reserved" and json.loads(shown["progress"]) == {"done": 3, "of": 10}
    assert shown["cancel"] == "requested (its consumer is asked to stop)"
    code, out, err = run_cli(capsys, "result", queue.name, "running", "mail", "--json", "--dsn", dsn)
    assert code == 0, err
    assert json.loads(out) == {
        "queue": queue.name,
        "key": "running",
        "kind": "mail",
        "state": "reserved",
        "result": None,
        "last_error": None,
        "attempts": 1,
        "progress": {"done": 3, "of": 10},
        "finished_at": None,
        "cancel_requested": True,
    }

    assert queue.commit_result(held, {"sent": True, "id": "m-1"})
    code, out, err = run_cli(capsys, "result", queue.name, "running", "mail", "--json", "--dsn", dsn)
    got = json.loads(out)
    assert code == 0 and got["state"] == "succeeded" and got["result"] == {"sent": True, "id": "m-1"}
    assert got["attempts"] == 1 and got["cancel_requested"] is False
    assert dt.datetime.fromisoformat(got["finished_at"]).tzinfo is not None
    code, out, _ = run_cli(capsys, "result", queue.name, "running", "mail", "--dsn", dsn)
    shown = fields(out)
    assert shown["state"] == "succeeded" and json.loads(shown["result"]) == {"sent": True, "id": "m-1"}
    assert shown["attempts"] == "1" and json.loads(shown["progress"]) == {"done": 3, "of": 10}
    assert "cancel" not in shown
    code, out, err = run_cli(capsys, "show", queue.name, "running", "mail", "--dsn", dsn)
    assert code == 0 and fields(out)["state"].startswith("gone, succeeded at"), out

    # nothing live: cancel and result say so in one line on stderr and exit 1
    code, out, err = run_cli(capsys, "cancel", queue.name, "running", "mail", "--dsn", dsn)
    assert code == 1 and out == "" and one_line(err).startswith("pyqueue-sql: unknown: no live message")
    code, out, err = run_cli(capsys, "result", queue.name, "never-pushed", "mail", "--dsn", dsn)
    assert code == 1 and out == "" and "unknown" in one_line(err) and "keeps no results" not in err
    code, _, err = run_cli(capsys, "cancel", "no-such-queue-x", "k", "mail", "--dsn", dsn)
    assert code == 1 and "does not exist" in one_line(err)


def test_a_failed_message_shows_its_last_error(capsys, dsn, make_queue):
    queue = make_queue(max_attempts=1)
    queue.set_result_retention(dt.timedelta(hours=1))
    queue.push("k", "x", {})
    [held] = queue.reserve()
    assert queue.fail(held, error="smtp timeout") == "dropped"
    code, out, err = run_cli(capsys, "result", queue.name, "k", "x", "--dsn", dsn)
    shown = fields(out)
    assert code == 0 and shown["state"] == "failed" and shown["last error"] == "smtp timeout", (out, err)


def test_result_on_a_queue_that_keeps_none_says_how_to_keep_them(capsys, dsn, queue):
    queue.push("k", "x", {})
    [held] = queue.reserve()
    assert queue.commit(held)
    code, out, err = run_cli(capsys, "result", queue.name, "k", "x", "--dsn", dsn)
    assert code == 1 and out == ""
    assert f"{queue.name} keeps no results" in one_line(err) and "--result-retention" in err
    queue.push("live", "x", {})
    code, out, _ = run_cli(capsys, "result", queue.name, "live", "x", "--dsn", dsn)
    assert code == 0 and fields(out)["state"] == "ready"  # a live message is known without results


@pytest.mark.slow  # waits half a second, then a second for a commit
def test_result_wait_returns_when_it_finishes_and_exits_1_when_it_has_not(capsys, dsn, connect, make_queue):
    queue = make_queue()
    queue.set_result_retention(dt.timedelta(hours=1))
    queue.push("slow", "x", {})
    started = time.monotonic()
    code, out, err = run_cli(capsys, "result", queue.name, "slow", "x", "--wait", "0.5", "--dsn", dsn)
    assert code == 1 and fields(out)["state"] == "ready"
    assert "has not finished after 0.5s: still ready" in one_line(err)
    assert time.monotonic() - started >= 0.5

    other = connect()
    worker_queue = other.queue(queue.name)

    def finish_later() -> None:
        time.sleep(1.0)
        [held] = worker_queue.reserve()
        worker_queue.commit_result(held, [1, 2, 3])

    finisher = threading.Thread(target=finish_later)
    finisher.start()
    try:
        started = time.monotonic()
        code, out, err = run_cli(
            capsys, "result", queue.name, "slow", "x", "--wait", "30", "--json", "--dsn", dsn
        )
        waited = time.monotonic() - started
    finally:
        finisher.join()
    got = json.loads(out)
    assert code == 0 and got["state"] == "succeeded" and got["result"] == [1, 2, 3], err
    assert 0.9 <= waited < 15
    code, _, err = run_cli(capsys, "result", queue.name, "slow", "x", "--wait", "-1", "--dsn", dsn)
    assert code == 2 and "--wait" in one_line(err)


def test_cancel_needs_producer_or_admin(capsys, dsn, queue):
    queue.push("a", "x", {})
    queue.push("b", "x", {})
    accounts = Accounts(dsn)
    try:
        watcher = accounts.with_capabilities("cancmon", "monitor")
        producer = accounts.with_capabilities("cancprod", "producer")
        capsys.readouterr()  # what granting printed
        code, out, err = run_cli(capsys, "cancel", queue.name, "a", "x", "--dsn", accounts.dsn_for(watcher))
        assert code == 1 and out == "" and "queue_cancel" in one_line(err), err
        code, out, _ = run_cli(capsys, "result", queue.name, "a", "x", "--dsn", accounts.dsn_for(watcher))
        assert code == 0 and fields(out)["state"] == "ready"  # monitor reads results
        code, out, err = run_cli(capsys, "cancel", queue.name, "a", "x", "--dsn", accounts.dsn_for(producer))
        assert code == 0 and out.startswith("cancelled:"), err
    finally:
        accounts.close()
    assert [m.key for m in queue.messages()] == ["b"]


def test_the_installed_command_exits_with_the_outcome(dsn, queue):
    """Run as a shell runs it: the exit status a script tests."""
    queue.push("a", "x", {})
    env = {**os.environ, "PYQUEUE_DSN": dsn}

    def sh(*argv):
        done = subprocess.run(
            [sys.executable, "-m", "pyqueue_sql.cli", *argv],
            env=env,
            capture_output=True,
            text=True,
            timeout=60,
        )
        return done.returncode, done.stdout, done.stderr

    code, out, err = sh("cancel", queue.name, "a", "x")
    assert code == 0 and out.startswith("cancelled:"), err
    code, out, err = sh("cancel", queue.name, "a", "x")
    assert code == 1 and out == "" and err.startswith("pyqueue-sql: unknown:")


def test_a_flagged_message_given_back_is_removed_by_the_next_cancel(capsys, dsn, queue):
    queue.push("k", "x", {})
    [held] = queue.reserve(timeout=3600)
    code, out, _ = run_cli(capsys, "cancel", queue.name, "k", "x", "--dsn", dsn)
    assert code == 0 and out.startswith("requested:")
    code, out, err = run_cli(capsys, "rollback", queue.name, "k", "x", str(held.token), "--dsn", dsn)
    assert code == 0, err
    code, out, _ = run_cli(capsys, "show", queue.name, "k", "x", "--dsn", dsn)
    assert fields(out)["state"] == "ready" and fields(out)["cancel"].startswith(
        "requested (no consumer holds it"
    )
    code, out, _ = run_cli(capsys, "cancel", queue.name, "k", "x", "--dsn", dsn)
    assert code == 0 and out.startswith("cancelled:")
    assert queue.messages() == []


def _waiting_sessions(raw, dialect: str) -> int:
    """Sessions of this test database, other than the test's own, that wait for a result: on
    PostgreSQL idle after their LISTEN (or the read that follows it), on MySQL/MariaDB inside a
    queue_result_wait. Each test process has a database of its own (tests/conftest.py's dsn).
    The processlist shows the statement a routine runs, not the CALL around it: the wait shows its
    CALL only as it starts and its poll's sleep (`DO SLEEP(LEAST(0.05, v_left))`) the rest of the time."""
    if dialect == "postgresql":
        query = (
            "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database()"
            " AND pid <> pg_backend_pid() AND state = 'idle'"
            " AND (query ILIKE 'LISTEN%%' OR query ILIKE '%%queue_result%%')"
        )
    else:
        query = (
            "SELECT COUNT(*) FROM information_schema.processlist WHERE db = DATABASE()"
            " AND id <> CONNECTION_ID()"
            " AND (info LIKE '%%queue_result_wait%%' OR info LIKE 'DO SLEEP(LEAST(0.05,%%v_left%%')"
        )
    return raw(query)[0][0]


@pytest.mark.slow  # a subprocess that starts, connects and waits before its Ctrl-C
def test_ctrl_c_ends_a_result_wait_in_one_line(dsn, queue, raw, dialect):
    """`result --wait` blocks in a LISTEN (PostgreSQL) or in queue_result_wait (MySQL/MariaDB);
    Ctrl-C ends it at once with 130 and one line, as every command."""
    queue.set_result_retention(dt.timedelta(hours=1))
    queue.push("k", "x", {})
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "pyqueue_sql.cli",
            "result",
            queue.name,
            "k",
            "x",
            "--wait",
            "120",
            "--dsn",
            dsn,
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        # SIGINT as in a terminal's foreground, even when the suite runs with it ignored
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    )
    try:
        # waiting in the server (not still starting: a Ctrl-C while Python imports is Python's)
        started = time.monotonic()
        while _waiting_sessions(raw, dialect) == 0:
            assert proc.poll() is None, proc.communicate()
            assert time.monotonic() - started < 60, "the result wait never reached the server"
            time.sleep(0.05)
        time.sleep(0.2)  # inside its wait (the LISTEN's read or the CALL under way)
        assert proc.poll() is None, proc.communicate()
        sent = time.monotonic()
        proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 130 and err == "pyqueue-sql: interrupted\n" and out == "", (out, err)
    assert time.monotonic() - sent < 5


def test_results_lists_the_finished_jobs_a_queue_keeps_newest_first(capsys, dsn, db):
    name = f"cli.res.{uuid.uuid4().hex[:8]}"
    queue = db.queue(name).create()
    queue.set_result_retention(3600)
    for key in ("a", "b", "c"):
        queue.push(key, "report", {})
    queue.push("d", "other", {})
    queue.cancel("a", "report")
    for r in queue.reserve(n=3):
        if r.key == "b":
            queue.fail(r, error="ValueError: bad month")  # retried: live, not listed
        elif r.key == "c":
            queue.commit_result(r, {"total": 3})
    code, out, err = run_cli(capsys, "results", name, "--dsn", dsn)
    assert code == 0 and err == "", err
    header, rule, *rows = out.splitlines()
    assert header.split() == [
        "finished",
        "at",
        "key",
        "kind",
        "state",
        "attempts",
        "result",
        "/",
        "last",
        "error",
    ]
    assert [row.split()[3:6] for row in rows] == [["c", "report", "succeeded"], ["a", "report", "cancelled"]]
    assert rows[0].endswith('{"total": 3}') and rows[0].split()[2] == "UTC"
    code, out, err = run_cli(capsys, "results", name, "--state", "cancelled", "--json", "--dsn", dsn)
    assert [json.loads(line)["key"] for line in out.splitlines()] == ["a"]
    code, out, err = run_cli(capsys, "results", name, "-n", "1", "--kind", "report", "--dsn", dsn)
    assert len(out.splitlines()) == 3
    assert one_line(err).startswith("pyqueue-sql: more may be kept: the next page with --before 20")
    before = one_line(err).rsplit(" ", 1)[1]
    code, out, err = run_cli(capsys, "results", name, "--before", before, "--dsn", dsn)
    assert [row.split()[3] for row in out.splitlines()[2:]] == ["a"]
    code, out, err = run_cli(capsys, "results", name, "--before", "yesterday", "--dsn", dsn)
    assert code == 2 and "not a time: 'yesterday'" in one_line(err)
    code, out, err = run_cli(capsys, "results", name, "--state", "lost", "--dsn", dsn)
    assert code == 2 and "invalid choice: 'lost'" in one_line(err)
    plain = f"cli.res.{uuid.uuid4().hex[:8]}"
    db.queue(plain).create()
    code, out, err = run_cli(capsys, "results", plain, "--dsn", dsn)
    assert code == 0 and out == ""
    assert one_line(err) == (
        f"pyqueue-sql: no finished job kept in {plain} that matches ({plain} keeps no results: "
        f"`pyqueue-sql create {plain} --result-retention S`)"
    )
