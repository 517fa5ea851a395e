"""after= combined with run_at, priority, headers and expires (queue_push_after_on_with_headers), on
both dialects through the task API: the child keeps every option, waits for its parents and then
for its run_at; a group does not combine with after= (one line)."""

from __future__ import annotations

import datetime as dt
import time
import uuid

import pytest

from pyqueue_sql import App, InvalidArgumentError, current_job


@pytest.fixture
def app(dsn):
    a = App(dsn, queue=f"w.{uuid.uuid4().hex[:12]}")
    yield a
    a.close()


def test_a_child_with_run_at_priority_and_headers_waits_for_its_parents_then_its_time(app, db):
    seen: list[tuple[int, object]] = []

    @app.task(store_result=True)
    def step(n: int) -> int:
        seen.append((n, (current_job().headers or {}).get("tenant")))
        return n

    app.create_queues()
    parent = step.defer(1)
    child = step.configure(
        after=[parent],
        run_at=dt.timedelta(hours=1),
        priority=5,
        headers={"tenant": "acme"},
        expires=dt.timedelta(hours=2),
    ).defer(2)
    message = db.queue(app.default_queue).message(child.key, "step")
    assert message.priority == 5
    assert message.headers["tenant"] == "acme" and "pyqueue.expires_at" in message.headers
    assert child.status().state == "waiting"
    app.run_pending()
    assert seen == [(1, None)]
    assert child.status().state == "delayed"  # its parent succeeded, its run_at has not come
    app.run_pending(advance=dt.timedelta(hours=1))
    assert seen == [(1, None), (2, "acme")]
    assert child.result(timeout=1) == 2


def test_after_with_an_expiry_that_passes_while_it_waits_is_never_run(app):
    ran: list[int] = []

    @app.task(store_result=True)
    def step(n: int) -> int:
        ran.append(n)
        return n

    app.create_queues()
    parent = step.configure(run_at=dt.timedelta(hours=2)).defer(1)
    child = step.configure(after=[parent], expires=dt.timedelta(hours=1)).defer(2)
    app.run_pending(advance=dt.timedelta(hours=3))
    assert ran == [1]
    assert child.status().state == "cancelled"
    assert child.status().last_error.startswith("expired at ")


def test_after_with_a_group_is_refused_in_one_line(app):
    @app.task(store_result=True)
    def step(n: int) -> int:
        return n

    app.create_queues()
    parent = step.defer(1)
    with pytest.raises(InvalidArgumentError, match=r"after= cannot be combined with group"):
        step.configure(after=[parent], group="g").defer(2)


def test_a_chord_of_a_thousand_parts_is_deferred_in_one_round_trip_with_every_option(app, db):
    """defer_many of calls configured with after= (queue_push_after_batch): the parts and their
    callback in one defer_many, each part's options applied; the callback runs once every part
    has succeeded."""

    @app.task(store_result=True)
    def part(n: int) -> int:
        return n

    @app.task(store_result=True)
    def total() -> int:
        return sum(part.parent_results())

    app.create_queues()
    source = part.defer(0)
    calls = [part.configure(after=[source], priority=n % 3, headers={"n": n}).call(n) for n in range(1, 1001)]
    started = time.monotonic()
    parts = app.defer_many(calls)
    took = time.monotonic() - started
    chord = total.configure(after=parts, run_at=dt.timedelta(minutes=1)).defer()
    q = db.queue(app.default_queue)
    m = q.message(parts[7].key, "part")
    assert (m.priority, m.headers, parts[7].status().state) == (8 % 3, {"n": 8}, "waiting")
    assert all(h.enqueued for h in parts) and len({h.key for h in parts}) == 1000
    app.run_pending()
    assert chord.status().state == "delayed"  # its parts succeeded, its run_at has not come
    app.run_pending(advance=dt.timedelta(minutes=1))
    assert chord.result(timeout=5) == sum(range(1, 1001))
    assert took < 30  # one call (measured in the report: tests/tasks/test_workflow_options.py)


def test_defer_many_with_after_refuses_a_bad_call_naming_it_and_writes_nothing(app, db):
    @app.task(store_result=True)
    def part(n: int) -> int:
        return n

    app.create_queues()
    source = part.defer(0)
    calls = [
        part.configure(after=[source]).call(1),
        part.configure(after=[(app.default_queue, "nobody", "part")]).call(2),
    ]
    with pytest.raises(InvalidArgumentError, match="element 2 of the batch: parents\\[1\\] is unknown"):
        app.defer_many(calls)
    assert db.queue(app.default_queue).stats().ready + db.queue(app.default_queue).stats().delayed == 1
