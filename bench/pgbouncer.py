"""PostgreSQL through a PgBouncer of its own in transaction pooling, beside direct, interleaved in
rounds: what preparing statements is worth (prepare), push -> handler latency (latency) and a
Worker's burn-down (burndown), direct / through the pooler with a direct LISTEN (listen_dsn) /
through the pooler with long polls (long_poll). bench/README.md, PgBouncer.

    python -m bench pgbouncer                       # ~4 min: every part, 3 rounds
    python -m bench pgbouncer --quick
    python -m bench pgbouncer --only prepare

Writes bench/latest/pgbouncer.{md,json} (--out DIR to write elsewhere).
"""

from __future__ import annotations

import functools
import json
import os
import subprocess
import sys
import threading
import time
import uuid

import pyqueue_sql
from bench import common, latency
from pyqueue_sql import dialects, migrate
from tests.own_pgbouncer import OwnPgBouncer

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

SETUPS = ("direct", "listen_dsn", "long_poll")


def setup_options(setup: str, direct: str, pooled: str) -> tuple[str, dict]:
    """(the worker's and producer's DSN, the Worker's options) of a set-up."""
    if setup == "direct":
        return direct, {}
    if setup == "listen_dsn":
        return pooled, {"listen_dsn": direct}
    return pooled, {"listen": False}


# -- prepare ------------------------------------------------------------------------------------
def prepare_round(dsn: str, threshold: int | None, ops: int) -> float:
    import psycopg

    conn = psycopg.connect(dsn, autocommit=True, prepare_threshold=threshold)
    db = pyqueue_sql.Database(conn, dialects.for_name("postgresql"), owned=True)
    try:
        q = db.queue(f"bench.prepare.{uuid.uuid4().hex[:8]}").create()
        for i in range(10):  # past the threshold before the clock starts
            q.push(f"warm{i}", "k", {})
            for r in q.reserve(n=1):
                q.commit(r)
        start = time.perf_counter()
        for i in range(ops):
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
    per_round = []
    for r in range(rounds):
        row = {mode: prepare_round(dsn, modes[mode], ops) for mode in common.rotated(modes, r)}
        row["ratio_none_to_5"] = row["prepare_threshold=None"] / row["prepare_threshold=5"]
        per_round.append(row)
        print(f"prepare round {r + 1}: {json.dumps({k: round(v, 3) for k, v in row.items()})}", flush=True)
    return {"ops_per_round": ops, "rounds": per_round}


# -- latency ------------------------------------------------------------------------------------
def run_latency(direct: str, pooled: str, rounds: int, samples: int) -> dict:
    per_round = []
    pooled_all: dict[str, list[float]] = {s: [] for s in SETUPS}
    for r in range(rounds):
        row = {}
        for setup in common.rotated(SETUPS, r):
            dsn, options = setup_options(setup, direct, pooled)
            values, _, wakeups = latency.latency_samples(
                dsn, samples, queue=f"bench.latency.{setup}.{r}", **options
            )
            pooled_all[setup].extend(values)
            row[setup] = {**latency.summary(values, samples), "wakeups": wakeups}
        per_round.append(row)
        print(
            f"latency round {r + 1}: " + ", ".join(f"{s} p50 {row[s]['p50_ms']} ms" for s in SETUPS),
            flush=True,
        )
    total = {s: latency.summary(v, samples * rounds) for s, v in pooled_all.items()}
    return {"samples_per_round": samples, "rounds": per_round, "all_rounds": total}


# -- burn-down ----------------------------------------------------------------------------------
def burndown_round(dsn: str, options: dict, messages: int, concurrency: int) -> float:
    queue = f"bench.burndown.{uuid.uuid4().hex[:8]}"
    with pyqueue_sql.connect(dsn) as db:
        q = db.queue(queue).create()
        for start in range(0, messages, 500):
            q.push_many([(f"m{i}", "k", {"i": i}) for i in range(start, min(start + 500, messages))])
    done = threading.Event()
    count = [0]
    lock = threading.Lock()

    def handle(job) -> None:
        with lock:
            count[0] += 1
            if count[0] >= messages:
                done.set()

    worker = pyqueue_sql.Worker(dsn, concurrency=concurrency, **options)
    worker.add_handler(queue, handle)
    t = threading.Thread(target=worker.run, kwargs={"install_signals": False}, daemon=True)
    start = time.perf_counter()
    t.start()
    finished = done.wait(timeout=300)
    elapsed = time.perf_counter() - start
    worker.stop()
    t.join(timeout=60)
    with pyqueue_sql.connect(dsn) as db:
        stats = db.queue(queue).stats()
        db.queue(queue).drop()
    if not finished or stats.ready or stats.reserved:
        raise RuntimeError(f"burn-down incomplete: {count[0]} of {messages} handled, {stats}")
    return messages / elapsed


def run_burndown(direct: str, pooled: str, rounds: int, messages: int, concurrency: int) -> dict:
    per_round = []
    for r in range(rounds):
        row = {}
        for setup in common.rotated(SETUPS, r):
            dsn, options = setup_options(setup, direct, pooled)
            row[setup] = burndown_round(dsn, options, messages, concurrency)
        for setup in SETUPS[1:]:
            row[f"{setup}_vs_direct"] = row[setup] / row["direct"]
        per_round.append(row)
        print(f"burndown round {r + 1}: {json.dumps({k: round(v, 3) for k, v in row.items()})}", flush=True)
    return {"messages": messages, "concurrency": concurrency, "rounds": per_round}


# -- report -------------------------------------------------------------------------------------
med = functools.partial(common.spread, fmt=".3g")


def markdown(report: dict) -> str:
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


def main(argv=None) -> int:
    parser = common.parser(
        __doc__.splitlines()[0],
        ("--rounds", 3, "rounds, the set-ups' order rotating"),
        ("--only", "prepare,latency,burndown", "comma-separated parts"),
        ("--ops", 1000, "prepare: push+reserve+commit per mode and round"),
        ("--samples", 50, "latency: pushes per set-up and round"),
        ("--messages", 3000, "burndown: backlog per set-up and round"),
        ("--concurrency", 8, "burndown: the worker's handlers"),
        ("--pool-size", 4, "PgBouncer's default_pool_size"),
        ("--out", os.path.join(ROOT, "bench", "latest"), "where pgbouncer.md and .json go"),
    )
    args = parser.parse_args(argv)
    parts = set(args.only.split(","))
    common.exit_on_sigterm()
    meta = {"command": common.command(), "started": common.now_utc("%Y-%m-%d %H:%M UTC")}
    meta |= {"load_before": os.getloadavg(), "rounds": args.rounds, "pool_size": args.pool_size}
    direct = common.create("postgresql", "pgbouncer")
    bouncer = OwnPgBouncer(common.ADMIN["postgresql"], pool_size=args.pool_size)
    report: dict = {"meta": meta}
    try:
        migrate.upgrade(direct)
        bouncer.start()
        pooled = bouncer.dsn(direct)
        version = subprocess.run([bouncer.exe, "--version"], capture_output=True, text=True).stdout
        meta["pgbouncer"] = version.splitlines()[0]
        with pyqueue_sql.connect(direct) as db, db.connection.cursor() as cur:
            cur.execute("SHOW server_version")
            meta["server"] = cur.fetchone()[0]
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
    text = markdown(report)
    common.write(args.out, "pgbouncer", text, report)
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
