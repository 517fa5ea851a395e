"""The Python systems of the burn-down (bench/burndown.py): install, bulk enqueue and one worker
process each, every one through the system's own API, as its users run it.

    python bench/peers/py_workers.py install SYSTEM DSN
    python bench/peers/py_workers.py enqueue SYSTEM DSN JOBS
    python bench/peers/py_workers.py work SYSTEM DSN --concurrency 16 --sleep-ms 10

`work` prints `ready` once the worker is built and runs it from the next line on its standard input
(the burn-down's clock starts there) until killed; the handler does nothing or waits --sleep-ms.
"""

from __future__ import annotations

import argparse
import asyncio
import functools
import json
import os
import sys
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))

QUEUE = "burndown"
CHUNK = 1000


def _sync(coro_fn):
    """The coroutine function run to its end on an event loop of its own (each system's asyncio API)."""
    return functools.wraps(coro_fn)(lambda *args: asyncio.run(coro_fn(*args)))


def _ready() -> None:
    """Tells the burn-down the worker is built, then waits for its go."""
    print("ready", flush=True)
    sys.stdin.readline()


# -- pyqueue-sql: AsyncWorker (async def handler) and Worker (plain def handler) ----------------


def pyqueue_install(dsn: str) -> None:
    from bench import common

    common.install_pyqueue(dsn, QUEUE)


def pyqueue_enqueue(dsn: str, jobs: int) -> None:
    import pyqueue_sql

    with pyqueue_sql.connect(dsn) as db:
        queue = db.queue(QUEUE)
        for start in range(0, jobs, CHUNK):
            queue.push_many([(f"j{i:07d}", "noop", {"n": i}) for i in range(start, min(jobs, start + CHUNK))])


def pyqueue_async_work(dsn: str, concurrency: int, sleep_s: float, settings: dict | None = None) -> None:
    from pyqueue_sql.aio import AsyncWorker

    worker = AsyncWorker(dsn, concurrency=concurrency, **(settings or {}))

    @worker.handler(QUEUE)
    async def handle(job):
        if sleep_s:
            await asyncio.sleep(sleep_s)

    _ready()
    asyncio.run(worker.run())


def pyqueue_threads_work(dsn: str, concurrency: int, sleep_s: float, settings: dict | None = None) -> None:
    from pyqueue_sql import Worker

    worker = Worker(dsn, **{"concurrency": concurrency, **(settings or {})})

    @worker.handler(QUEUE)
    def handle(job):
        if sleep_s:
            time.sleep(sleep_s)

    _ready()
    worker.run()


# -- pyqueue-sql as its users start it: `pyqueue-sql worker bench.peers.py_workers:OBJECT`, a plain
# handler (`plain`, with --queue burndown) or the same no-op as a task of an App (`app`); the
# burn-down's messages are what noop.defer(n=i) pushes (kind "noop", payload {"n": i}). Imported by
# the CLI with BENCH_GO set, the module says ready and waits for the go before the CLI builds its
# worker, as the other runtimes do. BENCH_SLEEP_MS: what each job waits.

_SLEEP_S = float(os.environ.get("BENCH_SLEEP_MS") or 0) / 1000


def plain(job) -> None:
    if _SLEEP_S:
        time.sleep(_SLEEP_S)


def _app():
    from pyqueue_sql import App

    app = App(queue=QUEUE)  # the DSN: $PYQUEUE_DSN, as the CLI reads it

    @app.task
    def noop(n: int) -> None:
        if _SLEEP_S:
            time.sleep(_SLEEP_S)

    return app


if os.environ.get("BENCH_GO"):
    app = _app()
    _ready()


# -- PGQueuer ------------------------------------------------------------------------------------


async def _pgqueuer_driver(dsn: str):
    import psycopg
    from pgqueuer import PsycopgDriver

    conn = await psycopg.AsyncConnection.connect(dsn, autocommit=True)
    return conn, PsycopgDriver(conn)


@_sync
async def pgqueuer_install(dsn: str) -> None:
    # what `pgq install` runs
    from pgqueuer import Queries

    conn, driver = await _pgqueuer_driver(dsn)
    await Queries(driver).install()
    await conn.close()


@_sync
async def pgqueuer_enqueue(dsn: str, jobs: int) -> None:
    from pgqueuer import Queries

    conn, driver = await _pgqueuer_driver(dsn)
    queries = Queries(driver)
    for start in range(0, jobs, CHUNK):
        n = min(jobs, start + CHUNK) - start
        await queries.enqueue(
            ["noop"] * n, [json.dumps({"n": start + i}).encode() for i in range(n)], [0] * n
        )
    await conn.close()


# PGQueuer requires max_concurrent_tasks >= 2 x batch_size: 16 handlers per process allow batches
# of at most 8 (its default batch is 10).
PGQUEUER_BATCH = 8


