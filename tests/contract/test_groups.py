"""FIFO message groups (spec: docs/contract.md, "FIFO groups"), on every dialect and client.

A message pushed with a group is its group's head (ready, delayed or reserved like any message) or
blocked behind the head (scheduled_at = the sentinel 9999-12-31 23:59:59.999999 UTC: past the end
of every ready range). The head stays head until it leaves the queue (commit, commit_batch,
commit_reserve, pop, dead-letter, remove, move to another queue); then the blocked message with the
least (scheduled_at_initially, id) is promoted, ready at max(its run_at, now): behind the heads
already ready, so groups take turns. A message that becomes head by its own push is scheduled at its
run_at (now when it has none), as a message without a group. After every step the tests check the invariant in the tables
(``assert_groups_consistent``): each non-empty group has exactly one message that is not blocked,
and pyqueue_group names it.
"""

from __future__ import annotations

import datetime as dt

import pytest

import pyqueue_sql
from pyqueue_sql import InvalidArgumentError, UnknownQueueError

UTC = dt.timezone.utc
SENTINEL = dt.datetime.max.replace(tzinfo=UTC)
SENTINEL_SQL = {
    "postgresql": "TIMESTAMPTZ '9999-12-31 23:59:59.999999+00'",
    "mysql": "CAST('9999-12-31 23:59:59.999999' AS DATETIME(6))",
}
NOW_SQL = {"postgresql": "clock_timestamp()", "mysql": "UTC_TIMESTAMP(6)"}


def keys(messages):
    return [m.key for m in messages]


def grouped(key, group, kind="job", payload=None, run_at=None, priority=None):
    return pyqueue_sql.NewMessage(
        key, kind, payload if payload is not None else key, run_at, priority, group=group
    )


def rows_of(raw, dialect, queue_name):
    """{key: (kind, group_key, blocked)} of the queue's live messages, read from the table."""
    got = raw(
        f"SELECT p_key, p_kind, group_key, scheduled_at = {SENTINEL_SQL[dialect]} "
        "FROM pyqueue_message WHERE queue_name = %s",
        (queue_name,),
    )
    return {k: (kd, g, bool(b)) for k, kd, g, b in got}


def group_table(raw, queue_name):
    """{group_key: (head_key, head_kind)} of pyqueue_group for the queue."""
    return {
        g: (hk, hkd)
        for g, hk, hkd in raw(
            "SELECT group_key, head_key, head_kind FROM pyqueue_group WHERE queue_name = %s", (queue_name,)
        )
    }


def assert_groups_consistent(raw, dialect, queue_name):
    """Exactly one message per non-empty group is not blocked and pyqueue_group names it; no row
    for an empty group; group-less messages are never blocked. Returns {group: head key}."""
    rows = rows_of(raw, dialect, queue_name)
    heads: dict[str, list[tuple[str, str]]] = {}
    for key, (kind, group, blocked) in rows.items():
        if group is None:
            assert not blocked, ("a group-less message is blocked", key)
            continue
        heads.setdefault(group, [])
        if not blocked:
            heads[group].append((key, kind))
    for group, hs in heads.items():
        assert len(hs) == 1, ("a group must have exactly one head", group, hs, rows)
    table = group_table(raw, queue_name)
    assert table == {g: hs[0] for g, hs in heads.items()}, (
        "pyqueue_group differs from the heads",
        table,
        rows,
    )
    return {g: hs[0][0] for g, hs in heads.items()}


def make_due(raw, dialect, queue_name, key, kind="job"):
    """Moves a head's scheduled_at (its delay, or its reservation's end) one second into the past,
    as time passing would: a delayed head becomes ready, a reservation expires. MySQL/MariaDB: its
    ready_at (its place in reserve order) with it when nobody holds it, and not past it when held."""
    past = f"{NOW_SQL[dialect]} - " + (
        "interval '1 second'" if dialect == "postgresql" else "INTERVAL 1 SECOND"
    )
    ready = (
        ""
        if dialect == "postgresql"
        else f", ready_at = IF(reserve_token IS NULL, {past}, LEAST(ready_at, {past}))"
    )
    raw(
        f"UPDATE pyqueue_message SET scheduled_at = {past}{ready}"
        f" WHERE queue_name = %s AND p_key = %s AND p_kind = %s AND scheduled_at < {SENTINEL_SQL[dialect]}",
        (queue_name, key, kind),
    )


def drain_in_order(queue, n=10):
    """Reserves and commits until nothing is ready; returns the keys in the order reserved."""
    order = []
    while got := queue.reserve(n=n, timeout=60):
        order += keys(got)
        assert queue.commit_many(got) == len(got)
    return order


@pytest.fixture
def check(raw, dialect):
    return lambda queue: assert_groups_consistent(raw, dialect, queue.name)


# -- one head per group ----------------------------------------------------------------------------


