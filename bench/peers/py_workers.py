"""The Python systems of the burn-down (bench/burndown.py): `install SYSTEM DSN`, `enqueue SYSTEM DSN
JOBS` and `work SYSTEM DSN`, each through the system's own API. `work` prints `ready` once the worker is
built and runs it from the next line on its standard input until killed; the handler does nothing or
waits --sleep-ms."""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import functools
import json
import os
import sys
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))

import pyqueue_sql  # noqa: E402
from bench import common  # noqa: E402 (the repository is on the path from here)
from bench.bench import HandRolled, PGQueuer  # noqa: E402
from pyqueue_sql import App, Worker  # noqa: E402

QUEUE = "burndown"
# what each job waits: --sleep-ms, or BENCH_SLEEP_MS where the CLI imports this module
SLEEP_S = float(os.environ.get("BENCH_SLEEP_MS") or 0) / 1000
STARTS = os.environ.get("BENCH_STARTS")  # burndown.py --features rate500: each job's start, time.time()
STARTS = STARTS and os.open(STARTS, os.O_WRONLY | os.O_APPEND)  # appended there, a line each
PGQUEUER_BATCH = 8  # PGQueuer requires max_concurrent_tasks >= 2 x batch_size (its default: 10)
PGMQ_BATCH = 10  # pgmq has no runtime of its own: a read-batch/delete loop in threads


def _sync(coro_fn):
    """The coroutine function run to its end on an event loop of its own (each system's asyncio API)."""
    return functools.wraps(coro_fn)(lambda *args: asyncio.run(coro_fn(*args)))


def _ready() -> None:
    """Tells the burn-down the worker is built, then waits for its go."""
    print("ready", flush=True)
    sys.stdin.readline()


async def _async_ready() -> None:
    await asyncio.get_running_loop().run_in_executor(None, _ready)


def plain(job) -> None:
    """The job of every threaded worker: nothing, or SLEEP_S of sleep."""
    if STARTS:  # one write(2) on an O_APPEND file: the handlers' lines never mix
        os.write(STARTS, b"%.6f\n" % time.time())
    if SLEEP_S:
        time.sleep(SLEEP_S)


async def nap(job=None, **_) -> None:
    """The job of every asyncio worker (a procrastinate task's arguments as keywords)."""
    if SLEEP_S:
        await asyncio.sleep(SLEEP_S)


def pyqueue_work(dsn: str, concurrency: int, threads: bool = True) -> None:
    """Worker (threads, a def handler) or AsyncWorker (an async def one)."""
    from pyqueue_sql.aio import AsyncWorker

    worker = (Worker if threads else AsyncWorker)(dsn, concurrency=concurrency)
    worker.handler(QUEUE)(plain if threads else nap)
    _ready()
    worker.run() if threads else asyncio.run(worker.run())


# -- `pyqueue-sql worker bench.peers.py_workers:plain|app|batch_app` (bench/README.md, Burn-down): imported
# by the CLI with BENCH_GO set, the module says ready and waits for the go before the CLI builds its worker.


@dataclasses.dataclass
class Noop:  # one job's arguments, its payload {"n": ...}: awa's jobs and the batch task's items
    n: int


def _apps() -> tuple[App, App]:
    """The no-op as an `@app.task`, and as a batch task of up to $BENCH_BATCH (burndown.py --batch)."""
    app, batch_app = App(queue=QUEUE), App(queue=QUEUE)  # the DSN: $PYQUEUE_DSN, as the CLI reads it

    @app.task
    def noop(n: int) -> None:
        plain(n)

    @batch_app.task(batch=int(os.environ.get("BENCH_BATCH", "100")), kind="noop")
    def noop_batch(items: list[Noop]) -> None:
        plain(None)

    return app, batch_app


if os.environ.get("BENCH_GO"):
    app, batch_app = _apps()
    _ready()


def pgqueuer_enqueue(dsn: str, jobs: int) -> None:
    with PGQueuer("postgresql").opened(dsn) as client:  # Queries on a psycopg async connection
        for numbers in common.chunks(jobs):
            n, payloads = len(numbers), [json.dumps({"n": i}).encode() for i in numbers]
            client.run(client.q.enqueue(["noop"] * n, payloads, [0] * n))


