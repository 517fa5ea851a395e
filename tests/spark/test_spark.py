"""Spark in local mode over the Debian JDBC jars: bulk enqueue through queue_ingest, and
read_history over pyqueue_history.

Every test runs on both dialects (the ``dsn`` fixture); the ``spark`` fixture
is one session for the whole run.
"""

from __future__ import annotations

import datetime as dt
import json
import threading
import time
import traceback
import uuid

import pytest

import pyqueue_sql
from pyqueue_sql import spark as pqs

pytestmark = pytest.mark.timeout(600)


def keyed_frame(spark, start: int, stop: int, tag: str = "a", partitions: int = 2):
    from pyspark.sql import functions as F

    return spark.range(start, stop, numPartitions=partitions).select(
        F.format_string("doc-%05d", F.col("id")).alias("doc_id"),
        F.col("id").alias("n"),
        F.lit(tag).alias("tag"),
    )


def live_keys(db, queue) -> dict[str, dict]:
    """key -> payload of every live message of the queue (reserved and given back at once)."""
    out = {}
    while True:
        got = queue.reserve(n=500, timeout=60)
        if not got:
            break
        for r in got:
            assert r.key not in out, f"{r.key} delivered twice"
            out[r.key] = r.payload
    return out


@pytest.mark.slow
@pytest.mark.parametrize("method", ["bulk", "jdbc"])
def test_two_appends_of_overlapping_data_enqueue_each_key_once(spark, jdbc_url, make_queue, db, method):
    from pyspark.sql import functions as F

    q = make_queue()
    first = pqs.enqueue(
        keyed_frame(spark, 0, 1000, "first"),
        jdbc_url,
        q.name,
        key="doc_id",
        kind=F.lit("reindex"),
        payload=["n", "tag"],
        method=method,
    )
    second = pqs.enqueue(
        keyed_frame(spark, 500, 1500, "second"),
        jdbc_url,
        q.name,
        key="doc_id",
        kind=F.lit("reindex"),
        payload=["n", "tag"],
        method=method,
    )
    assert q.stats().ready == 1500
    payloads = live_keys(db, q)
    assert len(payloads) == 1500
    assert payloads["doc-00000"] == {"n": 0, "tag": "first"}
    assert payloads["doc-00700"] == {"n": 700, "tag": "first"}  # the live one wins
    assert payloads["doc-01499"] == {"n": 1499, "tag": "second"}
    assert (first.rows, first.enqueued, first.duplicates, first.rejected) == (1000, 1000, 0, 0)
    assert (second.rows, second.enqueued, second.duplicates, second.rejected) == (1000, 500, 500, 0)


@pytest.mark.slow
def test_a_rerun_is_idempotent_and_a_committed_key_is_free_again(spark, jdbc_url, make_queue, db):
    from pyspark.sql import functions as F

    q = make_queue()
    frame = keyed_frame(spark, 0, 800)
    for expected in ((800, 800, 0), (800, 0, 800)):
        result = pqs.enqueue(frame, jdbc_url, q.name, key="doc_id", kind=F.lit("k"), payload=["n"])
        assert (result.rows, result.enqueued, result.duplicates) == expected
        assert q.stats().ready == 800
    [r] = q.reserve(n=1)
    assert q.commit(r)
    rerun = pqs.enqueue(frame, jdbc_url, q.name, key="doc_id", kind=F.lit("k"), payload=["n"])
    assert q.stats().ready == 800  # the committed one is enqueued again, nothing else
    assert (rerun.rows, rerun.enqueued, rerun.duplicates) == (800, 1, 799)


@pytest.mark.slow
def test_an_empty_frame_enqueues_nothing_and_says_so(spark, jdbc_url, make_queue):
    q = make_queue()
    empty = spark.createDataFrame([], "doc_id string, n long")
    result = pqs.enqueue(empty, jdbc_url, q.name, key="doc_id", kind="doc_id", payload=["n"])
    assert (result.rows, result.enqueued, result.duplicates, result.rejected) == (0, 0, 0, 0)
    assert q.stats().ready == 0


