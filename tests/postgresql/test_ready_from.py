"""Where the reserve starts reading: pyqueue_ready_from (PostgreSQL).

While a transaction holds the xmin horizon, the index entries of every message reserved or
committed since cannot be removed and pile up at the head of the ready range. The reserve reads
its ranges from the queue's ready_from, which autocommit reserves move up (a proposal, made active
a second later once every transaction older than it has ended), and which a write of a message in
the past lowers. The guard counts the index entries one reserve reads under a held snapshot (the
server's per-transaction counters), never time or buffers: how many heap pages those entries'
rows touch depends on how the rows of concurrent tests share pages. The others check that no
message is ever left below the bound: pushed in the past, or written by a transaction of its
database that was open while the bound moved (one of another database does not hold it).
"""

from __future__ import annotations

import datetime as dt
import time

import pytest

from pyqueue_sql import dialects
from tests.plainsql import MARK_ALWAYS, MARK_KEPT, MARK_PASSED

pytestmark = pytest.mark.only_dialect("postgresql")

UTC = dt.timezone.utc
CHURNED = 2000
# A pop that walked the dead entries of 2,000 churned messages reads over 2,000 index entries; one
# that starts past them, a few.
MAX_ENTRIES = 20


@pytest.fixture
def pg(dsn):
    """Autocommit connections to the test database, closed after the test."""
    opened = []

    def make():
        conn = dialects.for_name("postgresql").connect(dsn, autocommit=True)
        opened.append(conn)
        return conn

    yield make
    for conn in opened:
        conn.close()


def _run(conn, sql, params=None):
    with conn.cursor() as cur:
        cur.execute(sql, params)
        return cur.fetchall() if cur.description else []


def _reserve_keys(conn, queue, n=100):
    return [
        r[0] for r in _run(conn, "SELECT p_key FROM queue_reserve(%s, 'w', interval '60 s', %s)", (queue, n))
    ]


def _advance(conn, queue, steps=2):
    """Autocommit reserves more than a second apart: each one may move the bound a step."""
    for _ in range(steps):
        time.sleep(1.1)
        # a kind no message has: reserves nothing, but may move the bound
        _run(conn, "SELECT * FROM queue_reserve(%s, 'w', interval '60 s', 1, ARRAY['none'])", (queue,))


def _advance_past(conn, queue, at, seconds=30.0):
    """Advances until the bound is at or past ``at``: a step needs every transaction of the
    cluster that had an id at the step before to have ended (xids are cluster-wide), so a long
    writing transaction anywhere on the shared server holds it up for a while."""
    deadline = time.monotonic() + seconds
    while _ready_from(conn, queue) < at:
        assert time.monotonic() < deadline, ("the bound did not move past", at, _ready_from(conn, queue))
        _advance(conn, queue, steps=1)


def _ready_from(conn, queue):
    """The time the reserve starts reading the queue from: its bound's, or a lower one a write in
    the past recorded; -infinity (never moved) as a time Python can hold."""
    return _run(
        conn,
        "SELECT greatest(least((SELECT ready_from FROM pyqueue_ready_from WHERE queue_name = %(q)s),"
        " (SELECT min(lowered_to) FROM pyqueue_ready_lower WHERE queue_name = %(q)s)),"
        " timestamptz '2000-01-01Z')",
        {"q": queue},
    )[0][0]


def _pop_entries(conn, queue) -> int:
    """Index entries one queue_pop reads from the live table's indexes (dead ones included: under a
    held snapshot each is returned and its row checked), in a transaction rolled back."""
    entries = (
        "SELECT sum(pg_stat_get_xact_tuples_returned(i.indexrelid))::bigint FROM pg_index i"
        " WHERE i.indrelid = 'pyqueue_message'::regclass"
    )
    _run(conn, "BEGIN")
    try:
        [(before,)] = _run(conn, entries)
        _run(conn, "SELECT * FROM queue_pop(%s, 1)", (queue,))
        [(after,)] = _run(conn, entries)
    finally:
        _run(conn, "ROLLBACK")
    return after - before


