"""Routines side by side: each system's calls for four workloads and a bulk enqueue, clients starting
together, rounds interleaved; medians, ratios to the best peer, CPU per message. bench/README.md, Method;
`ab` (--previous-commit C) and `profile` run this too: README, A/B and profile."""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import datetime as dt
import functools
import importlib.util
import itertools
import json
import multiprocessing as mp
import operator
import os
import platform
import statistics
import sys
import time
import uuid
from typing import Any

import pyqueue_sql
from bench import common

WORKLOADS = ("push", "reserve_ack", "push_batch", "reserve_ack_batch")
# bulk enqueue: BULK messages a call (push_many's chunk), against send_batch and a multi-row INSERT
BULK_WORKLOADS = ("push_bulk",)
ALL_WORKLOADS = WORKLOADS + BULK_WORKLOADS
CONSUMING = ("reserve_ack", "reserve_ack_batch")
STATES = ("fresh", "churned")
BATCH = 100
BULK = 5000
QUEUE = "bench"
HERE = os.path.dirname(os.path.abspath(__file__))
FUNCTIONS = (
    "SELECT funcname, calls, total_time, self_time FROM pg_stat_user_functions"  # --profile's counters
)
LABEL = {
    "push": "push (1/call)",
    "reserve_ack": "reserve+ack (1/call)",
    "push_batch": f"push batch ({BATCH})",
    "reserve_ack_batch": f"reserve+ack batch ({BATCH})",
    "push_bulk": f"bulk enqueue ({BULK:,}/call)",
}
_of = operator.itemgetter("dialect", "system", "workload")
SETTINGS = {  # the server's settings the report names
    "postgresql": "server_version synchronous_commit fsync wal_sync_method shared_buffers autovacuum",
    "mysql": "version innodb_flush_log_at_trx_commit sync_binlog log_bin innodb_buffer_pool_size "
    "transaction_isolation tx_isolation",
}


def _payload(i: Any) -> str:
    return json.dumps({"n": i, "kind": "bench"})


def _deadlock(exc: Exception) -> bool:
    """A deadlock victim's error, from psycopg ("deadlock detected") or PyMySQL (1213)."""
    return "deadlock" in str(exc).lower() or "1213" in str(exc)


class System:
    """setup(dsn) once per fresh database, reset(dsn) before a measurement, prefill(dsn, n) for the consuming
    workloads; in each client process open(dsn) / close(), push(key, i), push_batch(keys), take_ack() and
    take_ack_batch() -> messages done. role: "ours", "peer" or "ceiling"; calls: a workload's one call."""

    name = ""
    role = "peer"
    needs = ""  # the Python package it needs, if any
    dialects: tuple[str, ...] = ("postgresql", "mysql")
    calls: dict[str, str] = {}

    def __init__(self, dialect: str):
        self.dialect = dialect
        self.pg = dialect == "postgresql"

    @classmethod
    def unavailable(cls) -> str | None:
        """Why this system cannot run here (a package missing), or None."""
        if cls.needs and importlib.util.find_spec(cls.needs) is None:
            return f"the {cls.needs} package is not installed (pip install {cls.needs}, or the bench extra)"
        return None

    @classmethod
    def call_of(cls, dialect: str, workload: str) -> str:
        """What one call of the workload runs, for the report."""
        return cls.calls.get(workload, "")

    @contextlib.contextmanager
    def opened(self, dsn: str):
        """A client of its own (open, close) for the with block."""
        client = type(self)(self.dialect)
        client.open(dsn)
        try:
            yield client
        finally:
            client.close()

    def prefill(self, dsn: str, n: int) -> None:
        with self.opened(dsn) as client:
            for numbers in common.chunks(n):
                client.push_batch([f"p{i}" for i in numbers])

    def close(self) -> None:
        self.conn.close()

    def take_ack(self) -> int:  # (the peers' _take(n): reserve up to n, acknowledge them; how many)
        return self._take(1)

    def take_ack_batch(self) -> int:
        return self._take(BATCH)


def _analyze(dialect: str, dsn: str, table: str) -> None:
    common.execute(dialect, dsn, ("VACUUM ANALYZE " if dialect == "postgresql" else "ANALYZE TABLE ") + table)