def test_only_the_head_of_a_group_can_be_reserved_or_popped(queue, check):
    for i in range(1, 4):
        assert queue.push(f"a{i}", "job", i, group="g") is True
    assert check(queue) == {"g": "a1"}
    [a1] = queue.reserve(n=10, timeout=60)
    assert a1.key == "a1"
    assert queue.reserve(n=10) == []
    assert queue.pop(10) == []
    s = queue.stats()
    assert (s.ready, s.delayed, s.reserved) == (0, 2, 1)
    assert check(queue) == {"g": "a1"}


def test_a_group_is_delivered_one_message_at_a_time_in_push_order(queue, check):
    for i in range(1, 6):
        queue.push(f"a{i}", "job", i, group="g")
    order = []
    while got := queue.reserve(n=10, timeout=60):
        assert len(got) == 1, keys(got)
        order.append(got[0].key)
        assert queue.commit(got[0])
        check(queue)
    assert order == ["a1", "a2", "a3", "a4", "a5"]
    assert check(queue) == {}  # the emptied group's row is gone


def test_a_blocked_message_shows_as_delayed_at_the_sentinel(queue):
    queue.push("head", "job", 1, group="g")
    queue.push("behind", "job", 2, group="g")
    info = queue.message("behind", "job")
    assert (info.state, info.scheduled_at) == ("delayed", SENTINEL)
    assert queue.message("head", "job").state == "ready"
    rows = {r.key: (r.state, r.scheduled_at) for r in queue.messages()}
    assert rows["behind"] == ("delayed", SENTINEL)
    assert queue.messages(state="ready")[0].key == "head"


def test_group_less_messages_are_not_held_back_by_groups(queue, raw, dialect, check):
    queue.push("p1", "job", 1)
    queue.push("a1", "job", 1, group="g")
    queue.push("a2", "job", 2, group="g")
    queue.push("p2", "job", 2)
    assert keys(queue.reserve(n=10, timeout=60)) == ["p1", "a1", "p2"]
    assert {k: g for k, (_, g, _) in rows_of(raw, dialect, queue.name).items()} == {
        "p1": None,
        "p2": None,
        "a1": "g",
        "a2": "g",
    }
    assert check(queue) == {"g": "a1"}
    queue.push("p3", "job", 3)
    assert keys(queue.pop(10)) == ["p3"]


def test_groups_are_per_queue(make_queue, check):
    q1, q2 = make_queue(), make_queue()
    q1.push("a1", "job", 1, group="g")
    q2.push("b1", "job", 1, group="g")
    q1.push("a2", "job", 2, group="g")
    assert keys(q2.reserve(n=5)) == ["b1"]
    assert keys(q1.reserve(n=5)) == ["a1"]
    assert (check(q1), check(q2)) == ({"g": "a1"}, {"g": "b1"})


def test_group_keys_compare_exactly(queue, check):
    for i, g in enumerate(("g", "G", " g", "gé")):
        queue.push(f"m{i}", "job", i, group=g)
    assert sorted(keys(queue.reserve(n=10))) == ["m0", "m1", "m2", "m3"]
    assert len(check(queue)) == 4


# -- the head stays head until it leaves -------------------------------------------------------------


def test_rollback_keeps_the_group_blocked_until_the_head_is_delivered_again(queue, check):
    queue.push("a1", "job", 1, group="g")
    queue.push("a2", "job", 2, group="g")
    [r] = queue.reserve(timeout=60)
    assert queue.rollback(r, delay=3600)
    assert queue.reserve(n=10) == []  # a1 waits for its delay; a2 stays blocked behind it
    assert check(queue) == {"g": "a1"}
    s = queue.stats()
    assert (s.ready, s.delayed) == (0, 2)
    queue.push("p", "job", 0)
    assert keys(queue.reserve(n=10)) == ["p"]


def test_rollback_without_delay_redelivers_the_head_not_the_next(queue, check):
    queue.push("a1", "job", 1, group="g")
    queue.push("a2", "job", 2, group="g")
    [r] = queue.reserve(timeout=60)
    assert queue.rollback(r)
    [again] = queue.reserve(n=10, timeout=60)
    assert (again.key, again.attempts) == ("a1", 2)
    assert queue.fail(again, "boom") == "retry"
    [third] = queue.reserve(n=10, timeout=60)
    assert (third.key, third.attempts) == ("a1", 3)
    assert queue.commit(third)
    assert keys(queue.reserve(n=10)) == ["a2"]
    check(queue)


def test_an_expired_reservation_keeps_the_group_blocked_and_redelivers_the_head(queue, raw, dialect, check):
    queue.push("a1", "job", 1, group="g")
    queue.push("a2", "job", 2, group="g")
    [old] = queue.reserve(timeout=60)
    make_due(raw, dialect, queue.name, "a1")
    [new] = queue.reserve(n=10, timeout=60)
    assert (new.key, new.attempts) == ("a1", 2)
    assert queue.commit(old) is False
    assert check(queue) == {"g": "a1"}
    assert queue.commit(new)
    assert keys(queue.reserve(n=10)) == ["a2"]


