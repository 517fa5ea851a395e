"""The command line over a message's whole life: reserve, commit, rollback (with an
error), remove, show, dead letters, redrive, pause/resume, drop, settings, workers,
and the `worker` process (status line, clean stop, async handlers); how a worker process stops
on signals and deadlines is in tests/worker/test_worker_handlers.py."""

from __future__ import annotations

import io
import json
import os
import pty
import re
import select
import signal
import subprocess
import sys
import time
import uuid

import pytest

from pyqueue_sql import cli

from ..helpers import run_cli, wait_for

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def reserve_one(capsys, dsn, queue):
    code, out, err = run_cli(capsys, "reserve", queue, "--dsn", dsn)
    assert code == 0, err
    [line] = out.splitlines()
    return json.loads(line)


class Terminal(io.StringIO):
    """A stdin that is a terminal, with answers already typed."""

    def isatty(self):
        return True


# -- commit / rollback / remove -----------------------------------------------------


def test_commit_a_reserved_token_then_it_no_longer_holds(capsys, dsn, queue):
    queue.push("k1", "kind", {"n": 1})
    m = reserve_one(capsys, dsn, queue.name)
    assert (m["key"], m["attempts"], m["payload"]) == ("k1", 1, {"n": 1})
    code, out, err = run_cli(capsys, "commit", queue.name, "k1", "kind", m["token"], "--dsn", dsn)
    assert (code, out.strip()) == (0, "committed"), err
    assert queue.stats().reserved == 0 and queue.message("k1", "kind") is None
    code, out, err = run_cli(capsys, "commit", queue.name, "k1", "kind", m["token"], "--dsn", dsn)
    assert code == 1 and "no longer holds" in err and out == ""


def test_reserve_on_an_empty_queue_says_so(capsys, dsn, queue):
    code, out, err = run_cli(capsys, "reserve", queue.name, "--dsn", dsn)
    assert code == 0 and out == ""
    assert queue.name in err and "no message ready" in err


def test_rollback_plain_and_with_delay(capsys, dsn, queue):
    queue.push("k", "kind", {})
    m = reserve_one(capsys, dsn, queue.name)
    code, out, err = run_cli(capsys, "rollback", queue.name, "k", "kind", m["token"], "--dsn", dsn)
    assert code == 0 and out.startswith("rolled back"), err
    m = reserve_one(capsys, dsn, queue.name)
    assert m["attempts"] == 2
    code, out, _ = run_cli(
        capsys, "rollback", queue.name, "k", "kind", m["token"], "--delay", "60", "--dsn", dsn
    )
    assert code == 0 and "in 60s" in out
    assert queue.stats().delayed == 1
    code, _, err = run_cli(capsys, "rollback", queue.name, "k", "kind", m["token"], "--dsn", dsn)
    assert code == 1 and "no longer holds" in err


def test_rollback_with_error_records_it_and_show_displays_it(capsys, dsn, queue):
    queue.push("k", "kind", {"to": "a@example.com"})
    m = reserve_one(capsys, dsn, queue.name)
    code, out, err = run_cli(
        capsys,
        "rollback",
        queue.name,
        "k",
        "kind",
        m["token"],
        "--error",
        "smtp timeout after 30 s",
        "--dsn",
        dsn,
    )
    assert code == 0, err
    assert out.startswith("rolled back: it will be delivered again")
    code, out, err = run_cli(capsys, "show", queue.name, "k", "kind", "--dsn", dsn)
    assert code == 0, err
    fields = dict(
        re.match(r"([a-z /]+):\s+(.*)", line).groups()
        for line in out.splitlines()
        if re.match(r"[a-z /]+:\s+\S", line)
    )
    assert fields["state"] == "ready"
    assert fields["attempts"] == "1"
    assert fields["last error"] == "smtp timeout after 30 s"
    assert json.loads(fields["payload"]) == {"to": "a@example.com"}
    # a stale token: the outcome is "no longer holds", exit 1
    code, _, err = run_cli(
        capsys, "rollback", queue.name, "k", "kind", m["token"], "--error", "x", "--dsn", dsn
    )
    assert code == 1 and "no longer holds" in err


