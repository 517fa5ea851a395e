"""The one-round-trip routines, on every dialect: queue_commit_reserve (commit the previous
message and reserve the next in one call) and queue_commit_batch (commit many at once).

They keep every feature of the plain routines: ordering, dead letters, pause, history,
recurring messages and concurrency limits; a refused call changes nothing."""

from __future__ import annotations

import datetime as dt
import json
import threading
import time
import uuid

import pytest

from pyqueue_sql import InvalidArgumentError, UnknownQueueError

UTC = dt.timezone.utc


def test_commit_reserve_walks_the_queue_one_round_trip_per_message(queue):
    for i in range(5):
        queue.push(f"k{i}", "job", {"i": i})
    committed, [first] = queue.commit_reserve(None)
    assert committed is None and first.key == "k0" and first.attempts == 1
    seen = [first.key]
    current = first
    while True:
        committed, got = queue.commit_reserve(current)
        assert committed is True
        if not got:
            break
        [current] = got
        seen.append(current.key)
    assert seen == ["k0", "k1", "k2", "k3", "k4"]
    stats = queue.stats()
    assert (stats.ready, stats.reserved) == (0, 0)


def test_commit_reserve_reports_a_stale_token_and_still_reserves(queue):
    queue.push("a", "job", 1)
    queue.push("b", "job", 2)
    [a] = queue.reserve(timeout=60)
    assert queue.commit(a)
    committed, [b] = queue.commit_reserve(a, n=5)
    assert committed is False and b.key == "b"
    committed, rest = queue.commit_reserve(b, n=5)
    assert committed is True and rest == []


def test_commit_reserve_of_nothing_then_n_of_some_kinds(queue):
    assert queue.commit_reserve(None) == (None, [])
    for i in range(4):
        queue.push(f"e{i}", "email" if i % 2 else "sms", i)
    committed, got = queue.commit_reserve(None, n=10, kinds=["email"])
    assert committed is None and [r.key for r in got] == ["e1", "e3"]
    committed, got2 = queue.commit_reserve(got[0], n=10)
    assert committed is True and sorted(r.key for r in got2) == ["e0", "e2"]
    assert queue.stats().reserved == 3


def test_commit_reserve_refusal_changes_nothing(queue):
    queue.push("a", "job", 1)
    [a] = queue.reserve()
    with pytest.raises(InvalidArgumentError):
        queue.commit_reserve(a, n=0)
    with pytest.raises(InvalidArgumentError):
        queue.commit_reserve(a, timeout=-1)
    assert queue.stats().reserved == 1  # the commit did not happen
    with pytest.raises(UnknownQueueError):
        queue.db.queue("no-such-queue-" + uuid.uuid4().hex[:6]).commit_reserve(a)
    assert queue.commit(a)


def test_commit_reserve_refuses_a_previous_message_without_its_kind(queue, raw, db):
    queue.push("a", "job", 1)
    if db.dialect.name == "postgresql":
        sql = "SELECT * FROM queue_commit_reserve(%s, %s, NULL, NULL)"
    else:
        sql = "CALL queue_commit_reserve(%s, %s, NULL, NULL, NULL, NULL, NULL, NULL)"
    with pytest.raises(Exception, match="p_kind must not be NULL"):
        raw(sql, (queue.name, "a"))
    if db.dialect.name == "postgresql":
        db.connection.rollback()
    assert queue.stats().ready == 1


def test_commit_many_deletes_only_held_reservations(queue):
    for i in range(6):
        queue.push(f"k{i}", "job", i)
    got = queue.reserve(n=6)
    stale = got[0]
    assert queue.commit(stale)
    assert queue.commit_many(got) == 5
    assert queue.commit_many(got) == 0
    assert queue.commit_many([]) == 0
    assert queue.stats().ready == 0 and queue.stats().reserved == 0


def test_commit_many_commits_non_ascii_keys_and_kinds(queue):
    queue.push("кей/é", "kïnd", 1)
    queue.push("plain", "kind", 2)
    got = queue.reserve(n=2)
    assert queue.commit_many(got) == 2


def test_commit_batch_refuses_bad_batches_and_changes_nothing(queue, raw, db):
    queue.push("a", "job", 1)
    [a] = queue.reserve()
    token = str(a.token)
    pg = db.dialect.name == "postgresql"

    def call(keys, kinds, tokens):
        if pg:
            raw(
                "SELECT queue_commit_batch(%s, %s::text[], %s::text[], %s::uuid[]::text[])",
                (queue.name, keys, kinds, tokens),
            )
        else:
            raw(
                "CALL queue_commit_batch(%s, %s, %s, %s)",
                (
                    queue.name,
                    None if keys is None else json.dumps(keys),
                    None if kinds is None else json.dumps(kinds),
                    None if tokens is None else json.dumps(tokens),
                ),
            )

    for keys, kinds, tokens, match in [
        (None, ["job"], [token], "must not be NULL"),
        (["a"], ["job", "job"], [token], "same length"),
        (["a", ""], ["job", "job"], [token, token], "element 2"),
        (["a", "b "], ["job", "job"], [token, token], "element 2"),
        (["a", "b"], ["job", None], [token, token], "element 2"),
        (["a", "b"], ["job", "job"], [token, None], "element 2"),
    ]:
        with pytest.raises(Exception, match=match):
            call(keys, kinds, tokens)
        if pg:
            db.connection.rollback()
    assert queue.stats().reserved == 1