@_sync
async def pgqueuer_work(dsn: str, concurrency: int) -> None:
    import psycopg
    from pgqueuer import PgQueuer

    conn = await psycopg.AsyncConnection.connect(dsn, autocommit=True)
    pgq = PgQueuer.from_psycopg_connection(conn)
    pgq.entrypoint("noop")(nap)
    await _async_ready()
    await pgq.run(batch_size=min(PGQUEUER_BATCH, concurrency // 2), max_concurrent_tasks=concurrency)


@_sync
async def procrastinate_run(action: str, dsn: str, n: int = 0) -> None:
    """install (what `procrastinate schema --apply` runs), enqueue n jobs, or work with n handlers."""
    import procrastinate

    app = procrastinate.App(connector=procrastinate.PsycopgConnector(conninfo=dsn))
    noop = app.task(name="noop", queue=QUEUE)(nap)
    async with app.open_async():
        if action == "install":
            await app.schema_manager.apply_schema_async()
        elif action == "enqueue":
            for numbers in common.chunks(n):
                await noop.batch_defer_async(*({"n": i} for i in numbers))
        else:
            await _async_ready()
            await app.run_worker_async(queues=[QUEUE], concurrency=n, install_signal_handlers=False)


@_sync
async def awa_run(action: str, dsn: str, n: int = 0) -> None:
    """install (what `awa migrate` runs, in a running loop), enqueue n jobs, or work with n handlers."""
    import awa

    if action == "install":
        return await awa.migrate(dsn)
    if action == "enqueue":
        client = awa.AsyncClient(dsn)
        for numbers in common.chunks(n):
            await client.insert_many_copy([Noop(n=i) for i in numbers], queue=QUEUE)
        return await client.close()
    client = awa.AsyncClient(dsn, max_connections=n + 4)
    client.task(Noop, queue=QUEUE)(nap)
    await _async_ready()
    await client.start([(QUEUE, n)])
    await asyncio.Event().wait()


def pgmq_enqueue(dsn: str, jobs: int) -> None:
    import psycopg

    with psycopg.connect(dsn, autocommit=True) as conn:
        for numbers in common.chunks(jobs):
            msgs = [json.dumps({"n": i}) for i in numbers]
            conn.execute("SELECT count(*) FROM pgmq.send_batch(%s::text, %s::jsonb[])", (QUEUE, msgs))


def _threads(conns: list, claim, delete) -> None:
    """A thread a connection: claim(conn) -> ids (none: a 50 ms sleep), the handler on each, delete(conn, ids)."""

    def loop(conn) -> None:
        while True:
            ids = claim(conn)
            if not ids:
                time.sleep(0.05)
                continue
            for i in ids:
                plain(i)
            delete(conn, ids)

    _ready()
    threads = [threading.Thread(target=loop, args=(c,), daemon=True) for c in conns]
    for t in threads:
        t.start()
    for t in threads:
        t.join()


def pgmq_work(dsn: str, concurrency: int) -> None:
    """Up to PGMQ_BATCH messages read (visibility 30 s) and deleted in one call (or read_with_poll)."""
    import psycopg

    read = "SELECT msg_id, read_ct, enqueued_at, vt, message FROM pgmq.read(%s::text, 30, %s)"
    _threads(
        [psycopg.connect(dsn, autocommit=True) for _ in range(concurrency)],
        lambda conn: [row[0] for row in conn.execute(read, (QUEUE, PGMQ_BATCH)).fetchall()],
        lambda conn, ids: conn.execute("SELECT pgmq.delete(%s::text, %s::bigint[])", (QUEUE, ids)),
    )


# The hand-rolled MariaDB worker's claim (bench.py's hand-rolled table), the strongest tried: at the
# default REPEATABLE READ a claim locks the purge-pending entries at the ready range's head (10 rows:
# 381 jobs/s no-op; 100: lock table full). READ COMMITTED, no-op / 10 ms jobs, jobs/s: 10 rows
# 1,052 / 2,394, 50 rows 1,833 / 2,748, 100 rows 3,032 / 2,650, 200 rows 3,615 / 2,321.
HAND_BATCH, HAND_ISOLATION = 100, "READ COMMITTED"
HAND_CLAIM = f"SELECT id FROM job WHERE run_at <= UTC_TIMESTAMP(6) ORDER BY run_at, id LIMIT {HAND_BATCH} FOR UPDATE SKIP LOCKED"
HAND_LEASE = "UPDATE job SET run_at = UTC_TIMESTAMP(6) + INTERVAL 30 SECOND, token = UUID() WHERE id IN ({})"


def handrolled_enqueue(dsn: str, jobs: int) -> None:
    with contextlib.closing(common.raw_connect("mysql", dsn)) as conn:
        for numbers in common.chunks(jobs):
            rows = [v for i in numbers for v in (f"j{i:07d}", json.dumps({"n": i}))]
            conn.cursor().execute(HandRolled("mysql").insert_sql(len(numbers)), rows)


def handrolled_work(dsn: str, concurrency: int) -> None:
    """Up to HAND_BATCH ready rows claimed and leased in a transaction (HAND_CLAIM), deleted in one."""
    conns = [common.raw_connect("mysql", dsn, autocommit=False) for _ in range(concurrency)]
    for conn in conns:
        conn.cursor().execute(f"SET SESSION TRANSACTION ISOLATION LEVEL {HAND_ISOLATION}")

    def claim(conn) -> list:
        cur = conn.cursor()
        cur.execute(HAND_CLAIM)
        if ids := [row[0] for row in cur.fetchall()]:
            cur.execute(HAND_LEASE.format(", ".join(["%s"] * len(ids))), ids)
        conn.commit()
        return ids

    def delete(conn, ids: list) -> None:
        conn.cursor().execute(f"DELETE FROM job WHERE id IN ({', '.join(['%s'] * len(ids))})", ids)
        conn.commit()

    _threads(conns, claim, delete)


def pyqueue_install(dsn: str) -> None:
    """The queue, with the feature of $BENCH_FEATURE (bench/burndown.py --features) set on it."""
    common.install_pyqueue(dsn, queue=QUEUE)
    with pyqueue_sql.connect(dsn) as db:
        common.FEATURES[os.environ.get("BENCH_FEATURE", "plain")](db.queue(QUEUE))


def pyqueue_enqueue(dsn: str, jobs: int) -> None:
    common.push_jobs(dsn, jobs, queue=QUEUE, feature=os.environ.get("BENCH_FEATURE", "plain"))


ACTIONS = ("install", "enqueue", "work")
SYSTEMS = {  # name: (install(dsn), enqueue(dsn, jobs), work(dsn, concurrency))
    "pyqueue-async": (pyqueue_install, pyqueue_enqueue, functools.partial(pyqueue_work, threads=False)),
    "pyqueue-threads": (pyqueue_install, pyqueue_enqueue, pyqueue_work),
    "pyqueue-cli": (pyqueue_install, pyqueue_enqueue, None),
    "pyqueue-tasks": (pyqueue_install, pyqueue_enqueue, None),
    "pyqueue-batch": (pyqueue_install, pyqueue_enqueue, None),
    "pgqueuer": (lambda dsn: PGQueuer("postgresql").setup(dsn), pgqueuer_enqueue, pgqueuer_work),
    "procrastinate": tuple(functools.partial(procrastinate_run, action) for action in ACTIONS),
    "awa": tuple(functools.partial(awa_run, action) for action in ACTIONS),
    "pgmq": (functools.partial(common.install_pgmq, queue=QUEUE), pgmq_enqueue, pgmq_work),
    # the hand-rolled queue's table of `routines`
    "handrolled": (lambda dsn: HandRolled("mysql").setup(dsn), handrolled_enqueue, handrolled_work),
}


def main() -> None:
    global SLEEP_S
    ap = common.parser(__doc__, ("--concurrency", 16, ""), ("--sleep-ms", 0.0, ""))
    ap.add_argument("action", choices=ACTIONS)
    ap.add_argument("system", choices=sorted(SYSTEMS))
    ap.add_argument("dsn")
    ap.add_argument("jobs", type=int, nargs="?", default=0)
    args = ap.parse_args()
    install, enqueue, work = SYSTEMS[args.system]
    SLEEP_S = args.sleep_ms / 1000
    if args.action == "install":
        install(args.dsn)
    elif args.action == "enqueue":
        enqueue(args.dsn, args.jobs)
    else:
        work(args.dsn, args.concurrency)


if __name__ == "__main__":
    main()