def _churn(conn, queue, lease):
    """CHURNED messages pushed, reserved for lease and committed, 100 at a time."""
    for start in range(0, CHURNED, 100):
        _run(
            conn,
            "SELECT queue_push_batch(%s, %s::text[], %s::text[], %s::jsonb[])",
            (queue, [f"c{i}" for i in range(start, start + 100)], ["job"] * 100, ["{}"] * 100),
        )
        got = _run(conn, "SELECT p_key, token FROM queue_reserve(%s, 'w', %s::interval, 100)", (queue, lease))
        assert len(got) == 100
        _run(
            conn,
            "SELECT queue_commit_batch(%s, %s, %s, %s)",
            (queue, [k for k, _ in got], ["job"] * 100, [str(t) for _, t in got]),
        )


def _held_churn(conn, holder, queue, lease, measure) -> int:
    """Under a snapshot holder takes (nothing dead since can go): CHURNED messages churned with
    lease, the bound moved past them, one message pushed; returns measure(conn, queue name), and
    checks that the reserve then takes that message."""
    _run(holder, "BEGIN ISOLATION LEVEL REPEATABLE READ")
    _run(holder, "SELECT count(*) FROM pyqueue_queue")
    try:
        _churn(conn, queue.name, lease)
        _advance_past(conn, queue.name, dt.datetime.now(UTC))
        queue.push("fresh", "job", {})
        measured = measure(conn, queue.name)
        assert _reserve_keys(conn, queue.name) == ["fresh"]
        return measured
    finally:
        _run(holder, "ROLLBACK")


def test_under_a_held_snapshot_the_reserve_starts_past_the_dead_entries(queue, pg):
    entries = _held_churn(pg(), pg(), queue, "60 s", _pop_entries)
    assert entries <= MAX_ENTRIES, entries


def _step_entries(conn, queue, tries=10) -> int:
    """Index entries read by the first autocommit-like reserve that makes the whole step moving the
    bound (a new proposal, under its own transaction id; a step that finds an older transaction
    still open only notes its time), rolled back. The reserve is of a kind no message has: it takes
    nothing."""
    entries = (
        "SELECT sum(pg_stat_get_xact_tuples_returned(i.indexrelid))::bigint FROM pg_index i"
        " WHERE i.indrelid = 'pyqueue_message'::regclass"
    )
    for _ in range(tries):
        time.sleep(1.1)  # a step at most once a second
        _run(conn, "BEGIN")
        try:
            [(before,)] = _run(conn, entries)
            _run(conn, "SELECT * FROM queue_reserve(%s, 'w', interval '60 s', 1, ARRAY['none'])", (queue,))
            [(after,)] = _run(conn, entries)
            [(stepped,)] = _run(
                conn,
                "SELECT r.next_xid = pg_current_xact_id_if_assigned() FROM pyqueue_ready_from r"
                " WHERE r.queue_name = %s",
                (queue,),
            )
        finally:
            _run(conn, "ROLLBACK")
        if stepped:
            return after - before
    raise AssertionError(f"no reserve made the whole step in {tries} tries")


def test_under_a_held_snapshot_the_bound_step_does_not_walk_back_over_the_dead_leases(queue, pg):
    """Messages committed while reserved leave their lease's entry (scheduled_at = the lease's end)
    at the end of the ready index, where a read of the queue's top priority starts: the step that
    moves the bound keeps the noted top while a message of it is there from the bound on."""
    conn = pg()
    queue.push("first", "job", {})
    _advance(conn, queue.name, steps=1)  # notes the top priority, 0
    assert [r[0] for r in _run(conn, "SELECT p_key FROM queue_pop(%s, 1)", (queue.name,))] == ["first"]
    entries = _held_churn(conn, pg(), queue, "300 s", _step_entries)
    assert entries <= MAX_ENTRIES, entries


