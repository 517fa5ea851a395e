"""MariaDB: a reserve under a read view held open elsewhere (a report's consistent snapshot). Every
message consumed since leaves a delete-marked entry in pyqueue_message_order_idx that purge may not
remove, at the head of priority 0 (where it was pushed; its claim leaves that entry alone, the lease's
end lives in scheduled_at). InnoDB steps over delete-marked entries before it checks the end of a range, so a read that
ends without a visible row walks all of them. The short batch reserve's probe for a priority below 0
reads the index down from the start of priority 0 instead: one entry, however many lie behind it (a scalar
subquery: inside EXISTS the optimizer drops ORDER BY ... LIMIT and reads up).
Measured by the pages the statement accesses (ANALYZE FORMAT=JSON, r_engine_stats: MariaDB 10.9+),
as the routine runs it (read out of sql/mysql/routines/05_reserve.sql, its variable inlined).
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

import pyqueue_sql
from tests import plainsql

pytestmark = pytest.mark.only_dialect("mysql")

ROUTINES = Path(__file__).resolve().parents[2] / "sql" / "mysql" / "routines" / "05_reserve.sql"
CHURNED = 2000


def below_probe() -> str:
    """pyqueue__claim_short_batch's probe for a message below priority 0, as the routine has it."""
    body = (
        ROUTINES.read_text().split("CREATE PROCEDURE pyqueue__claim_short_batch(", 1)[1].split("END //", 1)[0]
    )
    [probe] = re.findall(
        r"(\(SELECT b\.priority FROM pyqueue_message b .*?b\.priority < 0[^)]*\) IS NOT NULL)", body, re.S
    )
    return "SELECT " + " ".join(
        probe.split()
    )  # evaluated as the routine evaluates it (inside EXISTS: read up)


def pages(conn, sql: str) -> int | None:
    """The pages of pyqueue_message's indexes the statement accessed (None: no r_engine_stats)."""
    [(plan,)] = plainsql.run(conn, "ANALYZE FORMAT=JSON " + sql)
    found = re.findall(r'"r_engine_stats": \{([^}]*)\}', plan)  # every table's, subqueries' too
    if not found:
        return None
    return sum(int(m.group(1)) for f in found if (m := re.search(r'"pages_accessed": (\d+)', f)))


def churn_under_a_held_snapshot(report, queue, messages: int, per_call: int) -> None:
    """A report's consistent snapshot opened (after a read of another table), then `messages` pushed,
    reserved and committed `per_call` at a time: each leaves its dead entries behind the snapshot."""
    report.sql("START TRANSACTION WITH CONSISTENT SNAPSHOT")
    report.sql("SELECT count(*) FROM pyqueue_queue")
    for i in range(0, messages, per_call):
        queue.push_many([(f"k{j}", "job", {}) for j in range(i, i + per_call)])
        assert queue.commit_many(queue.reserve(n=per_call)) == per_call


def test_the_probe_below_priority_0_reads_one_entry_behind_a_held_snapshots_dead_entries(installed_database):
    dsn = installed_database("heldprobe")
    report, probe = plainsql.Session(dsn), plainsql.Session(dsn)
    [(version,)] = plainsql.run(probe.conn, "SELECT VERSION()")
    if (
        "mariadb" not in version.lower()
        or pages(probe.conn, "SELECT 1 FROM pyqueue_message m LIMIT 1") is None
    ):
        pytest.skip("ANALYZE's r_engine_stats: MariaDB 10.9 or later")
    with pyqueue_sql.connect(dsn) as db:
        queue = db.queue("held.probe").create(visibility_timeout=300)
        try:
            churn_under_a_held_snapshot(report, queue, 4 * CHURNED, 100)
            sql = below_probe().replace("in_queue", "'held.probe'")
            assert "ORDER BY b.priority DESC LIMIT 1" in sql  # down from the start of priority 0
            read = pages(probe.conn, sql)
            # the same probe inside EXISTS (as the routine had it): the optimizer drops its ORDER BY ... LIMIT and
            # reads up from the queue's start, over every entry the churn left
            inner = (
                sql.removeprefix("SELECT (")
                .removesuffix(") IS NOT NULL")
                .replace("SELECT b.priority", "SELECT 1")
            )
            upward = pages(probe.conn, f"SELECT EXISTS ({inner})")
            assert read <= 3, read
            assert upward >= 5 * max(read, 1) and upward >= 10, (read, upward)
        finally:
            report.sql("ROLLBACK")
            report.close()
            probe.close()


