"""Worker CPU: what one no-op job costs pyqueue-sql's threaded worker built as `pyqueue-sql worker`
builds it, and its server sessions, variants alternated (--variant bare: bare_loop, the floor; --variant
asyncio: AsyncWorker, an async def no-op). bench/README.md, Worker CPU."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import queue
import sys
import threading
import time

import pyqueue_sql
from bench import common
from pyqueue_sql import RetryPolicy, Worker
from pyqueue_sql.aio import AsyncWorker

HERE = os.path.dirname(os.path.abspath(__file__))
QUEUE = "burndown"
CONCURRENCY = 16


def _noop(job) -> None:
    pass


async def _async_noop(job) -> None:
    pass


def bare_loop(dsn: str, jobs: int, ended) -> None:
    """The floor: the Worker's reserve (16 + its prefetch, refilled at half), hand-off and batched acks
    (up to 500 within 2 ms), nothing else; ended() runs once all are acknowledged, connections open."""
    held, window, pending, acks = 0, CONCURRENCY * 15, queue.SimpleQueue(), queue.SimpleQueue()
    taken = threading.Condition()

    def handle() -> None:
        while (r := pending.get()) is not None:
            _noop(r)
            acks.put(r)

    def complete(q, left: int) -> None:
        nonlocal held
        while left > 0:
            batch, until = [acks.get()], time.monotonic() + 0.002
            with contextlib.suppress(queue.Empty):
                while len(batch) < 500 and (wait := until - time.monotonic()) > 0:
                    batch.append(acks.get(timeout=wait))
            with taken:
                held -= len(batch)
                taken.notify()
            q.commit_many(batch)
            left -= len(batch)

    with pyqueue_sql.connect(dsn) as db, pyqueue_sql.connect(dsn) as db2:
        q, left = db.queue(QUEUE), jobs
        threads = [threading.Thread(target=handle) for _ in range(CONCURRENCY)]
        threads.append(threading.Thread(target=complete, args=(db2.queue(QUEUE), jobs)))
        for t in threads:
            t.start()
        while left > 0:
            with taken:
                while held >= CONCURRENCY + (window + 1) // 2:
                    taken.wait()
                n, held = CONCURRENCY + window - held, CONCURRENCY + window
            got = q.reserve(n, worker="bare", timeout=30)
            with taken:
                held -= n - len(got)
            for r in got:
                pending.put(r)
            left -= len(got)
        for _ in range(CONCURRENCY):
            pending.put(None)
        for t in threads:
            t.join()
        ended()


def drain(dsn: str, jobs: int, variant: str | None = None) -> dict:
    """One Worker as cmd_worker builds it drains the backlog ("bare": bare_loop; "asyncio": AsyncWorker)."""
    if variant != "bare":
        worker = (AsyncWorker if variant == "asyncio" else Worker)(dsn, concurrency=CONCURRENCY)
        handler = _async_noop if variant == "asyncio" else _noop
        worker.add_handler(QUEUE, handler, None, retry=RetryPolicy(), timeout=None)
    counter = common.raw_connect("postgresql", dsn)
    cur = counter.cursor()
    seen: dict[str, dict[int, float]] = {"before": common.sessions_cpu(cur)}

    def watch() -> None:
        while True:
            time.sleep(0.02)
            if not common.query(counter, "SELECT count(*) FROM pyqueue_message")[0][0]:
                seen["after"] = common.sessions_cpu(cur)  # the worker's sessions, still open
                worker.stop()
                return

    cpu0, t0 = common.own_cpu(), time.perf_counter()
    if variant == "bare":
        bare_loop(dsn, jobs, lambda: seen.update(after=common.sessions_cpu(cur)))
    else:
        threading.Thread(target=watch, daemon=True).start()
        ran = worker.run(install_signals=False)  # (AsyncWorker's: a coroutine, run here to its end)
        if variant == "asyncio":
            asyncio.run(ran)
    cpu1, t1 = common.own_cpu(), time.perf_counter()
    counter.close()
    server = sum(v - seen["before"].get(pid, 0.0) for pid, v in seen.get("after", {}).items())
    out = dict(jobs=jobs, seconds=t1 - t0, rate=jobs / (t1 - t0), cpu_us_per_job=(cpu1 - cpu0) / jobs * 1e6)
    return out | {"server_cpu_us_per_job": server / jobs * 1e6}


def main() -> None:
    ap = common.parser(
        __doc__,
        ("--rounds", 5, "rounds; each drains once per variant, the order rotating"),
        ("--jobs", 20000, "no-op jobs per drain"),
        ("--quick", False, "1 round of 2,000 jobs; writes to bench/results/"),
        ("--out", None, "directory of worker-cpu.md/.json (default bench/latest, --quick bench/results)"),
    )
    ap.add_argument("--variant", action="append", default=[], choices=("bare", "asyncio"))
    args = ap.parse_args()
    common.exit_on_sigterm()
    if args.quick:
        args.rounds, args.jobs = 1, 2000
    import pyqueue_sql.tracing as tracing
    from pyqueue_sql.cli.workers import _log_handler, _TextLogFormatter

    # the CLI's log handler and level (a line at the start and the stop of each worker)
    handler = _log_handler(sys.stderr, None)
    handler.setFormatter(_TextLogFormatter())
    logging.getLogger("pyqueue_sql").addHandler(handler)
    logging.getLogger("pyqueue_sql").setLevel(logging.INFO)
    traced = tracing.api() is not None
    settings_of: dict[str, str | None] = {"as installed": None, **({"no tracing": None} if traced else {})}
    settings_of |= {text: text for text in args.variant}
    results: list[dict] = []
    meta = dict(command=common.command(), started=common.now_utc(), load_before=common.loadavg())
    meta |= dict(rounds=args.rounds, jobs=args.jobs)
    meta["tracing"] = f"opentelemetry-api {'importable' if traced else 'not installed'}"
    serial = 0
    with common.database("postgresql", "workercpu", QUEUE) as dsn:
        for rnd in range(args.rounds):
            for variant in common.rotated(settings_of, rnd):
                common.push_jobs(dsn, args.jobs, QUEUE, serial)
                serial += args.jobs
                tracing._api = False if variant == "no tracing" else None
                try:
                    r = drain(dsn, args.jobs, settings_of[variant])
                finally:
                    tracing._api = None
                results.append({"round": rnd + 1, "variant": variant, **r})
                print(f"worker-cpu: round {rnd + 1}, {variant}: {r['cpu_us_per_job']:.1f} µs", flush=True)
    meta["load_after"] = common.loadavg()
    figures = [("cpu_us_per_job", ".1f"), ("server_cpu_us_per_job", ".1f"), ("rate", ",.0f")]
    rows = [
        [v, *(common.spread([r[k] for r in results if r["variant"] == v], fmt) for k, fmt in figures)]
        for v in settings_of
    ]
    md = [
        "# Worker CPU: what one job costs the threaded worker, as the CLI builds it",
        "",
        f"Command: `{meta['command']}`; {meta['started']}, {args.rounds} round(s) of {args.jobs:,} no-op jobs "
        f"per variant, one process, concurrency {CONCURRENCY}, the CLI's defaults; {meta['tracing']}; "
        f"load average {meta['load_before']} before, {meta['load_after']} after. Medians over the rounds "
        "(min-max). Method: bench/README.md, Worker CPU.",
        "",
        *common.table(["variant", "worker CPU µs/job", "its server sessions µs/job", "jobs/s"], rows, "lrrr"),
        "",
    ]
    out = args.out or os.path.join(HERE, "results" if args.quick else "latest")
    common.write(out, "worker-cpu", "\n".join(md), {"meta": meta, "results": results}, "worker-cpu: ")


if __name__ == "__main__":
    main()
