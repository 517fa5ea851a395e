"""Spark bulk enqueue through queue_ingest against a plain JDBC append, side by side: plain, direct
(straight into pyqueue_message), ingest (JDBC + the trigger / flush), load, bulk (COPY / LOAD DATA
from Spark's Python workers), rerun (every row a duplicate): rows/s and ratios to plain, also in
bench/results/spark_ingest.json. Method and figures: bench/spark.md."""

from __future__ import annotations

import json
import sys
import time
from functools import partial
from pathlib import Path

import pyqueue_sql
from bench import common
from pyqueue_sql import spark as pqs
from pyqueue_sql.queries import parse_named

HERE = Path(__file__).resolve().parent
QUEUE = "bench.ingest"
COLUMNS = {"key": "key", "kind": "kind", "payload": "payload"}  # the frame's columns


def run_sql(url: str, statement: str) -> None:
    common.execute("postgresql" if url.startswith("postgresql") else "mysql", url, statement)


def frame(spark, rows: int, partitions: int):
    from pyspark.sql import functions as F

    df = spark.range(0, rows, numPartitions=partitions).select(
        F.format_string("msg-%08d", F.col("id")).alias("key"),
        F.lit("notify").alias("kind"),
        F.to_json(
            F.struct(
                F.col("id").alias("user_id"),
                F.format_string("user%d@example.com", F.col("id")).alias("to"),
                (F.col("id") % 100).alias("segment"),
            )
        ).alias("payload"),
    )
    df = df.cache()
    df.count()
    # the Python workers the bulk path runs in started (once a session), so that no step counts their start
    spark.sparkContext.parallelize(range(partitions), partitions).map(lambda x: x).count()
    return df


def bench_dialect(spark, dialect: str, rows: int, partitions: int, batch: int, repeat: int) -> list[dict]:
    results = []
    with common.database(dialect, "spark", QUEUE) as url:
        statements = parse_named((HERE / "spark_ingest.sql").read_text())
        run_sql(url, statements[f"plain_table_{dialect}"])
        df = frame(spark, rows, partitions)
        tgt = pqs.target(url)
        opts = pqs.write_options(tgt, batch)
        for r in range(repeat):
            with pyqueue_sql.connect(url) as db:
                db.call("stats", queue=None)
                run_sql(url, statements["truncate_plain"])
                run_sql(url, statements["clear_queue"])  # (queue_drop + queue_create would do too)
            ingest_df = pqs.ingest_frame(df, QUEUE, **COLUMNS, dialect=dialect)
            t = time.perf_counter()
            ingest_df.write.jdbc(tgt.jdbc_url, "bench_plain", mode="append", properties=opts)
            plain = time.perf_counter() - t

            # The floor: the same rows appended straight into the live table (no dedup, no checks;
            # fresh keys only): what pyqueue_message's own indexes and foreign key cost.
            from pyspark.sql import functions as F

            times_at = [
                F.current_timestamp().alias(c)
                for c in ("scheduled_at", "scheduled_at_initially", "created_at")
            ]
            direct_df = ingest_df.select(
                "queue_name", "p_key", "p_kind", "payload", F.lit(0).alias("priority"), *times_at
            )
            if dialect == "mysql":
                stamp = lambda c: F.date_format(c, "yyyy-MM-dd HH:mm:ss.SSSSSS").alias(c)  # noqa: E731
                direct_df = direct_df.select(
                    *[stamp(c) if c.endswith("_at") else F.col(c) for c in direct_df.columns]
                )
            t = time.perf_counter()
            direct_df.write.jdbc(tgt.jdbc_url, "pyqueue_message", mode="append", properties=opts)
            direct = time.perf_counter() - t
            run_sql(url, statements["clear_queue"])

            enqueue = partial(pqs.enqueue, df, url, QUEUE, **COLUMNS, properties={}, batch_size=batch)
            # The bulk load alone: the rows reach queue_ingest and are not enqueued
            # (PostgreSQL: trigger off; MySQL/MariaDB: no flush), i.e. what the append costs.
            load_rows = pqs.ingest_frame(df, QUEUE, **COLUMNS, dialect=dialect)
            if f"load_only_{dialect}" in statements:
                run_sql(url, statements[f"load_only_{dialect}"])
            t = time.perf_counter()
            pqs.bulk_load(load_rows, pqs.BULK_LOADS[type(tgt.sql_dialect)], tgt.dsn, batch)
            load = time.perf_counter() - t
            if f"load_done_{dialect}" in statements:
                run_sql(url, statements[f"load_done_{dialect}"])
            run_sql(url, statements["empty_ingest"])

            ingest, live = timed_enqueue(enqueue, "jdbc", url)
            run_sql(url, statements["clear_queue"])
            bulk, live_bulk = timed_enqueue(enqueue, "bulk", url)
            rerun, live_after = timed_enqueue(enqueue, "bulk", url)
            times = dict(plain=plain, direct=direct, ingest=ingest, load=load, bulk=bulk, rerun=rerun)
            row = {"dialect": dialect, "round": r + 1, "rows": rows, "partitions": partitions}
            row |= {"batch": batch, **{f"{k}_rows_s": rows / t for k, t in times.items()}}
            row |= {f"{k}_vs_plain": plain / t for k, t in times.items() if k != "plain"}
            row |= {"ingest_vs_direct": direct / ingest, "bulk_vs_direct": direct / bulk}
            row |= {"live_after_ingest": live, "live_after_bulk": live_bulk, "live_after_rerun": live_after}
            results.append(row)
            shown = "  ".join(
                f"{k} {row[f'{k}_rows_s']:9,.0f} rows/s"
                + (f" ({row[f'{k}_vs_plain']:.0%})" if k != "plain" else "")
                for k in times
            )
            print(f"{dialect:10s} round {r + 1}: {shown}  live {live}/{live_bulk}/{live_after}", flush=True)
            if {live, live_bulk, live_after} != {rows}:
                raise SystemExit(
                    f"{dialect}: expected {rows} live messages, got {live}, {live_bulk} then {live_after}"
                )
        df.unpersist()
    return results


def timed_enqueue(enqueue, method: str, url: str) -> tuple[float, int]:
    """Seconds one enqueue with ``method`` took, and the live messages of the queue after it."""
    t = time.perf_counter()
    enqueue(method=method)
    seconds = time.perf_counter() - t
    with pyqueue_sql.connect(url) as db:
        return seconds, db.queue(QUEUE).stats().ready


def main(argv: list[str] | None = None) -> int:
    options = ("--rows", 1_000_000, ""), ("--partitions", 2, ""), ("--batch", pqs.DEFAULT_BATCH_SIZE, "")
    parser = common.parser(
        __doc__, *options, ("--repeat", 1, ""), ("--dialect", ("both", "postgresql", "mysql"), "")
    )
    args = parser.parse_args(argv)
    common.exit_on_sigterm()
    if missing := pqs.missing_requirements():
        print("cannot run: " + "; ".join(missing), file=sys.stderr)
        return 1
    spark = pqs.session("pyqueue-bench-spark")
    results = []
    for dialect in ["postgresql", "mysql"] if args.dialect == "both" else [args.dialect]:
        results += bench_dialect(spark, dialect, args.rows, args.partitions, args.batch, args.repeat)
    spark.stop()
    (HERE / "results").mkdir(exist_ok=True)
    (HERE / "results" / "spark_ingest.json").write_text(json.dumps(results, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
