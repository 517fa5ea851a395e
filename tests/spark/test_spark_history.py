"""read_history against pyqueue_history (the history table of issue 4).

It expects pyqueue_history with at least queue_name, p_key, p_kind, payload, priority,
attempts, created_at, processed_at, outcome ('committed', 'popped',
'dead_lettered', 'moved') and id, written for queues created with a
history_retention.
"""

from __future__ import annotations

import datetime as dt
import json
import time

import pytest

from pyqueue_sql import spark as pqs

pytestmark = pytest.mark.timeout(600)


def test_read_history_reads_what_left_the_queue_in_parallel_partitions(spark, jdbc_url, make_queue):
    from pyspark.sql import functions as F

    keep = dt.timedelta(days=1)
    q, other = make_queue(history_retention=keep), make_queue(history_retention=keep)
    before = dt.datetime.now(dt.timezone.utc)
    time.sleep(0.01)
    frame = spark.createDataFrame(
        [(f"k{i}", "even" if i % 2 == 0 else "odd", json.dumps({"i": i})) for i in range(300)],
        "k string, kind string, payload string",
    )
    pqs.enqueue(frame, jdbc_url, q.name, key="k", kind="kind", payload="payload")
    pqs.enqueue(frame, jdbc_url, other.name, key="k", kind="kind", payload="payload")
    committed = 0
    while committed < 200:
        for r in q.reserve(n=50):
            assert q.commit(r)
            committed += 1
    popped = len(q.pop(n=60))
    for r in other.reserve(n=300):
        other.commit(r)
    time.sleep(0.01)
    after = dt.datetime.now(dt.timezone.utc)

    hist = pqs.read_history(spark, jdbc_url, q.name, before, after, num_partitions=4)
    assert hist.rdd.getNumPartitions() == 4
    assert set(hist.columns) >= {
        "id",
        "queue_name",
        "p_key",
        "p_kind",
        "payload",
        "priority",
        "attempts",
        "created_at",
        "processed_at",
        "outcome",
    }
    by_outcome = {r.outcome: r["count"] for r in hist.groupBy("outcome").count().collect()}
    assert by_outcome == {"committed": 200, "popped": popped}
    assert hist.where(F.col("queue_name") != q.name).count() == 0
    assert hist.select("p_key").distinct().count() == 200 + popped
    one = hist.where(F.col("p_key") == "k1").collect()
    assert len(one) == 1 and json.loads(one[0].payload) == {"i": 1} and one[0].p_kind == "odd"
    assert one[0].processed_at >= one[0].created_at

    # the same rows through one partition; nothing before `before` or after `after`
    single = pqs.read_history(spark, jdbc_url, q.name, before, after, num_partitions=1)
    assert single.count() == 200 + popped
    assert pqs.read_history(spark, jdbc_url, q.name, after, after + dt.timedelta(seconds=5)).count() == 0
    both = pqs.read_history(spark, jdbc_url, [q.name, other.name], before, after)
    assert both.count() == 200 + popped + 300
