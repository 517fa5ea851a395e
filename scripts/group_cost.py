"""MariaDB: the server's cost of a reserve of 256 and a commit of 256 on a backlog of 20,000 no-op jobs in 200
FIFO groups at k = 8 (the burn-down's groups feature), beside the same on a plain queue. One session calls
queue_reserve(n) and then commit_many of what it got, round after round; per call the session's server thread CPU
(/proc schedstat, its PROCESSLIST.TID), its statements (Com_*), rows read and written (Handler_*) and temporary tables on
disk. --routines DIR (repeatable): a database per directory with those routines installed over the schema
(a checkout's sql/mysql/routines), called turn about, so that two versions are measured in one time window.

    .venv/bin/python scripts/group_cost.py --rounds 8 [--routines OTHER/sql/mysql/routines]
"""

from __future__ import annotations

import argparse
import contextlib
import json
import statistics
import sys
from pathlib import Path

sys.path.insert(
    0, str(Path(__file__).resolve().parents[1])
)  # this checkout's package and bench, not an installed one

import pyqueue_sql  # noqa: E402
from bench import common  # noqa: E402
from pyqueue_sql import queries  # noqa: E402

HERE = Path(__file__).resolve().parents[1]
QUEUE = "gc"
COUNTERS = (
    "Handler_read_key",
    "Handler_read_next",
    "Handler_read_first",
    "Handler_read_rnd_next",
    "Handler_update",
    "Handler_delete",
    "Handler_write",
    "Created_tmp_disk_tables",
    "Created_tmp_tables",
)


def install_routines(dsn: str, folder: Path) -> None:
    """The routines of folder (its *.sql in name order) over the installed schema."""
    text = "\n".join(p.read_text(encoding="utf-8") for p in sorted(folder.glob("*.sql")))
    with contextlib.closing(common.raw_connect("mysql", dsn)) as conn:
        for statement in queries.split_script(text):
            common.query(conn, statement)


def status(conn) -> dict[str, int]:
    rows = common.query(conn, "SHOW SESSION STATUS WHERE Variable_name LIKE 'Handler%' OR Variable_name LIKE "
                              "'Created_tmp%' OR Variable_name LIKE 'Com_%'")  # fmt: skip
    return {str(k): int(v) for k, v in rows if str(v).isdigit()}


class Side:
    """One database: its queue filled, a session (pyqueue_sql) and its server thread."""

    def __init__(self, label: str, dsn: str, grouped: bool, jobs: int) -> None:
        self.label, self.dsn = label, dsn
        common.push_jobs(dsn, jobs, QUEUE, feature="groups" if grouped else "plain")
        self.db = pyqueue_sql.connect(dsn)
        self.queue = self.db.queue(QUEUE)
        conn = self.db.connection
        self.tid = common.session_id("mysql", conn)
        self.pid = common.server_pid("mysql", dsn)
        self.rows: list[dict] = []

    def _probe(self) -> tuple[float, dict[str, int]]:
        # schedstat: the thread's time on a CPU in ns (stat's utime and stime count 10 ms ticks)
        ns = int(Path(f"/proc/{self.pid}/task/{self.tid}/schedstat").read_text().split()[0])
        return ns / 1e9, status(self.db.connection)

    def round(self, n: int) -> dict:
        cpu0, s0 = self._probe()
        got = self.queue.reserve(n=n)
        cpu1, s1 = self._probe()
        self.queue.commit_many(got)
        cpu2, s2 = self._probe()
        row = {"n": len(got)}
        for part, (a, b, ca, cb) in {"reserve": (s0, s1, cpu0, cpu1), "commit": (s1, s2, cpu1, cpu2)}.items():
            row[f"{part}_us"] = (cb - ca) * 1e6 / max(len(got), 1)
            for name in COUNTERS:
                row[f"{part}_{name}"] = (b.get(name, 0) - a.get(name, 0)) / max(len(got), 1)
            # the probe's own SHOW STATUS counts as one statement of each of its kinds: not subtracted, the same
            # for every side
            row[f"{part}_statements"] = sum(
                b[k] - a.get(k, 0) for k in b if k.startswith("Com_") and k not in ("Com_show_status",)
            ) / max(len(got), 1)
        self.rows.append(row)
        return row


