"""Group limits (queue_set_group_limit): up to k messages of a FIFO group live at once (its heads:
ready, delayed or reserved; the others blocked), started in the group's order, with round robin
between groups, on every dialect. With k = 1 (no group limit) groups behave as tests/contract/test_groups.py
says.

The tests call the routines with plain SQL, as a psql or mysql client would, and count a group's
live messages in the message table (every grouped message that is not blocked: scheduled_at below
the sentinel 9999-12-31 23:59:59.999999 UTC).
"""

from __future__ import annotations

import datetime as dt
import json
import random
import threading
import time
import uuid

import pytest

from pyqueue_sql import dialects
from tests import plainsql

SENTINEL_SQL = {
    "postgresql": "TIMESTAMPTZ '9999-12-31 23:59:59.999999+00'",
    "mysql": "CAST('9999-12-31 23:59:59.999999' AS DATETIME(6))",
}
NOW_SQL = {"postgresql": "clock_timestamp()", "mysql": "UTC_TIMESTAMP(6)"}


def verb(dialect):
    return "SELECT" if dialect == "postgresql" else "CALL"


def set_group_limit(raw, dialect, queue, group, k):
    raw(f"{verb(dialect)} queue_set_group_limit(%s, %s, %s)", (queue, group, k))


def push(raw, dialect, queue, group, key, kind="job", ago_s=None):
    """Pushes into a group; ago_s: run_at that many seconds before now (None: now)."""
    run_at = None
    if ago_s is not None:
        run_at = dt.datetime.now(dt.timezone.utc) - dt.timedelta(seconds=ago_s)
        if dialect == "mysql":
            run_at = run_at.replace(tzinfo=None)
    if dialect == "postgresql":
        raw("SELECT queue_push_grouped(%s, %s, %s, %s, '{}', %s)", (queue, group, key, kind, run_at))
    else:
        raw("CALL queue_push_grouped(%s, %s, %s, %s, '{}', %s, NULL)", (queue, group, key, kind, run_at))


def reserve(raw, dialect, queue, n, timeout=60):
    """[(key, kind, token)] reserved, in the order handed out."""
    if dialect == "postgresql":
        rows = raw(
            "SELECT p_key, p_kind, token::text FROM queue_reserve(%s, 'w', make_interval(secs => %s), %s)",
            (queue, timeout, n),
        )
        return [tuple(r) for r in rows]
    rows = raw("CALL queue_reserve(%s, 'w', %s, %s, NULL)", (queue, timeout, n))
    return [(r[0], r[1], r[3]) for r in rows]


def keys(rows):
    return [r[0] for r in rows]


def commit(raw, dialect, queue, held):
    key, kind, token = held
    rows = raw(f"{verb(dialect)} queue_commit(%s, %s, %s, %s)", (queue, key, kind, token))
    assert rows and rows[0][0], ("commit failed", held)


def commit_batch(raw, dialect, queue, held):
    """queue_commit_batch of held [(key, kind, token)]: all of them must leave."""
    ks, kinds, tokens = ([h[i] for h in held] for i in range(3))
    if dialect == "postgresql":
        rows = raw("SELECT queue_commit_batch(%s, %s, %s, %s::uuid[]::text[])", (queue, ks, kinds, tokens))
    else:
        args = (queue, json.dumps(ks), json.dumps(kinds), json.dumps(tokens))
        rows = raw("CALL queue_commit_batch(%s, %s, %s, %s)", args)
    assert rows and int(rows[0][0]) == len(held), ("batch commit", held, rows)


def groups(raw, dialect, queue):
    """{group: (head_key, messages, group_limit, in_flight)} from queue_groups."""
    if dialect == "postgresql":
        rows = raw("SELECT * FROM queue_groups(%s)", (queue,))
    else:
        rows = raw("CALL queue_groups(%s, NULL)", (queue,))
    return {r[0]: (r[1], int(r[4]), int(r[5]), int(r[6])) for r in rows}


def live_counts(conn_or_raw, dialect, queue):
    """{group: (live, reserved now)} counted in the message table, one statement."""
    sql = (
        f"SELECT group_key, COUNT(*), SUM(CASE WHEN reserve_token IS NOT NULL AND scheduled_at > {NOW_SQL[dialect]} "
        f"THEN 1 ELSE 0 END) FROM pyqueue_message WHERE queue_name = %s AND group_key IS NOT NULL "
        f"AND scheduled_at < {SENTINEL_SQL[dialect]} GROUP BY group_key"
    )
    return {g: (int(n), int(r)) for g, n, r in conn_or_raw(sql, (queue,))}


@pytest.fixture
def q(raw, dialect):
    name = f"gl.{uuid.uuid4().hex[:12]}"
    if dialect == "postgresql":
        raw("SELECT queue_create(%s, NULL, 1000)", (name,))
    else:
        raw("CALL queue_create(%s, NULL, 1000, NULL, NULL)", (name,))
    return name


