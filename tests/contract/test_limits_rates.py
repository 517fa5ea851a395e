"""Rate limits (queue_set_rate, queue_rates): at most n reservations of a kind (or of a whole queue)
in any window of length per, on every path that hands a message out, on every dialect.

The tests call the routines with plain SQL, as a psql or mysql client would. The time a rate counts
a reservation at is the reservation's lease start: the reserved message's scheduled_at minus its
timeout. The exactness test reads those times from the messages themselves, never from the rate's
own tables, and checks that no window shorter than per holds more than n of them.
"""

from __future__ import annotations

import datetime as dt
import decimal
import json
import random
import threading
import time
import uuid

import pytest

from pyqueue_sql import dialects

# ---- plain SQL, per dialect -------------------------------------------------------------------


def per_arg(dialect, per_s):
    """A duration argument: an interval on PostgreSQL, seconds on MySQL."""
    if per_s is None:
        return None
    return dt.timedelta(seconds=per_s) if dialect == "postgresql" else decimal.Decimal(str(per_s))


def set_rate(raw, dialect, queue, kind, n, per_s):
    if dialect == "postgresql":
        raw("SELECT queue_set_rate(%s, %s, %s, %s::interval)", (queue, kind, n, per_arg(dialect, per_s)))
    else:
        raw("CALL queue_set_rate(%s, %s, %s, %s)", (queue, kind, n, per_arg(dialect, per_s)))


def set_limit(raw, dialect, queue, kind, capacity):
    verb = "SELECT" if dialect == "postgresql" else "CALL"
    raw(f"{verb} queue_set_limit(%s, %s, %s)", (queue, kind, capacity))


def seconds(value):
    if value is None:
        return None
    if isinstance(value, dt.timedelta):
        return value.total_seconds()
    return float(value)


def rates(raw, dialect, queue=None):
    """queue_rates as (queue, kind, n, per seconds, next_free_at set, in_window) tuples."""
    if dialect == "postgresql":
        rows = raw("SELECT * FROM queue_rates(%s)", (queue,))
    else:
        rows = raw("CALL queue_rates(%s)", (queue,))
    return [(r[0], r[1], int(r[2]), seconds(r[3]), r[4] is not None, int(r[5])) for r in rows]


def push(raw, dialect, queue, messages):
    """Pushes (key, kind) pairs in one batch, in that order."""
    if dialect == "postgresql":
        raw(
            "SELECT queue_push_batch(%s, %s::text[], %s::text[], %s::jsonb[])",
            (queue, [k for k, _ in messages], [kd for _, kd in messages], ["{}"] * len(messages)),
        )
    else:
        batch = json.dumps([{"p_key": k, "p_kind": kd, "payload": {}} for k, kd in messages])
        raw("CALL queue_push_batch(%s, %s, NULL, NULL, NULL, NULL)", (queue, batch))


def reserve(raw, dialect, queue, n, timeout=60, kinds=None):
    """Keys reserved, in the order handed out."""
    if dialect == "postgresql":
        rows = raw(
            "SELECT p_key FROM queue_reserve(%s, 'w', make_interval(secs => %s), %s, %s::text[])",
            (queue, timeout, n, kinds),
        )
    else:
        rows = raw(
            "CALL queue_reserve(%s, 'w', %s, %s, %s)",
            (queue, timeout, n, json.dumps(kinds) if kinds is not None else None),
        )
    return [r[0] for r in rows]


def reserve_rows(raw, dialect, queue, n, timeout=60):
    """(key, kind, token) of what is reserved."""
    if dialect == "postgresql":
        rows = raw(
            "SELECT p_key, p_kind, token::text FROM queue_reserve(%s, 'w', make_interval(secs => %s), %s)",
            (queue, timeout, n),
        )
    else:
        rows = raw("CALL queue_reserve(%s, 'w', %s, %s, NULL)", (queue, timeout, n))
        rows = [(r[0], r[1], r[3]) for r in rows]
    return [tuple(r[:3]) for r in rows]


def commit_reserve(raw, dialect, queue, held, n, timeout=60):
    """Commits held (key, kind, token), reserves up to n: the keys reserved."""
    key, kind, token = held
    if dialect == "postgresql":
        rows = raw(
            "SELECT p_key FROM queue_commit_reserve(%s, %s, %s, %s, 'w', make_interval(secs => %s), %s)",
            (queue, key, kind, token, timeout, n),
        )
    else:
        rows = raw(
            "CALL queue_commit_reserve(%s, %s, %s, %s, 'w', %s, %s, NULL)",
            (queue, key, kind, token, timeout, n),
        )
        rows = [(r[0],) for r in rows]  # the first result set: the reserved rows
    return [r[0] for r in rows if r[0] is not None]


