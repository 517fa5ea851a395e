"""MySQL/MariaDB: a batch reserve under a queue-wide rate alone (pyqueue__claim_limited_batch), and
the first page of one under a concurrency limit, read their pages without numbering the rows (a
window function's sort and its temporary table): no row of such a page can be past the slots left.
The units used are written by ranges of the primary key; when no unit inside the ranges was skipped
the list is not looked up, and when one was (another transaction holds it) it is left as it is."""

from __future__ import annotations

import threading

import pytest

import pyqueue_sql

pytestmark = pytest.mark.only_dialect("mysql")


def counters(cur) -> dict[str, int]:
    cur.execute(
        "SHOW SESSION STATUS WHERE Variable_name LIKE 'Handler_read%' OR Variable_name = 'Created_tmp_tables'"
    )
    return {name: int(value) for name, value in cur.fetchall()}


def used_units(raw_cur, queue: str) -> list[int]:
    raw_cur.execute(
        "SELECT slot_no FROM pyqueue_rate_slot WHERE queue_name = %s AND p_kind = '' AND used_at IS NOT NULL"
        " ORDER BY slot_no",
        (queue,),
    )
    return [int(r[0]) for r in raw_cur.fetchall()]


def test_a_unit_another_transaction_holds_is_skipped_and_left_unwritten(installed_database):
    url = installed_database("ratedunits")
    with pyqueue_sql.connect(url) as db, pyqueue_sql.connect(url) as other:
        queue = db.queue("ratedunits.q").create(visibility_timeout=300)
        queue.set_rate(None, 10, 60)
        queue.push_many([(f"k{i:02d}", "noop", {}) for i in range(20)])
        cur = other.connection.cursor()
        cur.execute("SET SESSION TRANSACTION ISOLATION LEVEL READ COMMITTED")
        cur.execute("START TRANSACTION")
        cur.execute(
            "SELECT slot_no FROM pyqueue_rate_slot WHERE queue_name = %s AND p_kind = '' AND slot_no = 3 FOR UPDATE",
            ("ratedunits.q",),
        )
        # (a write of unit 3 would wait for this lock: let it go after a while, so that such a write
        # shows as unit 3 used instead of as a lock wait timeout)
        release = threading.Timer(1.0, lambda: other.connection.rollback())
        release.start()
        try:
            taken = queue.reserve(n=10)
        finally:
            release.join()
        assert [r.key for r in taken] == [f"k{i:02d}" for i in range(9)]  # unit 3 held: 9 units free
        assert used_units(db.connection.cursor(), "ratedunits.q") == [1, 2, 4, 5, 6, 7, 8, 9, 10]
        assert [r.key for r in queue.reserve(n=10)] == ["k09"]  # unit 3, the last free one
        assert queue.reserve(n=10) == []  # the rate is used up for 60 s
        assert used_units(db.connection.cursor(), "ratedunits.q") == list(range(1, 11))


# A reserve of 256 under a rate of 10,000 a second: about 17 rows read by the handlers a message
# and 11 temporary tables (in memory) a call on a quiet server, where the page numbered by
# ROW_NUMBER read about 23 and made 14. The fewest of three counts, as in test_limited_reserve_pages.
@pytest.mark.parametrize("feature", ["rate", "limit"])
def test_a_page_that_cannot_pass_the_slots_left_is_not_numbered(installed_database, feature):
    rows, tables = [], []
    for _ in range(3):
        with pyqueue_sql.connect(installed_database("ratedpages")) as db:
            queue = db.queue("ratedpages.q").create(visibility_timeout=300)
            if feature == "rate":
                queue.set_rate(None, 10000, 1)
                n, expect = 256, 256
            else:
                queue.set_limit("noop", 64)
                n, expect = 64, 64
            queue.push_many([(f"k{i:04d}", "noop", {}) for i in range(600)])
            queue.commit_many(queue.reserve(n=n))  # (the routines loaded)
            cur = db.connection.cursor()
            before = counters(cur)
            taken = queue.reserve(n=n)
            after = counters(cur)
            assert len(taken) == expect
            rows.append(sum(after[k] - before[k] for k in after if k.startswith("Handler_read")) / len(taken))
            tables.append(after["Created_tmp_tables"] - before["Created_tmp_tables"])
    # (rate: 11 tables, 14 numbered; limit of 64, a reserve of 64: 14, 17 numbered)
    assert min(tables) <= {"rate": 12, "limit": 15}[feature], tables
    assert min(rows) <= {"rate": 20, "limit": 22}[feature], rows