@pytest.mark.slow
def test_an_account_with_only_the_ingest_capability_enqueues_and_gets_the_counts(spark, dsn, make_queue):
    """`pyqueue-sql grant --ingest` is all enqueue needs: the write, the flush and
    (MySQL/MariaDB) reading back the rejected rows; the counts come through it too."""
    from pyspark.sql import functions as F

    from ..security.test_privileges import Accounts

    q = make_queue()
    made = Accounts(dsn)
    try:
        url = made.dsn_for(made.with_capabilities("ing", "ingest"))
        first = pqs.enqueue(
            keyed_frame(spark, 0, 300), url, q.name, key="doc_id", kind=F.lit("k"), payload=["n"]
        )
        again = pqs.enqueue(
            keyed_frame(spark, 200, 400), url, q.name, key="doc_id", kind=F.lit("k"), payload=["n"]
        )
        assert (first.rows, first.enqueued, first.duplicates) == (300, 300, 0)
        assert (again.rows, again.enqueued, again.duplicates) == (200, 100, 100)
        assert q.stats().ready == 400
        bad = spark.createDataFrame(
            [(q.name, "", "k", "{}")], "queue_name string, p_key string, p_kind string, payload string"
        )
        expected = (
            pyqueue_sql.InvalidArgumentError
            if pqs.target(url).dialect == "postgresql"
            else pqs.IngestRejectedError
        )
        with pytest.raises(expected, match="p_key must not be NULL or empty"):
            pqs.enqueue(bad, url, None)
    finally:
        made.close()


@pytest.mark.slow
def test_a_plain_spark_jdbc_append_is_enough(spark, jdbc_url, make_queue, db, raw):
    """What a job written outside the project does: df.write.jdbc into queue_ingest, twice."""
    from pyspark.sql import functions as F

    q = make_queue()
    tgt = pqs.target(jdbc_url)
    jdbc = tgt.jdbc_url + ("?" if "?" not in tgt.jdbc_url else "&") + f"user={tgt.properties['user']}"
    frame = keyed_frame(spark, 0, 600).select(
        F.lit(q.name).alias("queue_name"),
        F.col("doc_id").alias("p_key"),
        F.lit("plain").alias("p_kind"),
        F.to_json(F.struct("n")).alias("payload"),
    )
    for _ in range(2):
        frame.write.jdbc(jdbc, "queue_ingest", mode="append", properties={"driver": tgt.properties["driver"]})
    if db.dialect.name == "postgresql":
        assert raw("SELECT count(*) FROM queue_ingest")[0][0] == 0
    else:
        assert q.stats().ready == 0  # waiting for the flush
        rows = raw("CALL queue_ingest_flush(%s)", (q.name,))
        assert [tuple(int(v) for v in r) for r in rows] == [(600, 600, 0)]
        assert raw("SELECT count(*) FROM queue_ingest WHERE queue_name = %s", (q.name,))[0][0] == 0
    assert q.stats().ready == 600
    assert live_keys(db, q)["doc-00042"] == {"n": 42}


BAD_ROWS = [
    ("null key", {"key": None}, pyqueue_sql.InvalidArgumentError, "p_key must not be NULL or empty"),
    ("empty kind", {"kind": ""}, pyqueue_sql.InvalidArgumentError, "p_kind must not be NULL or empty"),
    ("unknown queue", {"queue": "no.such.queue"}, pyqueue_sql.UnknownQueueError, "does not exist"),
    ("bad json", {"payload": "{not json"}, pyqueue_sql.InvalidPayloadError, "not valid JSON"),
]