def test_set_group_limit_refuses_bad_arguments(q, raw, dialect):
    for group, k in [("g", 0), ("g", 10001), ("g", -1), (None, 0), ("", 2), ("g ", 2), ("g" * 256, 2)]:
        with pytest.raises(Exception, match="pyqueue:invalid_argument"):
            set_group_limit(raw, dialect, q, group, k)
    with pytest.raises(Exception, match="pyqueue:unknown_queue"):
        set_group_limit(raw, dialect, "no-such-queue-" + uuid.uuid4().hex, "g", 2)
    set_group_limit(raw, dialect, q, "g", None)  # nothing to remove: no error
    set_group_limit(raw, dialect, q, None, 10000)
    set_group_limit(raw, dialect, q, "g", 1)


def test_k_heads_in_group_order_and_the_next_starts_when_one_leaves(q, raw, dialect):
    set_group_limit(raw, dialect, q, None, 3)
    for i in range(1, 7):
        push(raw, dialect, q, "A", f"a{i}")
    push(raw, dialect, q, "B", "b1")
    assert groups(raw, dialect, q) == {"A": ("a1", 6, 3, 3), "B": ("b1", 1, 3, 1)}
    held = reserve(raw, dialect, q, 10)
    assert keys(held) == ["a1", "a2", "a3", "b1"]
    assert reserve(raw, dialect, q, 10) == []
    commit(raw, dialect, q, held[1])  # a2 leaves: a4 starts
    assert keys(reserve(raw, dialect, q, 10)) == ["a4"]
    assert live_counts(raw, dialect, q) == {"A": (3, 3), "B": (1, 1)}


def test_a_batch_commit_of_a_head_hands_its_place_to_the_first_live_one_in_group_order(q, raw, dialect):
    """A head that leaves in a batch commit while others of its group are live: the first live one in
    the group's order (run time, then push order) is head, not one the commit started."""
    set_group_limit(raw, dialect, q, "A", 3)
    for i in range(1, 6):
        push(raw, dialect, q, "A", f"a{i}")
    held = reserve(raw, dialect, q, 10)
    assert keys(held) == ["a1", "a2", "a3"]
    commit_batch(raw, dialect, q, held[:1])  # the head leaves: a2 is head, a4 starts
    assert groups(raw, dialect, q)["A"] == ("a2", 4, 3, 3)
    commit_batch(raw, dialect, q, held[1:])  # the head a2 and a3 leave: a4 is head, a5 starts
    assert groups(raw, dialect, q)["A"] == ("a4", 2, 3, 2)


def test_a_batch_commit_that_empties_a_limited_group_drops_its_row(q, raw, dialect):
    """A batch commit of a group's last messages (k > 1) drops the group: queue_groups no longer shows it,
    and the group that still has messages keeps its row, naming its head."""
    set_group_limit(raw, dialect, q, None, 2)
    push(raw, dialect, q, "A", "a1")
    push(raw, dialect, q, "A", "a2")
    push(raw, dialect, q, "B", "b1")
    push(raw, dialect, q, "B", "b2")
    held = reserve(raw, dialect, q, 10)
    assert sorted(keys(held)) == ["a1", "a2", "b1", "b2"]
    commit_batch(raw, dialect, q, [h for h in held if h[0] != "b2"])
    assert groups(raw, dialect, q) == {"B": ("b2", 1, 2, 1)}


def test_a_batch_commit_starts_each_group_s_next_ones_under_its_own_limit(q, raw, dialect):
    """One batch commit settles groups of different limits (the queue's default, a group's own): each
    starts as many as its own limit leaves room for."""
    set_group_limit(raw, dialect, q, None, 1)
    set_group_limit(raw, dialect, q, "A", 3)
    for i in range(1, 6):
        push(raw, dialect, q, "A", f"a{i}")
    for i in range(1, 4):
        push(raw, dialect, q, "B", f"b{i}")
    held = reserve(raw, dialect, q, 10)
    assert sorted(keys(held)) == ["a1", "a2", "a3", "b1"]
    commit_batch(raw, dialect, q, [h for h in held if h[0] in ("a1", "b1")])  # a4 and b2 start
    assert live_counts(raw, dialect, q) == {"A": (3, 2), "B": (1, 0)}
    assert sorted(keys(reserve(raw, dialect, q, 10))) == ["a4", "b2"]


