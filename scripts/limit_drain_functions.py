"""The server's time in each routine while one `pyqueue-sql worker` drains a backlog (PostgreSQL).

The burn-down's own drain (bench/burndown.py: install, enqueue, VACUUM ANALYZE, one worker process with
16 handlers) of one --features entry, in a database with ``track_functions = 'all'``; then the calls,
total and own milliseconds of the routines that took the most, from pg_stat_user_functions.

    .venv/bin/python scripts/limit_drain_functions.py limit --jobs 20000

Run it from the root of the worktree whose sql/ is to be measured (the install imports its package).
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path.cwd()))  # the worktree whose routines are measured: run from its root

from bench import burndown, common  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("feature", choices=sorted(common.FEATURES))
    ap.add_argument("--jobs", type=int, default=20000)
    ap.add_argument("--cap", type=float, default=60.0)
    ap.add_argument("--top", type=int, default=12)
    args = ap.parse_args()
    create = common.create

    def tracked(dialect: str, tag: str) -> str:
        dsn = create(dialect, tag)
        name = dsn.rsplit("/", 1)[1]
        common.execute(
            dialect, common.ADMIN[dialect], f"ALTER DATABASE \"{name}\" SET track_functions = 'all'"
        )
        return dsn

    drain = burndown.drain

    def drain_and_read(system, dsn, jobs, sleep_ms, cap):
        result = drain(system, dsn, jobs, sleep_ms, cap)
        time.sleep(1.0)  # the worker's sessions report their counters within a second
        rows = common.execute(
            "postgresql",
            dsn,
            "SELECT funcname, calls, round(total_time::numeric, 1), round(self_time::numeric, 1)"
            f" FROM pg_stat_user_functions ORDER BY total_time DESC LIMIT {int(args.top)}",
        )
        print(
            f"{args.feature}: {result['rate']:,.0f} jobs/s, worker CPU {result['cpu_us_per_job']} µs/job, its server "
            f"sessions' {result['server_cpu_us_per_job']} µs/job, load {common.loadavg()}"
        )
        print("routine\tcalls\ttotal ms\town ms")
        for row in rows:
            print(*row, sep="\t")
        return result

    common.create = tracked
    burndown.PROCESSES = 1  # one `pyqueue-sql worker`, as --features runs it
    burndown.drain = drain_and_read
    burndown.measure(burndown.feature(args.feature, "postgresql"), "noop", args.jobs, args.cap)


if __name__ == "__main__":
    main()