@pytest.mark.slow
@pytest.mark.parametrize("method", ["bulk", "jdbc"])
@pytest.mark.parametrize("case, bad, error, message", BAD_ROWS, ids=[c[0] for c in BAD_ROWS])
def test_a_bad_row_is_refused_with_a_clear_error_and_nothing_is_lost(
    spark, jdbc_url, make_queue, db, raw, capfd, case, bad, error, message, method
):
    q = make_queue()
    rows = [(q.name, f"good-{i}", "k", json.dumps({"i": i})) for i in range(20)]
    rows.insert(
        7,
        (bad.get("queue", q.name), bad.get("key", "bad-key"), bad.get("kind", "k"), bad.get("payload", "{}")),
    )
    frame = spark.createDataFrame(rows, "queue_name string, p_key string, p_kind string, payload string")
    frame = frame.coalesce(1)
    expected = error if db.dialect.name == "postgresql" else pqs.IngestRejectedError
    log4j = spark._jvm.org.apache.logging.log4j.LogManager
    levels = [str(log4j.getLogger(name).getLevel()) for name in pqs._NOISY_LOGGERS]
    with pytest.raises(expected, match=message) as info:
        pqs.enqueue(frame, jdbc_url, None, key="p_key", kind="p_kind", payload="payload", method=method)
    assert [str(log4j.getLogger(name).getLevel()) for name in pqs._NOISY_LOGGERS] == levels  # put back
    if db.dialect.name == "postgresql":
        # the routine's error and nothing else: one line, no Java in it or printed before it
        text = str(info.value)
        assert text.startswith("queue_ingest row with p_key ") and message in text
        assert "\n" not in text and "java" not in text.lower() and "pyqueue:" not in text
        assert type(info.value) is error
        kept = "BatchUpdateException" if method == "jdbc" else "psycopg"  # the driver's own error
        assert kept in str(info.value.java_exception)  # kept for whoever needs it
        shown = "".join(traceback.format_exception(info.value))
        assert len(shown.splitlines()) < 12 and "\tat org." not in shown
        out, err = capfd.readouterr()
        assert "\tat org.postgresql" not in out + err and "Exception in task" not in out + err
        # the partition's transaction rolled back: nothing enqueued, nothing left behind
        assert q.stats().ready == 0
        assert raw("SELECT count(*) FROM queue_ingest")[0][0] == 0
    else:
        # the good rows are live, the bad one waits in the reject table with its reason
        assert isinstance(info.value, pqs.IngestRejectedError)
        assert info.value.result.rejected == 1 and info.value.result.enqueued == 20
        assert q.stats().ready == 20
        [(key, reason)] = raw(
            "SELECT p_key, reason FROM pyqueue_ingest_reject WHERE p_key = %s OR p_key IS NULL "
            "ORDER BY id DESC LIMIT 1",
            (bad.get("key", "bad-key"),),
        )
        assert key == bad.get("key", "bad-key") and message in reason and reason.startswith("pyqueue:")
        raw(
            "DELETE FROM pyqueue_ingest_reject WHERE p_key = %s OR p_key IS NULL",
            (bad.get("key", "bad-key"),),
        )


@pytest.mark.slow
def test_a_retried_task_after_a_partial_append_enqueues_each_row_once(
    spark, jdbc_url, make_queue, db, connect
):
    """A task that appended part of its rows (committed, as with isolationLevel NONE)
    and one whose transaction died half way, then the whole task again."""
    from pyspark.sql import functions as F

    q = make_queue()
    frame = keyed_frame(spark, 0, 1000)
    pqs.enqueue(frame.where("n < 300"), jdbc_url, q.name, key="doc_id", kind=F.lit("k"), payload=["n"])
    other = connect()
    other.dialect.begin(other.connection)
    cur = other.connection.cursor()
    cur.execute(
        "INSERT INTO queue_ingest (queue_name, p_key, p_kind, payload) VALUES (%s, %s, %s, %s)",
        (q.name, "doc-00500", "k", '{"n": -1}'),
    )
    cur.close()
    other.dialect.rollback(other.connection)  # the task died: its rows never existed
    pqs.enqueue(frame, jdbc_url, q.name, key="doc_id", kind=F.lit("k"), payload=["n"])
    payloads = live_keys(db, q)
    assert len(payloads) == 1000 and payloads["doc-00500"] == {"n": 500}