def pop(raw, dialect, queue, n):
    verb = "SELECT p_key FROM" if dialect == "postgresql" else "CALL"
    return [r[0] for r in raw(f"{verb} queue_pop(%s, %s)", (queue, n))]


def next_wait(raw, dialect, queue):
    """(next_scheduled_at is set, wait_s) of queue_next_scheduled_at."""
    if dialect == "postgresql":
        row = raw("SELECT * FROM queue_next_scheduled_at(%s)", (queue,))[0]
    else:
        row = raw("CALL queue_next_scheduled_at(%s, NULL)", (queue,))[0]
    return row[0] is not None, (float(row[1]) if row[1] is not None else None)


def message_state(raw, dialect, queue):
    """{key: (attempts, ready now)} of the queue's messages, read from the table."""
    now = "clock_timestamp()" if dialect == "postgresql" else "UTC_TIMESTAMP(6)"
    rows = raw(
        f"SELECT p_key, attempts, scheduled_at <= {now} FROM pyqueue_message WHERE queue_name = %s",
        (queue,),
    )
    return {k: (int(a), bool(r)) for k, a, r in rows}


def lease_starts_us(conn, dialect, queue, timeout_s):
    """The lease start (scheduled_at - timeout) of every reservation of the queue, in microseconds
    since the epoch, sorted: read from the messages (each reserved once, with that timeout)."""
    if dialect == "postgresql":
        sql = (
            "SELECT (extract(epoch FROM scheduled_at - make_interval(secs => %s)) * 1000000)::bigint "
            "FROM pyqueue_message WHERE queue_name = %s AND reserve_token IS NOT NULL"
        )
    else:
        sql = (
            "SELECT TIMESTAMPDIFF(MICROSECOND, '1970-01-01', scheduled_at - INTERVAL %s SECOND) "
            "FROM pyqueue_message WHERE queue_name = %s AND reserve_token IS NOT NULL"
        )
    cur = conn.cursor()
    try:
        cur.execute(sql, (timeout_s, queue))
        return sorted(int(r[0]) for r in cur.fetchall())
    finally:
        cur.close()


@pytest.fixture
def make_q(raw, dialect):
    """Creates queues with unique names (plain SQL)."""

    def make(max_attempts=None):
        name = f"r.{uuid.uuid4().hex[:12]}"
        if dialect == "postgresql":
            raw("SELECT queue_create(%s, NULL, %s)", (name, max_attempts))
        else:
            raw("CALL queue_create(%s, NULL, %s, NULL, NULL)", (name, max_attempts))
        return name

    return make


@pytest.fixture
def q(make_q):
    return make_q()


# ---- settings ---------------------------------------------------------------------------------


def test_set_rate_refuses_bad_arguments(q, raw, dialect):
    bad = [
        ("k", 0, 1),
        ("k", 10001, 1),
        ("k", -1, 1),
        ("k", 5, 0),
        ("k", 5, -1),
        ("k", 5, 86400.5),
        ("k", 5, None),
        ("", 5, 1),
        ("k ", 5, 1),
        ("k" * 129, 5, 1),
    ]
    for kind, n, per in bad:
        with pytest.raises(Exception, match="pyqueue:invalid_argument"):
            set_rate(raw, dialect, q, kind, n, per)
    with pytest.raises(Exception, match="pyqueue:unknown_queue"):
        set_rate(raw, dialect, "no-such-queue-" + uuid.uuid4().hex, "k", 5, 1)
    assert rates(raw, dialect, q) == []
    set_rate(raw, dialect, q, "k", None, None)  # removing what is not there: no error
    set_rate(raw, dialect, q, "k", 10000, 86400)  # the bounds themselves
    set_rate(raw, dialect, q, None, 1, 0.001)
    assert rates(raw, dialect, q) == [(q, None, 1, 0.001, False, 0), (q, "k", 10000, 86400.0, False, 0)]


