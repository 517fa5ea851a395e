"""Push -> handler-start latency of an idle Worker, its queries a second while idle, and the cost of
the NOTIFY throttle (PostgreSQL: delayed / throttled / listened / every, as ratios to delayed).
With --pgbouncer (the suite `pgbouncer`): PostgreSQL through a PgBouncer of its own in transaction
pooling beside direct, interleaved in rounds: what preparing statements is worth (prepare), the same
latency (latency) and a Worker's burn-down (burndown), direct / through the pooler with a direct
LISTEN (listen_dsn) / through the pooler with long polls (long_poll). bench/README.md, Latency and
PgBouncer.

    python -m bench latency                       # both dialects
    python -m bench latency --dialect postgresql --samples 300
    python -m bench pgbouncer                     # ~4 min: every part, 3 rounds
    python -m bench pgbouncer --only prepare

latency prints one JSON object, then a table; pgbouncer writes bench/latest/pgbouncer.{md,json}
(--out DIR to write elsewhere).
"""

from __future__ import annotations

import contextlib
import functools
import json
import os
import random
import statistics
import subprocess
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


@contextlib.contextmanager
def running(dsn: str, queue: str, handler, **options):
    """A Worker (concurrency 4 unless options say otherwise) running handler on queue in a thread
    of this process for the with block; stopped after."""
    worker = pyqueue_sql.Worker(dsn, **{"concurrency": 4, **options})
    worker.add_handler(queue, handler)
    t = threading.Thread(target=worker.run, kwargs={"install_signals": False}, daemon=True)
    t.start()
    try:
        yield worker
    finally:
        worker.stop()
        t.join(timeout=60)


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
    otherwise) on dsn; the producer pushes on producer_dsn (default dsn). --pgbouncer runs it
    through a PgBouncer beside direct."""
    db = pyqueue_sql.connect(producer_dsn or dsn)
    q = db.queue(queue).create()
    started: dict[str, float] = {}
    with running(
        dsn, q.name, lambda job: started.setdefault(job.key, time.perf_counter()), **worker_options
    ) as worker:
        time.sleep(1.0)
        pushed: dict[str, float] = {}
        rng = random.Random(7)
        prefix = uuid.uuid4().hex[:6]
        for i in range(samples):
            time.sleep(rng.uniform(0.1, 0.3))
            pushed[f"{prefix}-{i}"] = time.perf_counter()
            q.push(f"{prefix}-{i}", "k", {"i": i})
        deadline = time.monotonic() + 30
        while len(started) < samples and time.monotonic() < deadline:
            time.sleep(0.05)
        latencies = [(started[k] - pushed[k]) * 1000 for k in pushed if k in started]
        idle_qps = None
        if idle_seconds > 0:  # idle cost: the worker's own database round trips while nothing happens
            time.sleep(1.0)
            calls0, t0 = worker.stats.db_calls, time.monotonic()
            time.sleep(idle_seconds)
            idle_qps = (worker.stats.db_calls - calls0) / (time.monotonic() - t0)
    db.close()
    return latencies, idle_qps, worker.stats.wakeups


def summary(latencies: list[float], expected: int) -> dict:
    out = {"samples": len(latencies), "missing": expected - len(latencies)}
    out |= {f"p{p}_ms": round(percentile(latencies, p / 100), 2) for p in (50, 95, 99)}
    return out | {"max_ms": round(max(latencies), 2), "mean_ms": round(statistics.fmean(latencies), 2)}


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


SETUPS = ("direct", "listen_dsn", "long_poll")


def setup_options(setup: str, direct: str, pooled: str) -> tuple[str, dict]:
    """(the worker's and producer's DSN, the Worker's options) of a set-up."""
    if setup == "direct":
        return direct, {}
    if setup == "listen_dsn":
        return pooled, {"listen_dsn": direct}
    return pooled, {"listen": False}


def interleaved(part: str, names, rounds: int, fn) -> list[dict]:
    """Per round, {name: fn(name, round)} with the names' order rotating, printed as it comes."""
    per_round = []
    for r in range(rounds):
        per_round.append({name: fn(name, r) for name in common.rotated(names, r)})
        shown = {k: round(v, 3) if isinstance(v, float) else v for k, v in per_round[-1].items()}
        print(f"{part} round {r + 1}: {json.dumps(shown)}", flush=True)
    return per_round


def prepare_round(dsn: str, threshold: int | None, ops: int) -> float:
    """push + reserve + commit, one at a time, ops times, on a connection preparing after threshold uses."""
    import psycopg

    conn = psycopg.connect(dsn, autocommit=True, prepare_threshold=threshold)
    db = pyqueue_sql.Database(conn, pyqueue_sql.dialects.for_name("postgresql"), owned=True)
    try:
        q = db.queue(f"bench.prepare.{uuid.uuid4().hex[:8]}").create()
        for i in range(-10, ops):  # the first 10 take it past the threshold before the clock starts
            if i == 0:
                start = time.perf_counter()
            q.push(f"m{i}", "k", {"i": i})
            for r in q.reserve(n=1):
                q.commit(r)
        elapsed = time.perf_counter() - start
        q.drop()
        return ops / elapsed
    finally:
        db.close()


def run_prepare(dsn: str, rounds: int, ops: int) -> dict:
    modes = {"prepare_threshold=5": 5, "prepare_threshold=None": None}
    per_round = interleaved("prepare", modes, rounds, lambda mode, r: prepare_round(dsn, modes[mode], ops))
    for row in per_round:
        row["ratio_none_to_5"] = row["prepare_threshold=None"] / row["prepare_threshold=5"]
    return {"ops_per_round": ops, "rounds": per_round}


def run_latency(direct: str, pooled: str, rounds: int, samples: int) -> dict:
    pooled_all: dict[str, list[float]] = {s: [] for s in SETUPS}

    def one(setup: str, r: int) -> dict:
        dsn, options = setup_options(setup, direct, pooled)
        values, _, wakeups = latency_samples(dsn, samples, queue=f"bench.latency.{setup}.{r}", **options)
        pooled_all[setup].extend(values)
        return {**summary(values, samples), "wakeups": wakeups}

    per_round = interleaved("latency", SETUPS, rounds, one)
    total = {s: summary(v, samples * rounds) for s, v in pooled_all.items()}
    return {"samples_per_round": samples, "rounds": per_round, "all_rounds": total}


def burndown_round(dsn: str, options: dict, messages: int, concurrency: int) -> float:
    """messages pushed, then drained by one Worker of concurrency no-op handlers: msg/s."""
    queue = f"bench.burndown.{uuid.uuid4().hex[:8]}"
    with pyqueue_sql.connect(dsn) as db:
        q = db.queue(queue).create()
        for start in range(0, messages, 500):
            q.push_many([(f"m{i}", "k", {"i": i}) for i in range(start, min(start + 500, messages))])
    done, handled = threading.Event(), []

    def handle(job) -> None:
        handled.append(job.key)  # (atomic)
        if len(handled) >= messages:
            done.set()

    start = time.perf_counter()
    with running(dsn, queue, handle, concurrency=concurrency, **options):
        finished = done.wait(timeout=300)
        elapsed = time.perf_counter() - start
    with pyqueue_sql.connect(dsn) as db:
        stats = db.queue(queue).stats()
        db.queue(queue).drop()
    if not finished or stats.ready or stats.reserved:
        raise RuntimeError(f"burn-down incomplete: {len(handled)} of {messages} handled, {stats}")
    return messages / elapsed


def run_burndown(direct: str, pooled: str, rounds: int, messages: int, concurrency: int) -> dict:
    per_round = interleaved(
        "burndown",
        SETUPS,
        rounds,
        lambda s, r: burndown_round(*setup_options(s, direct, pooled), messages, concurrency),
    )
    for row in per_round:
        row |= {f"{setup}_vs_direct": row[setup] / row["direct"] for setup in SETUPS[1:]}
    return {"messages": messages, "concurrency": concurrency, "rounds": per_round}


# -- pgbouncer report -------------------------------------------------------------------------------------
med = functools.partial(common.spread, fmt=".3g")


def pgbouncer_markdown(report: dict) -> str:
    meta = report["meta"]
    lines = [
        "# PostgreSQL through PgBouncer (transaction pooling) beside direct",
        "",
        f"`{meta['command']}`, {meta['started']} - {meta['ended']}; {meta['pgbouncer']}, "
        f"pool_mode = transaction, default_pool_size = {meta['pool_size']}; PostgreSQL {meta['server']}; "
        f"load average {meta['load_before'][0]:.2f} before, {meta['load_after'][0]:.2f} after "
        f"({os.cpu_count()} cores, shared). Every round of bench/latest/pgbouncer.json; medians over "
        f"{meta['rounds']} interleaved rounds, (min-max) in brackets.",
        "",
    ]
    if "prepare" in report:
        rows = report["prepare"]["rounds"]
        lines += ["## What preparing is worth (direct; push + reserve + commit, one at a time)", ""]
        lines += common.table(
            ["prepare_threshold", "ops/s", "ratio None / 5 (per round)"],
            [
                ("5 (psycopg's default)", med([r["prepare_threshold=5"] for r in rows]), ""),
                ("None (pyqueue_sql.connect)", med([r["prepare_threshold=None"] for r in rows]), med([r["ratio_none_to_5"] for r in rows])),
            ],
        )  # fmt: skip
        lines.append("")
    if "latency" in report:
        total = report["latency"]["all_rounds"]
        keys = ("samples", "p50_ms", "p95_ms", "p99_ms", "max_ms")
        lines += ["## Push -> handler-start latency, idle Worker (concurrency 4)", ""]
        lines += common.table(
            ["set-up", "samples", "p50 ms", "p95 ms", "p99 ms", "max ms"],
            [(s, *(total[s][k] for k in keys)) for s in SETUPS],
        )
        lines.append("")
    if "burndown" in report:
        b = report["burndown"]
        rows = b["rounds"]
        lines += [
            f"## Burn-down: {b['messages']} messages, one Worker of {b['concurrency']} no-op handlers",
            "",
        ]
        lines += common.table(
            ["set-up", "msg/s", "vs direct (per round)"],
            [("direct", med([r["direct"] for r in rows]), 1)]
            + [(s, med([r[s] for r in rows]), med([r[f"{s}_vs_direct"] for r in rows])) for s in SETUPS[1:]],
        )
        lines.append("")
    lines += [
        "Set-ups: `direct` every connection to the server, the worker LISTENs; `listen_dsn` every",
        "connection through PgBouncer except the worker's dispatcher (LISTEN), which is direct;",
        "`long_poll` every connection through PgBouncer, `listen=False` (queue_wait long polls).",
        "",
    ]
    return "\n".join(lines)


def pgbouncer(args) -> int:
    """--pgbouncer: the three parts, direct and through the pooler, written to <out>/pgbouncer.*."""
    from pyqueue_sql import migrate
    from tests.own_pgbouncer import OwnPgBouncer

    parts = set(args.only.split(","))
    meta = {"command": common.command(), "started": common.now_utc("%Y-%m-%d %H:%M UTC")}
    meta |= {"load_before": os.getloadavg(), "rounds": args.rounds, "pool_size": args.pool_size}
    bouncer = OwnPgBouncer(common.ADMIN["postgresql"], pool_size=args.pool_size)  # (no binary: raises)
    direct = common.create("postgresql", "pgbouncer")
    report: dict = {"meta": meta}
    try:
        migrate.upgrade(direct)
        bouncer.start()
        pooled = bouncer.dsn(direct)
        version = subprocess.run([bouncer.exe, "--version"], capture_output=True, text=True).stdout
        meta["pgbouncer"] = version.splitlines()[0]
        meta["server"] = common.execute("postgresql", direct, "SHOW server_version")[0][0]
        if "prepare" in parts:
            report["prepare"] = run_prepare(direct, args.rounds, args.ops)
        if "latency" in parts:
            report["latency"] = run_latency(direct, pooled, args.rounds, args.samples)
        if "burndown" in parts:
            report["burndown"] = run_burndown(direct, pooled, args.rounds, args.messages, args.concurrency)
    finally:
        bouncer.destroy()
        common.drop("postgresql", direct)
    meta["ended"] = common.now_utc("%H:%M UTC")
    meta["load_after"] = os.getloadavg()
    text = pgbouncer_markdown(report)
    common.write(
        args.out or os.path.join(os.path.dirname(os.path.abspath(__file__)), "latest"),
        "pgbouncer",
        text,
        report,
    )
    print(text)
    return 0


def main(argv=None) -> int:
    parser = common.parser(
        __doc__.splitlines()[0],
        ("--samples", 0, "pushes per dialect (default 200; --pgbouncer: per set-up and round, 50)"),
        ("--idle-seconds", 10.0, ""),
        ("--pushes", 500, "pushes per mode and round (throttle cost)"),
        ("--rounds", 0, "rounds (default 6; --pgbouncer 3, the set-ups' order rotating)"),
        ("--out", None, "where latency-<time>.json goes (default bench/results; --pgbouncer bench/latest)"),
        ("--pgbouncer", False, "direct against PgBouncer in transaction pooling (the suite pgbouncer)"),
        ("--only", "prepare,latency,burndown", "--pgbouncer: comma-separated parts"),
        ("--ops", 1000, "--pgbouncer prepare: push+reserve+commit per mode and round"),
        ("--messages", 3000, "--pgbouncer burndown: backlog per set-up and round"),
        ("--concurrency", 8, "--pgbouncer burndown: the worker's handlers"),
        ("--pool-size", 4, "--pgbouncer: PgBouncer's default_pool_size"),
    )
    parser.add_argument("--dialect", choices=("postgresql", "mysql"), action="append")
    args = parser.parse_args(argv)
    common.exit_on_sigterm()
    args.rounds = args.rounds or (3 if args.pgbouncer else 6)
    args.samples = args.samples or (50 if args.pgbouncer else 200)
    if args.pgbouncer:
        return pgbouncer(args)
    args.out = args.out or "bench/results"
    report: dict = {"latency": {}, "push_cost_postgresql": None}
    for dialect in args.dialect or ["postgresql", "mysql"]:
        with common.database(dialect, "lat") as dsn:
            report["latency"][dialect] = measure_latency(dsn, args.samples, args.idle_seconds)
            if dialect == "postgresql":
                report["push_cost_postgresql"] = measure_push_cost(dsn, args.pushes, args.rounds)
    print(json.dumps(report, indent=2))
    keys = ("samples", "p50_ms", "p95_ms", "p99_ms", "max_ms", "idle_client_queries_per_s")
    lines = common.table(["dialect", "n", "p50 ms", "p95 ms", "p99 ms", "max ms", "idle q/s"],
                         [(d, *(r[k] for k in keys)) for d, r in report["latency"].items()], "lrrrrrr")  # fmt: skip
    if report["push_cost_postgresql"]:
        rows = [
            (m, r["pushes_per_s"], r["time_vs_delayed"]) for m, r in report["push_cost_postgresql"].items()
        ]
        lines += ["", *common.table(["push mode (PostgreSQL)", "pushes/s", "time vs delayed"], rows, "lrr")]
    stem = time.strftime("latency-%Y-%m-%dT%H%M%SZ", time.gmtime())
    common.write(args.out, stem, "\n".join(lines) + "\n", report)
    print(f"\nwrote {args.out}/{stem}.json and .md\n" + "\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main())
