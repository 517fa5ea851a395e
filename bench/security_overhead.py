"""What least privilege costs: SECURITY DEFINER (+ the pinned search_path on
PostgreSQL) against the same routines as SECURITY INVOKER, as ratios.

    python bench/security_overhead.py                   # both dialects
    python bench/security_overhead.py --dialect mysql --rounds 30 --ops 200

Two throwaway databases per dialect get the schema by the migrations; in the
second one routines.sql is run again without the security attributes
(PostgreSQL: no SECURITY DEFINER / SET search_path; MySQL: SQL SECURITY
INVOKER), so the routine bodies are identical. Each round, interleaved A/B
(ABBA order, so drift and background load hit both alike), on one autocommit
connection per database as the installing account (PostgreSQL: with
synchronous_commit off unless --sync-commit, so that the WAL flush of every
call, the same for A and B, does not drown the difference):

  push            --ops single queue_push calls
  reserve+commit  --ops times: queue_reserve(n=1) then queue_commit

--unpinned adds a third PostgreSQL database, SECURITY DEFINER without the
pinned search_path, to show which attribute costs what.

Prints the median microseconds per operation and the ratio definer/invoker,
and the load average before and after (the machine may be shared).
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import pyqueue_sql  # noqa: E402
from bench import common  # noqa: E402
from pyqueue_sql import migrate  # noqa: E402
from pyqueue_sql.queries import script, split_script  # noqa: E402

ATTRIBUTES = {
    "postgresql": "\nSECURITY DEFINER SET search_path FROM CURRENT\n",
    "mysql": "\nSQL SECURITY DEFINER\n",
}
# variant -> what replaces the attribute line of every contract routine
VARIANTS = {
    "postgresql": {"invoker": "\n", "definer-unpinned": "\nSECURITY DEFINER\n"},
    "mysql": {"invoker": "\nSQL SECURITY INVOKER\n"},
}


def variant_routines(dialect: str, variant: str) -> str:
    text = script(dialect, "routines.sql")
    line = ATTRIBUTES[dialect]
    assert text.count(line) >= 30, "routines.sql no longer has the attribute lines this bench replaces"
    return text.replace(line, VARIANTS[dialect][variant])


def install_variant(dialect: str, dsn: str, variant: str) -> None:
    conn = common.raw_connect(dialect, dsn)
    try:
        cur = conn.cursor()
        text = variant_routines(dialect, variant)
        for statement in [text] if dialect == "postgresql" else split_script(text):
            cur.execute(statement)
        cur.close()
    finally:
        conn.close()


def check_attributes(dialect: str, dsn: str) -> str:
    conn = common.raw_connect(dialect, dsn)
    try:
        cur = conn.cursor()
        if dialect == "postgresql":
            cur.execute("SELECT prosecdef, proconfig IS NOT NULL FROM pg_proc WHERE proname = 'queue_push'")
        else:
            cur.execute(
                "SELECT SECURITY_TYPE, '' FROM information_schema.ROUTINES "
                "WHERE ROUTINE_SCHEMA = DATABASE() AND ROUTINE_NAME = 'queue_push'"
            )
        return str(cur.fetchone())
    finally:
        conn.close()


def run(dialect: str, rounds: int, ops: int, sync_commit: bool, all_variants: bool) -> None:
    names = ["definer", "invoker"] + (
        [v for v in VARIANTS[dialect] if v != "invoker"] if all_variants else []
    )
    dsns = {k: common.create(dialect, "sec") for k in names}
    try:
        for k, dsn in dsns.items():
            migrate.upgrade(dsn)
            if k != "definer":
                install_variant(dialect, dsn, k)
        print(
            f"{dialect}: queue_push attributes: "
            + ", ".join(f"{k} {check_attributes(dialect, dsn)}" for k, dsn in dsns.items())
        )
        dbs = {k: pyqueue_sql.connect(v) for k, v in dsns.items()}
        if dialect == "postgresql" and not sync_commit:
            for db in dbs.values():  # CPU cost without the WAL flush wait of every autocommit call
                with db.connection.cursor() as cur:
                    cur.execute("SET synchronous_commit = off")
        queues = {k: db.queue("bench.secdef").create(visibility_timeout=3600) for k, db in dbs.items()}
        ops_names = ("push", "reserve+commit")
        times: dict[tuple[str, str], list[float]] = {(k, op): [] for k in dbs for op in ops_names}
        serial = 0
        for r in range(rounds):
            order = names if r % 2 == 0 else names[::-1]
            for op in ops_names:
                for k in order:
                    q = queues[k]
                    t = time.perf_counter()
                    if op == "push":
                        for i in range(ops):
                            q.push(f"m{serial + i:09d}", "job", {"i": i})
                    else:
                        for _ in range(ops):
                            [res] = q.reserve(n=1, worker="bench")
                            q.commit(res)
                    times[(k, op)].append((time.perf_counter() - t) / ops)
            serial += ops
        for op in ops_names:
            base = statistics.median(times[("invoker", op)])
            cells = "   ".join(f"{k} {statistics.median(times[(k, op)]) * 1e6:8.1f} us/op" for k in names)
            ratios = "  ".join(
                f"{k}/invoker {statistics.median(times[(k, op)]) / base:5.3f}"
                for k in names
                if k != "invoker"
            )
            print(f"  {op:15s} {cells}   {ratios}")
        for db in dbs.values():
            db.close()
    finally:
        for dsn in dsns.values():
            common.drop(dialect, dsn)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--dialect", choices=("postgresql", "mysql"), action="append")
    ap.add_argument("--rounds", type=int, default=20)
    ap.add_argument("--ops", type=int, default=200)
    ap.add_argument(
        "--unpinned",
        action="store_true",
        help="PostgreSQL: also SECURITY DEFINER without SET search_path (where the cost is)",
    )
    ap.add_argument(
        "--sync-commit",
        action="store_true",
        help="PostgreSQL: keep synchronous_commit on (default off for the bench sessions, "
        "so the WAL flush of each call does not drown the difference)",
    )
    args = ap.parse_args()
    print(f"load average before: {os.getloadavg()}, cpus: {os.cpu_count()}")
    for dialect in args.dialect or ("postgresql", "mysql"):
        run(dialect, args.rounds, args.ops, args.sync_commit, args.unpinned)
    print(f"load average after: {os.getloadavg()}")


if __name__ == "__main__":
    main()