def test_rates_lists_and_removes_and_drop_removes_them(make_q, raw, dialect):
    a, b = make_q(), make_q()
    set_rate(raw, dialect, a, "k", 2, 60)
    set_rate(raw, dialect, b, None, 3, 1.5)
    everyone = [r for r in rates(raw, dialect) if r[0] in (a, b)]
    assert sorted(everyone) == sorted([(a, "k", 2, 60.0, False, 0), (b, None, 3, 1.5, False, 0)])
    push(raw, dialect, a, [("m1", "k"), ("m2", "k"), ("m3", "k")])
    assert reserve(raw, dialect, a, 5) == ["m1", "m2"]
    assert rates(raw, dialect, a) == [(a, "k", 2, 60.0, True, 2)]  # used up: in_window = n
    set_rate(raw, dialect, a, "k", None, None)
    assert rates(raw, dialect, a) == []
    assert reserve(raw, dialect, a, 5) == ["m3"]
    verb = "SELECT" if dialect == "postgresql" else "CALL"
    raw(f"{verb} queue_drop(%s)", (b,))
    assert [r for r in rates(raw, dialect) if r[0] == b] == []
    make = (
        "SELECT queue_create(%s)"
        if dialect == "postgresql"
        else "CALL queue_create(%s, NULL, NULL, NULL, NULL)"
    )
    raw(make, (b,))  # a queue of the same name starts without the rate
    assert rates(raw, dialect, b) == []


def test_lowering_n_keeps_the_most_recent_times_raising_adds_free_units(q, raw, dialect):
    push(raw, dialect, q, [(f"m{i}", "k") for i in range(10)])
    set_rate(raw, dialect, q, "k", 3, 60)
    assert reserve(raw, dialect, q, 10) == ["m0", "m1", "m2"]
    set_rate(raw, dialect, q, "k", 1, 60)
    assert reserve(raw, dialect, q, 10) == []
    assert rates(raw, dialect, q) == [(q, "k", 1, 60.0, True, 1)]
    set_rate(raw, dialect, q, "k", 3, 60)  # two new units, never used
    assert reserve(raw, dialect, q, 10) == ["m3", "m4"]
    set_rate(raw, dialect, q, "k", 3, 0.3)  # a shorter per keeps the times: all free once it passed
    time.sleep(0.35)
    assert reserve(raw, dialect, q, 10) == ["m5", "m6", "m7"]


# ---- what a rate holds back, and what it does not ---------------------------------------------


def test_held_back_messages_stay_ready_keep_attempts_and_order_other_kinds_served(q, raw, dialect):
    push(raw, dialect, q, [("a1", "k"), ("o1", "o"), ("a2", "k"), ("a3", "k"), ("o2", "o"), ("a4", "k")])
    set_rate(raw, dialect, q, "k", 2, 60)
    assert reserve(raw, dialect, q, 10) == ["a1", "o1", "a2", "o2"]
    state = message_state(raw, dialect, q)
    assert {k: state[k] for k in ("a3", "a4")} == {"a3": (0, True), "a4": (0, True)}
    assert reserve(raw, dialect, q, 10) == []
    push(raw, dialect, q, [("o3", "o")])
    assert reserve(raw, dialect, q, 10) == ["o3"]  # other kinds still served behind the held-back ones
    assert message_state(raw, dialect, q)["a3"] == (0, True)
    set_rate(raw, dialect, q, "k", None, None)
    assert reserve(raw, dialect, q, 10) == ["a3", "a4"]  # in their order


def test_rates_are_per_queue_and_kinds_filter(make_q, raw, dialect):
    a, b = make_q(), make_q()
    push(raw, dialect, a, [("a1", "k"), ("a2", "k")])
    push(raw, dialect, b, [("b1", "k"), ("b2", "k")])
    set_rate(raw, dialect, a, "k", 1, 60)
    assert reserve(raw, dialect, b, 10) == ["b1", "b2"]
    assert reserve(raw, dialect, a, 10, kinds=["k"]) == ["a1"]
    assert reserve(raw, dialect, a, 10, kinds=["k"]) == []


def test_queue_wide_rate_counts_every_kind_and_ends_the_pass(q, raw, dialect):
    push(raw, dialect, q, [("a1", "k"), ("o1", "o"), ("a2", "k"), ("o2", "o"), ("x1", "x")])
    set_rate(raw, dialect, q, None, 3, 60)
    assert reserve(raw, dialect, q, 10) == ["a1", "o1", "a2"]
    assert reserve(raw, dialect, q, 10) == []
    assert message_state(raw, dialect, q)["o2"] == (0, True)
    set_rate(raw, dialect, q, None, 4, 60)
    assert reserve(raw, dialect, q, 10) == ["o2"]


