"""MySQL/MariaDB: the worker's batch calls build no temporary table on disk. A GROUP_CONCAT keeps its
arguments in a temporary table, and a derived table or a multi-table UPDATE's buffer one of its
own: with a TEXT column (a JSON_ARRAY, a JSON result, a long key) MariaDB makes it an Aria table on
disk, a file created and removed each call (measured: 12 % of a batch commit's time with results
kept, in the kernel's file creation). A batch commit on a queue that keeps history, one with results
all null, and a batch reserve on queues with priorities or a rate create none (the session's
Created_tmp_disk_tables); a rate's units are still written, and a batch commit of grouped and
plain messages with results still stores each its own."""

from __future__ import annotations

import time
import uuid

import pytest

import pyqueue_sql

pytestmark = pytest.mark.only_dialect("mysql")


def disk_tables(cur) -> int:
    cur.execute("SHOW SESSION STATUS LIKE 'Created_tmp_disk_tables'")
    return int(cur.fetchone()[1])


@pytest.mark.parametrize("feature", ["plain", "history", "results", "priorities"])
def test_a_batch_reserve_and_its_batch_commit_create_no_table_on_disk(dsn, feature):
    with pyqueue_sql.connect(dsn) as db:
        queue = db.queue(f"disk.{uuid.uuid4().hex[:10]}").create(
            **({"history_retention": 3600} if feature == "history" else {})
        )
        if feature == "results":
            queue.set_result_retention(3600)
        priority = (lambda i: i % 10) if feature == "priorities" else (lambda i: 0)
        queue.push_many([dict(key=f"k{i}", kind="job", payload={}, priority=priority(i)) for i in range(300)])
        cur = db.connection.cursor()
        before = disk_tables(cur)
        got = queue.reserve(n=256, timeout=60)
        assert len(got) == 256
        reserved = disk_tables(cur)
        if feature == "results":
            assert queue.commit_result_many([(r, None) for r in got]) == 256
        else:
            assert queue.commit_many(got) == 256
        assert (reserved - before, disk_tables(cur) - reserved) == (0, 0)
        queue.drop()


def test_a_batch_reserve_under_a_rate_writes_the_units_it_used_and_no_table_on_disk(dsn):
    """A queue-wide rate of 300 units a 0.5 s: a reserve of 100 takes units 1 to 100; past the per, a
    reserve of 256 takes the units after the session's last one, then from the first (101 to 300,
    then 1 to 56): each written with its time, two ranges of the primary key, and no table on disk;
    the next reserve finds the 44 units left free."""
    with pyqueue_sql.connect(dsn) as db:
        queue = db.queue(f"disk.{uuid.uuid4().hex[:10]}").create()
        queue.set_rate(None, 300, 0.5)
        queue.push_many([dict(key=f"k{i}", kind="job", payload={}) for i in range(600)])
        cur = db.connection.cursor()
        assert len(queue.reserve(n=100, timeout=60)) == 100
        time.sleep(0.6)
        cur.execute("SELECT UTC_TIMESTAMP(6)")
        [(start,)] = cur.fetchall()
        db.connection.commit()
        before = disk_tables(cur)
        assert len(queue.reserve(n=256, timeout=60)) == 256
        assert disk_tables(cur) == before
        cur.execute(
            "SELECT COUNT(*), SUM(slot_no <= 56), SUM(slot_no > 100) FROM pyqueue_rate_slot"
            " WHERE queue_name = %s AND used_at >= %s",
            (queue.name, start),
        )
        assert tuple(int(v) for v in cur.fetchone()) == (256, 56, 200)
        db.connection.commit()
        assert len(queue.reserve(n=256, timeout=60)) == 44
        queue.drop()


def test_a_batch_commit_with_results_of_grouped_and_plain_messages_stores_each_its_own(dsn):
    """FIFO groups (k = 2) and plain messages in one commit_result_many, in an order of their own:
    each message's result is the one given with it (the grouped ones' list is read again by id and
    token, each result by its element number)."""
    with pyqueue_sql.connect(dsn) as db:
        queue = db.queue(f"disk.{uuid.uuid4().hex[:10]}").create()
        queue.set_result_retention(3600)
        queue.set_group_limit(None, 2)
        queue.push_many(
            [dict(key=f"g{i}", kind="job", payload={}, group=f"grp{i % 2}") for i in range(4)]
            + [dict(key=f"p{i}", kind="job", payload={}) for i in range(3)]
        )
        got = queue.reserve(n=10, timeout=60)
        assert len(got) == 7
        items = [(r, {"for": r.key}) for r in reversed(got)]
        assert queue.commit_result_many(items) == 7
        for r in got:
            assert queue.result(r.key, "job").result == {"for": r.key}, r.key
        queue.drop()
