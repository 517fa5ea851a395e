"""Failover: the primary SIGKILLed under load and its standby promoted, --runs times per dialect,
tests/failover/scenario.py's run with its exact accounting (lost and undone must be 0); exits 1 if
a run does not balance. bench/README.md, Failover.

    python -m bench failover --runs 10                       # both dialects
    python -m bench failover --runs 3 --dialects mysql --gap 2

Writes <out>/failover.json (every run) and <out>/failover.md (the summary).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import tempfile
import time
from pathlib import Path

from bench import common
from tests.failover.scenario import run_failover, start_pair

ROOT = Path(__file__).resolve().parents[1]

SETTINGS = {
    "postgresql": "synchronous standby (pg_basebackup -R), synchronous_commit = on, "
    "synchronous_standby_names = the standby; promoted with pg_ctl promote",
    "mysql": "semi-synchronous replica by GTID, rpl_semi_sync_master_wait_point = AFTER_SYNC, "
    "rpl_semi_sync_master_timeout = 1 h; promoted with STOP SLAVE IO_THREAD, relay log applied, "
    "STOP SLAVE, RESET SLAVE ALL, read_only = OFF",
}
ASYNC_SETTINGS = {
    "postgresql": "asynchronous standby (synchronous_standby_names = ''), otherwise the same",
    "mysql": "asynchronous replica (semi-synchronous replication off on the primary), otherwise the same",
}


def one_run(dialect: str, args: argparse.Namespace, workdir: Path) -> dict:
    t0 = time.monotonic()
    pair = start_pair(dialect, synchronous=args.replication == "sync")
    started_s = time.monotonic() - t0
    try:
        result = run_failover(
            pair,
            workdir,
            warmup_commits=args.warmup,
            pushes_after=args.after,
            gap=args.gap,
            handler_sleep=args.handler_sleep,
        )
    finally:
        pair.destroy()
    result["start_pair_s"] = round(started_s, 3)
    result["run_s"] = round(time.monotonic() - t0, 3)
    return result


def summary(
    results: dict[str, list[dict]], args: argparse.Namespace, loads: tuple, when: str, name: str
) -> str:
    lines = [
        "# Failover soak" + ("" if args.replication == "sync" else ": asynchronous replication"),
        "",
        f"`{common.command()}` at {when}; every run's figures "
        f"in `{args.out}/{name}.json`. Load average before {loads[0]}, after {loads[1]} "
        f"({os.cpu_count()} CPUs, shared with other work).",
        "",
        "Per run: a new primary and standby, 2 producers, 2 worker processes (Worker, AsyncWorker; 3 "
        f"handlers each, lease 3 s, handler {args.handler_sleep:g} s), SIGKILL of every primary "
        f"process after {args.warmup} commits, promotion {args.gap:g} s after the kill, {args.after} "
        "pushes acknowledged by the new primary, drain. Figures: median (min-max) over the runs; times "
        "from the kill.",
        "",
    ]
    head = "dialect|runs balanced|pushes acked|in flight at kill|duplicates|lost|undone|promote (s)|first push again (s)|both workers commit again (s)|drain (s)"
    rows = []
    for dialect, runs in results.items():
        spread = [
            common.spread([r.get(k) for r in runs], empty="-")
            for k in ("pushes_acked", "in_flight_at_kill", "duplicates")
        ]
        times = ("promote_s", "first_push_after_kill_s", "workers_recovered_after_kill_s", "drain_s")
        balanced = f"{sum(1 for r in runs if not r.get('violations'))} of {len(runs)}"
        lost = [sum(r.get(k, 0) for r in runs) for k in ("lost", "undone")]
        rows.append(
            (
                dialect,
                balanced,
                *spread,
                *lost,
                *(common.spread([r.get(k) for r in runs], empty="-") for k in times),
            )
        )
    lines += common.table(head.split("|"), rows)
    lines += ["", "Settings:", ""]
    settings = SETTINGS if args.replication == "sync" else ASYNC_SETTINGS
    lines += [f"- {d}: {settings[d]}" for d in results]
    failures = [
        (d, i, r["violations"]) for d, runs in results.items() for i, r in enumerate(runs) if r["violations"]
    ]
    if failures:
        lines += ["", "Runs that did not balance:", ""]
        lines += [f"- {d} run {i + 1}: {'; '.join(v)[:500]}" for d, i, v in failures]
    return "\n".join(lines) + "\n"


def main() -> int:
    parser = common.parser(
        __doc__.split("\n\n")[0],
        ("--runs", 10, ""),
        ("--dialects", "postgresql,mysql", "comma-separated: postgresql, mysql"),
        ("--warmup", 100, "commits before the kill (default 100)"),
        ("--after", 100, "pushes acknowledged after the promotion"),
        ("--gap", 0.5, "seconds from the kill to the promotion"),
        ("--handler-sleep", 0.1, "seconds each handler run takes"),
        ("--name", None, "the results' file name (default failover, failover-async)"),
        ("--out", "bench/latest", "directory of <name>.json and .md"),
    )
    parser.add_argument(
        "--replication", choices=("sync", "async"), default="sync", help="async: what that loses"
    )
    args = parser.parse_args()
    dialects = [d.strip() for d in args.dialects.split(",") if d.strip()]
    unknown = sorted(set(dialects) - set(SETTINGS))
    if unknown or args.runs < 1:
        parser.error(f"unknown dialect(s) {unknown}" if unknown else "--runs must be at least 1")
    name = args.name or ("failover" if args.replication == "sync" else "failover-async")
    when = common.now_utc("%Y-%m-%d %H:%M UTC")
    load_before = tuple(common.loadavg())
    results: dict[str, list[dict]] = {d: [] for d in dialects}
    with tempfile.TemporaryDirectory(prefix="pyqueue-failover-") as tmp:
        # Dialects alternate run by run, so that a change in the machine's load hits both alike.
        for i in range(args.runs):
            for dialect in dialects:
                try:
                    result = one_run(dialect, args, Path(tmp) / f"{dialect}-{i}")
                except Exception as exc:  # the run itself broke: counted as not balanced
                    result = {"dialect": dialect, "violations": [f"the run failed: {exc!r}"]}
                results[dialect].append(result)
                print(
                    f"{dialect} run {i + 1}/{args.runs}: "
                    + ("balanced" if not result["violations"] else f"NOT balanced: {result['violations']}")
                    + f" {json.dumps({k: v for k, v in result.items() if k != 'violations'})}",
                    flush=True,
                )
    loads = (load_before, tuple(common.loadavg()))
    text = summary(results, args, loads, when, name)
    data = {
        "when": when,
        "argv": sys.argv[1:],
        "python": platform.python_version(),
        "load": loads,
        "runs": results,
    }
    common.write(args.out, name, text, data)
    print(text)
    return 0 if all(not r["violations"] for runs in results.values() for r in runs) else 1


if __name__ == "__main__":
    sys.exit(main())