def test_failure_on_the_last_attempt_dead_letters_and_the_trail_is_visible(capsys, dsn, make_queue):
    dead = make_queue()
    queue = make_queue(max_attempts=1, dead_letter_queue=dead.name, history_retention=3600)
    queue.push("order-1", "charge", {"amount": 5})
    m = reserve_one(capsys, dsn, queue.name)
    code, out, err = run_cli(
        capsys,
        "rollback",
        queue.name,
        "order-1",
        "charge",
        m["token"],
        "--error",
        "CardDeclined: insufficient funds",
        "--dsn",
        dsn,
    )
    assert code == 0, err
    assert out.startswith("dead-lettered")

    code, out, err = run_cli(capsys, "dead-letters", dead.name, "--dsn", dsn)
    assert code == 0, err
    [row] = [line for line in out.splitlines() if "order-1" in line]
    assert queue.name in row and "CardDeclined: insufficient funds" in row
    assert row.split()[:4] == [queue.name, "order-1", "charge", "1"]
    code, out, _ = run_cli(capsys, "dead-letters", dead.name, "--json", "--dsn", dsn)
    [entry] = [json.loads(line) for line in out.splitlines()]
    assert (entry["from_queue"], entry["attempts"], entry["last_error"], entry["payload"]) == (
        queue.name,
        1,
        "CardDeclined: insufficient funds",
        {"amount": 5},
    )

    code, out, err = run_cli(capsys, "show", dead.name, "order-1", "charge", "--dsn", dsn)
    assert code == 0, err
    assert re.search(rf"dead from:\s+{re.escape(queue.name)}", out)
    assert re.search(r"last error:\s+CardDeclined: insufficient funds", out)
    # the origin queue no longer holds it, but its history row shows what happened
    code, out, err = run_cli(capsys, "show", queue.name, "order-1", "charge", "--dsn", dsn)
    assert code == 0, err
    assert "gone" in out and "history (newest first)" in out
    [hist] = [line for line in out.splitlines() if "dead_lettered" in line]
    assert dead.name in hist and "CardDeclined" in hist

    code, out, err = run_cli(capsys, "redrive", dead.name, queue.name, "-n", "10", "--dsn", dsn)
    assert code == 0 and out.strip() == f"redrove 1 message(s) from {dead.name} to {queue.name}", err
    assert queue.stats().ready == 1 and dead.stats().ready == 0
    code, out, _ = run_cli(capsys, "dead-letters", dead.name, "--dsn", dsn)
    assert code == 0 and "no dead letters" in out


def test_failure_without_a_dead_letter_queue_is_dropped(capsys, dsn, make_queue):
    queue = make_queue(max_attempts=1)
    queue.push("k", "kind", {})
    m = reserve_one(capsys, dsn, queue.name)
    code, out, _ = run_cli(
        capsys, "rollback", queue.name, "k", "kind", m["token"], "--error", "boom", "--dsn", dsn
    )
    assert code == 0 and out.startswith("dropped")
    assert queue.message("k", "kind") is None


def test_remove_and_show_of_a_missing_message(capsys, dsn, queue):
    queue.push("k", "kind", {})
    code, out, _ = run_cli(capsys, "remove", queue.name, "k", "kind", "--dsn", dsn)
    assert (code, out.strip()) == (0, "removed")
    code, _, err = run_cli(capsys, "remove", queue.name, "k", "kind", "--dsn", dsn)
    assert code == 1 and "no message k/kind" in err
    code, out, err = run_cli(capsys, "show", queue.name, "k", "kind", "--dsn", dsn)
    assert code == 1 and out == "" and "no message" in err