class PyQueue(System):
    """pyqueue-sql through its Python client, whose methods each call one public routine."""

    name = "pyqueue"
    role = "ours"
    calls = {
        "push": "`queue_push` (`Queue.push`)",
        "reserve_ack": "`queue_reserve(n=1)` + `queue_commit`",
        "push_batch": "`queue_push_batch` of 100 (`Queue.push_many`)",
        "reserve_ack_batch": "`queue_reserve(n=100)` + `queue_commit_batch` (`Queue.commit_many`)",
        "push_bulk": f"`Queue.push_many` of {BULK:,} (one `queue_push_batch`)",
    }

    def setup(self, dsn: str) -> None:
        common.install_pyqueue(dsn)

    def reset(self, dsn: str) -> None:
        with pyqueue_sql.connect(dsn) as db:
            with contextlib.suppress(pyqueue_sql.UnknownQueueError):
                db.queue(QUEUE).drop()
            db.queue(QUEUE).create(visibility_timeout=300)
        _analyze(self.dialect, dsn, "pyqueue_message")

    def prefill(self, dsn: str, n: int) -> None:
        with self.opened(dsn) as client:
            for numbers in common.chunks(n):
                client.q.push_many([(f"p{i}", "job", {"n": i}) for i in numbers])

    def open(self, dsn: str) -> None:
        self.db = pyqueue_sql.connect(dsn)
        self.q = self.db.queue(QUEUE)
        self.worker = f"bench-{os.getpid()}"

    def close(self) -> None:
        self.db.close()

    def push(self, key: str, i: int) -> None:
        self.q.push(key, "job", {"n": i, "kind": "bench"})

    def push_batch(self, keys: list[str]) -> None:
        self.q.push_many([(k, "job", {"n": k, "kind": "bench"}) for k in keys])

    def _take(self, n: int) -> int:  # one: queue_commit; a batch: queue_commit_batch (commit_many)
        got = self.q.reserve(n, worker=self.worker)
        if got:
            self.q.commit(got[0]) if n == 1 else self.q.commit_many(got)
        return len(got)


class PyQueueCommitReserve(PyQueue):
    """One call per message: queue_commit_reserve commits the previous message and reserves the next."""

    name = "pyqueue commit_reserve"
    calls = {"reserve_ack": "`queue_commit_reserve(previous, n=1)`: one call per message"}

    def open(self, dsn: str) -> None:
        super().open(dsn)
        self.held = None

    def close(self) -> None:
        if self.held is not None:  # the last message taken; not timed
            self.q.commit(self.held)
        super().close()

    def take_ack(self) -> int:
        _, got = self.q.commit_reserve(self.held, worker=self.worker)
        done = 1 if self.held is not None else 0
        self.held = got[0] if got else None
        return done


class Previous(PyQueue):
    """pyqueue-sql with a git commit's sql/ (ab, --previous-commit): a peer, the ratio newest / previous."""

    name = "previous revision"
    role = "peer"
    commit = ""

    def setup(self, dsn: str) -> None:
        common.install_commit(self.dialect, dsn, self.commit)


def profile_lines(dsn: str, before: dict) -> tuple[dict, list[str]]:
    """(each routine's (calls, total ms, own ms) so far, the lines of calls and µs a call since before)."""
    after = {name: (c, t, o) for name, c, t, o in common.execute("postgresql", dsn, FUNCTIONS)}
    lines = []
    for name in sorted(after, key=lambda n: -(after[n][2] - before.get(n, (0, 0, 0))[2])):
        calls, total, own = (a - b for a, b in zip(after[name], before.get(name, (0, 0, 0))))
        if calls:
            lines.append(
                f"    {name:32} {calls:8,} calls  {total * 1000 / calls:8.1f} µs/call  own {own * 1000 / calls:8.1f}"
            )
    return after, lines


class InsertCeiling(System):
    """What a single push can approach: one autocommit INSERT of one row into a plain table (MySQL/MariaDB:
    INSERT IGNORE with a unique msg_key, the least a push with dedup can do)."""

    name = "INSERT ceiling"
    role = "ceiling"
    calls = {"push": "single-row autocommit `INSERT`"}
    CALL = {
        "postgresql": "single-row autocommit `INSERT` (id, payload jsonb)",
        "mysql": "single-row autocommit `INSERT IGNORE` (id, unique msg_key, payload JSON)",
    }
    DDL = {
        "postgresql": "CREATE TABLE plain (id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY, payload jsonb NOT NULL)",
        "mysql": "CREATE TABLE plain (id BIGINT AUTO_INCREMENT PRIMARY KEY, msg_key VARCHAR(255) NOT NULL, "
        "payload JSON NOT NULL, UNIQUE KEY plain_key (msg_key)) ENGINE=InnoDB",
    }
    INSERT = {
        "postgresql": "INSERT INTO plain (payload) VALUES (%s)",
        "mysql": "INSERT IGNORE INTO plain (msg_key, payload) VALUES (%s, %s)",
    }

    @classmethod
    def call_of(cls, dialect: str, workload: str) -> str:
        return cls.CALL[dialect]

    def setup(self, dsn: str) -> None:
        common.execute(self.dialect, dsn, self.DDL[self.dialect])

    def reset(self, dsn: str) -> None:
        common.execute(self.dialect, dsn, "TRUNCATE plain")

    def open(self, dsn: str) -> None:
        self.conn = common.raw_connect(self.dialect, dsn, autocommit=True)
        self.sql = self.INSERT[self.dialect]

    def push(self, key: str, i: int) -> None:
        self.conn.cursor().execute(self.sql, (_payload(i),) if self.pg else (key, _payload(i)))


