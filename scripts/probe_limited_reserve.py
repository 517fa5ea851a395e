"""What a batch reserve under a concurrency limit or a queue-wide rate costs MariaDB's server, beside a
plain one: the figures of bench/latest/NOTES-mylimit.md.

    python scripts/probe_limited_reserve.py mysql://root@127.0.0.1:3306/mysql [--calls 100] [--backlog 20000]
        [--before /path/to/a/worktree/of/the/commit/before] [--profile]

In a database of its own (made from the server DSN given, dropped at the end), for each case a queue
with a backlog of --backlog no-op messages kept topped up, then --calls rounds of one reserve of n and
the commit of what it got (Queue.commit_many, as the worker's completer), in one session. The session's
server thread is found by information_schema.processlist.tid; its CPU time is read from
/proc/<mariadbd>/task/<tid>/schedstat (nanoseconds on a CPU: other sessions' load moves it less than
wall time) before and after each call. Also the session's Handler_% and Created_tmp_% counters over
the reserves (the reserve only). With --before, a second database gets its routines from that
worktree's venv (its migrate.upgrade) and the two are called turn about, round by round, in this one
process, so that both see the same load: the client is this one for both.

Prints, per case and database, server µs a message of the reserve and of the commit (median of the
calls, and the total over them), rows read and written by the handlers a message, temporary tables a
call. --profile: SHOW PROFILES (wall time) of one more round of each at the end.
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import uuid

import pyqueue_sql
from pyqueue_sql import dialects, migrate

CASES = {
    "plain-256": (None, 256),
    "plain-64": (None, 64),
    "limit64-64": ("limit", 64),
    "limit64-256": ("limit", 256),
    "rate-256": ("rate", 256),
}


def server_pid() -> int:
    return int(subprocess.check_output(["pidof", "mariadbd"]).split()[0])


def thread_ns(pid: int, tid: int) -> int:
    with open(f"/proc/{pid}/task/{tid}/schedstat") as f:
        return int(f.read().split()[0])


def status(cur) -> dict[str, int]:
    cur.execute(
        "SHOW SESSION STATUS WHERE Variable_name LIKE 'Handler%' OR Variable_name LIKE 'Created_tmp%'"
    )
    return {name: int(value) for name, value in cur.fetchall()}


class Probe:
    """One database's queue for one case, and what its rounds cost the server."""

    def __init__(self, dsn: str, label: str, name: str, feature: str | None, n: int, backlog: int):
        self.label, self.n, self.backlog = label, n, backlog
        self.db = pyqueue_sql.connect(dsn)
        self.queue = self.db.queue(f"probe.{name}").create(visibility_timeout=300)
        if feature == "limit":
            self.queue.set_limit("noop", 64)
        elif feature == "rate":
            self.queue.set_rate(None, 10000, 0.1)
        self.pushed = self.done = self.got = 0
        self.top_up()
        self.cur = self.db.connection.cursor()
        self.cur.execute("SELECT tid FROM information_schema.processlist WHERE id = CONNECTION_ID()")
        (self.tid,) = self.cur.fetchone()
        self.pid = server_pid()
        self.queue.commit_many(self.queue.reserve(n=n))  # the routines loaded, the caches warm
        self.reserve_us: list[float] = []
        self.commit_us: list[float] = []
        self.counts: dict[str, int] = {}
        self.reserve_ns = self.commit_ns = 0

    def top_up(self) -> None:
        while self.pushed - self.done < self.backlog:
            self.queue.push_many([(f"k{self.pushed + i}", "noop", {}) for i in range(2000)])
            self.pushed += 2000

    def round(self) -> None:
        self.top_up()
        s0 = status(self.cur)
        t0 = thread_ns(self.pid, self.tid)
        taken = self.queue.reserve(n=self.n)
        t1 = thread_ns(self.pid, self.tid)
        s1 = status(self.cur)  # (the status read between: not in either)
        t1b = thread_ns(self.pid, self.tid)
        self.queue.commit_many(taken)
        t2 = thread_ns(self.pid, self.tid)
        for key in s1:
            self.counts[key] = self.counts.get(key, 0) + s1[key] - s0[key]
        self.got += len(taken)
        self.done += len(taken)
        self.reserve_ns += t1 - t0
        self.commit_ns += t2 - t1b
        self.reserve_us.append((t1 - t0) / 1000 / max(len(taken), 1))
        self.commit_us.append((t2 - t1b) / 1000 / max(len(taken), 1))

    def profile(self) -> None:
        self.cur.execute("SET profiling = 1, profiling_history_size = 100")
        self.queue.commit_many(self.queue.reserve(n=self.n))
        self.cur.execute("SHOW PROFILES")
        rows = self.cur.fetchall()
        self.cur.execute("SET profiling = 0")
        print(f"  {self.label}:")
        for qid, dur, text in rows:
            print(f"  {qid:4} {float(dur) * 1e6:8.0f} us  {' '.join(str(text).split())[:150]}")

    def summary(self, calls: int) -> str:
        reads = sum(v for k, v in self.counts.items() if k.startswith("Handler_read"))
        writes = sum(self.counts.get(k, 0) for k in ("Handler_write", "Handler_update", "Handler_delete"))
        got = max(self.got, 1)
        return (
            f"{self.label:7} got/call={self.got / calls:.0f}"
            f" reserve us/msg={statistics.median(self.reserve_us):.1f} (total {self.reserve_ns / 1000 / got:.1f})"
            f" commit us/msg={statistics.median(self.commit_us):.1f} (total {self.commit_ns / 1000 / got:.1f})"
            f" reads/msg={reads / got:.1f} writes/msg={writes / got:.1f}"
            f" tmp/call={self.counts.get('Created_tmp_tables', 0) / calls:.1f}"
            f" tmp disk/call={self.counts.get('Created_tmp_disk_tables', 0) / calls:.1f}"
        )

    def close(self) -> None:
        self.db.close()


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("server_dsn")
    parser.add_argument("--calls", type=int, default=100)
    parser.add_argument("--backlog", type=int, default=20000)
    parser.add_argument("--cases", default=",".join(CASES))
    parser.add_argument("--rounds", type=int, default=1)
    parser.add_argument("--before", help="a worktree whose .venv installs the routines to compare with")
    parser.add_argument("--profile", action="store_true", help="SHOW PROFILES of one more round at the end")
    args = parser.parse_args()
    dialect = dialects.for_dsn(args.server_dsn)
    base = args.server_dsn.rsplit("/", 1)[0]
    admin = dialect.connect(args.server_dsn, autocommit=True)
    dsns = {}
    for label in ["after", "before"] if args.before else ["this"]:
        name = f"pyqueue_probe_{uuid.uuid4().hex[:8]}"
        admin.cursor().execute(f"CREATE DATABASE {name}")
        dsns[label] = f"{base}/{name}"
    print("package:", pyqueue_sql.__file__)
    try:
        for label, dsn in dsns.items():
            if label == "before":
                code = f"from pyqueue_sql import migrate; migrate.upgrade({dsn!r})"
                subprocess.run([f"{args.before}/.venv/bin/python", "-c", code], check=True, cwd="/")
            else:
                migrate.upgrade(dsn)
        for r in range(args.rounds):
            for case in args.cases.split(","):
                feature, n = CASES[case]
                probes = [
                    Probe(dsn, label, f"{case}-{r}", feature, n, args.backlog) for label, dsn in dsns.items()
                ]
                for i in range(args.calls):
                    for probe in probes if i % 2 == 0 else probes[::-1]:
                        probe.round()
                print(f"case={case} round={r}")
                for probe in probes:
                    print("  " + probe.summary(args.calls), flush=True)
                    if args.profile:
                        probe.profile()
                    probe.close()
    finally:
        for dsn in dsns.values():
            admin.cursor().execute(f"DROP DATABASE {dsn.rsplit('/', 1)[1]}")


if __name__ == "__main__":
    main()