@pytest.mark.slow
@pytest.mark.parametrize("method", ["bulk", "jdbc"])
def test_a_rerun_after_a_job_that_failed_half_way_enqueues_each_row_once(
    spark, jdbc_url, make_queue, db, raw, method
):
    """The job dies at row 800 (in the second partition, after that partition sent
    statements of 100 rows): the failing partition keeps nothing, whatever it sent
    before, and once enqueue has raised nothing more lands (it waits for the job's
    other task, which Spark lets finish); the re-run of the whole job enqueues each
    row once and counts the rest as duplicates. On MySQL/MariaDB no flush ran, so
    the first partition's rows (if it committed) wait in queue_ingest and the
    re-run's flush meets them too."""
    from pyspark.sql import functions as F

    q = make_queue()
    frame = keyed_frame(spark, 0, 1000, partitions=2)
    dying = frame.withColumn(
        "doc_id",
        F.when(F.col("n") == 800, F.raise_error(F.lit("the job died half way"))).otherwise(F.col("doc_id")),
    )
    enqueue = dict(key="doc_id", kind=F.lit("k"), payload=["n"], batch_size=100, method=method)
    with pytest.raises(Exception, match="the job died half way"):
        pqs.enqueue(dying, jdbc_url, q.name, **enqueue)
    live = [r[0] for r in raw("SELECT p_key FROM pyqueue_message WHERE queue_name = %s", (q.name,))]
    waiting = [r[0] for r in raw("SELECT p_key FROM queue_ingest WHERE queue_name = %s", (q.name,))]
    assert len(live) + len(waiting) <= 500  # nothing of the failing partition (rows 500-999)
    assert all(key < "doc-00500" for key in live + waiting)
    result = pqs.enqueue(frame, jdbc_url, q.name, **enqueue)
    assert (result.rows, result.enqueued, result.duplicates) == (
        1000,
        1000 - len(live),
        len(live) + len(waiting),
    )
    payloads = live_keys(db, q)
    assert len(payloads) == 1000 and payloads["doc-00800"] == {"n": 800}
    assert raw("SELECT count(*) FROM queue_ingest WHERE queue_name = %s", (q.name,))[0][0] == 0


@pytest.mark.slow
def test_the_bulk_load_carries_awkward_text_and_null_exactly(spark, jdbc_url, make_queue, db):
    """Quotes, commas, backslashes, line ends, the word NULL and non-ASCII text reach
    the queue as they were; a NULL payload stays NULL (refused as NULL, not as text)."""
    awkward = ['a,"b"', "back\\slash\\n", "two\nlines\r\n", "NULL", "\\N", "clé ✓ 😀", '"', ","]
    q = make_queue()
    rows = [(f"k{i}-{text}", text, json.dumps({"s": text})) for i, text in enumerate(awkward)]
    frame = spark.createDataFrame(rows, "k string, kind string, payload string")
    result = pqs.enqueue(frame, jdbc_url, q.name, key="k", kind="kind", payload="payload", method="bulk")
    assert (result.rows, result.enqueued) == (len(rows), len(rows))
    got = {(m.key, m.kind): m.payload for m in q.pop(n=100)}
    assert got == {(k, kind): json.loads(p) for k, kind, p in rows}
    null = spark.createDataFrame([("k", "kind", None)], "k string, kind string, payload string")
    expected = pyqueue_sql.InvalidPayloadError if db.dialect.name == "postgresql" else pqs.IngestRejectedError
    with pytest.raises(expected, match="payload must not be NULL"):
        pqs.enqueue(null, jdbc_url, q.name, key="k", kind="kind", payload="payload", method="bulk")


