"""Log forging, as the author of a message: a key, a kind and a payload (quoted by the handler's
exception) holding a newline, a carriage return and the escape sequence that clears a terminal
must not start a log line of their own, move the cursor or clear anything, in the log of
`pyqueue-sql worker` (text and JSON) and in a library user's own ``logging.basicConfig`` (no
formatter of the package): every control character is escaped, the traceback keeps one physical
line per traceback line. The raw bytes the processes write are read back."""

from __future__ import annotations

import json
import logging
import os
import signal
import subprocess
import sys
import textwrap

import pytest

from pyqueue_sql import logsafe
from pyqueue_sql.cli import workers

from ..helpers import wait_for

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

# What a forged line of each log would look like: the CLI's "time level message" and the
# "LEVEL:logger:message" of logging.basicConfig.
CLI_FORGERY = "09:00:00.000 info    worker stopped (FORGED)"
BASIC_FORGERY = "INFO:pyqueue_sql.worker:worker stopped (FORGED)"
CLEAR = "\x1b[2J"


def hostile(forgery: str) -> str:
    return f"x\n{forgery}\r{CLEAR}\n{forgery}"


def handled(queue) -> bool:
    s = queue.stats()
    return s.ready == 0 and s.reserved == 0


def assert_not_forged(out: bytes, forgery: str) -> None:
    """The raw output shows the hostile texts escaped, and nothing of them unescaped."""
    assert b"\x1b" not in out, "an escape sequence reached the log"
    assert b"\r" not in out, "a carriage return reached the log"
    lines = out.split(b"\n")
    forged = [line for line in lines if line.startswith(forgery.encode())]
    assert not forged, f"forged log lines: {forged}"
    # the texts were logged, escaped: the test cannot pass by not logging them
    assert f"\\n{forgery}\\r\\x1b[2J".encode() in out
    assert b"Traceback (most recent call last):" in out
    [exception_line] = [line for line in lines if line.startswith(b"RuntimeError: ")]
    assert exception_line == f"RuntimeError: {logsafe.escape_control(hostile(forgery))}".encode()


def stop(proc: subprocess.Popen) -> bytes:
    try:
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    return err


@pytest.mark.slow
def test_the_worker_command_log_escapes_key_kind_payload_and_traceback(dsn, make_queue):
    # one delivery: the failure is final, so its traceback is logged (a retried failure is one
    # warning line, its traceback at DEBUG only)
    queue = make_queue(max_attempts=1)
    text = hostile(CLI_FORGERY)
    queue.push(text, text, {"error": text})
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "pyqueue_sql.cli",
            "worker",
            "tests.security.forging_handlers:fail_with_payload",
            "--queue",
            queue.name,
            "--dsn",
            dsn,
            "--no-status",
            "--poll-fallback",
            "0.2",
        ],
        cwd=ROOT,
        env={**os.environ, "PYTHONPATH": ROOT},
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    wait_for(lambda: handled(queue), 30, "the message to be handled")
    err = stop(proc)
    assert proc.returncode == 0, err
    assert b"handler failed" in err
    assert_not_forged(err, CLI_FORGERY)


# A library user's program: logging.basicConfig, a Worker, nothing of the package's formatters.
_LIBRARY_USER = textwrap.dedent(
    """
    import logging, sys, threading
    import pyqueue_sql

    logging.basicConfig(level=logging.INFO)
    dsn, queue = sys.argv[1], sys.argv[2]
    worker = pyqueue_sql.Worker(dsn, poll_fallback=0.2, register=False)

    @worker.handler(queue)
    def fail(job):
        raise RuntimeError(job.payload["error"])

    threading.Thread(target=lambda: (sys.stdin.read(), worker.stop()), daemon=True).start()
    worker.run()
    """
)