def test_int_looking_keys_are_the_same_message_as_python_int_keys(capsys, dsn, queue):
    assert queue.push(17, "kind", {"n": 17})
    code, out, err = run_cli(capsys, "push", queue.name, "17", "kind", "{}", "--dsn", dsn)
    assert (code, out.strip()) == (0, "duplicate"), err
    code, out, err = run_cli(capsys, "show", queue.name, "17", "kind", "--dsn", dsn)
    assert code == 0 and '{"n": 17}' in out, err
    m = reserve_one(capsys, dsn, queue.name)
    assert m["key"] == "17"
    assert run_cli(capsys, "commit", queue.name, "17", "kind", m["token"], "--dsn", dsn)[0] == 0
    assert queue.message(17, "kind") is None


# -- pause / resume / drop -------------------------------------------------------------


def test_pause_and_resume(capsys, dsn, queue):
    queue.push("k", "kind", {})
    assert run_cli(capsys, "pause", queue.name, "--dsn", dsn)[0] == 0
    assert queue.stats().paused
    code, out, err = run_cli(capsys, "reserve", queue.name, "--dsn", dsn)
    assert code == 0 and out == "" and "paused" in err
    code, out, _ = run_cli(capsys, "resume", queue.name, "--dsn", dsn)
    assert code == 0 and "resumed" in out
    assert not queue.stats().paused
    assert reserve_one(capsys, dsn, queue.name)["key"] == "k"


def test_drop_an_empty_queue_needs_no_question(capsys, dsn, queue):
    code, out, err = run_cli(capsys, "drop", queue.name, "--dsn", dsn)
    assert code == 0 and out.strip() == f"dropped {queue.name}", err


def test_drop_of_a_queue_with_messages_asks_or_needs_yes(capsys, monkeypatch, dsn, queue):
    queue.push("a", "kind", {})
    queue.push("b", "kind", {})
    monkeypatch.setattr(sys, "stdin", io.StringIO("y\n"))  # not a terminal: nobody to ask
    code, _, err = run_cli(capsys, "drop", queue.name, "--dsn", dsn)
    assert code == 1 and "2 message(s)" in err and "--yes" in err
    assert queue.stats().ready == 2
    monkeypatch.setattr(sys, "stdin", Terminal("n\n"))
    code, _, err = run_cli(capsys, "drop", queue.name, "--dsn", dsn)
    assert code == 1 and "drop the queue" in err and "not dropped" in err
    assert queue.stats().ready == 2
    monkeypatch.setattr(sys, "stdin", Terminal("y\n"))
    code, out, err = run_cli(capsys, "drop", queue.name, "--dsn", dsn)
    assert code == 0 and "and its 2 message(s)" in out, err
    code, _, err = run_cli(capsys, "stats", queue.name, "--dsn", dsn)
    assert code == 1 and "does not exist" in err


def test_drop_with_yes_drops_a_queue_with_messages_without_asking(capsys, dsn, queue):
    queue.push("a", "kind", {})
    code, out, err = run_cli(capsys, "drop", queue.name, "--yes", "--dsn", dsn)
    assert code == 0 and "dropped" in out, err


# -- create keeps settings; settings ---------------------------------------------------


def settings_row(capsys, dsn, name):
    code, out, err = run_cli(capsys, "settings", name, "--dsn", dsn)
    assert code == 0, err
    header, rule, row = out.splitlines()
    assert header.split()[:2] == ["queue", "visibility"]
    return row.split()