@pytest.mark.slow
def test_a_value_the_bulk_load_cannot_store_fails_the_partition_and_keeps_nothing(
    spark, jdbc_url, make_queue, db, raw
):
    """priority 'high' cannot be stored in queue_ingest's numeric column: PostgreSQL's
    COPY refuses it; MySQL's LOAD DATA LOCAL would store 0 with a warning, which the
    load turns into an error. Either way the partition's rows are not kept."""
    q = make_queue()
    frame = spark.createDataFrame([("a", "1"), ("b", "high")], "k string, prio string").coalesce(1)
    if db.dialect.name == "postgresql":
        error, message = Exception, "invalid input syntax for type numeric"
    else:
        error, message = pyqueue_sql.InvalidArgumentError, "could not store 1 value"
    with pytest.raises(error, match=message):
        pqs.enqueue(frame, jdbc_url, q.name, key="k", kind="k", payload=["k"], priority="prio", method="bulk")
    assert q.stats().ready == 0
    assert raw("SELECT count(*) FROM queue_ingest WHERE queue_name = %s", (q.name,))[0][0] == 0


def test_auto_takes_the_bulk_load_where_it_is_the_faster_path_and_method_is_checked(spark, jdbc_url, db):
    """In local mode auto takes the bulk load of the dialects where it measured faster
    (PostgreSQL's COPY), JDBC elsewhere; bulk and jdbc are taken as asked."""
    tgt = pqs.target(jdbc_url)
    load = pqs.BULK_LOADS[type(tgt.sql_dialect)]
    auto = pqs._bulk_method("auto", spark, tgt.sql_dialect, tgt.dsn)
    assert auto is (load if load.preferred else None)
    assert isinstance(pqs.BULK_LOADS[pyqueue_sql.dialects.PostgreSQL], pqs.CopyLoad)
    assert pqs.BULK_LOADS[pyqueue_sql.dialects.PostgreSQL].preferred
    assert pqs._bulk_method("bulk", spark, tgt.sql_dialect, tgt.dsn) is load
    assert pqs._bulk_method("jdbc", spark, tgt.sql_dialect, tgt.dsn) is None
    with pytest.raises(pyqueue_sql.InvalidArgumentError, match="method must be one of auto, bulk, jdbc"):
        pqs._bulk_method("copy", spark, tgt.sql_dialect, tgt.dsn)


@pytest.mark.slow
def test_concurrent_enqueues_report_what_each_enqueued(spark, jdbc_url, make_queue):
    """Two enqueues of overlapping keys run at once from two threads (two Spark
    jobs): each reports its own rows; together they enqueued each key once and
    counted every other row as a duplicate. On PostgreSQL each result is exact
    for its own write (the trigger tallies under the enqueue's own tag); on
    MySQL/MariaDB a flush may move the other writer's rows too, so only the sums
    are exact there."""
    from pyspark.sql import functions as F

    q = make_queue()
    results: dict[int, pqs.IngestResult] = {}
    failures: list[BaseException] = []
    barrier = threading.Barrier(2)

    def run(start: int) -> None:
        try:
            frame = keyed_frame(spark, start, start + 1000, f"from-{start}")
            barrier.wait(timeout=60)
            results[start] = pqs.enqueue(
                frame, jdbc_url, q.name, key="doc_id", kind=F.lit("k"), payload=["n"], batch_size=100
            )
        except BaseException as exc:  # reported below
            failures.append(exc)

    threads = [threading.Thread(target=run, args=(start,)) for start in (0, 500)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=300)
    assert not failures, failures
    assert [r.rows for r in results.values()] == [1000, 1000]
    assert sum(r.enqueued for r in results.values()) == 1500 == q.stats().ready
    assert sum(r.duplicates for r in results.values()) == 500
    if pqs.target(jdbc_url).dialect == "postgresql":
        assert all(r.enqueued + r.duplicates == r.rows for r in results.values())


