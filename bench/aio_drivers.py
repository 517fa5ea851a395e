"""Which asyncio MySQL driver pyqueue_sql.aio uses: aiomysql or asyncmy, measured on MariaDB.

The routines are stored procedures: a CALL sends each SELECT inside it as a result set, then a
status result without rows. The client must read every set (nextset) before the next statement,
and queue_commit_reserve sends two (the reserved rows, then the commit's result). For each driver
this checks that every call's result sets are exactly those PyMySQL (the sync client's driver)
reads, that the connection stays usable call after call, and measures calls per second of
queue_reserve, queue_commit_reserve (one message at a time, as a worker consumes) and queue_stats
on one connection.

    .venv/bin/python bench/aio_drivers.py [--messages 3000] [--rounds 3]

Needs a MariaDB/MySQL server at $BENCH_MYSQL_DSN (default mysql://root@127.0.0.1:3306/);
creates and drops its own database. Prints a table; the figures are machine-dependent, the
ratio between the drivers is what the choice rests on.
"""

from __future__ import annotations

import argparse
import asyncio
import inspect
import statistics
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench import common  # noqa: E402
from pyqueue_sql import dialects  # noqa: E402

RESERVE = "CALL queue_reserve(%s, 'bench', NULL, %s, NULL)"
COMMIT_RESERVE = "CALL queue_commit_reserve(%s, %s, %s, %s, 'bench', NULL, 1, NULL)"
STATS = "CALL queue_stats(%s)"


async def _maybe(value: Any) -> Any:
    return await value if inspect.isawaitable(value) else value


async def all_sets(conn: Any, sql: str, params: tuple) -> list[list[tuple]]:
    """Every result set with rows of one CALL (the driver-neutral loop both drivers run)."""
    cur = await _maybe(conn.cursor())
    try:
        await cur.execute(sql, params)
        sets = [list(await _maybe(cur.fetchall()))] if cur.description else []
        while await cur.nextset():
            if cur.description:
                sets.append(list(await _maybe(cur.fetchall())))
        return sets
    finally:
        await _maybe(cur.close())


def sync_sets(conn: Any, sql: str, params: tuple) -> list[list[tuple]]:
    cur = conn.cursor()
    try:
        cur.execute(sql, params)
        sets = [list(cur.fetchall())] if cur.description else []
        while cur.nextset():
            if cur.description:
                sets.append(list(cur.fetchall()))
        return sets
    finally:
        cur.close()


async def connect(driver: str, dsn: str) -> Any:
    args = dialects.mysql_connect_args(dsn)
    if driver == "aiomysql":
        import aiomysql

        return await aiomysql.connect(
            host=args["host"],
            port=args["port"],
            user=args["user"],
            password=args["password"],
            db=args["database"],
            charset="utf8mb4",
            autocommit=True,
        )
    import asyncmy

    return await asyncmy.connect(
        host=args["host"],
        port=args["port"],
        user=args["user"],
        password=args["password"],
        database=args["database"],
        charset="utf8mb4",
        autocommit=True,
    )


def shape(sets: list[list[tuple]]) -> list[list[tuple]]:
    """The sets without what differs per reservation (token, times): what must match PyMySQL's."""
    return [[tuple(str(v) for v in row[:3]) for row in part] for part in sets]


def fill(dsn: str, queue: str, n: int) -> None:
    import pyqueue_sql

    with pyqueue_sql.connect(dsn) as db:
        q = db.queue(queue).create(visibility_timeout=600)
        q.push_many((f"k{i:06d}", "job", {"i": i}) for i in range(n))


async def measure(driver: str, dsn: str, messages: int) -> dict[str, Any]:
    queue = f"bench_{driver}"
    fill(dsn, queue, messages)
    conn = await connect(driver, dsn)
    sync = dialects.for_name("mysql").connect(dsn)
    problems: list[str] = []
    try:
        # Correctness: the same calls through both drivers give the same result sets.
        want = shape(sync_sets(sync, STATS, (queue,)))
        got = shape(await all_sets(conn, STATS, (queue,)))
        if got != want:
            problems.append(f"queue_stats sets {got} != PyMySQL's {want}")
        third = messages // 3
        start = time.perf_counter()
        for _ in range(third):
            sets = await all_sets(conn, RESERVE, (queue, 1))
            if len(sets) != 1 or len(sets[0]) != 1:
                problems.append(f"queue_reserve: {len(sets)} sets")
                break
        reserve_rate = third / (time.perf_counter() - start)
        previous: tuple | None = None
        start = time.perf_counter()
        for _ in range(third):
            args = (queue, None, None, None) if previous is None else (queue, *previous)
            sets = await all_sets(conn, COMMIT_RESERVE, args)
            # the reserved row, then (committed): committed NULL for the first call, then 1
            if len(sets) != 2 or len(sets[0]) != 1 or sets[1][0][0] != (None if previous is None else 1):
                problems.append(f"queue_commit_reserve sets {sets!r:.200}")
                break
            key, kind, _payload, token = sets[0][0][:4]
            previous = (key, kind, str(token))
        commit_reserve_rate = third / (time.perf_counter() - start)
        calls = max(200, third // 2)
        start = time.perf_counter()
        for _ in range(calls):
            sets = await all_sets(conn, STATS, (queue,))
            if len(sets) != 1:
                problems.append(f"queue_stats: {len(sets)} sets")
                break
        stats_rate = calls / (time.perf_counter() - start)
        # After all that the session must be in step: a plain statement answers.
        if shape(await all_sets(conn, "SELECT 1", ())) != [[("1",)]]:
            problems.append("the connection is out of step after the calls")
    finally:
        sync.close()
        await _maybe(conn.close()) if driver == "asyncmy" else conn.close()
    return {
        "reserve": reserve_rate,
        "commit_reserve": commit_reserve_rate,
        "stats": stats_rate,
        "problems": problems,
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--messages", type=int, default=3000)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    dsn = common.create("mysql", "aio")
    results: dict[str, list[dict[str, Any]]] = {"aiomysql": [], "asyncmy": []}
    try:
        common.install_pyqueue(dsn)
        for _ in range(args.rounds):  # interleaved, so both see the same machine load
            for driver in results:
                common.execute("mysql", dsn, "DELETE FROM pyqueue_message", "DELETE FROM pyqueue_queue")
                results[driver].append(asyncio.run(measure(driver, dsn, args.messages)))
    finally:
        common.drop("mysql", dsn)
    print(f"MariaDB, one connection, {args.messages} messages, median of {args.rounds} rounds (calls/s)")
    print(f"{'driver':10} {'reserve':>9} {'commit_reserve':>15} {'stats':>9}  result sets")
    for driver, runs in results.items():
        med = {k: statistics.median(r[k] for r in runs) for k in ("reserve", "commit_reserve", "stats")}
        problems = sorted({p for r in runs for p in r["problems"]})
        print(
            f"{driver:10} {med['reserve']:9.0f} {med['commit_reserve']:15.0f} {med['stats']:9.0f}  "
            + ("as PyMySQL's" if not problems else "WRONG: " + "; ".join(problems))
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
