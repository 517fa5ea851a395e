"""What `Queue.stats()` (queue_stats: the depth the dashboard, the metrics and `pyqueue-sql stats`
show) costs on a queue of N live messages in a table with dead rows, after ANALYZE: the figures
of bench/latest/stats-bounded.md.

    python scripts/measure_stats.py postgresql://postgres@127.0.0.1:5432/postgres
    python scripts/measure_stats.py mysql://root@127.0.0.1:3306/mysql [--live 100000 --dead 300000]

(Before a change: the same script with PYTHONPATH at an export of the earlier commit, e.g.
`git archive COMMIT | tar -x -C /tmp/before`, so that the package and its routines are that one's.)

In a database of its own (made from the server DSN given, dropped at the end): installs head, turns autovacuum off for pyqueue_message (PostgreSQL:
the dead rows stay, as under a long transaction or a vacuum that is behind), writes --dead
messages and deletes them (the consumed ones: scheduled before the live ones), then --live messages (one INSERT ... SELECT each, not through the
routines; 1% of them delayed, 0.5% reserved), runs ANALYZE, and times --calls calls of
Queue.stats() (after one to warm the cache). Prints the times, the counts it returned beside
the exact ones, and what a producer that reads the depth before each batch of 100 pushes
reaches for --producer-s seconds."""

from __future__ import annotations

import argparse
import time
import uuid

import pyqueue_sql
from pyqueue_sql import dialects, migrate

FILL = {
    "postgresql": """INSERT INTO pyqueue_message (queue_name, p_key, p_kind, payload, scheduled_at,
                        scheduled_at_initially, created_at, reserve_token)
                     SELECT 'big', '{prefix}' || g, 'job', '{{"n": 1, "pad": "{pad}"}}',
                            CASE WHEN g % 200 = 0 THEN now() + interval '10 minutes'
                                 WHEN g % 100 = 1 THEN now() + interval '1 hour'
                                 ELSE now() - interval '{age} seconds' + g * interval '1 ms' END,
                            now(), now(), CASE WHEN g % 200 = 0 THEN gen_random_uuid() END
                       FROM generate_series(1, {rows}) g""",
    # ready_at (the reserve order): the due time, or for a held row (its lease's end in scheduled_at)
    # when it was due before it was claimed
    "mysql": """INSERT INTO pyqueue_message (queue_name, p_key, p_kind, payload, scheduled_at,
                   scheduled_at_initially, created_at, reserve_token, ready_at)
                SELECT 'big', CONCAT('{prefix}', seq), 'job', '{{"n": 1, "pad": "{pad}"}}',
                       CASE WHEN seq % 200 = 0 THEN UTC_TIMESTAMP(6) + INTERVAL 10 MINUTE
                            WHEN seq % 100 = 1 THEN UTC_TIMESTAMP(6) + INTERVAL 1 HOUR
                            ELSE UTC_TIMESTAMP(6) - INTERVAL {age} SECOND + INTERVAL seq * 1000 MICROSECOND END,
                       UTC_TIMESTAMP(6), UTC_TIMESTAMP(6), CASE WHEN seq % 200 = 0 THEN UUID() END,
                       CASE WHEN seq % 100 = 1 THEN UTC_TIMESTAMP(6) + INTERVAL 1 HOUR
                            ELSE UTC_TIMESTAMP(6) - INTERVAL {age} SECOND + INTERVAL seq * 1000 MICROSECOND END
                  FROM seq_1_to_{rows}""",
}
EXACT = {
    "postgresql": """SELECT count(*) FILTER (WHERE scheduled_at <= now()),
                            count(*) FILTER (WHERE scheduled_at > now() AND reserve_token IS NULL),
                            count(*) FILTER (WHERE scheduled_at > now() AND reserve_token IS NOT NULL)
                       FROM pyqueue_message WHERE queue_name = 'big'""",
    "mysql": """SELECT SUM(scheduled_at <= UTC_TIMESTAMP(6)),
                       SUM(scheduled_at > UTC_TIMESTAMP(6) AND reserve_token IS NULL),
                       SUM(scheduled_at > UTC_TIMESTAMP(6) AND reserve_token IS NOT NULL)
                  FROM pyqueue_message WHERE queue_name = 'big'""",
}
PREPARE = {
    "postgresql": ["ALTER TABLE pyqueue_message SET (autovacuum_enabled = false)"],
    "mysql": [],
}
ANALYZE = {"postgresql": "ANALYZE pyqueue_message", "mysql": "ANALYZE TABLE pyqueue_message"}


