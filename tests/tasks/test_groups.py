"""A group handle (app.group(handles), a TaskGroup: Celery's GroupResult) on both dialects: the
values in the handles' order, rebuilt by the task's return annotation, whatever order the jobs ran
in; wait() without raising; one state for all; a failure raised for the first failed handle in
order; a timeout when one has not finished; cancel() of the live ones. And the typed read of a
workflow's parents in the child: task.parent_results() / parent_result(), rebuilt as the task
returns them (tests/tasks/test_typing.py checks the types mypy sees)."""

from __future__ import annotations

import datetime as dt
import uuid

import pytest

from pyqueue_sql import App, InvalidArgumentError, RetryPolicy, TaskCancelled, TaskFailed, TaskGroup


@pytest.fixture
def app(dsn):
    a = App(dsn, queue=f"g.{uuid.uuid4().hex[:12]}")
    yield a
    a.close()


def test_a_group_gives_its_values_in_the_handles_order_and_one_state(app):
    @app.task(store_result=True)
    def day_after(day: dt.date) -> dt.date:
        return day + dt.timedelta(days=1)

    app.create_queues()
    # pushed at decreasing priority: they run in the opposite order of the handles
    handles = [day_after.configure(priority=p).defer(dt.date(2026, 1, p)) for p in (1, 2, 3)]
    group = app.group(handles)
    assert isinstance(group, TaskGroup) and len(group) == 3
    assert group.state == "pending" and group.completed_count() == 0
    with pytest.raises(TimeoutError, match="has not finished"):
        group.results(timeout=0.05)
    assert [r.state for r in group.wait(timeout=0)] == ["ready", "ready", "ready"]
    assert app.run_pending().succeeded == 3
    assert group.results(timeout=5) == [dt.date(2026, 1, 2), dt.date(2026, 1, 3), dt.date(2026, 1, 4)]
    assert group.state == "succeeded" and group.completed_count() == 3


def test_a_failed_or_cancelled_member_is_raised_in_order_and_cancel_stops_the_live_ones(app):
    @app.task(store_result=True, retry=RetryPolicy(give_up_on=ValueError))
    def check(n: int) -> int:
        if n == 2:
            raise ValueError("two is not allowed")
        return n

    app.create_queues()
    ok, bad = check.defer(1), check.defer(2)
    later = check.configure(run_at=dt.timedelta(hours=1)).defer(3)
    app.run_pending()
    group = app.group([ok, bad])
    assert [r.state for r in group.wait(timeout=1)] == ["succeeded", "failed"]
    assert group.state == "failed"
    with pytest.raises(TaskFailed, match="two is not allowed"):
        group.results(timeout=1)
    both = app.group([ok, later])
    assert both.state == "pending"
    assert both.cancel() == 1  # the finished one is not live: not counted
    assert both.state == "cancelled"
    with pytest.raises(TaskCancelled):
        both.results(timeout=1)
    with pytest.raises(InvalidArgumentError, match="takes task handles"):
        app.group([("q", "k", "kind")])  # type: ignore[list-item]


def test_a_child_reads_its_parents_results_of_one_task_typed(app):
    @app.task(store_result=True)
    def square(n: int) -> int:
        return n * n

    @app.task(store_result=True)
    def day_after(day: dt.date) -> dt.date:
        return day + dt.timedelta(days=1)

    @app.task(store_result=True)
    def report() -> str:
        squares = square.parent_results()  # list[int], in the order given
        day = day_after.parent_result()  # a date: its one parent of that task
        return f"{squares} {day.isoformat()} {type(day).__name__}"

    @app.task(store_result=True, retry=RetryPolicy(give_up_on=InvalidArgumentError))
    def ambiguous() -> str:
        return square.parent_result()  # type: ignore[return-value]  # two parents of square: refused

    app.create_queues()
    a, d, b = square.defer(2), day_after.defer(dt.date(2026, 2, 28)), square.defer(3)
    child = report.configure(after=[b, d, a]).defer()
    odd = ambiguous.configure(after=[a, b]).defer()
    app.run_pending()
    assert child.result(timeout=5) == "[9, 4] 2026-03-01 date"
    with pytest.raises(TaskFailed, match="2 parent\\(s\\) of task 'square'"):
        odd.result(timeout=5)
