"""Push -> handler-start latency of an idle Worker and its queries a second while idle; or a limited
reserve's (--limited, MariaDB, --limited-sql COMMIT: an A/B); or the pickup latency under a steady stream
(--stream, PostgreSQL, --stream-sql COMMIT: an A/B, rounds alternated). bench/README.md, Latency."""

from __future__ import annotations

import concurrent.futures
import contextlib
import json
import multiprocessing
import random
import statistics
import sys
import threading
import time
import uuid

import pyqueue_sql
from bench import common


@contextlib.contextmanager
def running(dsn: str, queue: str, handler, concurrency: int = 4):
    """A Worker running handler on queue in a thread for the with block."""
    worker = pyqueue_sql.Worker(dsn, concurrency=concurrency)
    worker.add_handler(queue, handler)
    t = threading.Thread(target=worker.run, kwargs={"install_signals": False}, daemon=True)
    t.start()
    try:
        yield worker
    finally:
        worker.stop()
        t.join(timeout=60)


def summary(latencies: list[float], expected: int) -> dict:
    out = {"samples": len(latencies), "missing": expected - len(latencies)}
    # linear between the two nearest (one sample: its value, twice, as quantiles wants two)
    cuts = statistics.quantiles(latencies * (2 if len(latencies) == 1 else 1), n=100, method="inclusive")
    out |= {f"p{p}_ms": round(cuts[p - 1], 2) for p in (50, 95, 99)}
    return out | {"max_ms": round(max(latencies), 2), "mean_ms": round(statistics.fmean(latencies), 2)}


def measure_latency(dsn: str, samples: int, idle_seconds: float) -> dict:
    """Push -> handler-start latencies (ms) of an idle Worker (concurrency 4), its queries a second idle."""
    db = pyqueue_sql.connect(dsn)
    q = db.queue("bench.latency").create()
    started: dict[str, float] = {}
    with running(dsn, q.name, lambda job: started.setdefault(job.key, time.perf_counter())) as worker:
        time.sleep(1.0)
        pushed: dict[str, float] = {}
        rng, prefix = random.Random(7), uuid.uuid4().hex[:6]
        for i in range(samples):
            time.sleep(rng.uniform(0.1, 0.3))
            pushed[f"{prefix}-{i}"] = time.perf_counter()
            q.push(f"{prefix}-{i}", "k", {"i": i})
        deadline = time.monotonic() + 30
        while len(started) < samples and time.monotonic() < deadline:
            time.sleep(0.05)
        latencies = [(started[k] - pushed[k]) * 1000 for k in pushed if k in started]
        time.sleep(1.0)
        calls0, t0 = worker.stats.db_calls, time.monotonic()
        time.sleep(idle_seconds)
        idle_qps = (worker.stats.db_calls - calls0) / (time.monotonic() - t0)
    db.close()
    result = summary(latencies, samples)
    return result | {"idle_client_queries_per_s": round(idle_qps, 2), "wakeups": worker.stats.wakeups}


def measure_limited(dsn: str, limited: int, consumers: int, seconds: float) -> dict:
    """Reserve (n 1) latencies in ms of `consumers` threads, each asking for one kind of five (and committing and
    pushing back what it got), alternating a queue whose first `limited` kinds have a limit of 2 with one without."""
    db, kinds, lat = pyqueue_sql.connect(dsn), [f"k{i}" for i in range(5)], {"limited": [], "free": []}
    for name in lat:
        db.queue(f"bench.{name}").create().push_many([(f"m{i}", kinds[i % 5], {}) for i in range(2000)])
    for kind in kinds[:limited]:
        db.queue("bench.limited").set_limit(kind, 2)
    stop = time.monotonic() + seconds

    def consume(i: int) -> None:
        with pyqueue_sql.connect(dsn) as c:
            while time.monotonic() < stop:
                for name in common.rotated(lat, i):
                    q, t = c.queue(f"bench.{name}"), time.perf_counter()
                    got = q.reserve(1, worker=f"w{i}", kinds=[kinds[i % 5]])
                    lat[name].append((time.perf_counter() - t) * 1000)
                    for r in got:
                        q.commit(r)
                        q.push(r.key, r.kind, {})

    with concurrent.futures.ThreadPoolExecutor(consumers) as pool:
        list(pool.map(consume, range(consumers)))
    return {name: summary(v, len(v)) for name, v in lat.items()}


def stream_worker(dsn: str, queue: str, handlers: int, ready, stop, out) -> None:
    """A Worker of `handlers` threads in a process of its own: each job's enqueue -> start (ms), at stop."""
    lat: list[float] = []
    handler = lambda job: "t" in job.payload and lat.append((time.time() - job.payload["t"]) * 1000)  # noqa: E731
    with running(dsn, queue, handler, handlers):
        ready.set()
        stop.wait()
    out.put(lat)


