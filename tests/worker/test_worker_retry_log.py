"""What `pyqueue-sql worker` prints for a job that fails, is retried and then fails for good: one
line per retried attempt (the error, attempt n of m, when it is tried next), the traceback once,
with the last failure (and at --log-level debug before); a Retry(after=) of a day says its delay
once, with the date of the next try."""

from __future__ import annotations

import datetime as dt
import re
import time
import uuid

import pytest

from .test_worker_cli_app import serving, write_module

MODULE = """
    from pyqueue_sql import App, Retry, RetryPolicy

    app = App({dsn!r})

    @app.task(queue={queue!r}, retry=RetryPolicy(base=0.05, jitter=0))
    def flaky(n: int) -> None:
        raise ConnectionError(f"upstream down for {{n}}")

    @app.task(queue={queue!r})
    def tomorrow() -> None:
        raise Retry(after=86400)
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


def test_a_retry_a_day_later_says_its_delay_once_with_the_date(tmp_path, app_queue):
    name, queue = app_queue
    queue.push("job-2", "tomorrow", {})
    with serving(tmp_path, f"{name}:app") as served:
        served.wait_for_line("retry in")
    line = next(line for line in served.lines if "retry in" in line)
    tomorrow = (dt.datetime.now() + dt.timedelta(days=1)).strftime("%Y-%m-%d")
    assert re.search(
        rf"handler failed: {re.escape(queue.name)}/job-2/tomorrow attempt 1 of 3: Retry; retry in 86400 s, "
        rf"at {tomorrow} \d\d:\d\d:\d\d\b",
        line,
    ), line
    assert line.count("retry in") == 1


def test_a_retry_base_above_the_cap_is_refused_naming_both():
    from pyqueue_sql import InvalidArgumentError, RetryPolicy

    with pytest.raises(InvalidArgumentError) as refused:
        RetryPolicy(base=3600)
    text = str(refused.value)
    assert "base=3600 s" in text and "max_delay=300 s" in text and "\n" not in text
    assert RetryPolicy(base=3600, max_delay=3600).delay(1) >= 3600 * 0.8  # not capped at 300 s
    assert RetryPolicy(base=300).max_delay == 300  # at the cap: as before
