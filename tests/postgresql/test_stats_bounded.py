"""queue_stats reads a bounded number of buffers, whatever the queue's size and the statistics
(PostgreSQL).

A queue of 100,000 live messages in a table with 100,000 dead rows (those of a queue dropped;
autovacuum off, as under a vacuum that is behind), after ANALYZE: a whole count read every
message of the queue, and with these statistics the planner read them by a sequential scan of
the whole table. queue_stats reads at most 10,001 rows of each range (ready; delayed and
reserved) through the due index in time order and estimates a larger range. The guard counts the
buffers of the queue's tables and indexes the call touches (the transaction's own counters, which
take in every statement run inside the routine), never time; one test shows that the guard fails
for a whole count.
"""

from __future__ import annotations

import pytest

from pyqueue_sql import dialects

pytestmark = pytest.mark.only_dialect("postgresql")

QUEUE = "stats.big"
CHURN = "stats.churn"
LIVE = 100_000
EXACT = 10_000
# 10,001 ready rows read with a visit to the heap each (no page is all-visible: never vacuumed)
# touch about 1,300 buffers; the whole count touches every page of the table (about 6,000).
MAX_BUFFERS = 3_000

FILL = (
    "INSERT INTO pyqueue_message (queue_name, p_key, p_kind, payload, scheduled_at, "
    "scheduled_at_initially, created_at, reserve_token) "
    "SELECT '{queue}', '{prefix}' || g, 'job', '{{\"pad\": \"{pad}\"}}', "
    "CASE WHEN g % 200 = 0 THEN now() + interval '10 minutes' "
    "WHEN g % 100 = 1 THEN now() + interval '1 hour' "
    "ELSE now() - interval '{age} seconds' + g * interval '1 ms' END, "
    "now(), now(), CASE WHEN g % 200 = 0 THEN gen_random_uuid() END "
    "FROM generate_series(1, {rows}) g"
)
# 1 in 100 delayed, 1 in 200 reserved, the rest ready
READY, DELAYED, RESERVED = LIVE - LIVE // 100 - LIVE // 200, LIVE // 100, LIVE // 200

# The previous queue_stats's read: every message of the queue.
WHOLE_COUNT = f"""
SELECT q.queue_name::text,
       pg_catalog.count(*) FILTER (WHERE m.scheduled_at <= now()),
       pg_catalog.count(*) FILTER (WHERE m.scheduled_at > now() AND m.reserve_token IS NULL),
       pg_catalog.count(*) FILTER (WHERE m.scheduled_at > now() AND m.reserve_token IS NOT NULL)
  FROM pyqueue_queue q
  LEFT JOIN pyqueue_message m ON m.queue_name::text = q.queue_name::text
 WHERE q.queue_name::text = '{QUEUE}'
 GROUP BY q.queue_name
"""

OWN_BUFFERS = """
SELECT coalesce(sum(pg_catalog.pg_stat_get_xact_blocks_fetched(c.oid)), 0)::bigint
  FROM pg_catalog.pg_class c
 WHERE c.relnamespace = pg_catalog.current_schema()::regnamespace
   AND c.relname LIKE 'pyqueue%' AND c.relkind IN ('r', 'i')
"""


def _run(conn, sql):
    with conn.cursor() as cur:
        cur.execute(sql)
        return cur.fetchall() if cur.description else []


def call_buffers(conn, sql: str) -> tuple[int, list]:
    """(buffers of the queue's tables and indexes touched, rows returned) by one call, in a
    transaction rolled back (the counters are the transaction's own, read before it ends); the
    same call runs once before, so that plans are cached."""
    result: tuple[int, list] = (0, [])
    for _ in range(2):
        _run(conn, "BEGIN")
        try:
            before = _run(conn, OWN_BUFFERS)[0][0]
            rows = _run(conn, sql)
            result = (_run(conn, OWN_BUFFERS)[0][0] - before, rows)
        finally:
            _run(conn, "ROLLBACK")
    return result


@pytest.fixture
def conn(installed_database):
    url = installed_database("stats")
    c = dialects.for_name("postgresql").connect(url)
    _run(c, "ALTER TABLE pyqueue_message SET (autovacuum_enabled = false)")
    pad = "x" * 64
    # the dead rows: the messages of a queue dropped (its rows deleted, not yet vacuumed)
    _run(c, f"SELECT queue_create('{CHURN}')")
    _run(c, FILL.format(queue=CHURN, prefix="d", pad=pad, age=7200, rows=LIVE))
    _run(c, f"SELECT queue_drop('{CHURN}')")
    _run(c, f"SELECT queue_create('{QUEUE}')")
    _run(c, FILL.format(queue=QUEUE, prefix="k", pad=pad, age=3600, rows=LIVE))
    _run(c, "ANALYZE pyqueue_message")
    yield c
    c.close()


@pytest.mark.slow
def test_stats_of_a_large_queue_touch_a_bounded_number_of_buffers(conn):
    buffers, rows = call_buffers(conn, f"SELECT * FROM queue_stats('{QUEUE}')")
    assert buffers < MAX_BUFFERS, f"queue_stats touched {buffers} buffers"
    [(queue, ready, delayed, reserved, dead, oldest_age, paused)] = rows
    assert (queue, delayed, reserved, dead, paused) == (QUEUE, DELAYED, RESERVED, 0, False)
    # more than 10,000 ready: an estimate, above the bound, near the count
    assert ready > EXACT
    assert abs(ready - READY) <= READY * 0.25, ready
    assert 3500 < oldest_age < 3700
    # and every queue (a second, empty one among them) in the same bound
    _run(conn, "SELECT queue_create('stats.empty')")
    buffers, rows = call_buffers(conn, "SELECT queue, ready, delayed, reserved FROM queue_stats(NULL)")
    assert buffers < MAX_BUFFERS, f"queue_stats(NULL) touched {buffers} buffers"
    assert rows[0] == ("stats.big", ready, DELAYED, RESERVED) and rows[1] == ("stats.empty", 0, 0, 0)


@pytest.mark.slow
def test_the_buffer_guard_fails_for_a_whole_count(conn):
    buffers, rows = call_buffers(conn, WHOLE_COUNT)
    assert rows == [(QUEUE, READY, DELAYED, RESERVED)]
    assert buffers >= MAX_BUFFERS, f"the whole count touched only {buffers} buffers"