@pytest.mark.slow
def test_payload_shapes_run_at_and_priority(spark, jdbc_url, make_queue, db):
    from pyspark.sql import functions as F

    q = make_queue()
    later = dt.datetime.now(dt.timezone.utc) + dt.timedelta(hours=1)
    frame = spark.createDataFrame(
        [("a", 1, "x", None, 0), ("b", 2, "y", later, 5), ("c", 3, "z", None, 9)],
        "k string, n long, s string, at timestamp, prio int",
    )
    pqs.enqueue(
        frame,
        jdbc_url,
        q.name,
        key="k",
        kind=F.lit("shape"),
        payload=F.struct(F.col("n"), F.array(F.col("s")).alias("list")),
        run_at="at",
        priority="prio",
    )
    stats = q.stats()
    assert (stats.ready, stats.delayed) == (2, 1)
    got = q.reserve(n=10)
    assert [(r.key, r.priority, r.payload) for r in got] == [
        ("c", 9, {"n": 3, "list": ["z"]}),
        ("a", 0, {"n": 1, "list": ["x"]}),
    ]
    # payload=None: every column not used as key/kind/run_at/priority
    q2 = make_queue()
    pqs.enqueue(
        frame, jdbc_url, q2.name, key="k", kind=F.lit("rest"), payload=None, run_at="at", priority="prio"
    )
    [first] = q2.reserve(n=1)
    assert first.payload == {"n": 3, "s": "z"}
    with pytest.raises(pyqueue_sql.InvalidArgumentError, match="not a column"):
        pqs.enqueue(frame, jdbc_url, q.name, key="nope", kind=F.lit("k"))


@pytest.mark.slow
def test_appends_and_flushes_running_at_once_lose_and_double_nothing(jdbc_url, make_queue, connect):
    """Two writers append disjoint keys in many small transactions while a flusher
    calls queue_ingest_flush and a consumer pops: every key comes out exactly once."""
    q = make_queue()
    writers, per_txn, txns = 2, 50, 12
    popped: list[str] = []
    failures: list[BaseException] = []
    done = threading.Event()

    def guard(fn):
        def run():
            try:
                fn()
            except BaseException as exc:  # reported below
                failures.append(exc)

        return run

    def writer(w: int) -> None:
        db = connect()
        for t in range(txns):
            db.dialect.begin(db.connection)
            cur = db.connection.cursor()
            cur.executemany(
                "INSERT INTO queue_ingest (queue_name, p_key, p_kind, payload) VALUES (%s, %s, %s, %s)",
                [(q.name, f"w{w}-{t}-{i}", "k", "{}") for i in range(per_txn)],
            )
            cur.close()
            db.dialect.commit(db.connection)

    def flusher() -> None:
        db = connect()
        while not done.is_set():
            db.call("ingest_flush", queue=q.name)

    def consumer() -> None:
        db = connect()
        mine = db.queue(q.name)
        while not done.is_set():
            popped.extend(m.key for m in mine.pop(n=100))

    threads = [threading.Thread(target=guard(lambda w=w: writer(w))) for w in range(writers)]
    side = [threading.Thread(target=guard(flusher)), threading.Thread(target=guard(consumer))]
    for t in threads + side:
        t.start()
    for t in threads:
        t.join(timeout=120)
    done.set()
    for t in side:
        t.join(timeout=120)
    assert not failures, failures
    last = connect()
    last.call("ingest_flush", queue=q.name)
    popped.extend(m.key for m in last.queue(q.name).pop(n=10_000))
    expected = {f"w{w}-{t}-{i}" for w in range(writers) for t in range(txns) for i in range(per_txn)}
    assert len(popped) == len(expected) and set(popped) == expected


@pytest.mark.slow
def test_read_stats_of_one_queue_or_all_and_of_an_unknown_queue(spark, jdbc_url, make_queue):
    q = make_queue()
    q.push("a", "k", {})
    q.push("b", "k", {}, run_at=dt.timedelta(hours=1))
    [row] = pqs.read_stats(spark, jdbc_url, q.name).collect()
    assert (row.queue, row.ready, row.delayed, row.reserved, row.paused) == (q.name, 1, 1, 0, False)
    every = {r.queue for r in pqs.read_stats(spark, jdbc_url).collect()}
    assert q.name in every
    with pytest.raises(pyqueue_sql.UnknownQueueError):
        pqs.read_stats(spark, jdbc_url, f"missing-{uuid.uuid4().hex[:6]}")


