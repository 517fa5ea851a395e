"""A limited reserve and a grouped batch commit read about the rows they change, whatever the backlog
(PostgreSQL).

Their routines run generic plans (``plan_cache_mode = force_generic_plan``), made on estimates that
know nothing of the backlog. Two such plans read it all: the free slots' holder check (a NOT EXISTS
under an OR) became a hashed subplan that read every message of the limited kind (20,000 of a
backlog: 13 ms a reserve), and the batch commit's step that drops the rows of emptied groups (a NOT
EXISTS) became an anti join that looped over every live message of the queue for each group. The
guard runs each call with auto_explain (ANALYZE) on the routines' statements and counts the rows
their scans of the message table return and remove, and the rows their joins' filters remove:
counts the machine's load does not move, never time.
"""

from __future__ import annotations

import re

import pytest

import pyqueue_sql
from pyqueue_sql import dialects

pytestmark = pytest.mark.only_dialect("postgresql")

BACKLOG = 3000
QUEUE = "featured"


def _run(conn, sql, params=None):
    with conn.cursor() as cur:
        cur.execute(sql, params)
        return cur.fetchall() if cur.description else []


def _rows_read(conn, sql, params=None) -> tuple[list, int, list[str]]:
    """(the call's rows, the rows its statements read: returned and removed by their scans of
    pyqueue_message, and removed by their joins' filters, over all loops; the plans)."""
    plans: list[str] = []
    conn.add_notice_handler(lambda diag: plans.append(diag.message_primary or ""))
    for setting in (
        "LOAD 'auto_explain'",
        "SET auto_explain.log_min_duration = 0",
        "SET auto_explain.log_nested_statements = on",
        "SET auto_explain.log_analyze = on",
        "SET auto_explain.log_timing = off",
        "SET auto_explain.log_level = notice",
    ):
        _run(conn, setting)
    rows = _run(conn, sql, params)
    _run(conn, "SET auto_explain.log_min_duration = -1")
    read = 0
    for plan in plans:
        # the routine's own line (its Query Text) holds no node: only the statements' plans count
        lines = plan.splitlines()
        for i, line in enumerate(lines):
            if f := re.search(r"Rows Removed by Join Filter: (\d+)", line):
                read += int(f.group(1))
            m = re.search(r"Scan.* on pyqueue_message .*rows=(\d+) loops=(\d+)", line)
            if not m:
                continue
            read += int(m.group(1)) * int(m.group(2))
            indent = len(line) - len(line.lstrip())
            for detail in lines[i + 1 :]:
                if detail.strip().startswith("->") or len(detail) - len(detail.lstrip()) <= indent:
                    break
                if f := re.search(r"Rows Removed by (?:Index )?Filter: (\d+)", detail):
                    read += int(f.group(1))
    return rows, read, plans


@pytest.fixture
def url(installed_database):
    return installed_database("featplans")


@pytest.fixture
def pg(url):
    conn = dialects.for_name("postgresql").connect(url, autocommit=True)
    _run(conn, f"SELECT queue_create('{QUEUE}')")
    yield conn
    conn.close()


def _push(url: str, groups: int | None = None):
    """The backlog: BACKLOG no-op messages, in `groups` FIFO groups (round robin) when given."""
    extra = (lambda i: {}) if groups is None else (lambda i: {"group": f"g{i % groups}"})
    with pyqueue_sql.connect(url) as db:
        for start in range(0, BACKLOG, 1000):
            db.queue(QUEUE).push_many(
                [
                    dict(key=f"k{i:05d}", kind="noop", payload={}, **extra(i))
                    for i in range(start, start + 1000)
                ]
            )


def _reserve(conn, n: int):
    return _run(
        conn, f"SELECT p_key, p_kind, token::text FROM queue_reserve('{QUEUE}', 'w', interval '60 s', {n})"
    )


def _commit(conn, rows):
    return _run(
        conn,
        "SELECT queue_commit_batch(%s, %s, %s, %s)",
        (QUEUE, [r[0] for r in rows], [r[1] for r in rows], [r[2] for r in rows]),
    )


def test_a_limited_reserve_checks_each_slot_s_holder_by_its_key(pg, url):
    _run(pg, f"SELECT queue_set_limit('{QUEUE}', 'noop', 64)")
    _push(url)
    _commit(pg, _reserve(pg, 64))  # the slots now name holders that have ended
    half = _reserve(pg, 32)
    assert len(half) == 32
    # 32 slots held, 32 named by ended holders: a reserve of 32 takes those, each holder checked
    # by a probe of its key (a read of a row or so), not by a read of the backlog's 3,000 rows. (A
    # reserve of more than the free slots reads past every ready message of the full kind, for
    # messages of other kinds: the worker asks for what its settles freed, see HeldBack.)
    rows, read, plans = _rows_read(
        pg, f"SELECT p_key FROM queue_reserve('{QUEUE}', 'w', interval '60 s', 32)"
    )
    assert len(rows) == 32
    assert read <= 200, (read, plans)  # 64 read at the time of writing; 5,936 with the hashed subplan


def test_a_grouped_batch_commit_reads_each_group_s_few_rows(pg, url):
    _run(pg, f"SELECT queue_set_group_limit('{QUEUE}', NULL, 8)")
    _push(url, groups=50)
    _commit(pg, _reserve(pg, 400))
    heads = _reserve(pg, 400)
    assert len(heads) == 400  # 50 groups, 8 heads each
    # the commit of 400 heads in 50 groups makes 400 new heads: each group's few live and next
    # rows read, about 3 a message committed, not the queue's 400 live messages for each group
    [(committed,)], read, plans = _rows_read(
        pg,
        "SELECT queue_commit_batch(%s, %s, %s, %s)",
        (QUEUE, [r[0] for r in heads], [r[1] for r in heads], [r[2] for r in heads]),
    )
    assert committed == 400
    assert read <= 8 * 400, (read, plans)  # 1,300 at the time of writing; 11,443 with the anti join