def _bound(conn, queue):
    # -infinity (never moved) as a time Python can hold
    return _run(
        conn,
        "SELECT greatest(ready_from, timestamptz '2000-01-01Z'), ready_from_id FROM pyqueue_ready_from"
        " WHERE queue_name = %s",
        (queue,),
    )[0]


@pytest.mark.parametrize("shape", ["plain", "limits", "waiting-priorities"])
def test_under_a_held_snapshot_the_reserve_starts_past_the_consumed_part_of_a_run_pushed_at_once(
    queue, pg, shape
):
    """A backlog pushed in one call shares one scheduled_at: a bound by time alone stays at that
    time while any of it is live, and every reserve walked the dead entries of the part consumed
    already. The bound by (scheduled_at, id) lies inside the run, at its first live message; on a
    queue with concurrency limits (another kind's, here) too, whose reserve takes one candidate at
    a time, and past 9 priorities above the run that hold only waiting messages, where the reserve
    reads the ready rows by time."""
    # Past the waiting priorities the reserve reads the ready rows of the lower priorities by time and
    # sorts them: the run's 100 live messages and a few more (108); the same read from the bound's time
    # alone, before the bound had an id, read the 2,000 dead entries of the consumed part too (2,108).
    limit = 200 if shape == "waiting-priorities" else MAX_ENTRIES
    conn, holder = pg(), pg()
    if shape == "limits":
        _run(conn, "SELECT queue_set_limit(%s, 'other', 5)", (queue.name,))
    if shape == "waiting-priorities":
        for priority in range(1, 10):
            queue.push(
                f"later{priority}",
                "job",
                {},
                run_at=dt.datetime.now(UTC) + dt.timedelta(hours=1),
                priority=priority,
            )
    total = CHURNED + 100
    _run(
        conn,
        "SELECT queue_push_batch(%s, %s::text[], %s::text[], %s::jsonb[])",
        (queue.name, [f"r{i:05d}" for i in range(total)], ["job"] * total, ["{}"] * total),
    )
    [(pushed_at,)] = _run(
        conn, "SELECT min(scheduled_at) FROM pyqueue_message WHERE queue_name = %s", (queue.name,)
    )
    _run(holder, "BEGIN ISOLATION LEVEL REPEATABLE READ")
    _run(holder, "SELECT count(*) FROM pyqueue_queue")  # the snapshot: nothing dead since can go
    try:
        for _ in range(CHURNED // 100):
            got = _run(
                conn, "SELECT p_key, token FROM queue_reserve(%s, 'w', interval '60 s', 100)", (queue.name,)
            )
            _run(
                conn,
                "SELECT queue_commit_batch(%s, %s, %s, %s)",
                (queue.name, [k for k, _ in got], ["job"] * 100, [str(t) for _, t in got]),
            )
        [(first_live,)] = _run(
            conn,
            "SELECT min(id) FROM pyqueue_message WHERE queue_name = %s AND scheduled_at = %s",
            (queue.name, pushed_at),
        )
        deadline = time.monotonic() + 30.0
        while _bound(conn, queue.name) != (pushed_at, first_live):
            assert time.monotonic() < deadline, ("the bound did not reach the run", _bound(conn, queue.name))
            _advance(conn, queue.name, steps=1)
        entries = _pop_entries(conn, queue.name)
        print("entries", entries)
        assert entries <= limit, entries
        assert _reserve_keys(conn, queue.name, n=3) == [f"r{i:05d}" for i in range(CHURNED, CHURNED + 3)]
    finally:
        _run(holder, "ROLLBACK")


def test_a_message_written_at_the_bound_s_time_with_a_smaller_id_is_reserved_first(queue, pg):
    """With the bound inside a run, a write at exactly the run's time of an older message (a
    smaller id than the bound's) lowers the bound to that time for every id."""
    conn = pg()
    queue.push("older", "job", {}, run_at=dt.datetime.now(UTC) + dt.timedelta(days=1))
    queue.push_many([(f"r{i:03d}", "job", {}) for i in range(200)])
    got = queue.reserve(n=100, timeout=60)
    assert queue.commit_many(got) == 100
    [(run_at, first_live)] = _run(
        conn,
        "SELECT min(scheduled_at), min(id) FROM pyqueue_message WHERE queue_name = %s AND p_key LIKE 'r%%'",
        (queue.name,),
    )
    deadline = time.monotonic() + 30.0
    while _bound(conn, queue.name) != (run_at, first_live):
        assert time.monotonic() < deadline, ("the bound did not reach the run", _bound(conn, queue.name))
        _advance(conn, queue.name, steps=1)
    assert queue.push_replace("older", "job", {}, run_at=run_at) == "replaced"
    assert _reserve_keys(conn, queue.name, n=2) == ["older", "r100"]


def test_a_message_pushed_in_the_past_after_the_bound_moved_is_reserved_first(queue, pg):
    conn = pg()
    queue.push("now", "job", {})
    _advance_past(conn, queue.name, dt.datetime.now(UTC) - dt.timedelta(seconds=5))
    hour_ago = dt.datetime.now(UTC) - dt.timedelta(hours=1)
    queue.push("past", "job", {}, run_at=hour_ago)
    queue.push_many([("past-batch", "job", {}, hour_ago - dt.timedelta(minutes=1))])
    queue.push("past-group", "job", {}, run_at=hour_ago - dt.timedelta(minutes=2), group="g")
    assert _ready_from(conn, queue.name) <= hour_ago - dt.timedelta(minutes=2)
    assert _reserve_keys(conn, queue.name) == ["past-group", "past-batch", "past", "now"]


def test_a_message_pushed_in_the_past_is_a_batch_reserves_first_though_its_session_has_a_mark(queue, pg):
    """A batch reserve reads from its session's mark (docs/contract/05_reserve.md) only while no
    write lowered the bound at or before it: a push in the past, recorded as a lowering until the
    bound takes it in, sends the next batch reserve to the bound, though n turn up after the mark."""
    conn = pg()
    queue.push_many([(f"m{i}", "job", {}) for i in range(6)])
    _run(conn, MARK_ALWAYS["postgresql"])
    assert _reserve_keys(conn, queue.name, n=2) == ["m0", "m1"]
    _run(conn, MARK_KEPT["postgresql"])
    queue.push("early", "job", {}, run_at=dt.datetime.now(UTC) - dt.timedelta(hours=1))
    assert _reserve_keys(conn, queue.name, n=2) == ["early", "m2"]


def test_a_blocked_message_made_head_at_a_run_time_in_the_past_is_not_left_below_the_bound(queue, pg):
    """A message waiting blocked in its group can get a run time in the past (push_replace); its
    lowering of the bound is folded in while it is still blocked, past every ready range. When a
    later push into the group displaces the head, it becomes the head at that past time, and must
    lower the bound again."""
    conn = pg()
    now = dt.datetime.now(UTC)
    queue.push("head", "job", {}, run_at=now + dt.timedelta(hours=1), group="g")
    queue.push("blocked", "job", {}, run_at=now + dt.timedelta(hours=2), group="g")
    assert queue.push_replace("blocked", "job", {}, run_at=now - dt.timedelta(hours=1)) == "replaced"
    _advance_past(conn, queue.name, now - dt.timedelta(seconds=5))
    queue.push("later", "job", {}, run_at=now + dt.timedelta(hours=3), group="g")
    assert _reserve_keys(conn, queue.name) == ["blocked"]


def test_a_message_of_a_transaction_open_while_the_bound_moved_is_not_left_below_it(queue, pg):
    conn, writer = pg(), pg()
    _advance(conn, queue.name, steps=1)  # a proposal is there
    _run(writer, "BEGIN")
    _run(writer, "SELECT queue_push(%s, 'slow', 'job', '{}')", (queue.name,))  # scheduled now, not committed
    _advance(conn, queue.name, steps=3)  # proposals later than its message, none may become the bound
    _run(writer, "COMMIT")
    assert _reserve_keys(conn, queue.name) == ["slow"]
    # the bound moves on once the writer has ended
    _advance_past(conn, queue.name, dt.datetime.now(UTC) - dt.timedelta(seconds=5))


def test_a_writing_transaction_open_in_another_database_does_not_hold_the_bound(queue, pg, fresh_database):
    """Transaction ids are cluster-wide, but only a transaction of the queue's own database can
    write its messages: one open with an id in another database of the server (an application's
    other database, a migration elsewhere) leaves the bound free to move."""
    other = dialects.for_name("postgresql").connect(fresh_database("elsewhere"), autocommit=True)
    try:
        _run(other, "BEGIN")
        [(xid,)] = _run(other, "SELECT pg_current_xact_id()")  # an id older than every proposal below
        start = dt.datetime.now(UTC)
        queue_conn = pg()
        _advance(queue_conn, queue.name, steps=3)
        [(held,)] = _run(
            queue_conn, "SELECT pg_snapshot_xmin(pg_current_snapshot()) <= %s::text::xid8", (str(xid),)
        )
        assert held, "the other database's transaction holds the cluster's xmin"
        assert _ready_from(queue_conn, queue.name) >= start - dt.timedelta(seconds=1.5)
    finally:
        other.close()


def test_a_consumer_that_only_calls_queue_commit_reserve_moves_the_bound(queue, pg):
    """queue_commit_reserve commits first, which gives its transaction an id; it moves the bound
    before that commit, so that a consumer of one call per message keeps the walk short too."""
    conn = pg()
    pushed_at = dt.datetime.now(UTC)
    queue.push_many([(f"m{i}", "job", {}) for i in range(10)])
    [(key, token)] = _run(
        conn, "SELECT p_key, token FROM queue_reserve(%s, 'w', interval '60 s', 1)", (queue.name,)
    )
    deadline = time.monotonic() + 30.0
    while _ready_from(conn, queue.name) < pushed_at - dt.timedelta(seconds=1):
        assert time.monotonic() < deadline, ("the bound did not move", _ready_from(conn, queue.name))
        time.sleep(1.1)
        [(committed, key, token)] = _run(
            conn,
            "SELECT committed, p_key, token FROM queue_commit_reserve(%s, %s, 'job', %s, 'w', interval '60 s', 1)",
            (queue.name, key, token),
        )
        assert committed
        assert key is not None, "ran out of messages before the bound moved"
    # the bound stops at the earliest live message: every one left is still reserved, in order
    left = _reserve_keys(conn, queue.name)
    assert left and all(k.startswith("m") for k in left)


def test_a_queue_without_its_bound_row_reads_from_the_start_and_keeps_its_limits(queue, pg):
    """The reserve's first read finds the queue's concurrency limits whether or not the queue has
    a pyqueue_ready_from row (queue_create makes one; without it the walk starts at the beginning)."""
    conn = pg()
    queue.push_many([(f"m{i}", "lim", {}) for i in range(5)])
    queue.set_limit("lim", 2)
    _run(conn, "DELETE FROM pyqueue_ready_from WHERE queue_name = %s", (queue.name,))
    assert len(_reserve_keys(conn, queue.name, n=5)) == 2


def test_a_batch_reserve_whose_read_from_the_bound_is_faster_than_mark_after_takes_no_mark(queue, pg):
    """Without a held horizon the read from the bound steps over few dead entries: a batch reserve
    keeps to it (reserve order) and takes no mark, which would cost it a second read of n entries
    each call. pyqueue.mark_after is the threshold ('1 s' here, so that load cannot make the read
    slower than it; the default is 1 ms and 10 us a message wanted); '0' takes one after any read."""
    conn = pg()
    queue.push_many([(f"m{i}", "job", {}) for i in range(6)])
    _run(conn, "SET pyqueue.mark_after = '1 s'")
    assert _reserve_marking(conn, queue.name, n=2) == (["m0", "m1"], False), (
        "a fast read from the bound took a mark"
    )
    _run(conn, MARK_ALWAYS["postgresql"])
    assert _reserve_marking(conn, queue.name, n=2) == (["m2", "m3"], True)


def test_a_batch_reserve_takes_a_mark_after_a_read_from_the_bound_slowed_by_a_held_horizon(queue, pg):
    """A writing transaction held open keeps both the xmin horizon and the queue's bound: 30,000
    messages popped meanwhile leave their dead entries in the range the next batch reserve reads
    from the bound, a read of milliseconds, over the default threshold (for n = 2: 1.02 ms). That
    reserve takes a mark. Once the horizon has moved and vacuum removed them, and the mark's time has
    passed, a read from the bound faster than pyqueue.mark_after takes none."""
    conn, holder = pg(), pg()
    _run(holder, "BEGIN")
    _run(holder, "SELECT pg_current_xact_id()")
    try:
        for start in range(0, 30000, 10000):  # a batch takes at most 10,000
            _run(conn, "SELECT queue_push_batch(%s, array_agg('d' || i), array_fill('job'::text, ARRAY[10000]), "
                       "array_fill('{}'::jsonb, ARRAY[10000]), NULL, NULL) FROM generate_series(%s::integer, %s::integer) i",
                 (queue.name, start, start + 9999))  # fmt: skip
            assert _run(conn, "SELECT count(*) FROM queue_pop(%s, 10000)", (queue.name,)) == [(10000,)]
        queue.push_many([(f"m{i}", "job", {}) for i in range(6)])
        t0 = time.perf_counter()
        keys, marked = _reserve_marking(conn, queue.name, n=2)
        took = time.perf_counter() - t0
        assert keys == ["m0", "m1"]
        assert marked, ("a slow read from the bound took no mark", took)
    finally:
        _run(holder, "ROLLBACK")
    _run(conn, "VACUUM pyqueue_message")
    _run(conn, "SET pyqueue.mark_after = '1 s'")
    _run(conn, MARK_PASSED["postgresql"])
    assert _reserve_marking(conn, queue.name, n=2) == (["m2", "m3"], False), (
        "a fast read from the bound took a mark again"
    )


def test_a_negative_mark_after_is_refused_with_one_line(queue, pg):
    conn = pg()
    queue.push_many([(f"m{i}", "job", {}) for i in range(4)])
    _run(conn, "SET pyqueue.mark_after = '-1 s'")
    with pytest.raises(Exception, match="pyqueue:invalid_argument: pyqueue.mark_after must not be negative"):
        _reserve_keys(conn, queue.name, n=2)
    assert queue.stats().ready == 4


def _reserve_marking(conn, queue, n) -> tuple[list[str], bool]:
    """A batch reserve's keys, and whether it took a mark on the queue: set the mark and its time
    (pyqueue.ready_full) past the server's clock before the call. Not whether the mark is still live
    at the next round trip: a fast read's mark lasts 20 times that read, which a loaded machine's
    round trip can outlast."""
    [(before,)] = _run(conn, "SELECT clock_timestamp()")
    keys = _reserve_keys(conn, queue, n=n)
    return keys, bool(_run(conn, "SELECT coalesce(current_setting('pyqueue.ready_queue', true) = format('%%I.%%I.%%I', "
                                 "current_database(), current_schema(), %s::text) AND %s < "
                                 "NULLIF(current_setting('pyqueue.ready_full', true), '')::timestamptz, false)",
                           (queue, before))[0][0])  # fmt: skip
