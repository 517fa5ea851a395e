"""Push -> handler-start latency of an idle Worker, its queries a second while idle, and the cost of
the NOTIFY throttle (PostgreSQL: delayed / throttled / listened / every, as ratios to delayed).
bench/README.md, Latency.

    python -m bench latency                       # both dialects
    python -m bench latency --dialect postgresql --samples 300

Prints one JSON object, then a table.
"""

from __future__ import annotations

import json
import os
import random
import statistics
import sys
import threading
import time
import uuid

import pyqueue_sql
from bench import common


def percentile(values: list[float], p: float) -> float:
    ordered = sorted(values)
    k = (len(ordered) - 1) * p
    lo, hi = int(k), min(int(k) + 1, len(ordered) - 1)
    return ordered[lo] + (ordered[hi] - ordered[lo]) * (k - lo)


def latency_samples(
    dsn: str,
    samples: int,
    idle_seconds: float = 0.0,
    *,
    producer_dsn: str | None = None,
    queue: str = "bench.latency",
    **worker_options,
) -> tuple[list[float], float | None, int]:
    """(push -> handler-start latencies in ms, the idle worker's queries/s or None when
    idle_seconds is 0, its wakeups). One Worker (concurrency 4 unless worker_options say
    otherwise) on dsn; the producer pushes on producer_dsn (default dsn). bench/pgbouncer.py runs
    it through a PgBouncer beside direct."""
    db = pyqueue_sql.connect(producer_dsn or dsn)
    q = db.queue(queue).create()
    started: dict[str, float] = {}
    worker = pyqueue_sql.Worker(dsn, **{"concurrency": 4, **worker_options})
    worker.add_handler(q.name, lambda job: started.setdefault(job.key, time.perf_counter()))
    t = threading.Thread(target=worker.run, kwargs={"install_signals": False}, daemon=True)
    t.start()
    time.sleep(1.0)
    pushed: dict[str, float] = {}
    rng = random.Random(7)
    prefix = uuid.uuid4().hex[:6]
    for i in range(samples):
        time.sleep(rng.uniform(0.1, 0.3))
        key = f"{prefix}-{i}"
        pushed[key] = time.perf_counter()
        q.push(key, "k", {"i": i})
    deadline = time.monotonic() + 30
    while len(started) < samples and time.monotonic() < deadline:
        time.sleep(0.05)
    latencies = [(started[k] - pushed[k]) * 1000 for k in pushed if k in started]
    idle_qps = None
    if idle_seconds > 0:
        # Idle cost: the worker's own database round trips while nothing happens.
        time.sleep(1.0)
        calls0, t0 = worker.stats.db_calls, time.monotonic()
        time.sleep(idle_seconds)
        idle_qps = (worker.stats.db_calls - calls0) / (time.monotonic() - t0)
    worker.stop()
    t.join(timeout=30)
    db.close()
    return latencies, idle_qps, worker.stats.wakeups


def summary(latencies: list[float], expected: int) -> dict:
    return {
        "samples": len(latencies),
        "missing": expected - len(latencies),
        "p50_ms": round(percentile(latencies, 0.50), 2),
        "p95_ms": round(percentile(latencies, 0.95), 2),
        "p99_ms": round(percentile(latencies, 0.99), 2),
        "max_ms": round(max(latencies), 2),
        "mean_ms": round(statistics.fmean(latencies), 2),
    }


def measure_latency(dsn: str, samples: int, idle_seconds: float) -> dict:
    latencies, idle_qps, wakeups = latency_samples(dsn, samples, idle_seconds)
    return {
        **summary(latencies, samples),
        "idle_client_queries_per_s": round(idle_qps, 2),
        "wakeups": wakeups,
    }


def measure_push_cost(dsn: str, pushes: int, rounds: int) -> dict:
    import datetime as dt

    db = pyqueue_sql.connect(dsn)
    queues = {
        mode: db.queue(f"bench.push.{mode}").create()
        for mode in ("delayed", "throttled", "listened", "every")
    }
    queues["every"].set_notify_window(0)
    listener = pyqueue_sql.connect(dsn)
    db.dialect.listen(listener.connection, [queues["listened"].channel(), queues["every"].channel()])
    stop = threading.Event()

    def drain():  # a real listener consumes its notifications
        while not stop.is_set():
            for _ in listener.connection.notifies(timeout=0.2):
                pass

    drainer = threading.Thread(target=drain, daemon=True)
    drainer.start()
    totals = {mode: 0.0 for mode in queues}
    later = dt.timedelta(days=1)
    n = 0
    for r in range(rounds):
        for mode, q in queues.items():
            start = time.perf_counter()
            for i in range(pushes):
                q.push(f"r{r}-{i}", "k", {"i": i}, run_at=later if mode == "delayed" else None)
            totals[mode] += time.perf_counter() - start
        n += pushes
    stop.set()
    drainer.join(timeout=5)
    listener.close()
    base = totals["delayed"]
    result = {
        mode: {"pushes_per_s": round(n / total, 1), "time_vs_delayed": round(total / base, 3)}
        for mode, total in totals.items()
    }
    for q in queues.values():
        q.drop()
    db.close()
    return result


def main(argv=None) -> int:
    parser = common.parser(
        __doc__.splitlines()[0],
        ("--samples", 200, ""),
        ("--idle-seconds", 10.0, ""),
        ("--pushes", 500, "pushes per mode and round (throttle cost)"),
        ("--rounds", 6, ""),
        ("--out", "bench/results", "where latency-<time>.json goes"),
    )
    parser.add_argument("--dialect", choices=("postgresql", "mysql"), action="append")
    args = parser.parse_args(argv)
    common.exit_on_sigterm()
    report: dict = {"latency": {}, "push_cost_postgresql": None}
    for dialect in args.dialect or ["postgresql", "mysql"]:
        with common.database(dialect, "lat") as dsn:
            report["latency"][dialect] = measure_latency(dsn, args.samples, args.idle_seconds)
            if dialect == "postgresql":
                report["push_cost_postgresql"] = measure_push_cost(dsn, args.pushes, args.rounds)
    print(json.dumps(report, indent=2))
    os.makedirs(args.out, exist_ok=True)
    path = os.path.join(args.out, time.strftime("latency-%Y-%m-%dT%H%M%SZ.json", time.gmtime()))
    with open(path, "w") as f:
        json.dump(report, f, indent=2)
    print(f"\nwrote {path}")
    print(f"{'dialect':<11} {'n':>5} {'p50 ms':>8} {'p95 ms':>8} {'p99 ms':>8} {'max ms':>8} {'idle q/s':>9}")
    for dialect, r in report["latency"].items():
        print(
            f"{dialect:<11} {r['samples']:>5} {r['p50_ms']:>8} {r['p95_ms']:>8} {r['p99_ms']:>8} "
            f"{r['max_ms']:>8} {r['idle_client_queries_per_s']:>9}"
        )
    if report["push_cost_postgresql"]:
        print()
        print(f"{'push mode (PostgreSQL)':<24} {'pushes/s':>9} {'time vs delayed':>16}")
        for mode, r in report["push_cost_postgresql"].items():
            print(f"{mode:<24} {r['pushes_per_s']:>9} {r['time_vs_delayed']:>16}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