def test_extend_keeps_the_head(queue, check):
    queue.push("a1", "job", 1, group="g")
    queue.push("a2", "job", 2, group="g")
    [r] = queue.reserve(timeout=60)
    extended = queue.extend(r, timeout=120)
    assert extended is not None
    assert queue.reserve(n=10) == []
    assert check(queue) == {"g": "a1"}
    assert queue.commit(extended)
    assert keys(queue.reserve(n=10)) == ["a2"]


def test_a_commit_promotes_the_next_message_and_the_last_commit_empties_the_group(queue, raw, check):
    queue.push("a1", "job", 1, group="g")
    queue.push("a2", "job", 2, group="g")
    [r] = queue.reserve(timeout=60)
    assert queue.commit(r)
    assert check(queue) == {"g": "a2"}
    assert queue.message("a2", "job").state == "ready"
    [r2] = queue.reserve(timeout=60)
    assert queue.commit(r2)
    assert check(queue) == {}
    assert group_table(raw, queue.name) == {}
    # the emptied group starts again with the next push
    queue.push("a3", "job", 3, group="g")
    assert check(queue) == {"g": "a3"}
    assert keys(queue.reserve()) == ["a3"]


def test_commit_batch_promotes_the_next_message_of_each_group(queue, check):
    for g in ("g1", "g2", "g3"):
        for i in (1, 2):
            queue.push(f"{g}-{i}", "job", i, group=g)
    first = queue.reserve(n=10, timeout=60)
    assert sorted(keys(first)) == ["g1-1", "g2-1", "g3-1"]
    assert queue.commit_many(first) == 3
    assert check(queue) == {"g1": "g1-2", "g2": "g2-2", "g3": "g3-2"}
    assert sorted(keys(queue.reserve(n=10, timeout=60))) == ["g1-2", "g2-2", "g3-2"]


def test_commit_reserve_promotes_the_next_message_and_can_reserve_it(queue, check):
    for i in range(1, 4):
        queue.push(f"a{i}", "job", i, group="g")
    committed, [current] = queue.commit_reserve(None)
    assert committed is None and current.key == "a1"
    seen = [current.key]
    while True:
        committed, got = queue.commit_reserve(current)
        assert committed is True
        if not got:
            break
        [current] = got
        seen.append(current.key)
    assert seen == ["a1", "a2", "a3"]
    assert check(queue) == {}


def test_pop_takes_heads_only_and_promotes_the_next(queue, check):
    queue.push("a1", "job", 1, group="g")
    queue.push("a2", "job", 2, group="g")
    queue.push("b1", "job", 1, group="h")
    assert keys(queue.pop(10)) == ["a1", "b1"]
    assert check(queue) == {"g": "a2"}
    assert keys(queue.pop(10)) == ["a2"]
    assert check(queue) == {}


def test_remove_of_the_head_promotes_and_remove_of_a_blocked_message_does_not(queue, check):
    for i in range(1, 5):
        queue.push(f"a{i}", "job", i, group="g")
    assert queue.remove("a3", "job") is True  # blocked: the head stays
    assert check(queue) == {"g": "a1"}
    [r] = queue.reserve(timeout=60)
    assert queue.remove("a1", "job") is True  # the reserved head
    assert check(queue) == {"g": "a2"}
    assert queue.commit(r) is False
    assert queue.remove("a2", "job") is True  # a ready head
    assert check(queue) == {"g": "a4"}
    assert keys(queue.reserve(n=10)) == ["a4"]


def test_move_to_another_queue_promotes_and_the_moved_message_has_no_group(
    queue, make_queue, raw, dialect, check
):
    target = make_queue()
    queue.push("a1", "job", 1, group="g")
    queue.push("a2", "job", 2, group="g")
    [r] = queue.reserve(timeout=60)
    assert queue.move(r, target, {"moved": True})
    assert check(queue) == {"g": "a2"}
    assert rows_of(raw, dialect, target.name) == {"a1": ("job", None, False)}
    assert check(target) == {}
    assert [(m.key, m.payload) for m in target.pop(5)] == [("a1", {"moved": True})]
    assert keys(queue.reserve()) == ["a2"]


def test_move_into_its_own_queue_keeps_the_head(queue, check):
    queue.push("a1", "job", 1, group="g")
    queue.push("a2", "job", 2, group="g")
    [r] = queue.reserve(timeout=60)
    assert queue.move(r, queue, {"again": 1})
    assert check(queue) == {"g": "a1"}
    [again] = queue.reserve(n=10, timeout=60)
    assert (again.key, again.payload) == ("a1", {"again": 1})