class HandRolled(System):
    """The SKIP LOCKED queue a team writes itself: reserve = the SELECT and an UPDATE of run_at, token."""

    name = "SKIP LOCKED by hand"
    lock = "FOR UPDATE SKIP LOCKED"
    calls = {
        "push": "`INSERT IGNORE` of one row",
        "reserve_ack": "`SELECT ... LIMIT 1 FOR UPDATE SKIP LOCKED` + `UPDATE`, `COMMIT`; `DELETE`",
        "push_batch": "multi-row `INSERT IGNORE` of 100",
        "reserve_ack_batch": "the same with `LIMIT 100`; one `DELETE ... IN (100 ids)`",
        "push_bulk": f"multi-row `INSERT IGNORE` of {BULK:,}",
    }

    DDL = {
        "postgresql": ("CREATE TABLE job (id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY, "
                       "msg_key text NOT NULL UNIQUE, payload jsonb NOT NULL, "
                       "run_at timestamptz NOT NULL DEFAULT now(), token uuid NULL)",
                       "CREATE INDEX job_ready ON job (run_at, id)"),
        "mysql": ("CREATE TABLE job (id BIGINT AUTO_INCREMENT PRIMARY KEY, msg_key VARCHAR(255) NOT NULL, "
                  "payload JSON NOT NULL, run_at DATETIME(6) NOT NULL DEFAULT (UTC_TIMESTAMP(6)), "
                  "token CHAR(36) NULL, UNIQUE KEY job_key (msg_key), KEY job_ready (run_at, id)) ENGINE=InnoDB",),
    }  # fmt: skip

    def setup(self, dsn: str) -> None:
        common.execute(self.dialect, dsn, *self.DDL[self.dialect])

    def reset(self, dsn: str) -> None:
        common.execute(self.dialect, dsn, "TRUNCATE job")
        _analyze(self.dialect, dsn, "job")

    def insert_sql(self, n: int) -> str:
        values = ", ".join(["(%s, %s)"] * n)
        if self.pg:
            return f"INSERT INTO job (msg_key, payload) VALUES {values} ON CONFLICT (msg_key) DO NOTHING"
        return f"INSERT IGNORE INTO job (msg_key, payload) VALUES {values}"

    def open(self, dsn: str) -> None:
        self.conn = common.raw_connect(self.dialect, dsn, autocommit=False)
        self.auto = common.raw_connect(self.dialect, dsn, autocommit=True)
        self.now = "now()" if self.pg else "UTC_TIMESTAMP(6)"
        self.later = "now() + interval '300 seconds'" if self.pg else "UTC_TIMESTAMP(6) + INTERVAL 300 SECOND"
        self.single = self.insert_sql(1)

    def close(self) -> None:
        self.conn.close()
        self.auto.close()

    def push(self, key: str, i: int) -> None:
        self.auto.cursor().execute(self.single, (key, _payload(i)))

    def push_batch(self, keys: list[str]) -> None:
        self.auto.cursor().execute(self.insert_sql(len(keys)), [v for k in keys for v in (k, _payload(k))])

    def _reserve(self, n: int) -> tuple[list[int], str]:
        token = str(uuid.uuid4())
        try:
            ids = claim(self.conn, "job", n, token, self.now, self.later, self.lock)
            self.conn.commit()
            return ids, token
        except Exception as exc:  # a deadlock under contention counts as nothing taken
            self.conn.rollback()
            if _deadlock(exc):
                return [], token
            raise

    def _take(self, n: int) -> int:
        ids, token = self._reserve(n)
        if ids:
            delete = f"DELETE FROM job WHERE token = %s AND id IN ({', '.join(['%s'] * len(ids))})"
            for attempt in range(10):  # a deadlock victim deletes again, as a user's loop would
                try:
                    self.auto.cursor().execute(delete, [token, *ids])
                    break
                except Exception as exc:
                    if attempt == 9 or not _deadlock(exc):
                        raise
        return len(ids)


