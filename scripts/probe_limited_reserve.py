"""What a batch reserve under a concurrency limit or a queue-wide rate costs MariaDB's server, beside a
plain one: the figures of bench/latest/NOTES-mylimit.md.

    python scripts/probe_limited_reserve.py mysql://root@127.0.0.1:3306/mysql [--calls 100] [--backlog 20000]

(Before a change: the same script run by a venv that imports the earlier commit's package, from a
directory outside this worktree, so that its routines are that commit's.)

In a database of its own (made from the server DSN given, dropped at the end), for each case a queue
with a backlog of --backlog no-op messages kept topped up, then --calls rounds of one reserve of n and
the commit of what it got (Queue.commit_many, as the worker's completer), in one session. The session's
server thread is found by information_schema.processlist.tid; its CPU time is read from
/proc/<mariadbd>/task/<tid>/schedstat (nanoseconds on a CPU: other sessions' load does not move it)
before and after each call. Also the session's Handler_% and Created_tmp_disk_tables counters and its
statements (Com_%) over the reserves. Prints, per case, server µs a message of the reserve and of the
commit (median of the calls), and rows read, rows written, statements and tables on disk a reserve.
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
        " OR Variable_name = 'Questions'"
    )
    return {name: int(value) for name, value in cur.fetchall()}


def run_case(
    dsn: str, name: str, feature: str | None, n: int, calls: int, backlog: int, profile: bool
) -> dict:
    pid = server_pid()
    with pyqueue_sql.connect(dsn) as db:
        queue = db.queue(f"probe.{name}").create(visibility_timeout=300)
        if feature == "limit":
            queue.set_limit("noop", 64)
        elif feature == "rate":
            queue.set_rate(None, 10000, 0.1)
        pushed = 0

        def top_up() -> None:
            nonlocal pushed
            while pushed - done[0] < backlog:
                queue.push_many([(f"k{pushed + i}", "noop", {}) for i in range(2000)])
                pushed += 2000

        done = [0]
        top_up()
        cur = db.connection.cursor()
        cur.execute("SELECT tid FROM information_schema.processlist WHERE id = CONNECTION_ID()")
        (tid,) = cur.fetchone()
        # one round first: the routines loaded, the caches warm
        queue.commit_many(queue.reserve(n=n))
        reserve_us, commit_us = [], []
        counts: dict[str, int] = {}
        got = 0
        for _ in range(calls):
            top_up()
            s0 = status(cur)
            t0 = thread_ns(pid, tid)
            taken = queue.reserve(n=n)
            t1 = thread_ns(pid, tid)
            s1 = status(cur)
            queue.commit_many(taken)
            t2 = thread_ns(pid, tid)
            for key in s1:
                counts[key] = counts.get(key, 0) + s1[key] - s0[key]
            got += len(taken)
            done[0] += len(taken)
            if profile and _ == calls - 1:
                cur.execute("SET profiling = 1, profiling_history_size = 100")
                queue.commit_many(queue.reserve(n=n))
                cur.execute("SHOW PROFILES")
                rows = cur.fetchall()
                cur.execute("SET profiling = 0")
                for qid, dur, text in rows:
                    print(f"  {qid:4} {float(dur) * 1e6:8.0f} us  {' '.join(str(text).split())[:150]}")
            reserve_us.append((t1 - t0) / 1000 / max(len(taken), 1))
            commit_us.append((t2 - t1) / 1000 / max(len(taken), 1))
    reads = sum(v for k, v in counts.items() if k.startswith("Handler_read"))
    writes = sum(counts.get(k, 0) for k in ("Handler_write", "Handler_update", "Handler_delete"))
    return {
        "case": name,
        "got/call": got / calls,
        "reserve us/msg": statistics.median(reserve_us),
        "commit us/msg": statistics.median(commit_us),
        "reads/msg": reads / got,
        "writes/msg": writes / got,
        # the status reads themselves are 2 of them a call
        "statements/call": (counts.get("Questions", 0)) / calls - 1,
        "tmp disk/call": counts.get("Created_tmp_disk_tables", 0) / calls,
        "tmp/call": counts.get("Created_tmp_tables", 0) / calls,
    }


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("server_dsn")
    parser.add_argument("--calls", type=int, default=100)
    parser.add_argument("--backlog", type=int, default=20000)
    parser.add_argument("--cases", default=",".join(CASES))
    parser.add_argument("--rounds", type=int, default=1)
    parser.add_argument("--profile", action="store_true", help="SHOW PROFILES of one more round at the end")
    args = parser.parse_args()
    dialect = dialects.for_dsn(args.server_dsn)
    name = f"pyqueue_probe_{uuid.uuid4().hex[:8]}"
    base = args.server_dsn.rsplit("/", 1)[0]
    admin = dialect.connect(args.server_dsn, autocommit=True)
    admin.cursor().execute(f"CREATE DATABASE {name}")
    dsn = f"{base}/{name}"
    print("package:", pyqueue_sql.__file__)
    try:
        migrate.upgrade(dsn)
        for r in range(args.rounds):
            for case in args.cases.split(","):
                feature, n = CASES[case]
                row = run_case(dsn, f"{case}-{r}", feature, n, args.calls, args.backlog, args.profile)
                print(
                    " ".join(f"{k}={v:.1f}" if isinstance(v, float) else f"{k}={v}" for k, v in row.items()),
                    flush=True,
                )
    finally:
        admin.cursor().execute(f"DROP DATABASE {name}")


if __name__ == "__main__":
    main()
