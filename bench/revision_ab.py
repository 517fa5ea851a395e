"""The current schema revision against an earlier one, side by side: does a change cost the
workloads that do not use it anything?

    python bench/revision_ab.py --previous <revision>
    python bench/revision_ab.py --previous <revision> --dialects postgresql --rounds 5
    python bench/revision_ab.py --previous-commit <git commit> --dialects postgresql

Until a second schema revision exists (the first change after 0.1.0) there is nothing to compare
by revision: the baseline against itself is refused. --previous-commit compares with the schema
and routines of a git commit instead (sql/<dialect>/schema.sql and routines.sql as that commit
has them, installed with the server's own client, psql or mariadb/mysql, as `pyqueue-sql sql`
output is): a change to the baseline measured against the baseline before it.

The four workloads of bench/bench.py (push, reserve+ack, push batch of 100, reserve+ack batch of
100), with the same clients and the same Python client, on two fresh databases: one migrated to the
newest revision, one to --previous. Rounds interleave the two (their order rotates), and the report
gives per workload each side's median msg/s and the median of the per-round ratios newest /
previous: 1.00 = no change. The Python client is the current one for both sides, so a difference
is the schema and its routines.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from bench import common  # noqa: E402
from bench.bench import LABEL, WORKLOADS, PyQueue, _ratio, measure  # noqa: E402


class Previous(PyQueue):
    """pyqueue-sql at the revision --previous names (BENCH_PREVIOUS_REVISION in the clients)."""

    name = "previous revision"

    def setup(self, dsn: str) -> None:
        from pyqueue_sql import migrate

        commit = os.environ.get("BENCH_PREVIOUS_COMMIT")
        if not commit:
            migrate.upgrade(dsn, os.environ["BENCH_PREVIOUS_REVISION"])
            return
        common.install_commit(self.dialect, dsn, commit)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    which = ap.add_mutually_exclusive_group(required=True)
    which.add_argument("--previous", help="the earlier schema revision to compare with")
    which.add_argument("--previous-commit", help="a git commit whose sql/ to compare with")
    ap.add_argument("--dialects", default="postgresql,mysql")
    ap.add_argument("--workloads", default=",".join(WORKLOADS))
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--messages", type=int, default=10000)
    ap.add_argument("--clients", type=int, default=4)
    ap.add_argument("--cap", type=float, default=4.0)
    args = ap.parse_args(argv)
    from pyqueue_sql import migrate

    if args.previous_commit:
        os.environ["BENCH_PREVIOUS_COMMIT"] = args.previous_commit
        args.previous = f"commit {args.previous_commit}"
    elif args.previous == migrate.head():
        ap.error(f"--previous {args.previous} is the newest revision: nothing to compare it with")
    else:
        os.environ["BENCH_PREVIOUS_REVISION"] = args.previous
    systems = {"newest": PyQueue, "previous": Previous}
    print(
        f"newest revision against {args.previous}: {args.rounds} rounds, {args.clients} clients, "
        f"{args.messages} messages",
        flush=True,
    )
    t0 = time.time()
    for dialect in args.dialects.split(","):
        dsns = {}
        try:
            for side, cls in systems.items():
                dsns[side] = common.create(dialect, f"ab_{side}")
                cls(dialect).setup(dsns[side])
            rates: dict[tuple[str, str], dict[int, float]] = {}
            for rnd in range(args.rounds):
                for w in args.workloads.split(","):
                    order = list(systems) if rnd % 2 == 0 else list(reversed(systems))
                    for side in order:
                        r = measure(
                            systems[side], dialect, dsns[side], w, args.clients, args.messages, args.cap
                        )
                        if "error" in r:
                            raise SystemExit(f"{dialect} {w} {side}: {r['error']}")
                        rates.setdefault((side, w), {})[rnd] = r["rate"]
                        print(
                            f"[{time.time() - t0:5.0f}s] {dialect:10} round {rnd + 1} {w:17} {side:8} "
                            f"{r['rate']} msg/s",
                            flush=True,
                        )
            print(f"\n{dialect}: workload | newest msg/s | previous msg/s | newest / previous (range)")
            for w in args.workloads.split(","):
                new, old = rates[("newest", w)], rates[("previous", w)]
                ratios = _ratio(new, old)
                print(
                    f"{LABEL[w]} | {statistics.median(new.values()):,.0f} | "
                    f"{statistics.median(old.values()):,.0f} | {statistics.median(ratios):.2f} "
                    f"({min(ratios):.2f}-{max(ratios):.2f})"
                )
            print(flush=True)
        finally:
            for dsn in dsns.values():
                common.drop(dialect, dsn)
    return 0


if __name__ == "__main__":
    sys.exit(main())