def claim(conn, table: str, n: int, token: str, now: str, later: str, lock: str = "FOR UPDATE SKIP LOCKED"):
    """A job table's reserve in conn's open transaction: the first n ready rows by (run_at, id), locked
    by lock, their run_at moved to later under token; their ids."""
    select = f"SELECT id, payload FROM {table} WHERE run_at <= {now} ORDER BY run_at, id LIMIT {n} {lock}"
    ids = [r[0] for r in common.query(conn, select)]
    if ids:
        marks = ", ".join(["%s"] * len(ids))
        update = f"UPDATE {table} SET run_at = {later}, token = %s WHERE id IN ({marks})"
        common.query(conn, update, (token, *ids))
    return ids


class Naive(HandRolled):
    """The select-then-update design: the same table and calls without SKIP LOCKED (every consumer
    waits for the one holding the oldest rows); its pushes are the SKIP LOCKED queue's: not measured."""

    name = "naive (FOR UPDATE)"
    lock = "FOR UPDATE"
    calls = {
        "reserve_ack": "`SELECT ... LIMIT 1 FOR UPDATE` + `UPDATE`, `COMMIT`; `DELETE`",
        "reserve_ack_batch": "the same with `LIMIT 100`",
    }


class Pgmq(System):
    """pgmq (common.install_pgmq) through its SQL functions on a psycopg autocommit connection."""

    name = needs = "pgmq"
    dialects = ("postgresql",)
    calls = {
        "push": "`pgmq.send`",
        "reserve_ack": "`pgmq.read(vt, 1)` + `pgmq.delete(id)`",
        "push_batch": "`pgmq.send_batch` of 100",
        "reserve_ack_batch": "`pgmq.read(vt, 100)` + `pgmq.delete(ids)`",
        "push_bulk": f"`pgmq.send_batch` of {BULK:,}",
    }

    def setup(self, dsn: str) -> None:
        common.install_pgmq(dsn, QUEUE)

    def reset(self, dsn: str) -> None:
        common.execute(self.dialect, dsn, f"SELECT pgmq.purge_queue('{QUEUE}')", f"TRUNCATE pgmq.a_{QUEUE}")
        _analyze(self.dialect, dsn, f"pgmq.q_{QUEUE}")

    def prefill(self, dsn: str, n: int) -> None:
        for m in map(len, common.chunks(n)):
            rows = f"ARRAY(SELECT jsonb_build_object('n', i, 'kind', 'bench') FROM generate_series(1, {m}) i)"
            common.execute(self.dialect, dsn, f"SELECT count(*) FROM pgmq.send_batch('{QUEUE}', {rows})")

    def open(self, dsn: str) -> None:
        self.conn = common.raw_connect(self.dialect, dsn, autocommit=True)

    def push(self, key: str, i: int) -> None:
        common.query(self.conn, self.SEND, (QUEUE, _payload(i)))

    def push_batch(self, keys: list[str]) -> None:
        common.query(self.conn, self.SEND_BATCH, (QUEUE, [_payload(k) for k in keys]))

    # What pgmq's Python client sends (pgmq/_sql.py): a consumer reads whole messages, as the others'.
    SEND = "SELECT * FROM pgmq.send(queue_name=>%s::text, msg=>%s::jsonb)"
    SEND_BATCH = "SELECT * FROM pgmq.send_batch(queue_name=>%s::text, msgs=>%s::jsonb[])"
    READ = (
        "SELECT msg_id, read_ct, enqueued_at, last_read_at, vt, message, headers "
        "FROM pgmq.read(queue_name=>%s::text, vt=>%s::integer, qty=>%s::integer)"
    )
    DELETE = "SELECT pgmq.delete(queue_name=>%s::text, msg_id=>%s::bigint)"
    DELETE_BATCH = "SELECT * FROM pgmq.delete(queue_name=>%s::text, msg_ids=>%s::bigint[])"

    def _take(self, n: int) -> int:
        ids = [r[0] for r in common.query(self.conn, self.READ, (QUEUE, 300, n))]
        if len(ids) == 1:
            common.query(self.conn, self.DELETE, (QUEUE, ids[0]))
        elif ids:
            common.query(self.conn, self.DELETE_BATCH, (QUEUE, ids))
        return len(ids)


