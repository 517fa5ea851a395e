"""PostgreSQL wakeups for messages that are not ready now: a delayed message that becomes the
earliest due of its queue notifies (a waiter asleep re-times to it), one behind an earlier
message does not; a schedule's occurrence, a group's delayed new head and queue_resume notify."""

from __future__ import annotations

import datetime as dt

import pytest

from .test_wakeups import listener  # noqa: F401  (the fixture)

pytestmark = pytest.mark.only_dialect("postgresql")


def test_a_delayed_push_notifies_only_when_it_is_the_earliest_due(listener, queue, raw):  # noqa: F811
    listen, received = listener
    channel = listen(queue)
    queue.set_notify_window(0)
    assert queue.push("in-1h", "k", {}, run_at=dt.timedelta(hours=1))
    assert received() == [(channel, queue.name)]  # the queue's earliest
    assert queue.push("in-2h", "k", {}, run_at=dt.timedelta(hours=2))
    assert received() == []  # behind "in-1h"
    raw("SELECT queue_push(%s, 'in-30m', 'k', '{}', now() + interval '30 minutes')", (queue.name,))
    assert received() == [(channel, queue.name)]  # plain SQL, before "in-1h"
    raw(
        "SELECT queue_push_with_headers(%s, 'in-3h', 'k', '{}', now() + interval '3 hours', NULL, NULL)",
        (queue.name,),
    )
    assert received() == []
    assert queue.push("ready", "k", {})
    assert received() == [(channel, queue.name)]
    assert queue.push("in-1m", "k", {}, run_at=dt.timedelta(minutes=1))
    assert received() == []  # a ready message is due first


def test_a_schedule_occurrence_and_resume_notify(listener, queue):  # noqa: F811
    listen, received = listener
    channel = listen(queue)
    queue.set_notify_window(0)
    queue.schedule_every("tick", "beat", {}, every=3600)
    assert received() == [(channel, queue.name)]  # its first occurrence is the queue's earliest
    queue.pause()
    assert received() == []
    queue.resume()
    assert received() == [(channel, queue.name)]


def test_a_groups_delayed_new_head_notifies(listener, queue):  # noqa: F811
    listen, received = listener
    channel = listen(queue)
    queue.set_notify_window(0)
    queue.push("first", "k", {}, group="g")
    queue.push("second", "k", {}, group="g", run_at=dt.timedelta(minutes=10))
    received()
    [job] = queue.reserve(n=1)
    assert job.key == "first"
    queue.commit(job)  # "second" becomes the head, due in 10 minutes
    assert received() == [(channel, queue.name)]
