"""AsyncWorker against the threaded Worker on handlers that wait on I/O, as throughput ratios.

    python bench/async_worker.py                              # PostgreSQL and MariaDB/MySQL
    python bench/async_worker.py --dialect postgresql --messages 1000 --concurrency 32 --wait-ms 20

For each dialect, a fresh database (bench/_dbs.py) and, for each runtime, a fresh queue of
--messages messages; the worker is started on the full backlog and timed from its start until
the last commit (the registry, LISTEN and the first reserve included, the same for both):

  asyncio   AsyncWorker(concurrency=C), handler `async def`: await asyncio.sleep(wait)
  threads   Worker(concurrency=C), handler def: time.sleep(wait)

The handler stands for a call to another service that takes --wait-ms. The ideal is
C / wait messages per second (1,600/s for 32 and 20 ms); what is left over is the queue's own
cost per message. With --repeat N the two runtimes alternate (threads first on even rounds,
asyncio first on odd ones), so that a load that comes and goes on the machine falls on both;
prints the median and the best msg/s of each and the ratio of the medians asyncio / threads.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import sys
import threading
import time
import uuid

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from bench import _dbs  # noqa: E402
from pyqueue_sql import Worker  # noqa: E402
from pyqueue_sql.aio.worker import AsyncWorker  # noqa: E402


def _timed(worker, queue, messages: int, run) -> float:
    """Runs the worker on a thread until every message is committed; the seconds it took."""
    started = time.perf_counter()
    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    while worker.stats.succeeded < messages:
        if not thread.is_alive():
            raise RuntimeError("the worker stopped early")
        time.sleep(0.005)
    elapsed = time.perf_counter() - started
    worker.stop()
    thread.join(timeout=60)
    assert queue.stats().ready == 0
    return elapsed


def measure(
    dsn: str, runtime: str, messages: int, concurrency: int, wait_s: float, commit_reserve: bool | None = None
) -> float:
    db = _dbs.pyqueue_sql.connect(dsn)
    queue = db.queue(f"bench.{runtime}.{uuid.uuid4().hex[:6]}").create()
    queue.push_many([(f"m{i:06d}", "k", {}) for i in range(messages)])
    common = dict(concurrency=concurrency, poll_fallback=1.0, register=True, commit_reserve=commit_reserve)
    if runtime == "asyncio":
        worker = AsyncWorker(dsn, **common)

        @worker.handler(queue.name)
        async def handle(job):
            await asyncio.sleep(wait_s)

        def run():
            asyncio.run(worker.run(install_signals=False))

    else:
        worker = Worker(dsn, **common)

        @worker.handler(queue.name)
        def handle(job):
            time.sleep(wait_s)

        def run():
            worker.run(install_signals=False)

    try:
        return messages / _timed(worker, queue, messages, run)
    finally:
        db.close()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--dialect", choices=("postgresql", "mysql"), action="append")
    ap.add_argument("--messages", type=int, default=1000)
    ap.add_argument("--concurrency", type=int, default=32)
    ap.add_argument("--wait-ms", type=float, default=20.0)
    ap.add_argument("--repeat", type=int, default=1, help="rounds, each runtime once a round, alternating")
    ap.add_argument(
        "--commit-reserve",
        choices=("auto", "on", "off"),
        default="auto",
        help="the workers' commit_reserve setting (auto: where it is one round trip, PostgreSQL)",
    )
    args = ap.parse_args()
    commit_reserve = {"auto": None, "on": True, "off": False}[args.commit_reserve]
    wait_s = args.wait_ms / 1000
    ideal = args.concurrency / wait_s
    print(
        f"{args.messages} messages, concurrency {args.concurrency}, handler waits {args.wait_ms:g} ms "
        f"(ideal {ideal:,.0f} msg/s), commit_reserve {args.commit_reserve}"
    )
    for dialect in args.dialect or ["postgresql", "mysql"]:
        dsn = _dbs.create(dialect, "aioworker")
        try:
            _dbs.install_pyqueue(dsn)
            rates: dict[str, list[float]] = {"threads": [], "asyncio": []}
            for round_ in range(args.repeat):
                for runtime in ("threads", "asyncio") if round_ % 2 == 0 else ("asyncio", "threads"):
                    rates[runtime].append(
                        measure(dsn, runtime, args.messages, args.concurrency, wait_s, commit_reserve)
                    )
            median = {runtime: statistics.median(r) for runtime, r in rates.items()}
            print(
                f"{dialect:<11} "
                + "   ".join(
                    f"{runtime} {median[runtime]:6,.0f} msg/s (best {max(rates[runtime]):6,.0f})"
                    for runtime in ("threads", "asyncio")
                )
                + f"   asyncio/threads {median['asyncio'] / median['threads']:.2f}"
            )
        finally:
            _dbs.drop(dialect, dsn)


if __name__ == "__main__":
    main()