def test_a_group_limit_overrides_the_default_and_none_goes_back_to_it(q, raw, dialect):
    set_group_limit(raw, dialect, q, None, 2)
    set_group_limit(raw, dialect, q, "A", 3)
    for i in range(1, 5):
        push(raw, dialect, q, "A", f"a{i}")
        push(raw, dialect, q, "B", f"b{i}")
    assert sorted(keys(reserve(raw, dialect, q, 20))) == ["a1", "a2", "a3", "b1", "b2"]
    assert {g: v[2:] for g, v in groups(raw, dialect, q).items()} == {"A": (3, 3), "B": (2, 2)}
    set_group_limit(raw, dialect, q, "A", None)  # back to the default, 2: nothing revoked
    assert groups(raw, dialect, q)["A"][2:] == (2, 3)


def test_raising_k_starts_heads_at_once_lowering_revokes_nothing(q, raw, dialect):
    for i in range(1, 6):
        push(raw, dialect, q, "A", f"a{i}")
    assert keys(reserve(raw, dialect, q, 10)) == ["a1"]
    set_group_limit(raw, dialect, q, "A", 3)
    held = reserve(raw, dialect, q, 10)
    assert keys(held) == ["a2", "a3"]
    set_group_limit(raw, dialect, q, "A", 1)
    assert groups(raw, dialect, q)["A"][2:] == (1, 3)
    commit(raw, dialect, q, held[0])
    commit(raw, dialect, q, held[1])
    assert reserve(raw, dialect, q, 10) == []  # a1 still live: one, the limit
    assert live_counts(raw, dialect, q) == {"A": (1, 1)}


def test_a_push_that_runs_earlier_takes_the_place_of_a_later_head_never_delivered(q, raw, dialect):
    """Heads start in the group's order (run time, then push order): a message pushed into a full
    group with an earlier run time than a head that was never delivered takes that head's place
    (which is blocked again); a delivered head keeps its place."""
    set_group_limit(raw, dialect, q, "A", 2)
    push(raw, dialect, q, "A", "a1", ago_s=10)
    push(raw, dialect, q, "A", "a2", ago_s=5)
    push(raw, dialect, q, "A", "a3", ago_s=1)
    assert keys(reserve(raw, dialect, q, 1)) == ["a1"]
    push(raw, dialect, q, "A", "a0", ago_s=7)  # before a2, after the delivered a1
    assert live_counts(raw, dialect, q) == {"A": (2, 1)}
    assert keys(reserve(raw, dialect, q, 10)) == ["a0"]
    push(raw, dialect, q, "A", "z", ago_s=20)  # both heads delivered: it waits its turn
    assert keys(reserve(raw, dialect, q, 10)) == []
    assert groups(raw, dialect, q)["A"][1:] == (5, 2, 2)


def test_removing_the_last_limit_of_a_group_with_several_heads_adds_none_until_they_end(q, raw, dialect):
    set_group_limit(raw, dialect, q, None, 2)
    for i in range(1, 5):
        push(raw, dialect, q, "A", f"a{i}")
    held = reserve(raw, dialect, q, 10)
    assert keys(held) == ["a1", "a2"]
    set_group_limit(raw, dialect, q, None, None)  # no limit applies any more: k = 1
    assert groups(raw, dialect, q)["A"][2:] == (1, 2)
    commit(raw, dialect, q, held[0])
    assert reserve(raw, dialect, q, 10) == []  # a2 is still live: one, the limit
    commit(raw, dialect, q, held[1])
    assert keys(reserve(raw, dialect, q, 10)) == ["a3"]
    assert reserve(raw, dialect, q, 10) == []


def test_one_message_group_is_served_within_one_round_behind_a_big_group(q, raw, dialect):
    """A group with a long backlog and k = 2 delays another group's single message by at most one
    round: it is among the first k x active groups + 1 deliveries after its push."""
    k = 2
    set_group_limit(raw, dialect, q, None, k)
    for i in range(200):
        push(raw, dialect, q, "big", f"big{i:03d}")
    for _ in range(7):  # the big group running
        [held] = reserve(raw, dialect, q, 1)
        commit(raw, dialect, q, held)
    push(raw, dialect, q, "small", "s1")
    _deliver_until(raw, dialect, q, "s1", bound=k * 2 + 1)


def _deliver_until(raw, dialect, q, key: str, bound: int) -> list[str]:
    """Reserves and commits one message at a time until `key` is delivered; the keys delivered, in
    order. Fails as soon as more than `bound` were needed (the round robin's promise)."""
    delivered: list[str] = []
    while key not in delivered:
        [held] = reserve(raw, dialect, q, 1)
        delivered.append(held[0])
        commit(raw, dialect, q, held)
        assert len(delivered) <= bound, delivered
    return delivered