def test_kind_rate_and_queue_wide_rate_both_need_a_unit(q, raw, dialect):
    push(raw, dialect, q, [("a1", "k"), ("a2", "k"), ("o1", "o"), ("o2", "o"), ("o3", "o")])
    set_rate(raw, dialect, q, "k", 1, 60)
    set_rate(raw, dialect, q, None, 3, 60)
    assert reserve(raw, dialect, q, 10) == ["a1", "o1", "o2"]
    assert reserve(raw, dialect, q, 10) == []
    # the queue-wide units were all used: raising the kind's rate alone frees nothing
    set_rate(raw, dialect, q, "k", 5, 60)
    assert reserve(raw, dialect, q, 10) == []
    # a kind held back by its own rate left the queue-wide unit it did not use to the others
    set_rate(raw, dialect, q, None, 5, 60)
    set_rate(raw, dialect, q, "k", 1, 60)  # its one unit: the most recent time, used
    assert reserve(raw, dialect, q, 10) == ["o3"]
    assert reserve(raw, dialect, q, 10) == []


def test_rate_and_concurrency_limit_together_leak_nothing(q, raw, dialect):
    push(raw, dialect, q, [(f"a{i}", "k") for i in range(1, 6)])
    set_limit(raw, dialect, q, "k", 1)
    set_rate(raw, dialect, q, "k", 2, 60)
    [held] = reserve_rows(raw, dialect, q, 5)
    assert held[0] == "a1"
    # the limit is full: the reserves it holds back must not use up the rate's second unit
    assert reserve(raw, dialect, q, 5) == []
    assert reserve(raw, dialect, q, 5) == []
    assert commit_reserve(raw, dialect, q, held, 5) == ["a2"]
    # the rate is used up: a reserve it holds back must not keep a slot of the limit
    set_limit(raw, dialect, q, "k", 2)
    assert reserve(raw, dialect, q, 5) == []
    assert reserve(raw, dialect, q, 5) == []
    set_rate(raw, dialect, q, "k", None, None)
    assert reserve(raw, dialect, q, 5) == ["a3"]  # a2 and a3: the limit, no more, no less
    assert reserve(raw, dialect, q, 5) == []
    state = message_state(raw, dialect, q)
    assert {k: state[k] for k in ("a4", "a5")} == {"a4": (0, True), "a5": (0, True)}


# ---- every path counts ------------------------------------------------------------------------


def test_pop_counts(q, raw, dialect):
    push(raw, dialect, q, [("a1", "k"), ("a2", "k"), ("a3", "k"), ("o1", "o")])
    set_rate(raw, dialect, q, "k", 2, 60)
    assert pop(raw, dialect, q, 10) == ["a1", "a2", "o1"]
    assert pop(raw, dialect, q, 10) == []
    assert reserve(raw, dialect, q, 10) == []
    assert message_state(raw, dialect, q) == {"a3": (0, True)}


def test_commit_reserve_and_reserve_of_many_count(q, raw, dialect):
    push(raw, dialect, q, [(f"a{i}", "k") for i in range(1, 7)])
    set_rate(raw, dialect, q, "k", 4, 60)
    [held] = reserve_rows(raw, dialect, q, 1)
    assert commit_reserve(raw, dialect, q, held, 5) == ["a2", "a3", "a4"]
    assert reserve(raw, dialect, q, 5) == []
    set_rate(raw, dialect, q, "k", 6, 60)
    assert reserve(raw, dialect, q, 5) == ["a5", "a6"]


def test_exhausted_message_is_dead_lettered_while_the_rate_is_used_up(make_q, raw, dialect):
    q = make_q(max_attempts=1)
    push(raw, dialect, q, [("a1", "k"), ("a2", "k")])
    set_rate(raw, dialect, q, "k", 1, 60)
    assert reserve(raw, dialect, q, 1, timeout=0.2) == ["a1"]
    time.sleep(0.3)  # a1's only delivery expired
    assert reserve(raw, dialect, q, 5) == []  # a1 dead-lettered without a unit, a2 held back
    assert message_state(raw, dialect, q) == {"a2": (0, True)}


# ---- wakeups ----------------------------------------------------------------------------------


