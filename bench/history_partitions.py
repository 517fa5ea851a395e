"""Does a time-partitioned pyqueue_history purge cheaper than batched DELETE? (PostgreSQL)

Builds, side by side in one scratch database, the plain history table (as in
sql/postgresql/schema.sql) and a copy range-partitioned by day on
processed_at, fills both with the same rows (DAYS days x ROWS_PER_DAY), then
measures:

  purge    removing the oldest day: batched DELETE (queue_purge_history's
           statement, 10000 rows a batch) + the VACUUM that reclaims the
           space, versus DROP of that day's partition;
  archive  the hot-path cost: single-row INSERTs as pyqueue__archive does them;
  replay   reading one hour of one queue by (queue_name, processed_at).

Prints ratios measured in one run (other work on the machine skews absolute
times; the ratios are what to compare).

    .venv/bin/python bench/history_partitions.py [postgresql://postgres@127.0.0.1/postgres] [rows_per_day]
"""

from __future__ import annotations

import sys
import time
import uuid

import psycopg

ADMIN = sys.argv[1] if len(sys.argv) > 1 else "postgresql://postgres@127.0.0.1/postgres"
ROWS_PER_DAY = int(sys.argv[2]) if len(sys.argv) > 2 else 100_000
DAYS = 8
QUEUES = 4

COLUMNS = """
    id           bigint       GENERATED ALWAYS AS IDENTITY,
    queue_name   varchar(128) NOT NULL,
    p_key        varchar(255) NOT NULL,
    p_kind       varchar(128) NOT NULL,
    payload      jsonb        NOT NULL,
    priority     integer      NOT NULL,
    attempts     integer      NOT NULL,
    created_at   timestamptz  NOT NULL,
    processed_at timestamptz  NOT NULL,
    outcome      varchar(16)  NOT NULL,
    to_queue     varchar(128) NULL,
    reserved_by  varchar(255) NULL"""

FILL = """
INSERT INTO {table} (queue_name, p_key, p_kind, payload, priority, attempts, created_at,
                     processed_at, outcome, reserved_by)
SELECT 'q' || (i % {queues}), 'key-' || i, 'job', jsonb_build_object('n', i, 'text', 'some payload text'),
       0, 1, t, t, 'committed', 'host:1234'
  FROM generate_series(1, {n}) AS i,
       LATERAL (SELECT timestamptz '2026-01-01' + (i::float8 / {per_day}) * interval '1 day') AS x(t)
"""


def timed(conn, sql, repeat=1):
    start = time.perf_counter()
    for _ in range(repeat):
        conn.execute(sql)
    return time.perf_counter() - start


def main() -> None:
    name = f"pyqueue_bench_{uuid.uuid4().hex[:8]}"
    with psycopg.connect(ADMIN, autocommit=True) as admin:
        admin.execute(f'CREATE DATABASE "{name}"')
    dsn = ADMIN.rsplit("/", 1)[0] + "/" + name
    try:
        with psycopg.connect(dsn, autocommit=True) as c:
            c.execute(f"CREATE TABLE plain ({COLUMNS}, PRIMARY KEY (id))")
            c.execute("CREATE INDEX ON plain (queue_name, processed_at)")
            c.execute(f"CREATE TABLE parted ({COLUMNS}) PARTITION BY RANGE (processed_at)")
            c.execute("CREATE INDEX ON parted (queue_name, processed_at)")
            for d in range(DAYS + 1):
                c.execute(
                    f"CREATE TABLE parted_d{d} PARTITION OF parted FOR VALUES FROM "
                    f"(timestamptz '2026-01-01' + interval '{d} days') TO "
                    f"(timestamptz '2026-01-01' + interval '{d + 1} days')"
                )
            n = ROWS_PER_DAY * DAYS
            for table in ("plain", "parted"):
                c.execute(FILL.format(table=table, queues=QUEUES, n=n, per_day=ROWS_PER_DAY))
            c.execute("VACUUM ANALYZE plain")
            c.execute("VACUUM ANALYZE parted")

            cutoff = "timestamptz '2026-01-02'"
            # batched DELETE, as queue_purge_history does it (per queue, oldest first, 10000 a batch)
            start = time.perf_counter()
            deleted = 0
            for q in range(QUEUES):
                while True:
                    cur = c.execute(f"""
                        WITH doomed AS (SELECT id FROM plain WHERE queue_name = 'q{q}' AND processed_at < {cutoff}
                                         ORDER BY processed_at LIMIT 10000 FOR UPDATE SKIP LOCKED)
                        DELETE FROM plain p USING doomed WHERE p.id = doomed.id""")
                    deleted += cur.rowcount
                    if cur.rowcount < 10000:
                        break
            t_delete = time.perf_counter() - start
            t_vacuum = timed(c, "VACUUM plain")
            t_drop = timed(c, "DROP TABLE parted_d0")

            # the hot path: single-row archive inserts
            rows = 20_000
            ins = (
                "INSERT INTO {t} (queue_name, p_key, p_kind, payload, priority, attempts, created_at, "
                "processed_at, outcome) VALUES ('q0', 'k' || %s, 'job', '{{\"n\": 1}}', 0, 1, "
                "timestamptz '2026-01-08 12:00', timestamptz '2026-01-08 12:00' + %s * interval '1 ms', 'committed')"
            )
            t_ins = {}
            for table in ("plain", "parted"):
                start = time.perf_counter()
                with c.transaction():
                    for i in range(rows):
                        c.execute(ins.format(t=table), (i, i))
                t_ins[table] = time.perf_counter() - start

            # replay's read: one queue, one hour
            read = (
                "SELECT count(*) FROM {t} WHERE queue_name = 'q1' AND processed_at >= timestamptz '2026-01-05' "
                "AND processed_at < timestamptz '2026-01-05 01:00'"
            )
            t_read = {t: timed(c, read.format(t=t), repeat=50) for t in ("plain", "parted")}

        print(
            f"history rows: {ROWS_PER_DAY * DAYS} over {DAYS} days, {QUEUES} queues; purging one day = {deleted} rows"
        )
        print(f"  batched DELETE        {t_delete * 1000:9.1f} ms")
        print(f"  + VACUUM              {t_vacuum * 1000:9.1f} ms")
        print(f"  DROP partition        {t_drop * 1000:9.1f} ms")
        print(f"  purge ratio (DELETE+VACUUM) / DROP: {(t_delete + t_vacuum) / t_drop:8.0f}x")
        print(f"  per purged row: DELETE {1e6 * t_delete / deleted:.2f} us")
        print(
            f"archive insert, {rows} single rows: plain {t_ins['plain'] * 1000:.0f} ms, "
            f"partitioned {t_ins['parted'] * 1000:.0f} ms (ratio {t_ins['parted'] / t_ins['plain']:.2f})"
        )
        print(
            f"replay read x50: plain {t_read['plain'] * 1000:.1f} ms, partitioned "
            f"{t_read['parted'] * 1000:.1f} ms (ratio {t_read['parted'] / t_read['plain']:.2f})"
        )
    finally:
        with psycopg.connect(ADMIN, autocommit=True) as admin:
            admin.execute(f'DROP DATABASE IF EXISTS "{name}"')


if __name__ == "__main__":
    main()