class PGQueuer(System):
    """PGQueuer through its async Queries API (enqueue / dequeue / log_jobs) on psycopg async."""

    name = needs = "pgqueuer"
    dialects = ("postgresql",)
    calls = {
        "push": "`Queries.enqueue` (async)",
        "reserve_ack": "`Queries.dequeue(batch_size=1)` + `Queries.log_jobs`",
        "push_batch": "`Queries.enqueue` with lists of 100",
        "reserve_ack_batch": "`dequeue(batch_size=100)` + `log_jobs`",
    }

    def run(self, coro):  # the async API run to its end on the client process's event loop
        return self.loop.run_until_complete(coro)

    async def _queries(self, dsn: str):
        import psycopg
        from pgqueuer.queries import Queries

        conn = await psycopg.AsyncConnection.connect(dsn, autocommit=True)
        return conn, Queries.from_psycopg_connection(conn)

    def setup(self, dsn: str) -> None:
        with self.opened(dsn) as client:
            client.run(client.q.install())

    def reset(self, dsn: str) -> None:
        common.execute(self.dialect, dsn, "TRUNCATE pgqueuer, pgqueuer_log")
        _analyze(self.dialect, dsn, "pgqueuer")

    def prefill(self, dsn: str, n: int) -> None:
        with self.opened(dsn) as client:
            for m in map(len, common.chunks(n)):
                client.run(client.q.enqueue(["bench"] * m, [b'{"n":1}'] * m, [0] * m))

    def open(self, dsn: str) -> None:
        from pgqueuer.queries import EntrypointExecutionParameter

        self.loop = asyncio.new_event_loop()
        self.conn, self.q = self.run(self._queries(dsn))
        self.eps = {"bench": EntrypointExecutionParameter(concurrency_limit=0)}
        self.qm_id = uuid.uuid4()

    def close(self) -> None:
        self.run(self.conn.close())
        self.loop.close()

    def push(self, key: str, i: int) -> None:
        self.run(self.q.enqueue("bench", _payload(i).encode(), 0))

    def push_batch(self, keys: list[str]) -> None:
        m = len(keys)
        self.run(self.q.enqueue(["bench"] * m, [_payload(k).encode() for k in keys], [0] * m))

    def _take(self, n: int) -> int:
        jobs = self.run(self.q.dequeue(n, self.eps, self.qm_id, None, dt.timedelta(seconds=300)))
        if jobs:
            self.run(self.q.log_jobs([(job, "successful", None) for job in jobs]))
        return len(jobs)


_ALL = (InsertCeiling, PyQueue, PyQueueCommitReserve, Previous, Pgmq, PGQueuer, HandRolled, Naive)
SYSTEMS: dict[str, type[System]] = {cls.name: cls for cls in _ALL}
_OURS = ("INSERT ceiling", "pyqueue", "pyqueue commit_reserve")
DEFAULT_SYSTEMS = {
    "postgresql": (*_OURS, "pgmq", "pgqueuer"),
    "mysql": (*_OURS, "SKIP LOCKED by hand", "naive (FOR UPDATE)"),
}


def _client(system_cls, dialect, dsn, workload, index, clients, n, cap, barrier, done, results) -> None:
    """One client process: its share of the messages (random uuid4 keys), from the barrier to done or cap."""
    try:
        system = system_cls(dialect)
        system.open(dsn)
        share = range(index, n, clients)  # this client's message numbers
        names = [uuid.uuid4().hex for _ in share if workload not in CONSUMING]  # (none to consume)
        barrier.wait()
        start = time.perf_counter()
        deadline, count = start + cap, 0
        if workload == "push":
            for key, i in zip(names, share):
                system.push(key, i)
                count += 1
                if (count & 31) == 0 and time.perf_counter() > deadline:
                    break
        elif workload in ("push_batch", "push_bulk"):
            size = BATCH if workload == "push_batch" else BULK
            for s in range(0, len(names), size):
                system.push_batch(names[s : s + size])
                count += len(names[s : s + size])
                if time.perf_counter() > deadline:
                    break
        else:
            take = system.take_ack if workload == "reserve_ack" else system.take_ack_batch
            total = 0
            while total < n and time.perf_counter() <= deadline:
                if got := take():
                    count += got
                    with done.get_lock():
                        done.value += got
                total = done.value
        end = time.perf_counter()
        system.close()  # not timed (commit_reserve commits the message it still holds)
        results.put((index, count, start, end, None))
    except BaseException as exc:  # reported by the parent
        results.put((index, 0, 0.0, 0.0, f"{type(exc).__name__}: {exc}"))


