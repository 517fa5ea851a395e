"""A schedule's pending occurrence handed back by its consumer (queue_snooze, with or without a delay)
is still the pending one: the schedule is unchanged, no next occurrence is pushed, and the snoozed
occurrence's own end later pushes the next one (docs/contract/17_schedules.md, the table of what
each routine does to the schedule)."""

from __future__ import annotations

import datetime as dt
import time

import pytest

from tests.contract.test_schedules import UTC, occurrence_key, pending


@pytest.mark.parametrize("delay", [None, 3600], ids=["now", "in-an-hour"])
def test_a_snoozed_occurrence_leaves_its_schedule_unchanged(queue, raw, delay):
    queue.create(max_attempts=1)  # a snooze uses up no attempt: the occurrence runs again, not dead-lettered
    first = queue.schedule_every("r", "tick", {}, 1)
    time.sleep(max(0.0, (first - dt.datetime.now(UTC)).total_seconds()) + 0.05)
    (occ,) = queue.reserve(timeout=60)
    assert occ.key == occurrence_key("r", first)
    assert queue.snooze(occ, delay)
    assert [s.next_at for s in queue.schedules()] == [first]
    assert pending(raw, queue, "r", "tick") == [occ.key]  # the same occurrence, nothing more
    assert queue.schedule_every("r", "tick", {}, 1) == first  # still the live pending one
    if delay is None:
        (again,) = queue.reserve(timeout=60)
        assert again.key == occ.key
        assert queue.commit(again)
        (sched,) = queue.schedules()
        assert sched.next_at > first
        assert pending(raw, queue, "r", "tick") == [occurrence_key("r", sched.next_at)]
