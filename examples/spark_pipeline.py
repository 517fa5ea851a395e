"""A data pipeline on Spark that feeds pyqueue-sql, drains it, and reports on it.

    .venv/bin/python examples/spark_pipeline.py                         # 1,000,000 users
    .venv/bin/python examples/spark_pipeline.py --rows 50000 --dsn mysql://root@127.0.0.1:3306/app
    .venv/bin/python examples/spark_pipeline.py --demo                  # what `make demo` runs (20,000)

1. Job 1 (PySpark, local mode) writes a dataset of users to Parquet, reads it
   back, computes the messages to send (a win-back e-mail for users idle for a
   month, a search re-index for recently changed profiles, with priorities)
   and enqueues them with pyqueue_sql.spark.enqueue: an append into
   queue_ingest (PostgreSQL: COPY from Spark's Python workers, in local mode;
   MySQL/MariaDB: JDBC batches, then CALL queue_ingest_flush). It then runs
   the same enqueue again, as a retried job would: nothing is enqueued twice.
2. Workers drain the queue with a plain reserve/commit loop of pyqueue-sql's
   client (threads, one connection each). (The worker runtime with LISTEN
   wakeups is a separate feature; this loop is all the example needs.)
3. Job 2 reads the history of the queue back with pyqueue_sql.spark.read_history
   (a partitioned parallel JDBC read of pyqueue_history) and reports per-kind
   counts and latency percentiles. Where the database has no pyqueue_history
   table yet, it says so and reports from the workers' own records instead.

Database: --dsn, else $PYQUEUE_DSN, else the demo's embedded PostgreSQL
(.pyqueue-demo/pgdata, the `embedded` extra), reached over a free localhost TCP
port: Spark's JDBC cannot use the server's Unix socket, so a small forwarder in
pyqueue_sql.demo gives it one. Never "whatever answers on 5432".
"""

from __future__ import annotations

import argparse
import datetime as dt
import os
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import pyqueue_sql  # noqa: E402
from pyqueue_sql import migrate  # noqa: E402
from pyqueue_sql import spark as pqs  # noqa: E402

QUEUE = "pipeline.notify"
DEMO_ROWS = 20_000


def say(text: str = "") -> None:
    print(text, flush=True)


@contextmanager
def database(dsn: str | None) -> Iterator[tuple[str, str]]:
    """(DSN for Spark, DSN for the Python clients): the given one, $PYQUEUE_DSN, or the
    embedded PostgreSQL (Spark over localhost TCP, the Python clients on its Unix socket)."""
    dsn = dsn or os.environ.get("PYQUEUE_DSN")
    if dsn:
        yield dsn, dsn
        return
    from pyqueue_sql.demo import embedded_dsns

    started = time.monotonic()
    with embedded_dsns() as (socket_dsn, tcp_dsn):
        say(
            f"database: embedded PostgreSQL (.pyqueue-demo/pgdata), up in {time.monotonic() - started:.1f} s; "
            f"Spark reaches it over TCP at {tcp_dsn}"
        )
        yield tcp_dsn, socket_dsn


# -- job 1 ---------------------------------------------------------------------------


def write_dataset(spark, path: str, rows: int) -> None:
    """The input: a users table as Parquet, made locally (deterministic)."""
    from pyspark.sql import functions as F

    now = F.lit(dt.datetime(2026, 11, 22, tzinfo=dt.timezone.utc))
    (
        spark.range(0, rows, numPartitions=4)
        .select(
            F.col("id").alias("user_id"),
            F.format_string("user%d@example.com", F.col("id")).alias("email"),
            F.element_at(
                F.array(*[F.lit(c) for c in ("DE", "FR", "US", "BR", "JP")]),
                (F.col("id") % 5 + 1).cast("int"),
            ).alias("country"),
            F.when(F.col("id") % 10 == 0, F.lit("premium")).otherwise(F.lit("free")).alias("plan"),
            (now - F.make_interval(days=(F.col("id") * 7919 % 90).cast("int"))).alias("last_login"),
            (now - F.make_interval(hours=(F.col("id") * 104729 % 200).cast("int"))).alias("profile_changed"),
        )
        .write.mode("overwrite")
        .parquet(path)
    )


