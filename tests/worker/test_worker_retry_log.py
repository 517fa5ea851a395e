"""What `pyqueue-sql worker` prints for a job that fails, is retried and then fails for good: one
line per retried attempt (the error, attempt n of m, when it is tried next), the traceback once,
with the last failure (and at --log-level debug before)."""

from __future__ import annotations

import re
import time
import uuid

import pytest

from .test_worker_cli_app import serving, write_module

MODULE = """
    from pyqueue_sql import App, RetryPolicy

    app = App({dsn!r})

    @app.task(queue={queue!r}, retry=RetryPolicy(base=0.05, jitter=0))
    def flaky(n: int) -> None:
        raise ConnectionError(f"upstream down for {{n}}")
"""


@pytest.fixture
def app_queue(tmp_path, dsn, db):
    queue = f"retrylog.{uuid.uuid4().hex[:8]}"
    db.queue(queue).create(max_attempts=3)
    yield write_module(tmp_path, MODULE.format(dsn=dsn, queue=queue)), db.queue(queue)
    db.queue(queue).drop()


@pytest.mark.parametrize("level", ["info", "debug"])
def test_a_retried_failure_is_one_line_and_its_traceback_comes_once(tmp_path, app_queue, level):
    name, queue = app_queue
    queue.push("job-1", "flaky", {"n": 7})
    with serving(tmp_path, f"{name}:app", "--log-level", level) as served:
        served.wait_for_line("dropped (the queue has no dead-letter queue)")
        time.sleep(0.2)
    lines = served.lines
    retried = [line for line in lines if "retry in" in line]
    assert len(retried) == 2, lines
    for n, line in enumerate(retried, start=1):
        assert re.search(
            rf"warning +handler failed: {re.escape(queue.name)}/job-1/flaky attempt {n} of 3: "
            r"ConnectionError: upstream down for 7; retry in 0\.\d s, at \d\d:\d\d:\d\d",
            line,
        ), line
    tracebacks = sum("Traceback (most recent call last)" in line for line in lines)
    assert tracebacks == (3 if level == "debug" else 1), lines
