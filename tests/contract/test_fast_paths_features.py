"""The one-round-trip routines (queue_commit_reserve, queue_commit_batch) keep
every feature of the plain ones: history, recurring messages, concurrency limits."""

from __future__ import annotations

import datetime as dt
import time

import pytest

UTC = dt.timezone.utc


def history(raw, queue) -> list[tuple[str, str]]:
    rows = raw(
        "SELECT p_key, outcome FROM pyqueue_history WHERE queue_name = %s ORDER BY p_key", (queue.name,)
    )
    return [(str(k), str(o)) for k, o in rows]


def live_keys(raw, queue) -> list[str]:
    return sorted(
        str(r[0]) for r in raw("SELECT p_key FROM pyqueue_message WHERE queue_name = %s", (queue.name,))
    )


@pytest.mark.parametrize("how", ["commit_reserve", "commit_many"])
def test_fast_commits_write_history(make_queue, raw, how):
    q = make_queue(history_retention=dt.timedelta(days=1))
    for i in range(3):
        assert q.push(f"k{i}", "kind", {"i": i})
    held = q.reserve(n=3)
    if how == "commit_reserve":
        for r in held:
            committed, _ = q.commit_reserve(r, n=1)
            assert committed is True
    else:
        assert q.commit_many(held) == 3
    assert history(raw, q) == [("k0", "committed"), ("k1", "committed"), ("k2", "committed")]
    assert live_keys(raw, q) == []


def test_fast_commit_of_a_stale_token_writes_no_history(make_queue, raw):
    q = make_queue(history_retention=dt.timedelta(days=1))
    assert q.push("k", "kind", 1)
    (r,) = q.reserve(timeout=0.2)
    time.sleep(0.4)
    (again,) = q.reserve()
    assert q.commit_many([r]) == 0
    committed, _ = q.commit_reserve(r, n=1)
    assert committed is False
    assert history(raw, q) == []
    assert q.commit(again)
    assert history(raw, q) == [("k", "committed")]


@pytest.mark.parametrize("how", ["commit_reserve", "commit_many"])
def test_fast_commit_of_an_occurrence_pushes_the_next(queue, raw, how):
    first = queue.schedule_every("report", "tick", {"n": 1}, 1)
    time.sleep(max(0.0, (first - dt.datetime.now(UTC)).total_seconds()) + 0.05)
    (occ,) = queue.reserve(timeout=60)
    if how == "commit_reserve":
        committed, _ = queue.commit_reserve(occ, n=1)
        assert committed is True
    else:
        assert queue.commit_many([occ]) == 1
    (sched,) = queue.schedules()
    assert sched.next_at > first
    pending = live_keys(raw, queue)
    assert len(pending) == 1 and pending[0] != occ.key and pending[0].startswith("report@")


def test_commit_reserve_respects_a_concurrency_limit(queue):
    queue.set_limit("slow", 2)
    for i in range(6):
        assert queue.push(f"s{i}", "slow", i)
    _, first = queue.commit_reserve(None, n=5)
    assert len(first) == 2
    _, none = queue.commit_reserve(None, n=5)
    assert none == []
    committed, next_one = queue.commit_reserve(first[0], n=5)
    assert committed is True and len(next_one) <= 1
    if not next_one:  # MySQL commits after it reserves: the slot is free from the next call
        _, next_one = queue.commit_reserve(None, n=5)
    assert len(next_one) == 1
    assert queue.stats().reserved == 2