def test_a_routine_error_is_found_in_driver_text_and_mapped_like_the_client_does():
    text = (
        "Job aborted: java.sql.BatchUpdateException: Batch entry 0 INSERT INTO queue_ingest (...) was aborted: "
        "ERROR: pyqueue:unknown_queue: queue_ingest row with p_key 'a': queue \"nope\" does not exist\n"
        "  Where: PL/pgSQL function pyqueue__ingest() line 43 at RAISE  Call getNextException to see other "
        "errors in the batch.\n\tat org.postgresql.jdbc.BatchResultHandler.handleError(...)"
    )
    mapped = pqs._routine_error(RuntimeError(text))
    assert type(mapped) is pyqueue_sql.UnknownQueueError
    assert str(mapped) == "queue_ingest row with p_key 'a': queue \"nope\" does not exist"
    mysql = "(conn=12) pyqueue:invalid_payload: payload is not valid JSON"
    assert type(pqs._routine_error(RuntimeError(mysql))) is pyqueue_sql.InvalidPayloadError
    assert pqs._routine_error(RuntimeError("Connection refused")) is None


def test_urls_map_between_dsn_and_jdbc():
    pg = pqs.target("postgresql://app:s%40cret@db.example:6543/appdb")
    assert pg.jdbc_url == "jdbc:postgresql://db.example:6543/appdb"
    assert pg.properties == {"user": "app", "password": "s@cret", "driver": "org.postgresql.Driver"}
    assert pg.dsn == "postgresql://app:s%40cret@db.example:6543/appdb"
    my = pqs.target("jdbc:mariadb://db.example/appdb?user=root&useSSL=false")
    assert my.dialect == "mysql" and my.jdbc_url == "jdbc:mysql://db.example:3306/appdb?useSSL=false"
    assert my.dsn == "mysql://root@db.example:3306/appdb"
    assert pqs.write_options(my)["rewriteBatchedStatements"] == "true"
    assert pqs.write_options(pg)["reWriteBatchedInserts"] == "true"
    with pytest.raises(pyqueue_sql.UnsupportedDsnError):
        pqs.target("jdbc:oracle:thin:@x")
    # the ingest tag rides on the startup options, after the caller's own
    props, dsn = pqs._tagged(pqs.target(pg.dsn, {"options": "-c search_path=app"}), "t1")
    assert props["options"] == "-c search_path=app -c pyqueue.ingest_tag=t1"
    assert dsn == (
        "postgresql://app:s%40cret@db.example:6543/appdb"
        "?options=-c%20search_path%3Dapp%20-c%20pyqueue.ingest_tag%3Dt1"
    )


@pytest.mark.slow
def test_concurrent_appends_of_overlapping_keys_enqueue_each_key_once(jdbc_url, make_queue, connect):
    """Two writers append overlapping key ranges at the same time (as two Spark
    jobs re-running the same data would), then one flush: the union, once."""
    q = make_queue()
    barrier = threading.Barrier(2)
    failures: list[BaseException] = []

    def writer(start: int) -> None:
        try:
            db = connect()
            barrier.wait(timeout=30)
            for t in range(start, start + 600, 50):
                db.dialect.begin(db.connection)
                cur = db.connection.cursor()
                cur.executemany(
                    "INSERT INTO queue_ingest (queue_name, p_key, p_kind, payload) VALUES (%s, %s, %s, %s)",
                    [(q.name, f"key-{i:04d}", "k", json.dumps({"by": start})) for i in range(t, t + 50)],
                )
                cur.close()
                db.dialect.commit(db.connection)
        except BaseException as exc:  # reported below
            failures.append(exc)

    threads = [threading.Thread(target=writer, args=(start,)) for start in (0, 300)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=120)
    assert not failures, failures
    connect().call("ingest_flush", queue=q.name)
    keys = [m.key for m in connect().queue(q.name).pop(n=10_000)]
    assert sorted(keys) == [f"key-{i:04d}" for i in range(900)]


# -- read_history -----------------------------------------------------------------
# It reads pyqueue_history (queue_name, p_key, p_kind, payload, priority, attempts,
# created_at, processed_at, outcome: 'committed', 'popped', 'dead_lettered', 'moved'; id),
# written for queues created with a history_retention.


@pytest.mark.slow
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
