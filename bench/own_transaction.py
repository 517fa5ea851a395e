"""MySQL/MariaDB: what the client's transaction of its own costs a consumer.

The client runs reserve, commit, commit_batch, ... in a transaction of its own (see
dialects.mysql.MySQL.own_transaction_statements). Two measurements, each in alternating rounds:

1. round trips: one connection reserves and commits one message at a time. On a connection from
   pyqueue_sql.connect each call is one query (on MySQL 8.0 START TRANSACTION, CALL and COMMIT sent
   together; on MariaDB a plain CALL, the procedure opening what transaction it needs); on a
   connection without CLIENT.MULTI_STATEMENTS each is BEGIN, CALL, COMMIT on MySQL 8.0 (on MariaDB
   the same plain CALL). Microseconds per message.
2. isolation: 4 client processes drain 10,000 messages with reserve(100) + commit_many, the reserve
   run in autocommit (as shipped on MariaDB at the session's REPEATABLE READ) and in a transaction
   of its own, at REPEATABLE READ and at READ COMMITTED. msg/s per round and the slowest reserve of
   the round: under REPEATABLE READ the reserve's page reads see the transaction's snapshot, so a
   reserve whose snapshot is older than other clients' claims walks pages of messages they have
   taken since.

    .venv/bin/python bench/own_transaction.py [--rounds 4]

Every measurement gets its own fresh database on BENCH_MYSQL_DSN's server (dropped at the end).
"""

from __future__ import annotations

import argparse
import multiprocessing as mp
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import pymysql  # noqa: E402

import pyqueue_sql  # noqa: E402
from bench import common  # noqa: E402
from pyqueue_sql import dialects  # noqa: E402
from pyqueue_sql.dialects import mysql_connect_args  # noqa: E402
from pyqueue_sql.dialects.mysql import MySQL  # noqa: E402

QUEUE = "bench"


def _fill(db: pyqueue_sql.Database, n: int, tag: str) -> None:
    q = db.queue(QUEUE)
    for start in range(0, n, 1000):
        q.push_many([(f"{tag}{i}", "job", {"n": i}) for i in range(start, min(n, start + 1000))])


def round_trips(dsn: str, rounds: int, n: int = 600) -> None:
    one = pyqueue_sql.connect(dsn)
    three = pyqueue_sql.Database(
        pymysql.connect(**mysql_connect_args(dsn)), dialects.for_dsn(dsn), owned=True
    )
    one.queue(QUEUE).create(visibility_timeout=300)
    _fill(one, 2 * n * rounds, "m")
    print("one connection, reserve + commit of one message, us per message")
    for r in range(rounds):
        row = []
        for name, db in (("one trip", one), ("three trips", three))[:: 1 if r % 2 == 0 else -1]:
            q = db.queue(QUEUE)
            start = time.perf_counter()
            for _ in range(n):
                [got] = q.reserve(worker="w")
                q.commit(got)
            row.append(f"{name} {(time.perf_counter() - start) / n * 1e6:,.0f}")
        print(f"  round {r + 1}: " + ", ".join(sorted(row)))
    one.close()
    three.close()


def _consumer(dsn: str, mode: str, out: mp.Queue) -> None:
    if mode != "autocommit":  # a reserve always opens its transaction
        MySQL.self_contained_on_mariadb = MySQL.self_contained_on_mariadb - {"reserve"}
    if mode == "read committed":
        one_trip = MySQL._one_trip

        def read_committed(self: MySQL, name: str) -> str:
            prefix = "SET TRANSACTION ISOLATION LEVEL READ COMMITTED; " if name == "reserve" else ""
            return prefix + one_trip(self, name)

        MySQL._one_trip = read_committed  # type: ignore[method-assign]
    with pyqueue_sql.connect(dsn) as db:
        q = db.queue(QUEUE)
        done, slowest = 0, 0.0
        while True:
            start = time.perf_counter()
            got = q.reserve(100, worker="w")
            slowest = max(slowest, time.perf_counter() - start)
            if not got:
                break
            q.commit_many(got)
            done += len(got)
    out.put((done, slowest))


def isolation(dsn: str, rounds: int, clients: int = 4, n: int = 10_000) -> None:
    modes = ["repeatable read", "autocommit", "read committed"]
    with pyqueue_sql.connect(dsn) as db:
        db.queue(QUEUE).create(visibility_timeout=300)
        print(f"{clients} clients, reserve(100) + commit_many of {n:,} messages: msg/s (slowest reserve)")
        for r in range(rounds):
            row = []
            for mode in modes[r % len(modes) :] + modes[: r % len(modes)]:
                _fill(db, n, f"r{r}{mode[0]}")
                out: mp.Queue = mp.Queue()
                procs = [mp.Process(target=_consumer, args=(dsn, mode, out)) for _ in range(clients)]
                start = time.perf_counter()
                for p in procs:
                    p.start()
                results = [out.get() for _ in procs]
                for p in procs:
                    p.join()
                elapsed = time.perf_counter() - start
                rate = sum(done for done, _ in results) / elapsed
                row.append(f"{mode} {rate:,.0f} ({max(s for _, s in results) * 1e3:,.0f} ms)")
            print(f"  round {r + 1}: " + ", ".join(sorted(row)))


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--rounds", type=int, default=4)
    args = parser.parse_args()
    common.exit_on_sigterm()
    for part in (round_trips, isolation):
        dsn = common.create("mysql", "own")
        try:
            common.install_pyqueue(dsn)
            part(dsn, args.rounds)
        finally:
            common.drop("mysql", dsn)


if __name__ == "__main__":
    main()