def measure_stream(dsn: str, rate: float, seconds: float, producers: int, batch: int, backlog: int) -> dict:
    """Pickup while `producers` sessions push no-op jobs (push_many of `batch`) at `rate` a second (0: at
    full speed) for `seconds` to a 16-handler worker; then a backlog drained from queue_resume (jobs/s)."""
    db, mp = pyqueue_sql.connect(dsn), multiprocessing.get_context("spawn")
    q = db.queue("bench.stream").create()
    ready, stop, out = mp.Event(), mp.Event(), mp.Queue()
    proc = mp.Process(target=stream_worker, args=(dsn, q.name, 16, ready, stop, out), daemon=True)
    proc.start()
    ready.wait(60)
    time.sleep(2.0)
    pushed, push_ms = [0] * producers, []

    def produce(p: int) -> None:
        with pyqueue_sql.connect(dsn) as c:
            pq, t0 = c.queue(q.name), time.monotonic()
            while (now := time.monotonic()) < t0 + seconds:
                if rate and (wait := t0 + pushed[p] * producers / rate - now) > 0:
                    time.sleep(wait)
                t = time.time()
                if batch > 1:
                    pq.push_many([(f"s{p}-{pushed[p] + i}", "noop", {"t": t}) for i in range(batch)])
                else:
                    pq.push(f"s{p}-{pushed[p]}", "noop", {"t": t})
                push_ms.append((time.time() - t) * 1000)
                pushed[p] += batch

    with concurrent.futures.ThreadPoolExecutor(producers) as pool:
        list(pool.map(produce, range(producers)))
    while db.queue(q.name).stats().ready and proc.is_alive():
        time.sleep(0.1)
    q.pause()
    common.push_jobs(dsn, backlog, q.name)
    t = time.perf_counter()
    q.resume()
    while db.queue(q.name).stats().ready and proc.is_alive():
        time.sleep(0.02)
    drain = time.perf_counter() - t
    time.sleep(1.0)
    stop.set()
    lat = out.get(timeout=90)[: sum(pushed)]
    proc.join(timeout=30)
    db.close()
    return summary(lat, sum(pushed)) | {
        "push_p50_ms": round(statistics.median(push_ms), 2),
        "pushed_per_s": round(sum(pushed) / seconds, 1),
        "backlog_jobs_per_s": round(backlog / drain),
    }


def run_stream(args) -> int:
    """--stream: rounds of this tree's SQL against --stream-sql's (if given), alternated."""
    sources = [None, args.stream_sql] if args.stream_sql else [None]
    rows, report = [], []
    keys = "samples missing p50_ms p95_ms p99_ms max_ms push_p50_ms pushed_per_s backlog_jobs_per_s".split()
    for r in range(args.rounds):
        for sql in sources if r % 2 == 0 else sources[::-1]:
            with common.database("postgresql", "pick", install=sql is None) as dsn:
                if sql:
                    common.install_commit("postgresql", dsn, sql)
                load = common.loadavg()[0]
                m = measure_stream(
                    dsn, args.stream, args.stream_seconds, args.producers, args.batch, args.backlog
                )
            report.append({"round": r + 1, "sql": sql or "this tree", "load": load} | m)
            print(json.dumps(report[-1]), flush=True)
            rows.append((r + 1, sql or "this tree", load, *(m[k] for k in keys)))
    head = "round|SQL|load|jobs|missing|p50 ms|p95 ms|p99 ms|max ms|push p50 ms|pushed/s|backlog jobs/s"
    md = [f"`{common.command()}`", "", *common.table(head.split("|"), rows, "llrrrrrrrrrr")]
    common.write(args.out, common.now_utc("pickup-%Y-%m-%dT%H%M%SZ"), "\n".join(md) + "\n", report, "")
    return 0


def main(argv=None) -> int:
    parser = common.parser(
        __doc__.splitlines()[0],
        ("--samples", 200, "pushes per dialect"),
        ("--idle-seconds", 10.0, ""),
        ("--rounds", 6, "--stream: rounds"),
        ("--out", "bench/results", "where latency-<time>.{json,md} go"),
        ("--limited", -1, "only the limited reserve: this many of five kinds limited (8 consumers, 10 s)"),
        ("--limited-sql", None, "the limited reserve on this commit's SQL (an A/B)"),
        ("--stream", -1.0, "only pickup under a stream of this many jobs/s (PostgreSQL; 0: full speed)"),
        ("--stream-seconds", 20.0, "how long the stream runs"),
        ("--stream-sql", None, "the stream also on this commit's SQL, rounds alternated (an A/B)"),
        ("--producers", 1, "producer sessions of the stream"),
        ("--batch", 8, "jobs a push of the stream (more than 1: push_many; 1: push)"),
        ("--backlog", 20000, "jobs drained from a paused queue after the stream"),
    )
    parser.add_argument("--dialect", choices=("postgresql", "mysql"), action="append")
    args = parser.parse_args(argv)
    common.exit_on_sigterm()
    if args.stream >= 0:
        return run_stream(args)
    if args.limited >= 0:
        with common.database("mysql", "lim", install=not args.limited_sql) as dsn:
            if args.limited_sql:
                common.install_commit("mysql", dsn, args.limited_sql)
            r = {"loadavg_before": common.loadavg()} | measure_limited(dsn, args.limited, 8, 10.0)
        rows = [(q, *(r[q][k] for k in ("samples", "p50_ms", "p99_ms"))) for q in ("limited", "free")]
        md = [f"{common.command()}; SQL {args.limited_sql or 'of this tree'}; load {r['loadavg_before']}", ""]
        md += common.table(["queue", "reserves", "p50 ms", "p99 ms"], rows, "lrrr")
        common.write(args.out, common.now_utc("limited-%Y-%m-%dT%H%M%SZ"), "\n".join(md), r, "")
        return 0
    report: dict = {"latency": {}}
    for dialect in args.dialect or ["postgresql", "mysql"]:
        with common.database(dialect, "lat") as dsn:
            report["latency"][dialect] = measure_latency(dsn, args.samples, args.idle_seconds)
    print(json.dumps(report, indent=2))
    keys = ("samples", "p50_ms", "p95_ms", "p99_ms", "max_ms", "idle_client_queries_per_s")
    lines = common.table(["dialect", "n", "p50 ms", "p95 ms", "p99 ms", "max ms", "idle q/s"],
                         [(d, *(r[k] for k in keys)) for d, r in report["latency"].items()], "lrrrrrr")  # fmt: skip
    common.write(args.out, common.now_utc("latency-%Y-%m-%dT%H%M%SZ"), "\n".join(lines) + "\n", report, "")
    return 0


if __name__ == "__main__":
    sys.exit(main())
