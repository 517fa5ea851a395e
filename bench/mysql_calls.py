"""MySQL/MariaDB: what a routine costs beyond its statements, and a routine against an earlier version of it.

    python bench/mysql_calls.py [--rounds 12] [--previous REV] [--routine queue_commit|queue_commit_batch|queue_reserve]

In a fresh database with pyqueue-sql installed, on one connection:

- nested calls: a procedure that makes eight nested CALLs of a trivial procedure against one that
  makes none (µs per call, each round 300 calls of each, interleaved);
- the routine as it is in sql/mysql/routines.sql against the same routine from git revision REV
  (installed beside it under another name), committing (queue_commit; queue_commit_batch: two
  batches of 100) or reserving (queue_reserve) 200 messages a round with each, alternating which
  goes first, inside one transaction per round so that no log flush is timed: µs per call and the
  median of the per-round ratios (above 1 = the current routine is faster).

Results: bench/results/mysql_calls.json and a summary on stdout.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import time
import uuid

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from bench import common  # noqa: E402
from pyqueue_sql import migrate  # noqa: E402

SQL_MODE = (
    "STRICT_ALL_TABLES,STRICT_TRANS_TABLES,NO_ZERO_IN_DATE,NO_ZERO_DATE,ERROR_FOR_DIVISION_BY_ZERO,"
    "NO_ENGINE_SUBSTITUTION"
)


def run(cur, sql: str, *args):
    cur.execute(sql, args or None)
    rows = cur.fetchall() if cur.description else ()
    while cur.nextset():
        pass
    return rows


def previous_routine(rev: str, name: str, new_name: str) -> str:
    text = subprocess.run(
        ["git", "show", f"{rev}:sql/mysql/routines.sql"], capture_output=True, text=True, check=True
    ).stdout
    body = re.search(rf"CREATE PROCEDURE {name}\(.*?\nEND //", text, re.S).group(0)
    return body.replace(f"CREATE PROCEDURE {name}(", f"CREATE PROCEDURE {new_name}(")[: -len(" //")]


def nested_calls(cur, rounds: int) -> dict:
    run(cur, "CREATE PROCEDURE bench_nop(IN a LONGTEXT) BEGIN IF a IS NULL THEN SET a = 1; END IF; END")
    run(cur, "CREATE PROCEDURE bench_e0() BEGIN SELECT 1; END")
    run(cur, "CREATE PROCEDURE bench_e8() BEGIN " + "CALL bench_nop(1); " * 8 + "SELECT 1; END")
    out: dict[str, list[float]] = {"none": [], "eight": []}
    for _ in range(rounds):
        for label, proc in (("none", "bench_e0"), ("eight", "bench_e8")):
            started = time.perf_counter()
            for _ in range(300):
                run(cur, f"CALL {proc}()")
            out[label].append((time.perf_counter() - started) / 300 * 1e6)
    return out


def routine_ab(cur, routine: str, rev: str, rounds: int) -> dict:
    old = f"{routine}_previous"
    run(cur, previous_routine(rev, routine, old))
    run(cur, "CALL queue_create('ab', NULL, NULL, NULL, NULL)")
    out: dict[str, list[float]] = {"current": [], "previous": []}
    for r in range(rounds):
        order = [("current", routine), ("previous", old)]
        for label, proc in order if r % 2 == 0 else order[::-1]:
            batch = [{"p_key": uuid.uuid4().hex, "p_kind": "k", "payload": {}} for _ in range(200)]
            run(cur, "CALL queue_push_batch('ab', %s, NULL, NULL, NULL, NULL)", json.dumps(batch))
            run(cur, "START TRANSACTION")
            started = time.perf_counter()
            if routine == "queue_commit":
                held = run(cur, "CALL queue_reserve('ab', 'w', NULL, 200, NULL)")
                started = time.perf_counter()
                for row in held:
                    run(cur, f"CALL {proc}('ab', %s, %s, %s)", row[0], row[1], row[3])
                calls = len(held)
            elif routine == "queue_commit_batch":  # two batches of 100: µs per batch
                held = run(cur, "CALL queue_reserve('ab', 'w', NULL, 200, NULL)")
                started = time.perf_counter()
                for part in (held[:100], held[100:]):
                    arrays = [json.dumps([row[i] for row in part]) for i in (0, 1, 3)]
                    run(cur, f"CALL {proc}('ab', %s, %s, %s)", *arrays)
                calls = 2
            else:
                for _ in range(200):
                    run(cur, f"CALL {proc}('ab', 'w', NULL, 1, NULL)")
                calls = 200
            out[label].append((time.perf_counter() - started) / calls * 1e6)
            run(cur, "COMMIT")
            run(cur, "DELETE FROM pyqueue_message WHERE queue_name = 'ab'")
    return out


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--rounds", type=int, default=12)
    parser.add_argument("--previous", default="HEAD~1", help="git revision of the routine to compare with")
    parser.add_argument(
        "--routine", default="queue_commit", choices=["queue_commit", "queue_commit_batch", "queue_reserve"]
    )
    args = parser.parse_args(argv)
    common.exit_on_sigterm()
    dsn = common.create("mysql", "calls")
    load = os.getloadavg()
    try:
        migrate.upgrade(dsn)
        conn = common.raw_connect("mysql", dsn)
        cur = conn.cursor()
        run(cur, f"SET SESSION sql_mode = '{SQL_MODE}'")
        nested = nested_calls(cur, args.rounds)
        ab = routine_ab(cur, args.routine, args.previous, args.rounds)
        conn.close()
    finally:
        common.drop("mysql", dsn)
    report = {
        "command": "python bench/mysql_calls.py " + " ".join(argv or sys.argv[1:]),
        "load_before": load,
        "load_after": os.getloadavg(),
        "nested_calls_us": nested,
        "routine": args.routine,
        "previous": args.previous,
        "routine_us": ab,
    }
    os.makedirs("bench/results", exist_ok=True)
    with open("bench/results/mysql_calls.json", "w") as f:
        json.dump(report, f, indent=1)
    print(
        f"nested calls, µs per call (min / median): none {min(nested['none']):.0f} / "
        f"{statistics.median(nested['none']):.0f}, eight {min(nested['eight']):.0f} / "
        f"{statistics.median(nested['eight']):.0f}"
    )
    ratios = [p / c for p, c in zip(ab["previous"], ab["current"])]
    print(
        f"{args.routine}, µs per call (median): current {statistics.median(ab['current']):.0f}, "
        f"{args.previous} {statistics.median(ab['previous']):.0f}; current faster by "
        f"{statistics.median(ratios):.2f}x ({min(ratios):.2f}-{max(ratios):.2f})"
    )
    print(f"load average before {load[0]:.1f}, after {os.getloadavg()[0]:.1f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