def compute_messages(spark, path: str):
    """One message per user: a win-back e-mail when idle for 30+ days, else a
    search re-index when the profile changed in the last 48 hours; premium first."""
    from pyspark.sql import functions as F

    now = F.lit(dt.datetime(2026, 11, 22, tzinfo=dt.timezone.utc))
    users = spark.read.parquet(path)
    winback = users.where(F.col("last_login") < now - F.expr("INTERVAL 30 DAYS")).select(
        F.format_string("user-%d", "user_id").alias("key"),
        F.lit("email.winback").alias("kind"),
        F.to_json(F.struct("email", "country", "plan")).alias("payload"),
        F.when(F.col("plan") == "premium", 5).otherwise(0).alias("priority"),
    )
    reindex = users.where(
        (F.col("last_login") >= now - F.expr("INTERVAL 30 DAYS"))
        & (F.col("profile_changed") >= now - F.expr("INTERVAL 48 HOURS"))
    ).select(
        F.format_string("user-%d", "user_id").alias("key"),
        F.lit("search.reindex").alias("kind"),
        F.to_json(F.struct("user_id", "country")).alias("payload"),
        F.lit(1).alias("priority"),
    )
    return winback.unionByName(reindex)


# -- workers -------------------------------------------------------------------------


def drain(dsn: str, expected: int, workers: int, timeout: float) -> list[tuple[str, float, float]]:
    """Reserve/commit loops in threads until `expected` messages are committed.
    Returns (kind, created_at, done_at) per message, the workers' own record."""
    done: list[tuple[str, float, float]] = []
    lock = threading.Lock()
    stop = threading.Event()
    errors: list[BaseException] = []

    def work(i: int) -> None:
        try:
            with pyqueue_sql.connect(dsn) as db:
                q = db.queue(QUEUE)
                while not stop.is_set():
                    batch = q.reserve(n=500, worker=f"example-worker-{i}", timeout=60)
                    if not batch:
                        time.sleep(0.05)
                        continue
                    mine = []
                    for r in batch:
                        # the work would go here: send the e-mail, re-index the profile
                        if q.commit(r):
                            mine.append((r.kind, r.created_at.timestamp(), time.time()))
                    with lock:
                        done.extend(mine)
                        if len(done) >= expected:
                            stop.set()
        except BaseException as exc:
            errors.append(exc)
            stop.set()

    threads = [threading.Thread(target=work, args=(i,), daemon=True) for i in range(workers)]
    for t in threads:
        t.start()
    stop.wait(timeout)
    stop.set()
    for t in threads:
        t.join(timeout=30)
    if errors:
        raise errors[0]
    return done


# -- job 2 ---------------------------------------------------------------------------


def report(spark, dsn: str, since: dt.datetime, records: list[tuple[str, float, float]]) -> None:
    from pyspark.sql import functions as F

    try:
        history = pqs.read_history(spark, dsn, QUEUE, since, None, num_partitions=4)
        history = history.where(F.col("outcome") == "committed").select(
            "p_kind",
            (F.col("processed_at").cast("double") - F.col("created_at").cast("double")).alias("latency_s"),
        )
        history.first()
        source = "pyqueue_history (read_history: 4 parallel JDBC partitions on processed_at)"
    except Exception as exc:
        if "pyqueue_history" not in str(exc):
            raise
        say(
            "job 2:    this database has no pyqueue_history table yet (the history feature is not installed);"
        )
        say("          reporting from the workers' own records instead")
        history = spark.createDataFrame(
            [(k, d - c) for k, c, d in records], "p_kind string, latency_s double"
        )
        source = "the workers' records"
    rows = (
        history.groupBy("p_kind")
        .agg(
            F.count(F.lit(1)).alias("n"),
            F.percentile_approx("latency_s", [0.5, 0.9, 0.99], 1000).alias("p"),
            F.max("latency_s").alias("max"),
        )
        .orderBy("p_kind")
        .collect()
    )
    say(f"job 2:    per-kind counts and latency (enqueue -> commit) from {source}")
    say(f"          {'kind':16s} {'messages':>9s} {'p50':>8s} {'p90':>8s} {'p99':>8s} {'max':>8s}")
    for r in rows:
        p50, p90, p99 = r.p
        say(f"          {r.p_kind:16s} {r.n:9,d} {p50:7.2f}s {p90:7.2f}s {p99:7.2f}s {r.max:7.2f}s")


# -- main ----------------------------------------------------------------------------


