"""The reserve's cost does not grow with the distinct priorities of waiting messages (PostgreSQL).

A queue of 100k delayed messages, each with its own priority, above one ready
message of the lowest priority: walking the priorities one index probe at a
time would visit all 100k before reaching the ready one. The reserve walks at
most 8 priorities that yield nothing, then reads the ready rows through
pyqueue_message_due_idx; queue_next_scheduled_at and queue_wait read the
earliest scheduled_at there in one probe. The guards count the shared buffers
each call touches (EXPLAIN (ANALYZE, BUFFERS) of the call, whose Function Scan
node accounts for every statement run inside it), never time; one test shows
the guard fails without the index. The others check the order the bounded walk
and the switch to the due index hand messages out in.
"""

from __future__ import annotations

import json

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


def _buffers(plan: dict) -> int:
    return plan.get("Shared Hit Blocks", 0) + plan.get("Shared Read Blocks", 0)


def call_buffers(conn, sql: str) -> tuple[int, int]:
    """(shared buffers touched, rows returned) by one call, in a transaction rolled back.

    The same call runs once before, also rolled back, so that the routines'
    plans are cached and planning does not count."""
    results = []
    for explain in (False, True):
        _run(conn, "BEGIN")
        try:
            if explain:
                rows = _run(conn, f"EXPLAIN (ANALYZE, BUFFERS, FORMAT JSON) {sql}")
                doc = rows[0][0]
                plan = (json.loads(doc) if isinstance(doc, str) else doc)[0]["Plan"]
                results.append((_buffers(plan), plan["Actual Rows"]))
            else:
                _run(conn, sql)
        finally:
            _run(conn, "ROLLBACK")
    return results[0]


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