def test_a_move_onto_a_blocked_message_of_the_target_keeps_it_blocked(queue, make_queue, raw, dialect, check):
    target = make_queue()
    target.push("t1", "job", 1, group="tg")
    target.push("a1", "job", "original", group="tg")  # blocked in the target
    queue.push("a1", "job", 1, group="g")
    [r] = queue.reserve(timeout=60)
    assert queue.move(r, target)
    assert rows_of(raw, dialect, target.name)["a1"] == ("job", "tg", True)
    assert check(target) == {"tg": "t1"}
    assert target.message("a1", "job").payload == "original"


def test_a_dead_letter_by_rollback_on_the_last_attempt_promotes_the_next(make_queue, raw, dialect, check):
    dead = make_queue()
    q = make_queue(max_attempts=1, dead_letter_queue=dead.name)
    for i in (1, 2, 3):
        q.push(f"a{i}", "job", i, group="g")
    [r] = q.reserve(timeout=60)
    assert q.rollback(r)
    assert check(q) == {"g": "a2"}
    assert rows_of(raw, dialect, dead.name) == {"a1": ("job", None, False)}  # no group in the DLQ
    [r2] = q.reserve(timeout=60)
    assert r2.key == "a2"
    assert q.fail(r2, "boom") == "dead_lettered"
    assert check(q) == {"g": "a3"}
    assert sorted(d.key for d in dead.dead_letters()) == ["a1", "a2"]
    assert q.stats().dead == 2


def test_a_dead_letter_of_an_expired_last_delivery_promotes_the_next(make_queue, raw, dialect, check):
    dead = make_queue()
    q = make_queue(max_attempts=1, dead_letter_queue=dead.name)
    for i in (1, 2, 3):
        q.push(f"a{i}", "job", i, group="g")
    [r] = q.reserve(timeout=60)
    make_due(raw, dialect, q.name, "a1")
    got = q.reserve(n=10, timeout=60)  # dead-letters a1; a2 may come in this call or the next
    assert keys(got) in ([], ["a2"])
    if not got:
        assert check(q) == {"g": "a2"}
        got = q.reserve(n=10, timeout=60)
    assert keys(got) == ["a2"]
    assert q.commit(r) is False
    assert [d.key for d in dead.dead_letters()] == ["a1"]
    assert rows_of(raw, dialect, dead.name) == {"a1": ("job", None, False)}
    assert check(q) == {"g": "a2"}


def test_a_dead_letter_onto_a_blocked_message_of_the_dead_letter_queue_keeps_it_blocked(
    make_queue, raw, dialect, check
):
    dead = make_queue()
    dead.push("d1", "job", 1, group="dg")
    dead.push("a1", "job", "older", group="dg")  # blocked in the DLQ
    q = make_queue(max_attempts=1, dead_letter_queue=dead.name)
    q.push("a1", "job", "newer", group="g")
    [r] = q.reserve(timeout=60)
    assert q.rollback(r)
    assert rows_of(raw, dialect, dead.name)["a1"][1:] == ("dg", True)
    assert check(dead) == {"dg": "d1"}
    assert check(q) == {}


def test_a_redrive_from_a_grouped_dead_letter_queue_leaves_every_group_a_head(
    make_queue, raw, dialect, check
):
    """Redrive takes ready messages only (the heads); a head that left its group must be replaced."""
    dead, to = make_queue(), make_queue()
    for i in (1, 2, 3):
        dead.push(f"a{i}", "job", i, group="g")
    moved = []
    while dead.redrive(to, n=10):
        check(dead)
        moved += keys(to.pop(10))
    assert moved == ["a1", "a2", "a3"]
    assert check(dead) == {}


def test_dropping_a_queue_drops_its_groups(db, raw, dialect):
    q = db.queue("t.groups.drop").create()
    q.push("a1", "job", 1, group="g")
    q.push("a2", "job", 2, group="g")
    q.drop()
    assert group_table(raw, q.name) == {}
    assert rows_of(raw, dialect, q.name) == {}


# -- order within a group ---------------------------------------------------------------------------


def test_a_later_push_with_an_earlier_run_at_goes_first_while_the_head_was_never_delivered(
    queue, raw, dialect, check
):
    later = (dt.datetime.now(UTC) + dt.timedelta(hours=1)).replace(microsecond=123456)
    queue.push("late", "job", 1, run_at=later, group="g")
    assert check(queue) == {"g": "late"}
    queue.push("now", "job", 2, group="g")  # earlier than the head's run_at: they swap
    assert check(queue) == {"g": "now"}
    assert queue.message("late", "job").scheduled_at == SENTINEL
    [r] = queue.reserve(n=10, timeout=60)
    assert r.key == "now"
    assert queue.commit(r)
    # the old head comes back as head at its own run_at (still in the future: delayed)
    assert check(queue) == {"g": "late"}
    info = queue.message("late", "job")
    assert (info.state, info.scheduled_at) == ("delayed", later)
    assert queue.reserve(n=10) == []


