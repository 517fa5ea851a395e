"""MySQL/MariaDB: a batch reserve on a queue with a concurrency limit (pyqueue__claim_limited_batch)
asked for more than its kind's free slots, as a worker whose prefetch is above the limit asks. Its
first page holds at most the free slots (a page of the whole n, numbered over, read and sorted rows
it could not take), and the slots are given by one single-table UPDATE (a join of the claims to the
slots buffered its rows, keyed by the slot's long primary key, in a temporary table on disk every
call). With other kinds among the limited one, a page past the first takes them all and the
limited kind only up to its slots."""

from __future__ import annotations

import pytest

import pyqueue_sql

pytestmark = pytest.mark.only_dialect("mysql")


def counters(cur) -> dict[str, int]:
    cur.execute(
        "SHOW SESSION STATUS WHERE Variable_name LIKE 'Handler_read%' OR Variable_name = 'Created_tmp_disk_tables'"
    )
    return {name: int(value) for name, value in cur.fetchall()}


# A reserve of 256 that finds 32 free slots of 64, a message reserved: about 39 rows read by the
# handlers on a quiet server (the page, the rest of the backlog walked once for another kind, the
# slots and their holders), where a first page of 256 numbered by ROW_NUMBER read about 91. Rows a
# purge running behind has not removed only add (the fewest of three is kept), as in
# tests/worker/test_cost_budget.py.
ROWS_PER_MESSAGE = 60


def test_a_reserve_past_its_free_slots_reads_about_what_it_takes(installed_database):
    rows = []
    for _ in range(3):
        with pyqueue_sql.connect(installed_database("limitpages")) as db:
            queue = db.queue("limitpages.q").create(visibility_timeout=300)
            queue.set_limit("noop", 64)
            queue.push_many([(f"k{i:03d}", "noop", {}) for i in range(300)])
            assert len(queue.reserve(n=32)) == 32  # half the slots held (and the routines loaded)
            cur = db.connection.cursor()
            before = counters(cur)
            taken = queue.reserve(n=256)
            after = counters(cur)
            assert [r.key for r in taken] == [f"k{i:03d}" for i in range(32, 64)]  # the free slots, FIFO
            assert after["Created_tmp_disk_tables"] == before["Created_tmp_disk_tables"]
            read = sum(after[k] - before[k] for k in after if k.startswith("Handler_read"))
            rows.append(read / len(taken))
            assert [(r.in_use, r.capacity) for r in queue.limits()] == [(64, 64)]
    assert min(rows) <= ROWS_PER_MESSAGE, rows


def test_one_free_slot_among_other_kinds_fills_the_batch_and_keeps_the_limit(installed_database):
    with pyqueue_sql.connect(installed_database("limitmixed")) as db:
        queue = db.queue("limitmixed.q").create(visibility_timeout=300)
        queue.set_limit("a", 2)
        # a, b, a, b, ... in FIFO order
        queue.push_many([(f"k{i:03d}", "a" if i % 2 == 0 else "b", {}) for i in range(200)])
        [first] = queue.reserve(n=1)
        assert (first.key, first.kind) == ("k000", "a")
        taken = queue.reserve(n=100)
        kinds = [r.kind for r in taken]
        assert kinds.count("a") == 1 and kinds.count("b") == 99
        assert [r.key for r in taken if r.kind == "a"] == ["k002"]  # the oldest a left
        assert [r.key for r in taken if r.kind == "b"] == [f"k{i:03d}" for i in range(1, 198, 2)]
        assert [(r.kind, r.in_use) for r in queue.limits()] == [("a", 2)]
        assert [r.key for r in queue.reserve(n=10)] == ["k199"]  # the last b; every a waits for a slot


def selects(cur) -> int:
    cur.execute("SHOW SESSION STATUS WHERE Variable_name = 'Com_select'")
    return int(cur.fetchone()[1])


# Once its kind is full, a reserve reads on past the backlog for other kinds, from the session's
# mark (@pyqueue__full_at: up to there none but the full kind's were ready) while that is live. The
# page that fills the kind also probes the ready index for any message after the mark: none, and
# the read from the mark is skipped (a statement fewer a reserve while a worker drains one kind);
# one, and the read takes it. Without the probe the read ran whatever it would find.
def test_a_reserve_that_fills_its_kind_reads_past_the_mark_only_when_a_message_is_there(installed_database):
    with pyqueue_sql.connect(installed_database("limitmark")) as db:
        queue = db.queue("limitmark.q").create(visibility_timeout=300)
        queue.set_limit("a", 2)
        queue.push_many([(f"a{i:02d}", "a", {}) for i in range(10)])
        cur = db.connection.cursor()
        held = queue.reserve(n=10)
        assert [r.key for r in held] == ["a00", "a01"]  # read to the end for another kind: the mark
        cur.execute(
            "SET @pyqueue__full_until = UTC_TIMESTAMP(6) + INTERVAL 50 SECOND"
        )  # live, whatever the clock
        costs = {}
        for other in (False, True):
            assert queue.commit_many(held) == len(held)  # the slots free again
            if other:
                queue.push("b00", "b", {})  # after the mark
            before = selects(cur)
            held = queue.reserve(n=10)
            costs[other] = selects(cur) - before
            assert [r.kind for r in held] == ["a", "a"] + (["b"] if other else [])
        # (the read from the mark, and the lock of what it found: both only with a message there)
        assert costs[False] == costs[True] - 2, costs
