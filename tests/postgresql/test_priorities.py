"""The reserve's cost does not grow with the distinct priorities of waiting messages (PostgreSQL).

A queue of 100k delayed messages, each with its own priority, above one ready
message of the lowest priority: walking the priorities one index probe at a
time would visit all 100k before reaching the ready one. The reserve walks at
most 8 priorities that yield nothing, then reads the ready rows through
pyqueue_message_due_idx; queue_next_scheduled_at and queue_wait read the
earliest scheduled_at there in one probe. The guards count the buffers of the
queue's tables and indexes each call touches (the transaction's own counters,
which take in every statement run inside the routine), never time; one test shows
the guard fails without the index. The others check the order the bounded walk
and the switch to the due index hand messages out in.
"""

from __future__ import annotations

import pytest

from pyqueue_sql import dialects

pytestmark = pytest.mark.only_dialect("postgresql")

QUEUE = "prio.q"
DELAYED = 100_000
# A walk of 100k priorities touches hundreds of thousands of buffers and a read
# of the whole ready index several hundred; the bounded reserve about a hundred.
MAX_BUFFERS = 300

CALLS = {
    "queue_reserve": f"SELECT * FROM queue_reserve('{QUEUE}')",
    "queue_commit_reserve": f"SELECT * FROM queue_commit_reserve('{QUEUE}', NULL, NULL, NULL)",
    "queue_next_scheduled_at": f"SELECT * FROM queue_next_scheduled_at('{QUEUE}')",
    "queue_wait": f"SELECT queue_wait('{QUEUE}', NULL, interval '1 millisecond')",
}


def _run(conn, sql):
    with conn.cursor() as cur:
        cur.execute(sql)
        return cur.fetchall() if cur.description else []


# The queue's own tables and indexes: a count of every buffer the call touches
# would include the catalog pages a backend reads again when its caches are
# reset (other sessions' DDL on a busy server, as under the parallel suite):
# 1,700 buffers a cold call, against the reserve's own 100.
OWN_BUFFERS = """
SELECT coalesce(sum(pg_catalog.pg_stat_get_xact_blocks_fetched(c.oid)), 0)::bigint
  FROM pg_catalog.pg_class c
 WHERE c.relnamespace = pg_catalog.current_schema()::regnamespace
   AND c.relname LIKE 'pyqueue%' AND c.relkind IN ('r', 'i')
"""


def call_buffers(conn, sql: str) -> tuple[int, int]:
    """(buffers of the queue's tables and indexes touched, rows returned) by
    one call, in a transaction rolled back; the counters are the
    transaction's own, read before it ends.

    The same call runs once before, also rolled back, so that the routines'
    plans are cached and planning's reads of the indexes' metapages do not count."""
    result = (0, 0)
    for _ in range(2):  # the first to cache the plans, the second measured
        _run(conn, "BEGIN")
        try:
            before = _run(conn, OWN_BUFFERS)[0][0]
            rows = _run(conn, sql)
            result = (_run(conn, OWN_BUFFERS)[0][0] - before, len(rows))
        finally:
            _run(conn, "ROLLBACK")
    return result


@pytest.fixture
def conn(installed_database):
    """A queue of 100k delayed messages of distinct priorities 1..100000 and one
    ready message of priority 0, analyzed."""
    url = installed_database("prio")
    c = dialects.for_name("postgresql").connect(url)
    _run(c, f"SELECT queue_create('{QUEUE}')")
    _run(
        c,
        "INSERT INTO pyqueue_message (queue_name, p_key, p_kind, payload, priority, scheduled_at, "
        "scheduled_at_initially, created_at) "
        f"SELECT '{QUEUE}', 'd' || i, 'job', '{{}}', i, now() + interval '1 hour', now(), now() "
        f"FROM generate_series(1, {DELAYED}) AS i",
    )
    _run(c, f"SELECT queue_push('{QUEUE}', 'ready', 'job', '{{}}', NULL, 0)")
    _run(c, "ANALYZE pyqueue_message")
    yield c
    c.close()


@pytest.mark.slow
def test_reserve_and_wakeups_touch_a_bounded_number_of_buffers(conn):
    for name, sql in CALLS.items():
        buffers, rows = call_buffers(conn, sql)
        assert rows == 1, name
        assert buffers < MAX_BUFFERS, f"{name} touched {buffers} buffers"
    # and the reserve did find the ready message below the 100k waiting priorities
    assert _run(conn, f"SELECT p_key, priority FROM queue_reserve('{QUEUE}')") == [("ready", 0)]


@pytest.mark.slow
def test_the_buffer_guard_fails_without_the_due_index(conn):
    _run(conn, "DROP INDEX pyqueue_message_due_idx")
    _run(conn, "ANALYZE pyqueue_message")
    for name in ("queue_reserve", "queue_next_scheduled_at"):
        buffers, _ = call_buffers(conn, CALLS[name])
        assert buffers >= MAX_BUFFERS, f"{name} touched only {buffers} buffers without the index"


@pytest.mark.slow
def test_past_the_walk_ready_rows_come_in_reserve_order(conn):
    # One ready message above every waiting priority (taken by the walk), three
    # below them all (taken through the due index): nothing twice, in order.
    _run(conn, f"SELECT queue_push('{QUEUE}', 'top', 'job', '{{}}', NULL, {DELAYED + 1})")
    _run(conn, f"SELECT queue_push('{QUEUE}', 'low-old', 'job', '{{}}', now() - interval '1 minute', -5)")
    _run(conn, f"SELECT queue_push('{QUEUE}', 'low-new', 'job', '{{}}', NULL, -5)")
    got = _run(conn, f"SELECT p_key, priority FROM queue_reserve('{QUEUE}', NULL, NULL, 10)")
    assert got == [("top", DELAYED + 1), ("ready", 0), ("low-old", -5), ("low-new", -5)]
    assert _run(conn, f"SELECT count(*) FROM queue_reserve('{QUEUE}', NULL, NULL, 10)") == [(0,)]


@pytest.mark.slow
def test_pop_and_kinds_past_the_walk(conn):
    _run(conn, f"SELECT queue_push('{QUEUE}', 'other', 'report', '{{}}', NULL, -1)")
    got = _run(conn, f"SELECT p_key, p_kind FROM queue_reserve('{QUEUE}', NULL, NULL, 5, ARRAY['report'])")
    assert got == [("other", "report")]
    assert _run(conn, f"SELECT p_key FROM queue_pop('{QUEUE}', 5)") == [("ready",)]
    # nothing ready left: the earliest due is the reservation's expiry (30 s), not an hour
    wait = _run(conn, f"SELECT wait_s FROM queue_next_scheduled_at('{QUEUE}')")[0][0]
    assert 0 < wait <= 30
    assert _run(conn, f"SELECT count(*) FROM queue_reserve('{QUEUE}', NULL, NULL, 5)") == [(0,)]