@_sync
async def pgqueuer_work(dsn: str, concurrency: int, sleep_s: float) -> None:
    import psycopg
    from pgqueuer import PgQueuer

    conn = await psycopg.AsyncConnection.connect(dsn, autocommit=True)
    pgq = PgQueuer.from_psycopg_connection(conn)

    @pgq.entrypoint("noop")
    async def noop(job) -> None:
        if sleep_s:
            await asyncio.sleep(sleep_s)

    await asyncio.get_running_loop().run_in_executor(None, _ready)
    await pgq.run(batch_size=min(PGQUEUER_BATCH, concurrency // 2), max_concurrent_tasks=concurrency)


# -- procrastinate -------------------------------------------------------------------------------


def _procrastinate_app(dsn: str, sleep_s: float = 0.0):
    import procrastinate

    app = procrastinate.App(connector=procrastinate.PsycopgConnector(conninfo=dsn))

    @app.task(name="noop", queue=QUEUE)
    async def noop(n: int) -> None:
        if sleep_s:
            await asyncio.sleep(sleep_s)

    return app, noop


@_sync
async def procrastinate_install(dsn: str) -> None:
    # what `procrastinate schema --apply` runs
    app, _ = _procrastinate_app(dsn)
    async with app.open_async():
        await app.schema_manager.apply_schema_async()


@_sync
async def procrastinate_enqueue(dsn: str, jobs: int) -> None:
    app, noop = _procrastinate_app(dsn)
    async with app.open_async():
        for start in range(0, jobs, CHUNK):
            await noop.batch_defer_async(*({"n": i} for i in range(start, min(jobs, start + CHUNK))))


@_sync
async def procrastinate_work(dsn: str, concurrency: int, sleep_s: float) -> None:
    app, _ = _procrastinate_app(dsn, sleep_s)
    async with app.open_async():
        await asyncio.get_running_loop().run_in_executor(None, _ready)
        await app.run_worker_async(queues=[QUEUE], concurrency=concurrency, install_signal_handlers=False)


# -- awa-pg --------------------------------------------------------------------------------------


def _awa_args():
    from dataclasses import dataclass

    @dataclass
    class Noop:
        n: int

    return Noop


@_sync
async def awa_install(dsn: str) -> None:  # what `awa migrate` (python -m awa migrate) runs, in a running loop
    import awa

    await awa.migrate(dsn)


@_sync
async def awa_enqueue(dsn: str, jobs: int) -> None:
    import awa

    Noop = _awa_args()
    client = awa.AsyncClient(dsn)
    for start in range(0, jobs, CHUNK):
        await client.insert_many_copy(
            [Noop(n=i) for i in range(start, min(jobs, start + CHUNK))], queue=QUEUE
        )
    await client.close()


@_sync
async def awa_work(dsn: str, concurrency: int, sleep_s: float) -> None:
    import awa

    Noop = _awa_args()
    client = awa.AsyncClient(dsn, max_connections=concurrency + 4)

    @client.task(Noop, queue=QUEUE)
    async def noop(job) -> None:
        if sleep_s:
            await asyncio.sleep(sleep_s)

    await asyncio.get_running_loop().run_in_executor(None, _ready)
    await client.start([(QUEUE, concurrency)])
    await asyncio.Event().wait()


# -- pgmq: no runtime of its own; a read-batch/delete loop in threads ------------------------------

PGMQ_BATCH = 10


def pgmq_install(dsn: str) -> None:
    from bench import common

    common.install_pgmq(dsn, QUEUE)


def pgmq_enqueue(dsn: str, jobs: int) -> None:
    import psycopg

    with psycopg.connect(dsn, autocommit=True) as conn:
        for start in range(0, jobs, CHUNK):
            msgs = [json.dumps({"n": i}) for i in range(start, min(jobs, start + CHUNK))]
            conn.execute("SELECT count(*) FROM pgmq.send_batch(%s::text, %s::jsonb[])", (QUEUE, msgs))


def _threads(conns: list, claim, delete, sleep_s: float) -> None:
    """One thread a connection: claim(conn) -> ids (when none, sleep 50 ms: nothing is empty during
    a burn-down), the handler on each, delete(conn, ids); says ready and runs until killed."""

    def loop(conn) -> None:
        while True:
            ids = claim(conn)
            if not ids:
                time.sleep(0.05)
                continue
            for _ in ids:
                if sleep_s:
                    time.sleep(sleep_s)
            delete(conn, ids)

    _ready()
    threads = [threading.Thread(target=loop, args=(c,), daemon=True) for c in conns]
    for t in threads:
        t.start()
    for t in threads:
        t.join()


def pgmq_work(dsn: str, concurrency: int, sleep_s: float) -> None:
    """Read up to PGMQ_BATCH messages (visibility 30 s), delete them in one call (pgmq's
    read_with_poll is the alternative to the sleep when empty)."""
    import psycopg

    read = "SELECT msg_id, read_ct, enqueued_at, vt, message FROM pgmq.read(%s::text, 30, %s)"
    _threads(
        [psycopg.connect(dsn, autocommit=True) for _ in range(concurrency)],
        lambda conn: [row[0] for row in conn.execute(read, (QUEUE, PGMQ_BATCH)).fetchall()],
        lambda conn, ids: conn.execute("SELECT pgmq.delete(%s::text, %s::bigint[])", (QUEUE, ids)),
        sleep_s,
    )


# -- MariaDB/MySQL: a hand-rolled SKIP LOCKED worker (bench.py's hand-rolled queue's table) --------

# The hand-rolled MariaDB worker's claim: 100 rows per claim, at READ COMMITTED, chosen by
# measurement as the strongest of the settings tried (bench/README.md, Burn-down). At the server's
# default REPEATABLE READ every claim's locking read walks and locks the delete-marked index entries
# that purge has not removed yet at the head of the ready range (10 rows a claim: 381 jobs/s no-op;
# 100: "The total number of locks exceeds the lock table size"); a larger claim spreads that walk
# over more jobs (READ COMMITTED, no-op / 10 ms jobs: 10 rows 1,052 / 2,394, 50 rows 1,833 / 2,748,
# 100 rows 3,032 / 2,650, 200 rows 3,615 / 2,321 jobs/s).
HAND_BATCH = 100
HAND_ISOLATION = "READ COMMITTED"


def _mysql_connect(dsn: str, autocommit: bool = True):
    from pyqueue_sql import dialects

    return dialects.for_name("mysql").connect(dsn, autocommit=autocommit)


def handrolled_install(dsn: str) -> None:
    from bench.bench import HandRolled

    HandRolled("mysql").setup(dsn)  # the hand-rolled queue's table of `routines`


def handrolled_enqueue(dsn: str, jobs: int) -> None:
    conn = _mysql_connect(dsn)
    try:
        cur = conn.cursor()
        for start in range(0, jobs, CHUNK):
            rows = range(start, min(jobs, start + CHUNK))
            cur.execute(
                "INSERT IGNORE INTO job (msg_key, payload) VALUES " + ", ".join(["(%s, %s)"] * len(rows)),
                [v for i in rows for v in (f"j{i:07d}", json.dumps({"n": i}))],
            )
    finally:
        conn.close()


def handrolled_work(dsn: str, concurrency: int, sleep_s: float) -> None:
    """In one transaction take up to HAND_BATCH ready rows (FOR UPDATE SKIP LOCKED) and lease them
    (run_at + 30 s, a token), commit; delete them in one statement."""
    conns = [_mysql_connect(dsn, autocommit=False) for _ in range(concurrency)]
    for conn in conns:
        conn.cursor().execute(f"SET SESSION TRANSACTION ISOLATION LEVEL {HAND_ISOLATION}")

    def claim(conn) -> list:
        cur = conn.cursor()
        cur.execute(
            "SELECT id FROM job WHERE run_at <= UTC_TIMESTAMP(6) ORDER BY run_at, id "
            f"LIMIT {HAND_BATCH} FOR UPDATE SKIP LOCKED"
        )
        ids = [row[0] for row in cur.fetchall()]
        if ids:
            marks = ", ".join(["%s"] * len(ids))
            lease = "run_at = UTC_TIMESTAMP(6) + INTERVAL 30 SECOND, token = UUID()"
            cur.execute(f"UPDATE job SET {lease} WHERE id IN ({marks})", ids)
        conn.commit()
        return ids

    def delete(conn, ids: list) -> None:
        conn.cursor().execute(f"DELETE FROM job WHERE id IN ({', '.join(['%s'] * len(ids))})", ids)
        conn.commit()

    _threads(conns, claim, delete, sleep_s)


SYSTEMS = {
    "pyqueue-async": (pyqueue_install, pyqueue_enqueue, pyqueue_async_work),
    "pyqueue-threads": (pyqueue_install, pyqueue_enqueue, pyqueue_threads_work),
    "pyqueue-cli": (pyqueue_install, pyqueue_enqueue, None),
    "pyqueue-tasks": (pyqueue_install, pyqueue_enqueue, None),
    "pgqueuer": (pgqueuer_install, pgqueuer_enqueue, pgqueuer_work),
    "procrastinate": (procrastinate_install, procrastinate_enqueue, procrastinate_work),
    "awa": (awa_install, awa_enqueue, awa_work),
    "pgmq": (pgmq_install, pgmq_enqueue, pgmq_work),
    "handrolled": (handrolled_install, handrolled_enqueue, handrolled_work),
}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("action", choices=("install", "enqueue", "work"))
    ap.add_argument("system", choices=sorted(SYSTEMS))
    ap.add_argument("dsn")
    ap.add_argument("jobs", type=int, nargs="?", default=0)
    ap.add_argument("--concurrency", type=int, default=16)
    ap.add_argument("--sleep-ms", type=float, default=0.0)
    ap.add_argument("--settings", type=json.loads, help="pyqueue-sql: the worker's settings, a JSON object")
    args = ap.parse_args()
    install, enqueue, work = SYSTEMS[args.system]
    if args.action == "install":
        install(args.dsn)
    elif args.action == "enqueue":
        enqueue(args.dsn, args.jobs)
    else:
        extra = (args.settings,) if args.settings else ()
        work(args.dsn, args.concurrency, args.sleep_ms / 1000, *extra)


if __name__ == "__main__":
    main()
