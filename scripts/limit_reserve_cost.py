"""The server's cost of a reserve under a concurrency limit that does not bind, on PostgreSQL.

A fresh database with ``track_functions = 'all'``, a backlog of no-op jobs (kind noop), then one
connection that reserves ``--n`` and commits them (``queue_commit_batch``), ``--calls`` times, after a
few warm-up rounds. Per reserve: the wall time, the backend's CPU (from /proc), and from
pg_stat_user_functions the total and self time of queue_reserve and the limit helpers under it.
Once on a plain queue and once under ``set_limit("noop", --capacity)``, alternated ``--rounds`` times.

    .venv/bin/python scripts/limit_reserve_cost.py --jobs 20000 --n 64 --calls 100 --rounds 3

Run it from the root of the worktree whose sql/ is to be measured (its package installs its routines).
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path.cwd()))  # the worktree whose routines are measured: run from its root

import pyqueue_sql  # noqa: E402
from bench import common  # noqa: E402

FUNCTIONS = (
    "queue_reserve",
    "pyqueue__reserve",
    "pyqueue__ready_tids",
    "pyqueue__limited_tids",
    "pyqueue__limit_free_slots",
    "pyqueue__limit_claim",
    "queue_commit_batch",
)


def stats(conn) -> dict[str, tuple[int, float, float]]:
    rows = common.query(
        conn,
        "SELECT funcname, calls, total_time, self_time FROM pg_stat_user_functions WHERE schemaname = current_schema()",
    )
    return {name: (calls, total, own) for name, calls, total, own in rows}


def one(feature: str, args) -> dict:
    queue = "bench"
    dsn = common.create("postgresql", "limitcost")
    try:
        name = dsn.rsplit("/", 1)[1]
        common.execute(
            "postgresql", common.ADMIN["postgresql"], f"ALTER DATABASE \"{name}\" SET track_functions = 'all'"
        )
        common.install_pyqueue(dsn, queue)
        if feature == "limit":
            with pyqueue_sql.connect(dsn) as db:
                db.queue(queue).set_limit("noop", args.capacity)
        common.push_jobs(dsn, args.jobs, queue)
        conn = common.raw_connect("postgresql", dsn)
        pid = common.session_id("postgresql", conn)
        common.query(conn, "VACUUM ANALYZE")

        def round_trip() -> tuple[float, float]:
            t0 = time.perf_counter()
            c0 = common.process_cpu(pid)
            rows = common.query(
                conn, "SELECT p_key, p_kind, token FROM queue_reserve(%s, NULL, NULL, %s)", (queue, args.n)
            )
            wall = time.perf_counter() - t0
            cpu = common.process_cpu(pid) - c0
            keys, kinds, tokens = ([r[i] for r in rows] for i in range(3))
            common.query(
                conn,
                "SELECT queue_commit_batch(%s, %s, %s, %s)",
                (queue, keys, kinds, [str(t) for t in tokens]),
            )
            return wall, cpu

        for _ in range(args.warmup):
            round_trip()
        common.query(conn, "SELECT pg_stat_force_next_flush()")
        common.query(conn, "SELECT 1")
        before = stats(conn)
        walls, cpus = [], []
        for _ in range(args.calls):
            wall, cpu = round_trip()
            walls.append(wall)
            cpus.append(cpu)
        common.query(conn, "SELECT pg_stat_force_next_flush()")
        common.query(conn, "SELECT 1")
        after = stats(conn)
        conn.close()
        per_call = {}
        for fn in FUNCTIONS:
            if fn in after:
                calls0, total0, own0 = before.get(fn, (0, 0.0, 0.0))
                calls, total, own = after[fn]
                if calls > calls0:
                    per_call[fn] = {
                        "calls": (calls - calls0) / args.calls,
                        "total_ms": (total - total0) / args.calls,
                        "self_ms": (own - own0) / args.calls,
                    }
        return {
            "feature": feature,
            "wall_ms_median": statistics.median(walls) * 1000,
            "backend_cpu_ms_per_reserve": sum(cpus) * 1000 / args.calls,
            "functions": per_call,
            "load": common.loadavg(),
        }
    finally:
        common.drop("postgresql", dsn)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--jobs", type=int, default=20000)
    ap.add_argument("--n", type=int, default=64)
    ap.add_argument("--calls", type=int, default=100)
    ap.add_argument("--warmup", type=int, default=10)
    ap.add_argument("--capacity", type=int, default=64)
    ap.add_argument("--rounds", type=int, default=1)
    ap.add_argument("--features", default="plain,limit")
    ap.add_argument("--json", help="also write the results here")
    ap.add_argument(
        "--md", help="also append a row a run to this Markdown table (made with its header if missing)"
    )
    ap.add_argument("--label", default="", help="--md: what the run measured (e.g. before, after)")
    args = ap.parse_args()
    results = []
    for _ in range(args.rounds):
        for feature in args.features.split(","):
            r = one(feature, args)
            results.append(r)
            fns = "  ".join(
                f"{fn.removeprefix('pyqueue__')} {v['total_ms']:.2f}/{v['self_ms']:.2f}"
                for fn, v in r["functions"].items()
            )
            print(
                f"{feature:6} wall {r['wall_ms_median']:.2f} ms  backend cpu {r['backend_cpu_ms_per_reserve']:.2f} ms"
                f"  [total/self ms] {fns}  load {r['load']}",
                flush=True,
            )
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=1))
    if args.md:
        append_md(Path(args.md), args, results)


COLUMNS = ("queue_reserve", "pyqueue__ready_tids", "pyqueue__limited_tids", "pyqueue__limit_free_slots")


def append_md(path: Path, args, results: list[dict]) -> None:
    """One row a run: the server's time a reserve (total; limited_tids: its own, without free_slots)."""
    if not path.exists():
        head = [
            "run (UTC)", "label", "queue", "load (1 min)", "reserve wall, median ms", "backend CPU ms a reserve",
            "queue_reserve ms", "ready_tids ms", "limited_tids own ms", "limit_free_slots ms",
        ]  # fmt: skip
        path.write_text(
            f"Command: `{common.command()}` (each row one such run; --n {args.n}, --calls {args.calls}, "
            f"--jobs {args.jobs})\n\n| {' | '.join(head)} |\n|{'---|' * len(head)}\n"
        )
    with path.open("a") as out:
        for r in results:
            f = r["functions"]
            cells = [
                common.now_utc(),
                args.label,
                r["feature"],
                f"{r['load'][0]:.2f}",
                f"{r['wall_ms_median']:.2f}",
            ]
            cells.append(f"{r['backend_cpu_ms_per_reserve']:.2f}")
            for fn in COLUMNS:
                key = "self_ms" if fn == "pyqueue__limited_tids" else "total_ms"
                cells.append(f"{f[fn][key]:.2f}" if fn in f else "")
            out.write(f"| {' | '.join(cells)} |\n")


if __name__ == "__main__":
    main()
