"""Two versions of sql/ side by side (an A/B), and where a routine's server time goes (a profile).

    python -m bench ab --previous-commit <git commit> --dialects postgresql --rounds 3
    python -m bench ab --previous <schema revision>
    python -m bench profile --workloads push,reserve_ack        # = ab --profile, this checkout alone
    python -m bench ab --previous-commit <commit> --profile     # both, each side's routines profiled

A/B: the four workloads of `routines`, the same clients and Python client, on a database at the
newest revision and one at --previous (a schema revision) or holding --previous-commit's sql/, rounds
interleaved; per workload the medians and the median of the per-round ratios newest / previous.
--profile (PostgreSQL): track_functions = 'all', and after each workload every routine it called,
with its calls and total and own µs per call. Method and caveats: bench/README.md, A/B and profile.
"""

from __future__ import annotations

import os
import statistics
import sys
import time

from bench import common
from bench.bench import LABEL, WORKLOADS, PyQueue, _ratio, measure

FUNCTIONS = "SELECT funcname, calls, total_time, self_time FROM pg_stat_user_functions"


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


def functions(dsn: str) -> dict[str, tuple[int, float, float]]:
    """name -> (calls, total ms, own ms) of the database's routines so far."""
    return {
        name: (calls, total, own) for name, calls, total, own in common.execute("postgresql", dsn, FUNCTIONS)
    }


def profile_lines(before: dict, after: dict) -> list[str]:
    lines = []
    for name in sorted(after, key=lambda n: -(after[n][2] - before.get(n, (0, 0, 0))[2])):
        calls, total, own = (a - b for a, b in zip(after[name], before.get(name, (0, 0, 0))))
        if calls:
            lines.append(
                f"    {name:32} {calls:8,} calls  {total * 1000 / calls:8.1f} µs/call  own {own * 1000 / calls:8.1f}"
            )
    return lines


def main(argv: list[str] | None = None) -> int:
    ap = common.parser(
        __doc__,
        ("--previous", None, "the earlier schema revision to compare with"),
        ("--previous-commit", None, "a git commit whose sql/ to compare with"),
        ("--profile", False, "PostgreSQL: each routine's server time per call"),
        ("--dialects", "postgresql,mysql", ""),
        ("--workloads", ",".join(WORKLOADS), ""),
        ("--rounds", 3, ""),
        ("--messages", 10000, ""),
        ("--clients", 4, ""),
        ("--cap", 4.0, ""),
    )
    args = ap.parse_args(argv)
    if args.previous and args.previous_commit:
        ap.error("--previous and --previous-commit: one or the other")
    common.exit_on_sigterm()
    from pyqueue_sql import migrate

    systems: dict[str, type[PyQueue]] = {"newest": PyQueue}
    if args.previous_commit:
        os.environ["BENCH_PREVIOUS_COMMIT"] = args.previous_commit
        args.previous = f"commit {args.previous_commit}"
    elif args.previous == migrate.head():
        ap.error(f"--previous {args.previous} is the newest revision: nothing to compare it with")
    elif args.previous:
        os.environ["BENCH_PREVIOUS_REVISION"] = args.previous
    elif not args.profile:
        ap.error("one of --previous, --previous-commit or --profile is needed")
    if args.previous:
        systems["previous"] = Previous
    dialects = args.dialects.split(",")
    if args.profile:
        dialects = [d for d in dialects if d == "postgresql"] or ap.error("--profile is for PostgreSQL")
    print(
        f"newest revision{' against ' + args.previous if args.previous else ''}: {args.rounds} rounds, "
        f"{args.clients} clients, {args.messages} messages",
        flush=True,
    )
    t0 = time.time()
    for dialect in dialects:
        dsns = {}
        try:
            for side, cls in systems.items():
                dsns[side] = common.create(dialect, f"ab_{side}")
                if args.profile:
                    name = dsns[side].rsplit("/", 1)[1]
                    sql = f"ALTER DATABASE \"{name}\" SET track_functions = 'all'"
                    common.execute(dialect, common.ADMIN[dialect], sql)
                cls(dialect).setup(dsns[side])
            rates: dict[tuple[str, str], dict[int, float]] = {}
            for rnd in range(args.rounds):
                for w in args.workloads.split(","):
                    order = list(systems) if rnd % 2 == 0 else list(reversed(systems))
                    for side in order:
                        before = functions(dsns[side]) if args.profile else {}
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
                        if (
                            args.profile
                        ):  # the clients' counters reach the server within a second of their exit
                            time.sleep(1)
                            print("\n".join(profile_lines(before, functions(dsns[side]))), flush=True)
            print(
                f"\n{dialect}: workload | newest msg/s"
                + (" | previous msg/s | newest / previous (range)" if args.previous else "")
            )
            for w in args.workloads.split(","):
                new = rates[("newest", w)]
                line = f"{LABEL[w]} | {statistics.median(new.values()):,.0f}"
                if args.previous:
                    old = rates[("previous", w)]
                    ratios = _ratio(new, old)
                    line += (
                        f" | {statistics.median(old.values()):,.0f} | {statistics.median(ratios):.2f} "
                        f"({min(ratios):.2f}-{max(ratios):.2f})"
                    )
                print(line)
            print(flush=True)
        finally:
            for dsn in dsns.values():
                common.drop(dialect, dsn)
    return 0


if __name__ == "__main__":
    sys.exit(main())