def measure(system_cls, dialect, dsn, workload, clients, n, cap, pid=None, state="fresh") -> dict:
    """One measurement: the system emptied or churned, prefilled to consume, clients from one barrier."""
    out: dict[str, Any] = {}
    if state == "churned" and "reserve_ack_batch" in system_cls.calls:  # it consumes: it can be drained
        with system_cls(dialect).opened(dsn) as system:  # what the last one left drained, n pushed, drained
            drained = sum(iter(system.take_ack_batch, 0))
            system.prefill(dsn, n)
            out["churned"] = drained + sum(iter(system.take_ack_batch, 0))
    else:  # fresh (and the INSERT ceiling, which does not consume): emptied, VACUUM ANALYZE
        system_cls(dialect).reset(dsn)
    if workload in CONSUMING:
        system_cls(dialect).prefill(dsn, n)
    client0, server0 = common.own_cpu(children=True), common.server_cpu(dialect, pid)
    ctx = mp.get_context("fork")
    barrier, done, results = ctx.Barrier(clients), ctx.Value("q", 0), ctx.Queue()
    client = functools.partial(_client, system_cls, dialect, dsn, workload)
    shared = (clients, n, cap, barrier, done, results)
    procs = [ctx.Process(target=client, args=(i, *shared)) for i in range(clients)]
    for p in procs:
        p.start()
    try:
        rows = [results.get(timeout=cap + 120) for _ in procs]
    finally:  # a client stuck in a call is ended, so that the next measurement starts clean
        for p in procs:
            p.join(timeout=30)
            if p.is_alive():
                p.terminate()
                p.join(timeout=10)
    if errors := [r[4] for r in rows if r[4]]:
        return {"error": errors[0]}
    count, seconds = sum(r[1] for r in rows), max(r[3] for r in rows) - min(r[2] for r in rows)
    rate = round(count / seconds, 1) if seconds else None
    out = dict(messages=count, seconds=round(seconds, 4), rate=rate) | out
    server1 = common.server_cpu(dialect, pid)
    if count:
        out["client_cpu_us"] = round((common.own_cpu(children=True) - client0) / count * 1e6, 1)
        if server0 is not None and server1 is not None:
            out["server_cpu_us"] = round((server1 - server0) / count * 1e6, 1)
    return out


def _rates(results: list[dict], dialect: str, system: str, workload: str, key="rate") -> dict[int, float]:
    """Round -> msg/s (or key: client_cpu_us, server_cpu_us) of one system on one workload."""
    return {r["round"]: r[key] for r in results if _of(r) == (dialect, system, workload) and r.get(key)}


def _ratio(mine: dict[int, float], other: dict[int, float]) -> list[float]:
    """Per-round ratios (rounds where both ran): the two sides were measured seconds apart."""
    return [mine[k] / other[k] for k in sorted(mine) if k in other]


def summarize(results: list[dict], dialect: str, systems: list[str]) -> list[dict]:
    """One row per workload and system: median, range, ratio to the best peer and to the ceiling."""
    rows = []
    for w in ALL_WORKLOADS:
        rates = {s: _rates(results, dialect, s, w) for s in systems}
        rates = {s: v for s, v in rates.items() if v}
        if not rates:
            continue
        peers = [s for s in rates if SYSTEMS[s].role == "peer"]
        best = max(peers, key=lambda s: statistics.median(rates[s].values()), default=None)
        ceiling = rates.get("INSERT ceiling")
        for s, v in rates.items():
            vals, role = list(v.values()), SYSTEMS[s].role
            row = dict(workload=w, system=s, role=role, calls=SYSTEMS[s].call_of(dialect, w))
            row |= dict(median=statistics.median(vals), min=min(vals), max=max(vals))
            row |= dict(rounds=len(vals), best_peer=best)
            for side in ("client_cpu_us", "server_cpu_us"):
                if cpu := list(_rates(results, dialect, s, w, side).values()):
                    row[side] = statistics.median(cpu)
            if best and role != "ceiling":
                r = _ratio(v, rates[best])
                row["vs_best_peer"] = statistics.median(r) if r else None
                row["vs_best_peer_range"] = (min(r), max(r)) if r else None
            if w == "push" and ceiling and role != "ceiling":
                r = _ratio(v, ceiling)
                row["vs_ceiling"] = statistics.median(r) if r else None
            rows.append(row)
    return rows


