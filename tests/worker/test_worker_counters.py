"""The worker's counters (its stop line, its status line) tell a give-up from a failure and count
snoozes."""

from __future__ import annotations

import logging

from pyqueue_sql import GiveUp, Snooze, Worker

from ..helpers import wait_for
from .test_worker import running


def test_give_ups_and_snoozes_are_counted_apart_from_failures(dsn, queue, caplog):
    worker = Worker(dsn, concurrency=2, register=False, poll_fallback=0.2)

    def handle(job):
        if job.kind == "give-up":
            raise GiveUp("not this one")
        if job.kind == "snooze":
            raise Snooze(after=600)
        raise RuntimeError("boom")

    worker.add_handler(queue.name, handle)
    for kind in ("give-up", "snooze", "fail"):
        queue.push(kind, kind, {})
    with caplog.at_level(logging.INFO, logger="pyqueue_sql"):
        with running(worker):
            wait_for(
                lambda: worker.stats.given_up + worker.stats.snoozed + worker.stats.failed == 3,
                30,
                "3 outcomes",
            )
            assert "gave up 1, snoozed 1" in worker.status_line()
    s = worker.stats
    assert (s.failed, s.given_up, s.snoozed, s.succeeded) == (1, 1, 1, 0)
    [stop] = [r for r in caplog.records if getattr(r, "event", None) == "stop"]
    assert (stop.failed, stop.given_up, stop.snoozed) == (1, 1, 1)


def test_every_counter_says_what_it_counts():
    """WorkerStats' fields each carry a docstring (what a reader of worker.stats, or of an
    integration built on it, needs: succeeded counts acknowledged commits, not handler returns)."""
    import ast
    import dataclasses
    import inspect

    from pyqueue_sql.worker.model import WorkerStats

    body = ast.parse(inspect.getsource(WorkerStats)).body[0].body
    documented = {
        node.target.id
        for node, after in zip(body, body[1:])
        if isinstance(node, ast.AnnAssign)
        and isinstance(after, ast.Expr)
        and isinstance(after.value, ast.Constant)
        and isinstance(after.value.value, str)
    }
    fields = {f.name for f in dataclasses.fields(WorkerStats)}
    assert fields - documented == set()
    assert "acknowledged" in WorkerStats.__doc__