def test_a_new_groups_first_message_is_scheduled_at_its_run_at_like_a_message_without_a_group(queue, check):
    """The message that becomes head by its own push (the group's first, one push or a batch)
    is due at its run_at, past or future, as a message without a group would be: one with a
    past run_at goes before a message pushed earlier without run_at."""
    past = (dt.datetime.now(UTC) - dt.timedelta(hours=1)).replace(microsecond=250000)
    future = (dt.datetime.now(UTC) + dt.timedelta(hours=1)).replace(microsecond=500000)
    queue.push("plain", "job", 0)
    queue.push("g-past", "job", 1, run_at=past, group="g")
    assert queue.push_many([grouped("h-past", "h", run_at=past - dt.timedelta(minutes=1))]) == 1
    queue.push("f-future", "job", 2, run_at=future, group="f")
    assert check(queue) == {"g": "g-past", "h": "h-past", "f": "f-future"}
    assert queue.message("g-past", "job").scheduled_at == past
    assert (queue.message("f-future", "job").state, queue.message("f-future", "job").scheduled_at) == (
        "delayed",
        future,
    )
    assert keys(queue.reserve(n=10, timeout=60)) == ["h-past", "g-past", "plain"]


def test_a_later_push_with_the_same_run_at_queues_behind_the_head(queue, check):
    """Only an earlier run_at swaps a head that was never delivered: pushes of one run_at keep their
    push order (a push of the same time that took the head's place broke FIFO on ties)."""
    at = (dt.datetime.now(UTC) - dt.timedelta(minutes=5)).replace(microsecond=250000)
    queue.push("first", "job", 1, run_at=at, group="g")
    queue.push("second", "job", 2, run_at=at, group="g")
    assert check(queue) == {"g": "first"}
    assert drain_in_order(queue) == ["first", "second"]


def test_an_earlier_run_at_does_not_overtake_a_head_that_was_delivered(queue, check):
    past = dt.datetime.now(UTC) - dt.timedelta(hours=1)
    queue.push("a1", "job", 1, group="g")
    [r] = queue.reserve(timeout=60)
    queue.push("early-while-reserved", "job", 2, run_at=past, group="g")
    assert check(queue) == {"g": "a1"}
    assert queue.rollback(r)  # delivered once: attempts 1, no longer swappable
    queue.push("early-after-rollback", "job", 3, run_at=past - dt.timedelta(hours=1), group="g")
    assert check(queue) == {"g": "a1"}
    assert drain_in_order(queue) == ["a1", "early-after-rollback", "early-while-reserved"]


def test_blocked_messages_are_promoted_by_run_at_then_push_order(queue, raw, dialect, check):
    now = dt.datetime.now(UTC)
    queue.push("head", "job", 0, group="g")
    [h] = queue.reserve(timeout=60)
    queue.push("b-future", "job", 1, run_at=now + dt.timedelta(hours=2), group="g")
    queue.push("c-now", "job", 2, group="g")
    queue.push("d-past", "job", 3, run_at=now - dt.timedelta(hours=1), group="g")
    queue.push("e-now", "job", 4, group="g")
    queue.push("f-past", "job", 5, run_at=now - dt.timedelta(hours=1), group="g")  # ties d-past: push order
    assert queue.commit(h)
    assert drain_in_order(queue) == ["d-past", "f-past", "c-now", "e-now"]
    # the delayed member is head now: the group waits for its run_at
    assert check(queue) == {"g": "b-future"}
    assert queue.message("b-future", "job").state == "delayed"
    make_due(raw, dialect, queue.name, "b-future")
    assert keys(queue.reserve(n=10)) == ["b-future"]


def test_a_delayed_head_blocks_its_group_until_due(queue, raw, dialect, check):
    queue.push("a1", "job", 1, run_at=dt.timedelta(hours=1), group="g")
    queue.push("a2", "job", 2, run_at=dt.timedelta(hours=2), group="g")
    queue.push("other", "job", 0, group="h")
    assert keys(queue.reserve(n=10)) == ["other"]
    s = queue.stats()
    assert (s.ready, s.delayed, s.reserved) == (0, 2, 1)
    make_due(raw, dialect, queue.name, "a1")
    [r] = queue.reserve(n=10, timeout=60)
    assert r.key == "a1"
    assert queue.commit(r)
    assert check(queue) == {"g": "a2", "h": "other"}
    assert queue.message("a2", "job").state == "delayed"  # promoted at its own run_at
    assert queue.reserve(n=10) == []