@pytest.mark.slow
def test_a_library_users_basic_config_gets_escaped_records(dsn, make_queue):
    queue = make_queue(max_attempts=1)  # the final failure logs its traceback
    text = hostile(BASIC_FORGERY)
    queue.push(text, text, {"error": text})
    proc = subprocess.Popen(
        [sys.executable, "-c", _LIBRARY_USER, dsn, queue.name],
        cwd=ROOT,
        env={**os.environ, "PYTHONPATH": ROOT},
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    try:
        wait_for(lambda: handled(queue), 30, "the message to be handled")
        _, err = proc.communicate(b"", timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    assert proc.returncode == 0, err
    assert b"handler failed" in err
    assert_not_forged(err, BASIC_FORGERY)


def _failed_record(logger: str) -> logging.LogRecord:
    text = hostile(CLI_FORGERY)
    try:
        try:
            raise KeyError(text)
        except KeyError as inner:
            raise RuntimeError(text) from inner
    except RuntimeError:
        return logging.getLogger(logger).makeRecord(
            logger,
            logging.ERROR,
            __file__,
            1,
            "handler failed: %s",
            (text,),
            sys.exc_info(),
            extra={"key": text},
        )


def test_the_json_log_line_escapes_the_message_extras_and_traceback():
    line = workers._JsonLogFormatter().format(_failed_record("pyqueue_sql.worker"))
    assert "\n" not in line and "\x1b" not in line
    entry = json.loads(line)
    for field in ("msg", "key", "exc"):
        assert "\x1b" not in entry[field] and "\r" not in entry[field]
    for exc_line in entry["exc"].split("\n"):
        assert not exc_line.startswith(CLI_FORGERY)


def test_the_safe_formatter_escapes_and_masks_any_record():
    """A library user's own formatter for any logger: SafeFormatter, whatever its format string."""
    record = _failed_record("an.application")
    record.msg += " postgresql://app:pw-S3CRET@db/app"
    out = logsafe.SafeFormatter("%(levelname)s %(key)s %(message)s").format(record)
    assert "pw-S3CRET" not in out and "\x1b" not in out and "\r" not in out
    lines = out.split("\n")
    assert lines[0].startswith("ERROR x\\n09:00:00.000")
    assert lines[1] == "Traceback (most recent call last):"
    assert not [line for line in lines if line.startswith(CLI_FORGERY)]
    # the record itself is left as it was, for the other handlers
    assert "\x1b" in record.getMessage() and "\x1b" in record.key


def test_the_package_loggers_escape_their_records():
    """Every logger the package logs on carries an EscapeFilter (a new logger must be added to
    logsafe.LOGGERS)."""
    import re
    from pathlib import Path

    package = Path(logsafe.__file__).parent
    names = set()
    for path in package.rglob("*.py"):
        source = path.read_text()
        names |= set(re.findall(r"logging\.getLogger\(\"(pyqueue_sql[\w.]*)\"\)", source))
        if re.search(r"logging\.getLogger\(__name__\)", source):
            names.add(".".join(path.relative_to(package.parent).with_suffix("").parts))
    assert "pyqueue_sql.worker" in names
    for name in names:
        filters = logging.getLogger(name).filters
        assert any(isinstance(f, logsafe.EscapeFilter) for f in filters), name


def test_the_command_line_shows_a_messages_texts_escaped(db, dsn, make_queue, capsys):
    """`show`, `groups`, `dead-letters` and `workers` print what a producer or a consumer wrote (key,
    kind, group, last error, worker name) escaped: no escape sequence reaches the terminal and no
    line of theirs starts with the forged text."""
    from pyqueue_sql import cli

    forged = "09:00:00.000 info    FORGED"
    text = f"x\r{CLEAR}\n{forged}"
    queue = make_queue()
    queue.push(text, text, {}, group=text)
    [held] = queue.reserve()
    queue.fail(held, error=text)
    dead = make_queue()
    failing = make_queue(dead_letter_queue=dead.name)
    failing.push("k2", text, {})
    [held] = failing.reserve()
    failing.give_up(held, error=text)
    registration = db.register_worker(name=text, queues=[queue.name])
    try:
        outputs = []
        for argv in (
            ["show", queue.name, text, text],
            ["groups", queue.name],
            ["dead-letters", dead.name],
            ["workers"],
        ):
            capsys.readouterr()
            assert cli.main([*argv, "--dsn", dsn]) == 0, argv
            outputs.append(capsys.readouterr().out)
    finally:
        db.deregister_worker(registration)
    for out in outputs:
        assert "\x1b" not in out and "\r" not in out, out
        assert not [line for line in out.split("\n") if line.startswith(forged)], out
        assert "\\x1b[2J" in out, out  # shown, escaped


def test_the_status_line_shows_an_error_escaped():
    """The worker's live status line quotes its last reserve-loop error: escaped too (the only
    control characters written are the line's own clear-and-redraw)."""
    import io

    stream = io.StringIO()
    status = workers.StatusLine(stream)
    status.update(f"w running 0/1, error: {hostile(CLI_FORGERY)}")
    status.finish(f"w stopped, error: {hostile(CLI_FORGERY)}")
    escaped = logsafe.escape_control(hostile(CLI_FORGERY))
    assert stream.getvalue() == (
        f"{status.CLEAR}w running 0/1, error: {escaped}{status.CLEAR}w stopped, error: {escaped}\n"
    )