def markdown(results: list[dict], meta: dict) -> str:
    out = [
        f"Command: `{meta['command']}`. Run {meta['started']} on {meta['machine']}, {meta['seconds']:.0f} s; {meta['rounds']} round(s), "
        f"{meta['clients']} client processes, {meta['messages']:,} messages per measurement "
        f"({meta.get('bulk_messages') or 0:,} for a bulk enqueue), random keys, time cap "
        f"{meta['cap']} s; 1-minute load average {meta['load_before'][0]:.1f} before, "
        f"{meta['load_after'][0]:.1f} after. msg/s, higher is better: the median over the rounds and "
        "the range (min-max). Ratios are taken within each round (systems measured seconds apart), "
        "then the median, with their range over the rounds. CPU µs/msg: the CPU a message cost the "
        "client processes and the server (when it runs on this machine), medians over the rounds; "
        "with clients and server on the same cores the rates follow their sums.",
        "",
    ]
    if meta.get("state") == "churned":
        said = [
            f"{d} autovacuum = {s['autovacuum']}" for d, s in meta["servers"].items() if "autovacuum" in s
        ]
        out[0] += " **Churned queue** (bench/README.md, Method): never vacuumed, analyzed or truncated "
        out[0] += f"(autovacuum as the server is configured: {'; '.join(said) or 'not read'})."
    if meta.get("against"):
        out[0] += f" **A/B**: pyqueue is this checkout's sql/, previous revision commit {meta['against']}; "
        out[0] += "vs best peer = newest / previous."
    for dialect in meta["dialects"]:
        rows = summarize(results, dialect, list(SYSTEMS))
        server = meta["servers"].get(dialect, {})
        version = server.get("server_version") or server.get("version") or "?"
        out += [f"### {dialect} ({version})", ""]
        if not rows:
            out += ["Nothing measured.", ""]
            continue
        cells = []
        for row in rows:
            vs = ""
            if row["system"] == row["best_peer"]:
                vs = "best peer"
            elif row.get("vs_best_peer") is not None:
                lo, hi = row["vs_best_peer_range"]
                vs = f"{row['vs_best_peer']:.2f}x" + (f" ({lo:.2f}-{hi:.2f})" if row["rounds"] > 1 else "")
            ceil = f"{100 * row['vs_ceiling']:.0f}%" if row.get("vs_ceiling") else ""
            name = f"**{row['system']}**" if row["role"] == "ours" else row["system"]
            client, server = row.get("client_cpu_us"), row.get("server_cpu_us")
            cpu = "" if client is None else f"{client:,.0f}"
            if client is not None and server is not None:
                cpu += f" + {server:,.0f} = {client + server:,.0f}"
            span = f"{row['min']:,.0f}-{row['max']:,.0f}"
            cells.append(
                (LABEL[row["workload"]], name, row["calls"], f"{row['median']:,.0f}", span, vs, ceil, cpu)
            )
        head = "workload|system|one call is|msg/s (median)|range|vs best peer|push vs INSERT ceiling|CPU µs/msg: client + server"
        out += [*common.table(head.split("|"), cells, "lllr"), ""]
    notes = [f"- {d}/{s}: {why}" for (d, s), why in sorted(meta["skipped"].items())]
    for r in (r for r in results if r.get("error")):
        notes.append(f"- {r['dialect']}/{r['system']}/{r['workload']} round {r['round']}: {r['error']}")
    if notes:
        out += ["Not measured:", "", *notes, ""]
    return "\n".join(out)


def run(args: argparse.Namespace) -> tuple[list[dict], dict]:
    keys = "rounds messages bulk_messages cap clients dialects state against"
    meta: dict[str, Any] = {k: getattr(args, k) for k in keys.split()}
    meta |= {"started": common.now_utc(), "command": common.command(), "load_before": os.getloadavg()}
    meta |= {"machine": f"{platform.node()} ({os.cpu_count()} CPUs, Python {platform.python_version()})"}
    meta |= {"servers": {}, "skipped": {}}
    results: list[dict] = []
    pids: dict[str, int | None] = {}  # the server's process, where it runs on this machine
    t0 = time.time()

    def skip(dialect: str, sname: str, why: str) -> None:
        meta["skipped"][(dialect, sname)] = why
        print(f"[skip] {dialect} {sname}: {why}", flush=True)

    for dialect in args.dialects:
        dsns: dict[str, str] = {}
        wanted = args.systems or DEFAULT_SYSTEMS[dialect]
        try:
            for sname in wanted:
                cls = SYSTEMS[sname]
                if dialect not in cls.dialects:
                    continue
                if why := cls.unavailable():
                    skip(dialect, sname, why)
                    continue
                try:
                    dsn = common.create(dialect, sname.split(" ")[0].lower())
                except Exception as exc:  # the dialect's server is not there
                    skip(dialect, "*", f"cannot create a database: {exc}")
                    break
                if args.profile:
                    sql = f"ALTER DATABASE \"{dsn.rsplit('/', 1)[1]}\" SET track_functions = 'all'"
                    common.execute(dialect, common.ADMIN[dialect], sql)
                try:
                    cls(dialect).setup(dsn)
                    if args.state == "churned":
                        cls(dialect).reset(dsn)  # once: from here on only churned
                except Exception as exc:  # e.g. a peer's installer that does not work on this server
                    common.drop(dialect, dsn)
                    skip(dialect, sname, f"setup failed: {type(exc).__name__}: {exc}")
                    continue
                dsns[sname] = dsn
                meta["servers"].setdefault(dialect, common.settings(dialect, dsn, *SETTINGS[dialect].split()))
                pids.setdefault(dialect, common.server_pid(dialect, dsn))
            for rnd, w in itertools.product(range(args.rounds), args.workloads):
                for sname in common.rotated([s for s in dsns if w in SYSTEMS[s].calls], rnd):
                    r = {"dialect": dialect, "system": sname, "workload": w, "round": rnd}
                    n = args.bulk_messages if w in BULK_WORKLOADS else args.messages
                    how = (dialect, dsns[sname], w, args.clients, n, args.cap, pids.get(dialect), args.state)
                    counters = profile_lines(dsns[sname], {})[0] if args.profile else {}
                    try:
                        r.update(measure(SYSTEMS[sname], *how))
                    except Exception as exc:
                        r["error"] = f"{type(exc).__name__}: {exc}"
                    results.append(r)
                    at = f"[{time.time() - t0:5.0f}s] {dialect:10} round {rnd + 1} {w:17} {sname:24}"
                    print(f"{at} {r.get('rate') or r.get('error')} msg/s", flush=True)
                    if args.profile:  # the clients' counters reach the server within a second
                        time.sleep(1)
                        print("\n".join(profile_lines(dsns[sname], counters)[1]), flush=True)
        finally:
            for dsn in dsns.values():
                common.drop(dialect, dsn)
    meta["seconds"] = round(time.time() - t0, 1)
    meta["load_after"] = os.getloadavg()
    return results, meta


