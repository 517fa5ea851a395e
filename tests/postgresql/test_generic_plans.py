"""A session's plans of the reserve stay index and TID reads as the table grows (PostgreSQL).

The reserve's routines run with ``plan_cache_mode = force_generic_plan``: a session plans each
statement once, on the table as it is then, and keeps the plan. A join of the claimed rows by ctid
planned on a young, small table was a hash join over a sequential scan, kept by every long-lived
worker session as the table grew (a read of every row, dead ones too, a claim); the routines rule
sequential scans out. The guard counts the sequential scans of the message table one call makes
(the transaction's own counters), never time.
"""

from __future__ import annotations

import pytest

from pyqueue_sql import dialects

pytestmark = pytest.mark.only_dialect("postgresql")

GROWN = 5000
QUEUE = "grown"


def _run(conn, sql, params=None):
    with conn.cursor() as cur:
        cur.execute(sql, params)
        return cur.fetchall() if cur.description else []


def _seq_scans(conn, sql, params=None) -> tuple[int, list]:
    """(sequential scans of pyqueue_message, rows) of one call, in a transaction rolled back."""
    scans = "SELECT coalesce(sum(seq_scan), 0)::bigint FROM pg_stat_xact_user_tables WHERE relname = 'pyqueue_message'"
    _run(conn, "BEGIN")
    try:
        [(before,)] = _run(conn, scans)
        rows = _run(conn, sql, params)
        [(after,)] = _run(conn, scans)
    finally:
        _run(conn, "ROLLBACK")
    return after - before, rows


@pytest.fixture
def pg(installed_database):
    """A session of a database of its own, whose message table is empty until the test fills it."""
    conn = dialects.for_name("postgresql").connect(installed_database("plans"), autocommit=True)
    _run(conn, "SELECT queue_create('grown')")
    yield conn
    conn.close()


CALLS = {
    "queue_reserve": "SELECT p_key FROM queue_reserve(%s, 'w', interval '60 s', 50)",
    "queue_pop": "SELECT p_key FROM queue_pop(%s, 50)",
}


@pytest.mark.parametrize("call", sorted(CALLS))
def test_a_session_that_planned_on_an_empty_queue_reads_no_whole_table_once_it_grew(pg, call):
    _run(pg, "SELECT queue_push(%s, 'first', 'job', '{}')", (QUEUE,))
    scans, rows = _seq_scans(pg, CALLS[call], (QUEUE,))  # the session's plans, on one row
    assert rows == [("first",)]
    keys = [f"k{i}" for i in range(GROWN)]
    _run(
        pg,
        "SELECT queue_push_batch(%s, %s::text[], %s::text[], %s::jsonb[])",
        (QUEUE, keys, ["job"] * GROWN, ["{}"] * GROWN),
    )
    scans, rows = _seq_scans(pg, CALLS[call], (QUEUE,))
    assert len(rows) == 50
    assert scans == 0, f"{call} read the whole table {scans} time(s)"
