"""MySQL/MariaDB: a batch reserve hands its messages out in FIFO order by sorting the claims' ids by
their element number. Sorted straight from JSON_TABLE, MariaDB 10.11 sized the sort for a table
function's guess and wrote the rows of a batch of about 20 or more to a merge file on disk: a merge
pass and two temporary files created and removed on every call. The read-back materialises the
JSON_TABLE first and sorts it in memory: no merge pass (the session's status counter around the
call)."""

from __future__ import annotations

import pytest

import pyqueue_sql

pytestmark = pytest.mark.only_dialect("mysql")

COUNTERS = ("Sort_merge_passes",)


def counters(cur) -> dict[str, int]:
    cur.execute(
        "SHOW SESSION STATUS WHERE Variable_name IN (%s)" % ", ".join(f"'{name}'" for name in COUNTERS)
    )
    return {name: int(value) for name, value in cur.fetchall()}


@pytest.mark.parametrize("n", [2, 50, 200])
def test_a_batch_reserve_sorts_its_claims_in_memory(installed_database, n):
    with pyqueue_sql.connect(installed_database("sorts")) as db:
        queue = db.queue("sorts.q").create(visibility_timeout=300)
        queue.push_many([(f"k{i}", "job", {"i": i}) for i in range(2 * n)])
        assert len(queue.reserve(n=n)) == n  # the session's first call (its routines loaded) not counted
        cur = db.connection.cursor()
        before = counters(cur)
        taken = queue.reserve(n=n)
        after = counters(cur)
        assert [r.key for r in taken] == [f"k{i}" for i in range(n, 2 * n)]  # FIFO, as pushed
        assert {name: after[name] - before[name] for name in COUNTERS} == dict.fromkeys(COUNTERS, 0)
