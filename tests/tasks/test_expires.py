"""configure(expires=...) (Celery's expires) on both dialects, as a user meets it: a job that no
worker started before its expiry is not run, and its handle reads 'cancelled' with the last error
'expired at <time>'; one started in time runs; a delay counts from each defer; bad values are
refused in one line."""

from __future__ import annotations

import datetime as dt
import time
import uuid

import pytest

from pyqueue_sql import App, InvalidArgumentError

from ..worker.test_worker import running, wait_for


@pytest.fixture
def app(dsn):
    a = App(dsn, queue=f"x.{uuid.uuid4().hex[:12]}")
    yield a
    a.close()


def test_a_job_not_started_before_it_expires_is_not_run_and_reads_cancelled(app, db):
    ran: list[str] = []

    @app.task(store_result=True)
    def send(to: str) -> str:
        ran.append(to)
        return to

    app.create_queues()
    late = send.configure(expires=dt.timedelta(seconds=0.3)).defer("late")
    in_time = send.configure(expires=60).defer("in time")
    at = dt.datetime.now(dt.timezone.utc) + dt.timedelta(hours=1)
    dated = send.configure(expires=at).defer("dated")
    header = db.queue(app.default_queue).message(dated.key, "send").headers
    assert header == {"pyqueue.expires_at": at.strftime("%Y-%m-%dT%H:%M:%S.%fZ")}
    time.sleep(0.5)  # no worker ran while "late" could still start
    worker = app.worker(concurrency=1, register=False, poll_fallback=0.2)
    with running(worker):
        wait_for(lambda: len(ran) == 2, 30, "the jobs in time")
        wait_for(lambda: late.status().state == "cancelled", 30, "the expired job's outcome")
    assert sorted(ran) == ["dated", "in time"]
    status = late.status()
    assert status.state == "cancelled"
    assert status.last_error.startswith("expired at ")
    assert in_time.result(timeout=1) == "in time"


def test_a_delay_counts_from_each_defer_and_joins_the_jobs_headers(app, db):
    @app.task
    def ping() -> None:
        pass

    app.create_queues()
    configured = ping.configure(expires=dt.timedelta(minutes=10), headers={"tenant": "acme"})
    first = configured.defer()
    time.sleep(0.05)
    second = configured.defer()
    q = db.queue(app.default_queue)
    a, b = (q.message(h.key, "ping").headers for h in (first, second))
    assert a["tenant"] == b["tenant"] == "acme"
    assert a["pyqueue.expires_at"] < b["pyqueue.expires_at"]


def test_defer_many_carries_each_calls_expiry(app, db):
    ran: list[int] = []

    @app.task
    def count(n: int) -> None:
        ran.append(n)

    app.create_queues()
    handles = count.configure(expires=0.2).defer_many([count.call(1), count.configure(expires=60).call(2)])
    time.sleep(0.4)
    app.run_pending()
    assert ran == [2]
    assert handles[0].status().state == "unknown"  # the queue keeps no results: the job is gone


@pytest.mark.parametrize(
    ("value", "message"),
    [
        (0, "expires must be a positive delay, not 0.0 s"),
        (-5, "expires must be a positive delay, not -5.0 s"),
        (dt.timedelta(seconds=-1), "expires must be a positive delay"),
        (float("nan"), "expires must be a finite number of seconds, not nan"),
        (True, "expires must be a timedelta, a number of seconds or an aware datetime, not bool"),
        ("10", "expires must be a timedelta, a number of seconds or an aware datetime, not str"),
        (dt.datetime(2030, 1, 1), "expires must be an aware datetime"),
        (dt.datetime(2020, 1, 1, tzinfo=dt.timezone.utc), "expires is in the past: 2020-01-01T00:00:00"),
    ],
)
def test_a_bad_expiry_is_refused_in_one_line(app, value, message):
    @app.task
    def ping() -> None:
        pass

    with pytest.raises(InvalidArgumentError, match=message.replace(".", r"\.").replace("(", r"\(")) as info:
        ping.configure(expires=value)
    assert "\n" not in str(info.value)


def test_the_time_machine_moves_an_expiry_with_the_clock(app):
    """run_pending(advance=) moves the header pyqueue.expires_at with every stored time: a job due
    after its expiry is ended when the clock passes both, one due before it runs."""
    ran: list[int] = []

    @app.task(store_result=True)
    def later(n: int) -> None:
        ran.append(n)

    app.create_queues()
    too_late = later.configure(run_at=dt.timedelta(hours=2), expires=dt.timedelta(hours=1)).defer(1)
    in_time = later.configure(run_at=dt.timedelta(hours=1), expires=dt.timedelta(hours=3)).defer(2)
    report = app.run_pending(advance=dt.timedelta(hours=2))
    assert (ran, report.succeeded) == ([2], 1)
    assert in_time.status().state == "succeeded"
    assert too_late.status().state == "cancelled"