def candidates_read(k: int, mark: tuple[str, int] | None) -> str:
    """pyqueue__claim_short_batch's read of candidates, as the routine has it: from the queue's start (mark None)
    or from a first candidate (ready_at, id) as a session's mark starts it."""
    body = (
        ROUTINES.read_text().split("CREATE PROCEDURE pyqueue__claim_short_batch(", 1)[1].split("END //", 1)[0]
    )
    [read] = re.findall(
        r"FROM \((SELECT m\.id, m\.ready_at\s+FROM pyqueue_message m .*?LIMIT v_k)\) AS d", body, re.S
    )
    at, below = (f"'{mark[0]}'", str(mark[1] - 1)) if mark else ("NULL", "NULL")
    sql = " ".join(read.split()).replace("in_queue", "'held.ready'").replace("v_now", "UTC_TIMESTAMP(6)")
    sql = sql.replace("v_pr", "0")  # (priority 0: the walk's step where these messages lie)
    return sql.replace("v_at", at).replace("v_id", below).replace("v_k", str(k))


def plan(conn, sql: str) -> dict:
    [(text,)] = plainsql.run(conn, "ANALYZE FORMAT=JSON " + sql)
    found = json.loads(text)["query_block"]
    assert "filesort" not in json.dumps(found), found  # read in the index's order
    return found["nested_loop"][0]["table"]


def test_the_batch_candidates_are_a_range_read_and_from_a_mark_skip_a_held_snapshots_dead_entries(
    installed_database,
):
    """The read of candidates is a range read of the ready index up to now (its end checked as it goes: the
    statistics, which leave delete-marked rows out, made the optimizer read by the queue and priority alone,
    `ready_at <= now` a filter) and, from a session's mark, starts past the entries the churn left."""
    dsn = installed_database("heldready")
    report, probe = plainsql.Session(dsn), plainsql.Session(dsn)
    if pages(probe.conn, "SELECT 1 FROM pyqueue_message m LIMIT 1") is None:
        pytest.skip("ANALYZE's r_engine_stats: MariaDB 10.9 or later")
    with pyqueue_sql.connect(dsn) as db:
        queue = db.queue("held.ready").create(visibility_timeout=300)
        try:
            churn_under_a_held_snapshot(report, queue, 4 * CHURNED, 100)
            queue.push_many([(f"live{j}", "job", {}) for j in range(50)])
            # the statistics as InnoDB's own recalculation leaves them: 50 rows (purge-blocked entries not counted)
            plainsql.run(probe.conn, "ANALYZE TABLE pyqueue_message")
            rows = plainsql.run(probe.conn, candidates_read(50, None))
            assert len(rows) == 50
            start = plan(probe.conn, candidates_read(50, None))
            assert start["access_type"] == "range" and "ready_at" in start["used_key_parts"], start
            first = min(rows, key=lambda r: (r[1], r[0]))
            marked = plan(probe.conn, candidates_read(50, (str(first[1]), int(first[0]))))
            assert marked["r_rows"] == 50, marked
            read, whole = (
                marked["r_engine_stats"]["pages_accessed"],
                start["r_engine_stats"]["pages_accessed"],
            )
            # (both count the optimizer's dives into the index and the rows' pages: a claim leaves the ready order
            # alone, so the consumed messages' entries lie behind the first live one and cost the read from the mark
            # nothing)
            assert read <= whole, (read, whole)
        finally:
            report.sql("ROLLBACK")
            report.close()
            probe.close()