@pytest.mark.slow
def test_never_more_than_k_live_under_concurrency_and_k_is_reached(q, raw, dialect, dsn):
    """Six connections reserve (1 to 3 at a time), commit, roll back, let expire and push into three
    groups with k = 2 while a checker counts each group's live and reserved messages."""
    k, threads, groups_n, seconds, longest = 2, 6, 3, 3.0, 20.0
    set_group_limit(raw, dialect, q, None, k)
    for i in range(30):
        for g in range(groups_n):
            push(raw, dialect, q, f"g{g}", f"g{g}-{i:03d}")
    done = threading.Event()
    failures: list[BaseException] = []
    seen = {"max_live": 0, "max_reserved": 0, "samples": 0, "handled": 0}
    start = time.monotonic()

    def conn_call(conn):
        return lambda sql, params=None: plainsql.run(conn, sql, params)

    def worker(i):
        conn = dialects.for_dsn(dsn).connect(dsn)
        run = conn_call(conn)
        rng = random.Random(i)
        try:
            while not done.is_set():
                got = reserve(run, dialect, q, rng.randint(1, 3), timeout=rng.choice([0.2, 2.0]))
                time.sleep(0.01)
                for held in got:
                    action = rng.random()
                    if action < 0.6:  # false when it expired and went to another: nothing to check
                        run(f"{verb(dialect)} queue_commit(%s, %s, %s, %s)", (q, *held))
                        push(run, dialect, q, f"g{rng.randrange(groups_n)}", f"n-{uuid.uuid4().hex[:10]}")
                    elif action < 0.85:
                        run(
                            f"{verb(dialect)} queue_rollback(%s, %s, %s, %s, NULL)",
                            (q, held[0], held[1], held[2]),
                        )
                    # else: left to expire
                seen["handled"] += len(got)
                if not got:
                    time.sleep(0.005)
        except BaseException as exc:  # noqa: BLE001
            failures.append(exc)
            done.set()
        finally:
            conn.close()

    workers = [threading.Thread(target=worker, args=(i,)) for i in range(threads)]
    for t in workers:
        t.start()
    checker = dialects.for_dsn(dsn).connect(dsn)
    try:
        run = conn_call(checker)
        while not done.is_set():
            counts = live_counts(run, dialect, q)
            seen["samples"] += 1
            for g, (live, reserved) in counts.items():
                assert live <= k, (g, live, counts)
                seen["max_live"] = max(seen["max_live"], live)
                seen["max_reserved"] = max(seen["max_reserved"], reserved)
            elapsed = time.monotonic() - start
            # on until k was reached and enough was handled and sampled (a loaded machine handles
            # fewer in the first seconds), at most `longest`
            enough = seen["max_reserved"] == k and seen["handled"] > 50 and seen["samples"] > 20
            if elapsed >= longest or (elapsed >= seconds and enough):
                done.set()
    finally:
        done.set()
        for t in workers:
            t.join()
        checker.close()
    assert not failures, failures[0]
    assert seen["max_reserved"] == k, seen  # k reached: the limit was under pressure
    assert seen["handled"] > 50 and seen["samples"] > 20, seen
    assert all(live <= k for live, _ in live_counts(raw, dialect, q).values())


def push_many(raw, dialect, queue, group, keys_):
    """One batch grouped push of keys_ into group (the batch routine of each dialect)."""
    if dialect == "postgresql":
        n = len(keys_)
        raw(
            "SELECT queue_push_batch_grouped(%s, array_fill(%s::text, ARRAY[%s]), %s::text[], "
            "array_fill('job'::text, ARRAY[%s]), array_fill('{}'::jsonb, ARRAY[%s]))",
            (queue, group, n, keys_, n, n),
        )
    else:
        messages = [{"p_key": k, "p_kind": "job", "payload": {}, "group": group} for k in keys_]
        raw(
            "CALL queue_push_batch_grouped(%s, %s, NULL, NULL, NULL, NULL, NULL)",
            (queue, json.dumps(messages)),
        )


@pytest.mark.slow
def test_one_message_group_is_served_within_one_round_behind_a_100k_message_group(q, raw, dialect):
    """The bound at scale: a tenant with 100,000 queued messages and k = 2, another tenant's single
    message pushed behind them is among the first k x active groups + 1 deliveries after its push,
    and a reserve of several spreads over the groups (the backlog stays blocked, unread)."""
    k = 2
    set_group_limit(raw, dialect, q, None, k)
    for start in range(0, 100_000, 10_000):
        push_many(raw, dialect, q, "big", [f"big{i:06d}" for i in range(start, start + 10_000)])
    assert live_counts(raw, dialect, q) == {"big": (k, 0)}
    push(raw, dialect, q, "small", "s1")
    delivered = _deliver_until(raw, dialect, q, "s1", bound=k * 2 + 1)
    push(raw, dialect, q, "small", "s2")
    push(raw, dialect, q, "other", "o1")
    # a reserve of more than there is to run takes k of the big group and each other group's one
    spread = keys(reserve(raw, dialect, q, 10))
    assert len(spread) == k + 2 and {"s2", "o1"} <= set(spread), spread
    assert groups(raw, dialect, q)["big"][1:] == (100_000 - len(delivered) + 1, k, k)