def test_next_scheduled_at_answers_when_the_next_unit_frees(make_q, raw, dialect):
    q = make_q()
    push(raw, dialect, q, [("a1", "k"), ("a2", "k")])
    set_rate(raw, dialect, q, "k", 1, 3)
    assert next_wait(raw, dialect, q) == (True, 0.0)
    assert reserve(raw, dialect, q, 5) == ["a1"]
    at, wait = next_wait(raw, dialect, q)
    assert at and 2.0 < wait <= 3.0, wait  # not now (no polling), not past the next unit
    # queue_wait does not answer "ready" for a message the rate holds back
    if dialect == "postgresql":
        [(ready,)] = raw("SELECT queue_wait(%s, NULL, interval '0.3 seconds', NULL)", (q,))
    else:
        [(ready,)] = raw("CALL queue_wait(%s, NULL, 0.3, NULL)", (q,))
    assert not ready
    # a ready message of another kind is reservable now
    push(raw, dialect, q, [("o1", "o")])
    assert next_wait(raw, dialect, q) == (True, 0.0)
    assert reserve(raw, dialect, q, 5) == ["o1"]
    # a queue-wide rate used up: the next of its units, whatever the kinds
    w = make_q()
    push(raw, dialect, w, [("b1", "k"), ("c1", "o")])
    set_rate(raw, dialect, w, None, 1, 3)
    assert reserve(raw, dialect, w, 5) == ["b1"]
    at, wait = next_wait(raw, dialect, w)
    assert at and 2.0 < wait <= 3.0, wait


# ---- exactness under concurrency --------------------------------------------------------------


@pytest.mark.slow
def test_never_more_than_n_in_any_window_under_concurrent_reservers(make_q, raw, dialect, dsn):
    """Six connections reserve in loops (1 to 3 at a time) for about 4.5 s against a rate of 5 per
    second; the lease starts, read from the messages, never put 6 within one second, and no unit
    is withheld: the n-th reservation after one comes at most a window plus the reservers' own
    delays later (the longest gap between two calls' starts of a connection, twice: a call that
    starts after the unit frees takes it, within its own duration), whatever the machine's load."""
    n, per, threads, run_s, timeout = 5, 1.0, 6, 4.5, 120
    q = make_q()
    push(raw, dialect, q, [(f"m{i:04d}", "k") for i in range(400)])
    set_rate(raw, dialect, q, "k", n, per)
    failures: list[BaseException] = []
    counts = [0] * threads
    gaps = [0.0] * threads  # the longest time between two calls' starts, per connection
    start = time.monotonic()

    def reserver(i):
        conn = dialects.for_dsn(dsn).connect(dsn)
        rng = random.Random(i)
        if dialect == "postgresql":
            sql = "SELECT p_key FROM queue_reserve(%s, %s, make_interval(secs => %s), %s)"
        else:
            sql = "CALL queue_reserve(%s, %s, %s, %s, NULL)"
        try:
            last = start
            while (now := time.monotonic()) - start < run_s:
                gaps[i], last = max(gaps[i], now - last), now
                cur = conn.cursor()
                cur.execute(sql, (q, f"r{i}", timeout, rng.randint(1, 3)))
                got = cur.fetchall() if cur.description else []
                while dialect == "mysql" and cur.nextset():
                    pass
                cur.close()
                counts[i] += len(got)
                if not got:
                    time.sleep(0.002 + rng.random() * 0.004)
        except BaseException as exc:  # noqa: BLE001
            failures.append(exc)
        finally:
            conn.close()

    workers = [threading.Thread(target=reserver, args=(i,)) for i in range(threads)]
    for t in workers:
        t.start()
    for t in workers:
        t.join()
    elapsed = time.monotonic() - start
    assert not failures, failures[0]
    conn = dialects.for_dsn(dsn).connect(dsn)
    try:
        times = lease_starts_us(conn, dialect, q, timeout)
    finally:
        conn.close()
    assert len(times) == sum(counts)
    per_us = int(per * 1_000_000)
    crowded = [(times[i], times[i + n]) for i in range(len(times) - n) if times[i + n] - times[i] < per_us]
    assert not crowded, f"{n + 1} reservations within {per} s: {crowded[:3]} ({len(times)} in all)"
    # the rate reached: after the first n (at once), n more per per from the first to the last
    span_s = (times[-1] - times[0]) / 1_000_000
    reached = (len(times) - n) / (n * span_s / per)
    print(dialect, len(times), "reservations over", round(span_s, 3), "s:", round(reached, 3), "of the rate")
    assert elapsed >= run_s and span_s >= run_s - 1.5 * per, (span_s, elapsed)
    # liveness, as a bound on every pair with the reservers' measured delays as its margin (a rate
    # reached over the run is moved by the load: each late call delays that unit's next window)
    slack_us = int(2 * max(gaps) * 1_000_000) + 50_000
    late = [
        (times[i], times[i + n]) for i in range(len(times) - n) if times[i + n] - times[i] > per_us + slack_us
    ]
    assert not late, (
        f"a unit withheld: {late[:3]} (windows of {per} s plus {slack_us} µs of the reservers' delays)"
    )