def test_push_many_orders_a_group_by_element_and_returns_the_new_count(queue, check):
    n = queue.push_many(
        [
            grouped("a1", "g"),
            grouped("b1", "h"),
            grouped("a2", "g"),
            pyqueue_sql.NewMessage("p1", "job", 0),
            grouped("a3", "g"),
            grouped("b2", "h"),
        ]
    )
    assert n == 6
    assert check(queue) == {"g": "a1", "h": "b1"}
    assert sorted(keys(queue.reserve(n=10, timeout=60))) == ["a1", "b1", "p1"]
    assert queue.push_many([grouped("a1", "g"), grouped("a4", "g")]) == 1  # a1 still live


def test_push_many_with_earlier_run_at_in_a_later_element_swaps_the_head(queue, check):
    later = dt.datetime.now(UTC) + dt.timedelta(hours=1)
    assert queue.push_many([grouped("late", "g", run_at=later), grouped("now", "g")]) == 2
    assert check(queue) == {"g": "now"}
    assert keys(queue.reserve(n=10)) == ["now"]


def test_push_dedup_keeps_the_existing_message_and_its_group(queue, raw, dialect, check):
    assert queue.push("k1", "job", 1, group="g") is True
    assert queue.push("k1", "job", 2, group="h") is False
    assert queue.push("k1", "job", 3) is False
    assert queue.push("k2", "job", 4) is True
    assert queue.push("k2", "job", 5, group="g") is False
    rows = rows_of(raw, dialect, queue.name)
    assert (rows["k1"][1], rows["k2"][1]) == ("g", None)
    assert check(queue) == {"g": "k1"}
    assert queue.message("k1", "job").payload == 1


def test_push_replace_of_a_blocked_message_keeps_it_blocked_and_moves_it_in_its_group(
    queue, raw, dialect, check
):
    past = dt.datetime.now(UTC) - dt.timedelta(hours=1)
    for i in (1, 2, 3):
        queue.push(f"a{i}", "job", i, group="g")
    assert queue.push_replace("a3", "job", {"new": 3}, run_at=past, priority=7) == "replaced"
    assert rows_of(raw, dialect, queue.name)["a3"][2] is True
    assert check(queue) == {"g": "a1"}
    info = queue.message("a3", "job")
    assert (info.state, info.scheduled_at, info.payload, info.priority) == (
        "delayed",
        SENTINEL,
        {"new": 3},
        7,
    )
    assert keys(queue.reserve(n=10)) == ["a1"]
    queue.remove("a1", "job")
    # its new run_at put it before a2 in the group
    assert check(queue) == {"g": "a3"}
    [r] = queue.reserve(n=10, timeout=60)
    assert (r.key, r.payload, r.priority) == ("a3", {"new": 3}, 7)


def test_push_replace_of_a_head_reschedules_it_and_keeps_the_group_blocked(queue, check):
    queue.push("a1", "job", 1, group="g")
    queue.push("a2", "job", 2, group="g")
    assert queue.push_replace("a1", "job", {"v": 2}, run_at=dt.timedelta(hours=1)) == "replaced"
    assert check(queue) == {"g": "a1"}
    assert queue.message("a1", "job").state == "delayed"
    assert queue.reserve(n=10) == []


def test_push_replace_inserts_a_new_message_without_a_group(queue, raw, dialect, check):
    """push_replace has no group argument: what it inserts has none."""
    assert queue.push_replace("x", "job", 1) == "inserted"
    assert rows_of(raw, dialect, queue.name)["x"][1] is None
    assert check(queue) == {}


# -- across groups: fairness, priorities, limits ------------------------------------------------------


def test_a_reserve_of_n_takes_at_most_one_message_per_group(queue, check):
    for g in range(5):
        for i in range(4):
            queue.push(f"g{g}-{i}", "job", i, group=f"g{g}")
    for i in range(3):
        queue.push(f"plain-{i}", "job", i)
    got = queue.reserve(n=100, timeout=60)
    assert sorted(keys(got)) == sorted([f"g{g}-0" for g in range(5)] + [f"plain-{i}" for i in range(3)])
    assert queue.reserve(n=100) == []
    check(queue)


def test_a_promoted_message_queues_behind_the_heads_already_ready(queue):
    queue.push("a1", "job", 1, group="A")
    queue.push("a2", "job", 2, group="A")
    queue.push("b1", "job", 1, group="B")
    queue.push("p", "job", 0)
    [a1] = queue.reserve(timeout=60)
    assert queue.commit(a1)
    assert keys(queue.reserve(n=10, timeout=60)) == ["b1", "p", "a2"]


def test_a_long_group_does_not_starve_a_short_one_pushed_after_it(queue):
    """200 messages of group A, then 20 of group B: one consumer reserving one at a time gets them
    in turns (round robin), so B is done after about 40 reserves, long before A."""
    assert queue.push_many([grouped(f"A{i:03d}", "A") for i in range(200)]) == 200
    assert queue.push_many([grouped(f"B{i:03d}", "B") for i in range(20)]) == 20
    order = []
    while got := queue.reserve(n=1, timeout=60):
        order.append(got[0].key)
        assert queue.commit(got[0])
    assert len(order) == 220
    assert [k for k in order if k[0] == "A"] == [f"A{i:03d}" for i in range(200)]
    assert [k for k in order if k[0] == "B"] == [f"B{i:03d}" for i in range(20)]
    assert "".join(k[0] for k in order[:40]) == "AB" * 20
    assert max(i for i, k in enumerate(order) if k[0] == "B") == 39


