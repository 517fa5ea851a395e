"""A worker that cannot log in or finds no database at start ends with one line (it used to retry
forever); control characters of keys and kinds cannot forge lines of the worker's text log."""

from __future__ import annotations

import asyncio
import logging
import os
import subprocess
import sys
import time
import uuid
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

import pytest

from pyqueue_sql import Worker
from pyqueue_sql.aio.worker import AsyncWorker
from pyqueue_sql.cli.workers import _TextLogFormatter
from pyqueue_sql.errors import ConnectionFailedError

ROOT = str(Path(__file__).resolve().parents[2])


def _missing_database(dsn: str) -> str:
    return urlunsplit(urlsplit(dsn)._replace(path=f"/pyqueue_missing_{uuid.uuid4().hex[:8]}"))


@pytest.mark.parametrize("runtime", ["threads", "asyncio"])
@pytest.mark.parametrize("register", [True, False])
def test_a_worker_whose_database_does_not_exist_ends_at_start(dsn, runtime, register):
    bad = _missing_database(dsn)
    cls = AsyncWorker if runtime == "asyncio" else Worker
    worker = cls(bad, register=register)
    worker.add_handler("q", lambda job: None)
    started = time.monotonic()
    with pytest.raises(ConnectionFailedError, match="does not exist"):
        outcome = worker.run(install_signals=False)
        if asyncio.iscoroutine(outcome):
            asyncio.run(outcome)
    assert time.monotonic() - started < 10


def test_the_cli_worker_exits_with_one_line_on_a_missing_database(dsn):
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "pyqueue_sql.cli",
            "worker",
            "tests.worker.worker_handlers:sleepy",
            "--queue",
            "q",
            "--dsn",
            _missing_database(dsn),
            "--no-status",
            "--log-level",
            "error",
        ],
        cwd=ROOT,
        env={**os.environ, "PYTHONPATH": ROOT},
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode != 0
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and "does not exist" in lines[0], proc.stderr


def test_control_characters_of_a_key_cannot_forge_a_text_log_line():
    forged = "k\n12:00:00.000 error   forged line\r\x1b[2J"
    record = logging.LogRecord(
        "pyqueue_sql.worker", logging.WARNING, __file__, 1, "handler failed: q/%s/kind", (forged,), None
    )
    record.key = forged
    record.kind = "a\tb"
    text = _TextLogFormatter().format(record)
    assert "\n" not in text and "\r" not in text and "\x1b" not in text, text
    assert "k\\n12:00:00.000 error   forged line\\r\\x1b[2J" in text
    assert "kind=a\\tb" in text


def test_a_failing_handler_with_a_newline_in_its_key_logs_one_line(dsn, db, tmp_path):
    q = f"t.{uuid.uuid4().hex[:12]}"
    queue = db.queue(q).create()
    queue.push("bad\nFORGED", "k", {"sleep": "not a number"})
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "pyqueue_sql.cli",
            "worker",
            "tests.worker.worker_handlers:sleepy",
            "--queue",
            q,
        ]
        + ["--dsn", dsn, "--no-status", "--retry-base", "600", "--retry-max", "600"],
        cwd=ROOT,
        env={**os.environ, "PYTHONPATH": ROOT, "PYQUEUE_TEST_RECORD": str(tmp_path / "record")},
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and not (queue.message("bad\nFORGED", "k").last_error or ""):
            time.sleep(0.1)
    finally:
        proc.terminate()
        _, err = proc.communicate(timeout=30)
    assert "handler failed: " + q + "/bad\\nFORGED/k" in err, err
    assert not any(line.startswith("FORGED") for line in err.splitlines()), err