def run(dsn: str, rows: int, workers: int, timeout: float, client_dsn: str | None = None) -> int:
    """dsn: the database as Spark reaches it (JDBC); client_dsn: for the Python clients (default dsn)."""
    client_dsn = client_dsn or dsn
    migrate.upgrade(client_dsn)
    with pyqueue_sql.connect(client_dsn) as db:
        try:
            db.queue(QUEUE).drop()
        except pyqueue_sql.UnknownQueueError:
            pass
        db.queue(QUEUE).create(visibility_timeout=60, history_retention=dt.timedelta(days=7))
    since = dt.datetime.now(dt.timezone.utc) - dt.timedelta(seconds=1)
    started = time.monotonic()
    spark = pqs.session("pyqueue-spark-pipeline")
    say(
        f"spark:    local session up in {time.monotonic() - started:.1f} s "
        f"(JDBC jars: {', '.join(os.path.basename(j) for j in pqs.jdbc_jars())})"
    )
    try:
        with tempfile.TemporaryDirectory(prefix="pyqueue-spark-") as tmp:
            path = os.path.join(tmp, "users.parquet")
            t = time.monotonic()
            write_dataset(spark, path, rows)
            say(f"dataset:  {rows:,} users written to Parquet in {time.monotonic() - t:.1f} s")
            messages = compute_messages(spark, path).cache()
            total = messages.count()
            kinds = {r.kind: r["count"] for r in messages.groupBy("kind").count().collect()}
            say(
                f"job 1:    {total:,} messages computed: "
                + ", ".join(f"{n:,} {k}" for k, n in sorted(kinds.items()))
            )
            t = time.monotonic()
            result = pqs.enqueue(
                messages,
                dsn,
                QUEUE,
                key="key",
                kind="kind",
                payload="payload",
                priority="priority",
                num_partitions=2,
            )
            took = time.monotonic() - t
            with pyqueue_sql.connect(client_dsn) as db:
                live = db.queue(QUEUE).stats().ready
            say(
                f"          enqueued through queue_ingest in {took:.1f} s ({total / took:,.0f} rows/s): "
                f"{live:,} live messages"
                + (f" (flush: {result.enqueued:,} new)" if result.enqueued is not None else "")
            )
            t = time.monotonic()
            again = pqs.enqueue(
                messages,
                dsn,
                QUEUE,
                key="key",
                kind="kind",
                payload="payload",
                priority="priority",
                num_partitions=2,
            )
            with pyqueue_sql.connect(client_dsn) as db:
                live_again = db.queue(QUEUE).stats().ready
            say(
                f"          re-run of the same job in {time.monotonic() - t:.1f} s: {live_again:,} live messages "
                + ("(dedup: nothing enqueued twice)" if live_again == live else "(UNEXPECTED: duplicates)")
                + (f", flush: {again.duplicates:,} duplicates" if again.duplicates is not None else "")
            )
            messages.unpersist()
        t = time.monotonic()
        records = drain(client_dsn, live, workers, timeout)
        took = time.monotonic() - t
        say(
            f"workers:  {workers} reserve/commit loops committed {len(records):,} messages in {took:.1f} s "
            f"({len(records) / max(took, 1e-9):,.0f}/s)"
        )
        report(spark, dsn, since, records)
    finally:
        spark.stop()
    ok = live == total and live_again == live and len(records) == live
    if not ok:
        say(f"FAILED: computed {total}, live {live}, after re-run {live_again}, committed {len(records)}")
        return 1
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "--rows", type=int, default=1_000_000, help="users in the dataset (default 1,000,000)"
    )
    parser.add_argument(
        "--dsn",
        help="postgresql://... or mysql://... (default $PYQUEUE_DSN, else the "
        "embedded PostgreSQL over a localhost TCP port)",
    )
    parser.add_argument("--workers", type=int, default=3)
    parser.add_argument("--timeout", type=float, default=1800.0, help="seconds the workers may take")
    parser.add_argument(
        "--demo",
        action="store_true",
        help=f"the `make demo` stage: {DEMO_ROWS:,} users, and a plain message when it cannot run",
    )
    args = parser.parse_args(argv)
    rows = DEMO_ROWS if args.demo and args.rows == 1_000_000 else args.rows
    say()
    say("== Spark stage: bulk enqueue from a PySpark job, workers, history report ==")
    missing = pqs.missing_requirements()
    if missing:
        java = [m for m in missing if "Java" in m]
        if java:
            say(
                "Spark stage SKIPPED: Java is not installed. The Spark stage needs a Java 17+ runtime "
                "(apt-get install default-jre-headless, or set JAVA_HOME); install it and run this again."
            )
        others = [m for m in missing if "Java" not in m]
        if others:
            say("Spark stage SKIPPED: " + "; ".join(others))
        return 0 if args.demo else 1
    from pyqueue_sql.display import describe_error, redact_dsn
    from pyqueue_sql.embedded import EmbeddedPostgresError

    try:
        with database(args.dsn) as (dsn, client_dsn):
            if args.dsn or os.environ.get("PYQUEUE_DSN"):
                say(f"database: {redact_dsn(dsn)}")
            return run(dsn, rows, args.workers, args.timeout, client_dsn)
    except EmbeddedPostgresError as exc:
        say(f"Spark stage SKIPPED: {describe_error(exc)}")
        return 0 if args.demo else 1


if __name__ == "__main__":
    raise SystemExit(main())