def test_create_changes_only_the_settings_given(capsys, dsn, db):
    name = f"cli.{uuid.uuid4().hex[:8]}"
    dead = f"{name}.dead"
    assert run_cli(capsys, "create", dead, "--dsn", dsn)[0] == 0
    code, out, err = run_cli(
        capsys,
        "create",
        name,
        "--max-attempts",
        "5",
        "--dead-letter-queue",
        dead,
        "--history-retention",
        "3600",
        "--dsn",
        dsn,
    )
    assert code == 0 and out.startswith(f"created {name}:"), err
    assert settings_row(capsys, dsn, name)[:7] == [name, "30s", "5", dead, "3600s", "-", "no"]
    code, out, err = run_cli(capsys, "create", name, "--visibility-timeout", "7", "--dsn", dsn)
    assert code == 0 and out.startswith(f"updated {name}:"), err
    assert f"dead-letter queue {dead}" in out
    s = db.queue(name).settings()
    assert (
        s.visibility_timeout.total_seconds(),
        s.max_attempts,
        s.dead_letter_queue,
        s.history_retention.total_seconds(),
    ) == (7, 5, dead, 3600)
    code, out, err = run_cli(
        capsys, "create", name, "--reset", "dead_letter_queue", "--reset", "max_attempts", "--dsn", dsn
    )
    assert code == 0, err
    s = db.queue(name).settings()
    assert (s.visibility_timeout.total_seconds(), s.max_attempts, s.dead_letter_queue) == (7, 10, None)
    assert settings_row(capsys, dsn, name)[:4] == [name, "7s", "10", "-"]
    with pytest.raises(SystemExit) as exit_info:
        cli.main(["create", name, "--reset", "colour", "--dsn", dsn])
    assert exit_info.value.code == 2 and "invalid choice" in capsys.readouterr().err


def test_settings_of_every_queue(capsys, dsn, make_queue):
    a, b = make_queue(max_attempts=3), make_queue()
    b.pause()
    code, out, err = run_cli(capsys, "settings", "--dsn", dsn)
    assert code == 0, err
    rows = {line.split()[0]: line.split() for line in out.splitlines()[2:]}
    assert rows[a.name][1:3] == ["30s", "3"]
    assert rows[b.name][6] == "yes"  # after history and result retention
    code, _, err = run_cli(capsys, "settings", "no.such.queue", "--dsn", dsn)
    assert code == 1 and "does not exist" in err


# -- workers: stale marking --------------------------------------------------------------


def test_workers_marks_stale_heartbeats(capsys, dsn, db):
    reg = db.register_worker(f"stale-{uuid.uuid4().hex[:6]}", queues=["jobs"])
    try:
        code, out, _ = run_cli(capsys, "workers", "--dsn", dsn)
        [line] = [l for l in out.splitlines() if reg.name in l]
        assert line.split()[-1] == "ok"
        assert out.splitlines()[0].split()[-1] == "state"
        time.sleep(0.3)
        code, out, err = run_cli(capsys, "workers", "--stale-after", "0.2", "--dsn", dsn)
        assert code == 0
        [line] = [l for l in out.splitlines() if reg.name in l]
        assert line.split()[-1] == "stale"
        assert "stale worker(s)" in err and "--release-older-than" in err
    finally:
        db.deregister_worker(reg)


# -- the worker process ------------------------------------------------------------------


def worker_command(dsn, queue, handler, *extra):
    return [
        sys.executable,
        "-m",
        "pyqueue_sql.cli",
        "worker",
        f"tests.cli.handlers:{handler}",
        "--queue",
        queue,
        "--dsn",
        dsn,
        *extra,
    ]


def read_all(fd, until, timeout):
    """Reads a pty until the child has exited (or timeout); returns the bytes."""
    data = b""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        ready, _, _ = select.select([fd], [], [], 0.1)
        if ready:
            try:
                chunk = os.read(fd, 65536)
            except OSError:  # EIO: the child closed the terminal
                break
            if not chunk:
                break
            data += chunk
        elif until():
            break
    return data


def visible_lines(text):
    """What a terminal shows per line: \\r\\x1b[K clears the line, the text after it stays."""
    return [line.split("\r\x1b[K")[-1].split("\r")[-1] for line in text.split("\n")]


LOG_LINE = re.compile(r"^\d\d:\d\d:\d\d\.\d\d\d (debug|info|warning|error)\s")