def test_priority_applies_across_groups_but_not_within_a_group(queue):
    queue.push("a1", "job", 1, group="A", priority=0)
    queue.push("a2", "job", 2, group="A", priority=9)  # does not overtake a1
    queue.push("b1", "job", 1, group="B", priority=5)
    queue.push("p", "job", 0, priority=1)
    assert keys(queue.reserve(n=10, timeout=60)) == ["b1", "p", "a1"]
    queue.remove("a1", "job")
    assert keys(queue.reserve(n=10, timeout=60)) == ["a2"]


def test_a_kinds_filter_never_reaches_past_a_head_of_another_kind(queue):
    queue.push("a1", "email", 1, group="g")
    queue.push("a2", "sms", 2, group="g")
    queue.push("b1", "sms", 1, group="h")
    assert keys(queue.reserve(n=10, kinds=["sms"], timeout=60)) == ["b1"]
    assert keys(queue.reserve(n=10, kinds=["sms"])) == []
    assert keys(queue.reserve(n=10, kinds=["email"], timeout=60)) == ["a1"]


def test_a_concurrency_limit_on_the_head_holds_its_whole_group(queue, check):
    queue.set_limit("lim", 1)
    queue.push("x1", "lim", 1, group="g")
    queue.push("x2", "free", 2, group="g")  # not limited, but behind x1
    queue.push("y1", "lim", 1, group="h")
    queue.push("z1", "free", 1, group="k")
    got = queue.reserve(n=10, timeout=60)
    assert keys(got) == ["x1", "z1"]  # y1: no slot; x2: blocked
    assert queue.reserve(n=10) == []
    assert queue.commit(got[0])
    assert sorted(keys(queue.reserve(n=10, timeout=60))) == ["x2", "y1"]
    assert queue.limits()[0].in_use == 1
    check(queue)


def test_a_paused_queue_still_promotes_on_commit(queue, check):
    queue.push("a1", "job", 1, group="g")
    queue.push("a2", "job", 2, group="g")
    [r] = queue.reserve(timeout=60)
    queue.pause()
    assert queue.commit(r)
    assert check(queue) == {"g": "a2"}
    assert queue.reserve(n=10) == []
    queue.resume()
    assert keys(queue.reserve(n=10)) == ["a2"]


def test_next_scheduled_at_ignores_blocked_messages(queue):
    queue.push("a1", "job", 1, group="g")
    queue.push("a2", "other", 2, group="g")  # blocked, of a kind no head has
    assert queue.next_scheduled_at(kinds=["other"]) == (None, None)
    at, wait = queue.next_scheduled_at()
    assert wait == 0
    [r] = queue.reserve(timeout=600)
    at, wait = queue.next_scheduled_at()
    assert at is not None and at < dt.datetime.now(UTC) + dt.timedelta(hours=1)
    assert 0 < wait <= 600
    assert queue.next_scheduled_at(kinds=["other"]) == (None, None)
    assert queue.wait(timeout=0.05, kinds=["other"]) is False


# -- queue_groups ------------------------------------------------------------------------------------


def group_rows(queue, n=None):
    return [
        (g.group_key, g.head_key, g.head_kind, g.head_state, g.messages)
        for g in (queue.groups() if n is None else queue.groups(n=n))
    ]


def test_groups_lists_non_empty_groups_by_key_with_their_head(queue):
    assert group_rows(queue) == []
    queue.push("b1", "sms", 1, group="h")
    queue.push("a1", "email", 1, group="g")
    queue.push("a2", "email", 2, group="g")
    queue.push("a3", "sms", 3, group="g")
    queue.push("c1", "job", 1, run_at=dt.timedelta(hours=1), group="i")
    queue.push("plain", "job", 0)
    assert group_rows(queue) == [
        ("g", "a1", "email", "ready", 3),
        ("h", "b1", "sms", "ready", 1),
        ("i", "c1", "job", "delayed", 1),
    ]
    [r] = queue.reserve(timeout=60)
    assert r.key == "b1"
    assert group_rows(queue)[1] == ("h", "b1", "sms", "reserved", 1)
    assert group_rows(queue, n=2) == [("g", "a1", "email", "ready", 3), ("h", "b1", "sms", "reserved", 1)]
    assert queue.commit(r)
    queue.remove("a1", "email")
    assert group_rows(queue) == [("g", "a2", "email", "ready", 2), ("i", "c1", "job", "delayed", 1)]


