"""The time machine of the test helpers on both dialects: App.run_pending(advance=) runs a job that
fails, retries after its backoff and succeeds, a snooze, a job deferred for later and a periodic
task's next occurrence, each without the real wait. (The pytest fixture pyqueue_clock, which moves
the database's clock for a test of an application, is tested through the plugin in the pytest run
of tests/tasks/test_testing_plugin.py.)"""

from __future__ import annotations

import datetime as dt
import time
import uuid

import pytest

from pyqueue_sql import App, InvalidArgumentError, RetryPolicy, Snooze


@pytest.fixture
def app(installed_database):
    """An App on a database of its own: the time machine rewrites every stored time of the
    database, which on the test process's shared one (every earlier test's rows) took seconds."""
    a = App(installed_database("tt"), queue=f"tt.{uuid.uuid4().hex[:12]}")
    yield a
    a.close()


def test_a_retry_a_snooze_and_a_delay_run_without_waiting_for_them(app):
    calls: list[str] = []

    @app.task(store_result=True, retry=RetryPolicy(base=60, jitter=0))
    def flaky(n: int) -> int:
        calls.append(f"flaky {n}")
        if len(calls) < 3:
            raise ConnectionError(f"attempt {len(calls)}")
        return n

    @app.task
    def sleepy() -> None:
        calls.append("sleepy")
        if calls.count("sleepy") == 1:
            raise Snooze(after=dt.timedelta(hours=2))

    app.create_queues()
    started = time.monotonic()
    handle = flaky.defer(7)
    later = sleepy.configure(run_at=dt.timedelta(minutes=30)).defer()
    first = app.run_pending()
    assert (first.retried, first.succeeded) == (1, 0)  # the retry waits out its backoff: not run
    assert handle.status().state == "delayed"
    report = app.run_pending(advance=dt.timedelta(hours=3))
    # 60 s then 120 s of backoff, the 30 minutes' delay, then the 2 hours' snooze: all run
    assert calls == ["flaky 7", "flaky 7", "flaky 7", "sleepy", "sleepy"], calls
    assert (report.retried, report.snoozed, report.succeeded) == (1, 1, 2)
    assert handle.result(timeout=1) == 7
    assert handle.status().last_error is None  # a success shows no earlier attempt's error
    assert later.status().state == "succeeded"
    assert time.monotonic() - started < 20  # hours of the job's time, not of the test's


def test_advance_leaves_what_is_due_later_and_runs_a_periodic_tasks_occurrences(app):
    ran: list[str] = []

    @app.task
    def tomorrow() -> None:
        ran.append("tomorrow")

    @app.periodic(every=dt.timedelta(hours=1))
    def hourly() -> None:
        ran.append("hourly")

    app.create_queues()
    tomorrow.configure(run_at=dt.timedelta(days=1)).defer()
    app.run_pending(advance=dt.timedelta(minutes=59, seconds=59))  # the first occurrence: within the hour
    assert ran.count("hourly") == 1 and "tomorrow" not in ran
    # the next occurrence is computed from the database's real clock (the hour after the first):
    # within two hours of the job's time
    app.run_pending(advance=dt.timedelta(hours=2))
    assert ran.count("hourly") >= 2 and "tomorrow" not in ran
    app.run_pending(advance=dt.timedelta(hours=22))
    assert "tomorrow" in ran
    with pytest.raises(InvalidArgumentError, match="advance must be from 0"):
        app.run_pending(advance=-1)
