"""The memory one batch push at the cap takes on PostgreSQL (docs/contract.md, "Batch size"): a
fresh database, one queue_push_batch of N messages (default 10,000, the cap) with 1 KB payloads in
one call, and the backend's memory from /proc before and after (run it on the server's machine).

    python scripts/batch_cap_memory.py [N] [--dsn postgresql://postgres@127.0.0.1:5432/postgres]
"""

from __future__ import annotations

import argparse
import time
import uuid

import psycopg

import pyqueue_sql
from pyqueue_sql import migrate, sansio

FIELDS = ("VmRSS", "VmHWM", "RssAnon", "RssShmem")


def memory(pid: int) -> dict[str, int]:
    """The backend's resident memory, its peak, its private and its shared part, in MB."""
    with open(f"/proc/{pid}/status", encoding="ascii") as status:
        fields = dict(line.split(":", 1) for line in status)
    return {name: int(fields[name].split()[0]) // 1024 for name in FIELDS}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("n", type=int, nargs="?", default=10_000)
    parser.add_argument("--dsn", default="postgresql://postgres@127.0.0.1:5432/postgres")
    args = parser.parse_args()
    name = f"capmem_{uuid.uuid4().hex[:8]}"
    admin = psycopg.connect(args.dsn, autocommit=True)
    admin.execute(f'CREATE DATABASE "{name}"')
    dsn = args.dsn.rsplit("/", 1)[0] + "/" + name
    try:
        migrate.upgrade(dsn)
        with pyqueue_sql.connect(dsn) as db:
            queue = db.queue("mem").create()
            (pid,) = db.connection.execute("SELECT pg_backend_pid()").fetchone()
            queue.push("warm", "k", {})  # the routines compiled, the caches warm
            sansio.CHUNK_SIZE = max(args.n, sansio.CHUNK_SIZE)  # one call
            batch = [(f"k{i}", "job", {"data": "x" * 1000}) for i in range(args.n)]
            before = memory(pid)
            started = time.monotonic()
            queue.push_many(batch)
            took = time.monotonic() - started
            after = memory(pid)
        print(
            f"{args.n} messages of 1 KB in one call, {took:.2f} s; backend MB before -> after: "
            + ", ".join(f"{k} {before[k]} -> {after[k]}" for k in FIELDS)
        )
    finally:
        admin.execute(f'DROP DATABASE "{name}" WITH (FORCE)')
        admin.close()


if __name__ == "__main__":
    main()