@pytest.mark.slow
def test_status_line_is_never_glued_to_a_log_line(dsn, queue):
    """A worker whose stderr is a terminal draws its status line; failures logged
    every ~0.1 s go above it, each on a line of its own."""
    queue.create(max_attempts=100)
    queue.push_many([(f"k{i}", "kind", {}) for i in range(3)])
    name = f"st-{uuid.uuid4().hex[:6]}"
    master, slave = pty.openpty()
    proc = subprocess.Popen(
        worker_command(
            dsn,
            queue.name,
            "failing",
            "--status",
            "--name",
            name,
            "--retry-base",
            "0.05",
            "--retry-max",
            "0.2",
            "--concurrency",
            "2",
        ),
        cwd=ROOT,
        env={**os.environ, "PYTHONPATH": ROOT},
        stdin=subprocess.DEVNULL,
        stdout=slave,
        stderr=slave,
    )
    os.close(slave)
    try:
        # until the status line was drawn and a failure logged (a loaded machine may take seconds
        # to start the worker; a SIGTERM before it is running ends it silently), then 2 s more of
        # failures logged above the status line
        data = b""
        drawn, failed = f"\r\x1b[K{name}".encode(), (b"handler failed", b"cannot handle")
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and not (drawn in data and any(f in data for f in failed)):
            data += read_all(master, lambda: True, 1)
        data += read_all(master, lambda: False, 2)
        proc.send_signal(signal.SIGTERM)
        data += read_all(master, lambda: proc.poll() is not None, 30)
        proc.wait(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
        os.close(master)
    text = data.decode("utf-8", "replace").replace("\r\n", "\n")
    lines = [line for line in visible_lines(text) if line.strip()]
    status = [line for line in lines if line.startswith(name)]
    logs = [line for line in lines if LOG_LINE.match(line)]
    assert len(status) >= 1, text[-2000:]
    assert any("handler failed" in line or "cannot handle" in line for line in logs), text[-2000:]
    assert "\r\x1b[K" in text, "the status line was never drawn"
    for line in lines:
        # a visible line is either a log record (or its traceback) or the status, never both
        assert not (LOG_LINE.match(line) and f"{name} running" in line), line
        assert not (
            line.startswith(name) and re.search(r"\d\d:\d\d:\d\d\.\d\d\d (info|warning|error)", line)
        ), line
        assert not re.search(r"(done|failed|lost|wakeups|reconnects) \d+\S*\d\d:\d\d:\d\d\.\d\d\d", line), (
            line
        )
    assert status[-1].startswith(name) and (
        "stopped" in status[-1] or "stopping" in status[-1] or "running" in status[-1]
    )


@pytest.mark.slow
def test_clean_stop_exits_zero(dsn, queue):
    queue.push("quick", "kind", {"sleep": 0})
    proc = subprocess.Popen(
        worker_command(dsn, queue.name, "sleeping", "--no-status"),
        cwd=ROOT,
        env={**os.environ, "PYTHONPATH": ROOT},
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        wait_for(lambda: queue.stats().ready + queue.stats().reserved == 0, 30, "the message to be handled")
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 0, err


@pytest.mark.slow
def test_async_handler_runs_before_its_commit(dsn, queue, tmp_path):
    record = tmp_path / "record"
    queue.push_many([(f"a{i}", "kind", {}) for i in range(3)])
    proc = subprocess.Popen(
        worker_command(dsn, queue.name, "async_record", "--no-status"),
        cwd=ROOT,
        env={**os.environ, "PYTHONPATH": ROOT, "PYQUEUE_TEST_RECORD": str(record)},
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        wait_for(
            lambda: record.exists() and len(record.read_text().splitlines()) == 3, 30, "three async handlers"
        )
        wait_for(lambda: queue.stats().ready + queue.stats().reserved == 0, 30, "the commits")
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 0, err
    assert sorted(record.read_text().split()) == sorted(["async", "async", "async", "a0", "a1", "a2"])
    assert "never awaited" not in err