def run(dsn: str, statement: str, fetch: bool = False) -> list | None:
    connection = dialects.for_dsn(dsn).connect(dsn)
    try:
        cursor = connection.cursor()
        cursor.execute(statement)
        rows = list(cursor.fetchall()) if fetch else None
        connection.commit()
        return rows
    finally:
        connection.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("server_dsn")
    parser.add_argument("--live", type=int, default=100_000)
    parser.add_argument("--dead", type=int, default=300_000)
    parser.add_argument("--calls", type=int, default=20)
    parser.add_argument("--producer-s", type=float, default=3.0)
    parser.add_argument(
        "--vacuum", action="store_true", help="PostgreSQL: VACUUM before ANALYZE (bloat, no dead rows)"
    )
    parser.add_argument("--keep", action="store_true", help="keep the database (its name is printed)")
    args = parser.parse_args()
    dialect = dialects.for_dsn(args.server_dsn)
    name = f"pyqueue_measure_{uuid.uuid4().hex[:8]}"
    base = args.server_dsn.rsplit("/", 1)[0]
    admin = dialect.connect(args.server_dsn, autocommit=True)
    admin.cursor().execute(f"CREATE DATABASE {name}")
    dsn = f"{base}/{name}"
    try:
        migrate.upgrade(dsn)
        with pyqueue_sql.connect(dsn) as db:
            db.queue("big").create()
        for statement in PREPARE[dialect.name]:
            run(dsn, statement)
        pad = "x" * 64
        fill = FILL[dialect.name]
        if args.dead:
            run(dsn, fill.format(prefix="d", pad=pad, rows=args.dead, age=7200))
            run(dsn, "DELETE FROM pyqueue_message WHERE p_key LIKE 'd%'")
        run(dsn, fill.format(prefix="k", pad=pad, rows=args.live, age=3600))
        if args.vacuum and dialect.name == "postgresql":
            run(dsn, "VACUUM pyqueue_message")
        run(dsn, ANALYZE[dialect.name], fetch=dialect.name == "mysql")
        exact = run(dsn, EXACT[dialect.name], fetch=True)[0]
        with pyqueue_sql.connect(dsn) as db:
            queue = db.queue("big")
            stats = queue.stats()
            times = []
            for _ in range(args.calls):
                t0 = time.perf_counter()
                stats = queue.stats()
                times.append((time.perf_counter() - t0) * 1000)
            times.sort()
            print(
                f"{dialect.name}: {args.live} live + {args.dead} dead rows"
                f"{' (vacuumed: the pages left empty)' if args.vacuum else ''}, after ANALYZE: "
                f"Queue.stats() over {args.calls} calls: min {times[0]:.2f} ms, "
                f"median {times[len(times) // 2]:.2f} ms, max {times[-1]:.2f} ms"
            )
            print(
                f"{dialect.name}: returned ready {stats.ready}, delayed {stats.delayed}, reserved "
                f"{stats.reserved}; exact ready {int(exact[0])}, delayed {int(exact[1])}, "
                f"reserved {int(exact[2])}"
            )
            if args.producer_s > 0:
                pushed, n, t_end = 0, 0, time.monotonic() + args.producer_s
                t0 = time.monotonic()
                while time.monotonic() < t_end:
                    queue.stats()
                    queue.push_many([(f"p{n}-{i}", "job", {"n": i}) for i in range(100)])
                    pushed += 100
                    n += 1
                rate = pushed / (time.monotonic() - t0)
                print(
                    f"{dialect.name}: a producer that reads the depth before each batch of 100: "
                    f"{rate:,.0f} jobs/s"
                )
    finally:
        if args.keep:
            print(f"kept: {dsn}")
        else:
            admin.cursor().execute(f"DROP DATABASE {name}")
        admin.close()


if __name__ == "__main__":
    main()