def main(argv: list[str] | None = None) -> int:
    ap = common.parser(
        __doc__,
        ("--quick", False, "1 round, 2,000 messages, 3 s cap; writes to bench/results"),
        ("--rounds", 0, "rounds (default 3)"),
        ("--messages", 0, "messages per measurement (default 10000)"),
        ("--bulk-messages", 0, f"messages a bulk enqueue, {BULK:,} a call (default 100000; ab: --messages)"),
        ("--cap", 0.0, "time cap per measurement in seconds (default 4)"),
        ("--clients", 4, "client processes (default 4)"),
        ("--dialects", "postgresql,mysql", "comma-separated"),
        ("--systems", None, "comma-separated, of: " + ", ".join(SYSTEMS) + " (default: the dialect's)"),
        ("--workloads", None, f"comma-separated (default {','.join(ALL_WORKLOADS)}; ab, profile: 4)"),
        ("--out", None, "directory of bench.md/.json (default bench/latest; ab, profile: bench/results)"),
        ("--states", None, "comma-separated: fresh, churned (README, Method); default both (ab: fresh)"),
        ("--previous-commit", None, "ab: a git commit whose sql/ to compare with"),
        ("--profile", False, "PostgreSQL: each routine's calls and server time per call"),
    )
    args = ap.parse_args(argv)
    ab = bool(args.previous_commit)
    Previous.commit = args.against = args.previous_commit
    if ab or args.profile:
        args.systems = args.systems or ("pyqueue,previous revision" if ab else "pyqueue")
        args.workloads = args.workloads or ",".join(WORKLOADS)
        args.states = args.states or "fresh"
    if args.profile and "postgresql" not in args.dialects:
        ap.error("--profile is for PostgreSQL")
    args.dialects = "postgresql" if args.profile else args.dialects
    states = common.names(args.states or ",".join(STATES), STATES, ap, "states")
    common.exit_on_sigterm()
    args.rounds = args.rounds or (1 if args.quick else 3)
    args.messages = args.messages or (2000 if args.quick else 10000)
    quick_bulk = args.messages if ab or args.profile else 4 * BULK if args.quick else 100000
    args.bulk_messages = args.bulk_messages or quick_bulk
    args.cap = args.cap or (3.0 if args.quick else 4.0)
    args.dialects = common.names(args.dialects)
    args.workloads = common.names(args.workloads or ",".join(ALL_WORKLOADS))
    args.systems = common.names(args.systems, list(SYSTEMS), ap, "systems") or None
    out = args.out or os.path.join(HERE, "results" if args.quick or ab or args.profile else "latest")
    base = "ab" if ab else "profile" if args.profile else "bench"
    for state in states:
        args.state = state
        results, meta = run(args)
        table = markdown(results, meta)
        meta["skipped"] = {f"{d}/{s}": why for (d, s), why in meta["skipped"].items()}
        summary = {d: summarize(results, d, list(SYSTEMS)) for d in meta["dialects"]}
        name = base if state == "fresh" else f"{base}-{state}"
        common.write(out, name, table, {"meta": meta, "summary": summary, "results": results}, tag="")
    return 0


if __name__ == "__main__":
    sys.exit(main())