def test_commit_reserve_concurrent_consumers_never_share(make_queue, connect):
    queue = make_queue()
    queue.push_many([(f"m{i:03}", "job", i) for i in range(120)])
    seen: list[str] = []
    lock = threading.Lock()
    errors: list[BaseException] = []

    def consume():
        try:
            q = connect().queue(queue.name)
            committed, got = q.commit_reserve(None)
            while got:
                with lock:
                    seen.append(got[0].key)
                committed, got = q.commit_reserve(got[0])
                assert committed is True
        except BaseException as exc:  # reported below
            errors.append(exc)

    threads = [threading.Thread(target=consume) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors
    assert sorted(seen) == [f"m{i:03}" for i in range(120)]
    assert queue.stats().ready == 0 and queue.stats().reserved == 0


def test_commit_reserve_follows_priorities_like_reserve(queue):
    queue.push("low", "job", 1, priority=0)
    queue.push("high1", "job", 2, priority=5)
    queue.push("mid", "job", 3, priority=1)
    queue.push("high2", "job", 4, priority=5)
    committed, got = queue.commit_reserve(None, n=3)
    assert [r.key for r in got] == ["high1", "high2", "mid"]
    committed, got2 = queue.commit_reserve(got[0], n=3)
    assert committed is True and [r.key for r in got2] == ["low"]


def test_commit_reserve_dead_letters_an_exhausted_message(make_queue):
    dlq = make_queue()
    queue = make_queue(max_attempts=1, dead_letter_queue=dlq.name)
    queue.push("tired", "job", 1)
    queue.push("fresh", "job", 2)
    [tired] = queue.reserve(timeout=0.2)
    time.sleep(0.4)  # its only allowed delivery expired
    committed, got = queue.commit_reserve(None, n=2)
    assert [r.key for r in got] == ["fresh"]
    assert queue.stats().dead == 1 and dlq.stats().ready == 1
    assert queue.commit_reserve(tired)[0] is False


def test_commit_reserve_on_a_paused_queue_commits_but_hands_out_nothing(queue):
    queue.push("a", "job", 1)
    queue.push("b", "job", 2)
    [a] = queue.reserve()
    queue.pause()
    assert queue.commit_reserve(a) == (True, [])
    queue.resume()
    assert [r.key for r in queue.commit_reserve(None)[1]] == ["b"]


# -- history, recurring messages and limits, as with the plain routines ---------------


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


@pytest.mark.slow
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
    if not next_one:  # MySQL 8.0 commits after it reserves: the slot is free from the next call
        _, next_one = queue.commit_reserve(None, n=5)
    assert len(next_one) == 1
    assert queue.stats().reserved == 2


@pytest.mark.parametrize("k", [None, 2])
def test_commit_many_of_group_heads_hands_each_group_its_next(make_queue, k):
    q = make_queue()
    if k is not None:
        q.set_group_limit(None, k)
    for g in ("a", "b"):
        for i in range(5):
            assert q.push(f"{g}{i}", "kind", {}, group=g)
    heads = q.reserve(n=10)
    assert sorted(r.key for r in heads) == sorted(f"{g}{i}" for g in "ab" for i in range(k or 1))
    assert q.commit_many(heads) == len(heads)
    # the next k (or 1) of each group, in push order, and no more
    nxt = q.reserve(n=10)
    assert sorted(r.key for r in nxt) == sorted(f"{g}{i}" for g in "ab" for i in range(k or 1, 2 * (k or 1)))
    assert q.commit_many(nxt[:1]) == 1  # one head of one group leaves: one more of that group only
    (one,) = q.reserve(n=10)
    assert one.key[0] == nxt[0].key[0] and int(one.key[1:]) == 2 * (k or 1)
    assert q.commit_many([*nxt[1:], one]) == len(nxt)
    left = q.reserve(n=10)
    assert q.commit_many(left) == len(left)
    while got := q.reserve(n=10):
        assert q.commit_many(got) == len(got)
    stats = q.stats()
    assert (stats.ready, stats.reserved) == (0, 0)


def test_commit_many_records_each_result(make_queue):
    q = make_queue()
    q.set_result_retention(3600)
    for i in range(3):
        assert q.push(f"k{i}", "kind", {"i": i})
    held = q.reserve(n=3)
    assert q.commit_many(held) == 3
    assert [(q.result(f"k{i}", "kind").state, q.result(f"k{i}", "kind").attempts) for i in range(3)] == [
        ("succeeded", 1)
    ] * 3
    assert q.commit_many(held) == 0  # committed already: nothing more recorded