def worker_drain(label: str, folder: Path | None, grouped: bool, jobs: int) -> dict:
    """A Worker(concurrency=16), as `pyqueue-sql worker` builds it, drains jobs no-op jobs in a fresh database;
    the server threads of the database's sessions (besides this watcher's), their CPU from the first time the watcher
    saw each (every 20 ms) to the end: the worker's own server CPU, whatever else the server ran."""
    import threading
    import time

    from pyqueue_sql import RetryPolicy, Worker

    with common.database("mysql", "gcostw", QUEUE) as dsn:
        if folder is not None:
            install_routines(dsn, folder)
        with pyqueue_sql.connect(dsn) as db:
            if grouped:
                common.FEATURES["groups"](db.queue(QUEUE))
        common.push_jobs(dsn, jobs, QUEUE, feature="groups" if grouped else "plain")
        pid = common.server_pid("mysql", dsn)
        worker = Worker(dsn, concurrency=16)
        worker.add_handler(QUEUE, lambda job: None, None, retry=RetryPolicy(), timeout=None)
        watcher = common.raw_connect("mysql", dsn)
        first: dict[int, float] = {}
        last: dict[int, float] = {}

        def sample() -> None:
            for (tid,) in common.query(
                watcher,
                "SELECT TID FROM information_schema.PROCESSLIST WHERE DB = DATABASE() AND ID <> CONNECTION_ID()",
            ):
                with contextlib.suppress(OSError):
                    ns = int(Path(f"/proc/{pid}/task/{tid}/schedstat").read_text().split()[0]) / 1e9
                    first.setdefault(int(tid), ns)
                    last[int(tid)] = ns

        def watch() -> None:
            while True:
                time.sleep(0.02)
                sample()
                if not common.query(watcher, "SELECT COUNT(*) FROM pyqueue_message")[0][0]:
                    worker.stop()
                    return

        threading.Thread(target=watch, daemon=True).start()
        cpu0, t0 = common.own_cpu(), time.perf_counter()
        worker.run(install_signals=False)
        cpu1, t1 = common.own_cpu(), time.perf_counter()
        watcher.close()
        server = sum(last[t] - first[t] for t in last)
        return dict(
            side=label,
            rate=jobs / (t1 - t0),
            worker_us=(cpu1 - cpu0) / jobs * 1e6,
            server_us=server / jobs * 1e6,
        )


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rounds", type=int, default=8)
    ap.add_argument("--jobs", type=int, default=20000)
    ap.add_argument("--n", type=int, default=256)
    ap.add_argument("--warm", type=int, default=2, help="rounds not counted first")
    ap.add_argument("--routines", action="append", default=[], help="another routines folder to compare")
    ap.add_argument("--no-plain", action="store_true")
    ap.add_argument("--json", help="write the rows here")
    ap.add_argument(
        "--worker", action="store_true", help="drains by a Worker instead: jobs/s, its CPU and its sessions'"
    )
    args = ap.parse_args(argv)
    load = common.loadavg()
    if args.worker:
        folders = [("this", None)] + [(str(f), Path(f)) for f in args.routines]
        sides = [(f"groups {label}", folder, True) for label, folder in folders]
        sides += [] if args.no_plain else [("plain", None, False)]
        runs = [
            worker_drain(*side, args.jobs) for i in range(args.rounds) for side in common.rotated(sides, i)
        ]
        print(
            f"load before {load}, after {common.loadavg()}; {args.rounds} drains of {args.jobs:,} jobs each side"
        )
        print("| side | jobs/s | worker CPU us/job | its server sessions' CPU us/job |")
        print("|---|---|---|---|")
        for label, _, _ in sides:
            mine = [r for r in runs if r["side"] == label]
            cells = [
                ", ".join(f"{r[k]:,.0f}" for r in mine)
                + f" (median {statistics.median(r[k] for r in mine):,.0f})"
                for k in ("rate", "worker_us", "server_us")
            ]
            print(f"| {label} | " + " | ".join(cells) + " |")
        if args.json:
            Path(args.json).write_text(json.dumps(runs, indent=1))
        return 0
    with contextlib.ExitStack() as stack:
        sides = []
        folders = [("this", None)] + [(str(f), Path(f)) for f in args.routines]
        for label, folder in folders:
            dsn = stack.enter_context(common.database("mysql", "gcost", QUEUE))
            if folder is not None:
                install_routines(dsn, folder)
            with pyqueue_sql.connect(dsn) as db:
                common.FEATURES["groups"](db.queue(QUEUE))
            sides.append(Side(f"groups {label}", dsn, True, args.jobs))
        if not args.no_plain:
            dsn = stack.enter_context(common.database("mysql", "gcost", QUEUE))
            sides.append(Side("plain", dsn, False, args.jobs))
        for i in range(args.warm + args.rounds):
            for side in common.rotated(sides, i):
                side.round(args.n)
        out = {}
        print(
            f"load before {load}, after {common.loadavg()}; rounds {args.rounds} of n={args.n}, medians a job"
        )
        keys = ["us", "statements", *COUNTERS]
        print("| side | part | " + " | ".join(keys) + " |")
        print("|---|---|" + "---|" * len(keys))
        for side in sides:
            rows = side.rows[args.warm :]
            out[side.label] = rows
            for part in ("reserve", "commit"):
                vals = [statistics.median(r[f"{part}_{k}"] for r in rows) for k in keys]
                print(f"| {side.label} | {part} | " + " | ".join(f"{v:.2f}" for v in vals) + " |")
            print(f"  ({side.label}: jobs a round {[r['n'] for r in rows]}; reserve+commit us a job "
                  f"{[round(r['reserve_us'] + r['commit_us']) for r in rows]})")  # fmt: skip
            side.db.close()
        if args.json:
            Path(args.json).write_text(json.dumps(out, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