def test_groups_refuses_bad_n_and_unknown_queues(db, queue):
    for bad in (0, -1, 1001):
        with pytest.raises(InvalidArgumentError):
            queue.groups(n=bad)
    assert queue.groups(n=1000) == []
    with pytest.raises(UnknownQueueError):
        db.queue("t.no-such-queue-groups").groups()


# -- bad arguments ------------------------------------------------------------------------------------


@pytest.mark.parametrize("bad", ["", "g ", "x" * 256])
def test_a_bad_group_is_refused_and_changes_nothing(queue, bad):
    with pytest.raises(InvalidArgumentError, match="group"):
        queue.push("k", "job", 1, group=bad)
    with pytest.raises(InvalidArgumentError, match="group"):
        queue.push_many([grouped("ok", "g"), grouped("k", bad)])
    s = queue.stats()
    assert (s.ready, s.delayed) == (0, 0)


def test_the_longest_group_and_unusual_characters_are_accepted(queue, check):
    for i, g in enumerate(("x" * 255, "a b", "😀 group", "with.dots*#")):
        assert queue.push(f"m{i}", "job", i, group=g)
    assert len(check(queue)) == 4


def test_push_with_a_group_refuses_unknown_queues(db):
    with pytest.raises(UnknownQueueError):
        db.queue("t.no-such-queue-push-grouped").push("k", "job", 1, group="g")
    with pytest.raises(UnknownQueueError):
        db.queue("t.no-such-queue-push-grouped").push_many([grouped("k", "g")])


# -- plain SQL ---------------------------------------------------------------------------------------


def test_grouped_pushes_from_plain_sql(queue, raw, dialect):
    def call(sql, params=None):
        return [tuple(r) for r in raw(sql, params)]

    q = queue.name
    if dialect == "postgresql":
        assert call("SELECT queue_push_grouped(%s, 'g', 'a1', 'job', '{}')", (q,)) == [(True,)]
        assert call("SELECT queue_push_grouped(%s, 'g', 'a1', 'job', '{}', NULL, NULL)", (q,)) == [(False,)]
        [(n,)] = call(
            "SELECT queue_push_batch_grouped(%s, ARRAY['g', NULL, 'h'], ARRAY['a2', 'p', 'b1'], "
            "ARRAY['job', 'job', 'job'], ARRAY['{}', '{}', '{}']::jsonb[], NULL, NULL)",
            (q,),
        )
        got = call("SELECT p_key FROM queue_reserve(%s, 'psql', NULL, 10)", (q,))
    else:
        assert call("CALL queue_push_grouped(%s, 'g', 'a1', 'job', '{}', NULL, NULL)", (q,)) == [(1,)]
        assert call("CALL queue_push_grouped(%s, 'g', 'a1', 'job', '{}', NULL, NULL)", (q,)) == [(0,)]
        [(n,)] = call(
            # as queue_push_batch: one JSON array of messages, each with its group (null: none)
            'CALL queue_push_batch_grouped(%s, \'[{"p_key": "a2", "p_kind": "job", "payload": {}, "group": "g"}, '
            '{"p_key": "p", "p_kind": "job", "payload": {}, "group": null}, '
            '{"p_key": "b1", "p_kind": "job", "payload": {}, "group": "h"}]\', NULL, NULL, NULL, NULL, NULL)',
            (q,),
        )
        got = call("CALL queue_reserve(%s, 'mysql', NULL, 10, NULL)", (q,))
    assert n == 3
    assert sorted(r[0] for r in got) == ["a1", "b1", "p"]


# -- pushes inside a caller's transaction whose snapshot is older than the group -------------------


@pytest.mark.parametrize("batch", [False, True], ids=["one", "batch"])
@pytest.mark.parametrize("change", ["emptied", "blocked_removed"])
def test_a_push_in_a_transaction_that_read_earlier_sees_the_group_as_it_is_now(
    queue, connect, raw, dialect, check, batch, change
):
    """A caller's transaction reads first (its REPEATABLE READ snapshot is taken), then another
    connection changes the group (pops every message, or removes a blocked one), then the
    transaction pushes into the group: the push must go by the group as it is, not as the
    snapshot shows it, or the group records a head that no longer exists and is stuck."""
    other = connect().queue(queue.name)
    other.push("a", "job", 1, group="g")
    other.push("b", "job", 2, group="g")
    tx_db = connect()
    mine = tx_db.queue(queue.name)
    with tx_db.transaction():
        mine.stats()  # a read: the snapshot starts here
        if change == "emptied":
            assert keys(other.pop(5)) == ["a"]
            assert keys(other.pop(5)) == ["b"]
        else:
            assert other.remove("b", "job")
        if batch:
            assert mine.push_many([grouped("c", "g")]) == 1
        else:
            assert mine.push("c", "job", 3, group="g")
    check(queue)
    want = ["c"] if change == "emptied" else ["a", "c"]
    assert drain_in_order(queue) == want
    check(queue)
