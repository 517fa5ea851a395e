"""Side-by-side queue benchmark: pyqueue-sql, PGQueuer, procrastinate, the naive
select-then-update design, and the machine's single-row INSERT ceiling.

    python bench/bench.py            # full run (10,000 messages, 1/4/16 clients, both dialects)
    python bench/bench.py --quick    # 2,000 messages, shorter time cap

Every system gets its own fresh database (created here, dropped at the end).
Clients are separate processes, each with its own connection; they start
together behind a barrier, and throughput = messages done / (last client's
end - first client's start). See bench/README.md for the method.
"""

from __future__ import annotations

import argparse
import asyncio
import datetime as dt
import json
import multiprocessing as mp
import os
import platform
import sys
import time
import uuid
from typing import Any

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from bench import _dbs  # noqa: E402

WORKLOADS = ("push", "reserve_ack", "push_batch", "reserve_ack_batch")
BATCH = 100
PEERS = ("pgqueuer", "procrastinate")


# ===========================================================================
# Systems. Each has: setup(dsn) once per fresh database, reset(dsn) before a
# run, prefill(dsn, n) for the consuming workloads, and client(workload) that
# returns an object with .open(), .push(i), .push_batch(ids), .take_ack() ->
# int (messages done; 0 when nothing was there), .take_ack_batch() -> int.
# ===========================================================================


class PyQueue:
    """pyqueue-sql through its Python client. One at a time: commit_reserve
    (commits the previous message and reserves the next in one call)."""

    name = "pyqueue"
    dialects = ("postgresql", "mysql")
    queue = "bench"

    def __init__(self, dialect: str):
        self.dialect = dialect

    def setup(self, dsn: str) -> None:
        _dbs.install_pyqueue(dsn)

    def reset(self, dsn: str) -> None:
        import pyqueue_sql

        with pyqueue_sql.connect(dsn) as db:
            try:
                db.queue(self.queue).drop()
            except pyqueue_sql.UnknownQueueError:
                pass
            db.queue(self.queue).create(visibility_timeout=300)
        _dbs.execute(
            self.dialect,
            dsn,
            "VACUUM ANALYZE pyqueue_message"
            if self.dialect == "postgresql"
            else "ANALYZE TABLE pyqueue_message",
        )

    def prefill(self, dsn: str, n: int) -> None:
        import pyqueue_sql

        with pyqueue_sql.connect(dsn) as db:
            q = db.queue(self.queue)
            for start in range(0, n, 1000):
                q.push_many([(f"p{i}", "job", {"n": i}) for i in range(start, min(n, start + 1000))])

    def open(self, dsn: str) -> None:
        import pyqueue_sql

        self.db = pyqueue_sql.connect(dsn)
        self.q = self.db.queue(self.queue)
        self.held = None
        self.worker = f"bench-{os.getpid()}"

    def close(self) -> None:
        if self.held is not None:
            self.q.commit(self.held)
        self.db.close()

    def push(self, key: str, i: int) -> None:
        self.q.push(key, "job", {"n": i})

    def push_batch(self, keys: list[str]) -> None:
        self.q.push_many([(k, "job", {"n": k}) for k in keys])

    def take_ack(self) -> int:
        committed, got = self.q.commit_reserve(self.held, worker=self.worker)
        done = 1 if self.held is not None else 0
        self.held = got[0] if got else None
        return done

    def take_ack_batch(self) -> int:
        # commit_reserve with nothing to commit is queue_reserve's fast path
        _, got = self.q.commit_reserve(None, n=BATCH, worker=self.worker)
        if got:
            self.q.commit_many(got)
        return len(got)


class PyQueueTwoCalls(PyQueue):
    """pyqueue-sql with the core contract only: reserve, then commit (two calls per message)."""

    name = "pyqueue (reserve+commit)"

    def take_ack(self) -> int:
        got = self.q.reserve(worker=self.worker)
        if got:
            self.q.commit(got[0])
        return len(got)


class Naive:
    """The seed's select-then-update design: SELECT ... FOR UPDATE (no SKIP
    LOCKED) of the oldest ready row, UPDATE it to reserved, COMMIT; ack = DELETE."""

    name = "naive"
    dialects = ("postgresql", "mysql")

    def __init__(self, dialect: str):
        self.dialect = dialect
        self.pg = dialect == "postgresql"

    def setup(self, dsn: str) -> None:
        if self.pg:
            _dbs.execute(
                self.dialect,
                dsn,
                """
                CREATE TABLE naive_job (
                    id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
                    payload jsonb NOT NULL,
                    run_at timestamptz NOT NULL DEFAULT now(),
                    token uuid NULL)""",
                "CREATE INDEX naive_job_ready ON naive_job (run_at, id)",
            )
        else:
            _dbs.execute(
                self.dialect,
                dsn,
                """
                CREATE TABLE naive_job (
                    id BIGINT AUTO_INCREMENT PRIMARY KEY,
                    payload JSON NOT NULL,
                    run_at DATETIME(6) NOT NULL DEFAULT (UTC_TIMESTAMP(6)),
                    token CHAR(36) NULL,
                    KEY naive_job_ready (run_at, id)) ENGINE=InnoDB""",
            )

    def reset(self, dsn: str) -> None:
        _dbs.execute(self.dialect, dsn, "TRUNCATE naive_job")

    def prefill(self, dsn: str, n: int) -> None:
        conn = _dbs.raw_connect(self.dialect, dsn)
        try:
            cur = conn.cursor()
            for start in range(0, n, 1000):
                rows = [(json.dumps({"n": i}),) for i in range(start, min(n, start + 1000))]
                cur.executemany("INSERT INTO naive_job (payload) VALUES (%s)", rows)
        finally:
            conn.close()

    def open(self, dsn: str) -> None:
        self.conn = _dbs.raw_connect(self.dialect, dsn, autocommit=False)
        self.auto = _dbs.raw_connect(self.dialect, dsn, autocommit=True)
        self.now = "now()" if self.pg else "UTC_TIMESTAMP(6)"
        self.later = "now() + interval '300 seconds'" if self.pg else "UTC_TIMESTAMP(6) + INTERVAL 300 SECOND"

    def close(self) -> None:
        self.conn.close()
        self.auto.close()

    def push(self, key: str, i: int) -> None:
        cur = self.auto.cursor()
        cur.execute("INSERT INTO naive_job (payload) VALUES (%s)", (json.dumps({"n": i}),))

    def push_batch(self, keys: list[str]) -> None:
        cur = self.auto.cursor()
        values = ", ".join(["(%s)"] * len(keys))
        cur.execute(f"INSERT INTO naive_job (payload) VALUES {values}", [json.dumps({"k": k}) for k in keys])

    def _reserve(self, n: int) -> list[tuple[int, str]]:
        cur = self.conn.cursor()
        try:
            cur.execute(
                f"SELECT id, payload FROM naive_job WHERE run_at <= {self.now} "
                f"ORDER BY run_at, id LIMIT {n} FOR UPDATE"
            )
            ids = [row[0] for row in cur.fetchall()]
            token = str(uuid.uuid4())
            if ids:
                marks = ", ".join(["%s"] * len(ids))
                cur.execute(
                    f"UPDATE naive_job SET run_at = {self.later}, token = %s WHERE id IN ({marks})",
                    [token, *ids],
                )
            self.conn.commit()
            return [(i, token) for i in ids]
        except Exception as exc:  # a deadlock under contention: counts as nothing taken
            self.conn.rollback()
            if "deadlock" in str(exc).lower() or "1213" in str(exc):
                return []
            raise

    def _ack(self, taken: list[tuple[int, str]]) -> None:
        cur = self.auto.cursor()
        marks = ", ".join(["%s"] * len(taken))
        cur.execute(
            f"DELETE FROM naive_job WHERE token = %s AND id IN ({marks})",
            [taken[0][1], *[i for i, _ in taken]],
        )

    def take_ack(self) -> int:
        taken = self._reserve(1)
        if taken:
            self._ack(taken)
        return len(taken)

    def take_ack_batch(self) -> int:
        taken = self._reserve(BATCH)
        if taken:
            self._ack(taken)
        return len(taken)


class InsertCeiling:
    """Single-row autocommit INSERTs into a plain table: what one push can approach."""

    name = "INSERT ceiling"
    dialects = ("postgresql", "mysql")
    workloads = ("push",)

    def __init__(self, dialect: str):
        self.dialect = dialect

    def setup(self, dsn: str) -> None:
        if self.dialect == "postgresql":
            _dbs.execute(
                self.dialect,
                dsn,
                "CREATE TABLE plain (id bigint GENERATED ALWAYS AS IDENTITY "
                "PRIMARY KEY, payload jsonb NOT NULL)",
            )
        else:
            _dbs.execute(
                self.dialect,
                dsn,
                "CREATE TABLE plain (id BIGINT AUTO_INCREMENT PRIMARY KEY, "
                "payload JSON NOT NULL) ENGINE=InnoDB",
            )

    def reset(self, dsn: str) -> None:
        _dbs.execute(self.dialect, dsn, "TRUNCATE plain")

    def open(self, dsn: str) -> None:
        self.conn = _dbs.raw_connect(self.dialect, dsn, autocommit=True)

    def close(self) -> None:
        self.conn.close()

    def push(self, key: str, i: int) -> None:
        cur = self.conn.cursor()
        cur.execute("INSERT INTO plain (payload) VALUES (%s)", (json.dumps({"n": i}),))


class _Async:
    """Runs a peer's async API from a synchronous client loop on one event loop."""

    def run(self, coro):
        return self.loop.run_until_complete(coro)


class PGQueuer(_Async):
    """PGQueuer through its Queries API (enqueue / dequeue / log_jobs) on psycopg async."""

    name = "pgqueuer"
    dialects = ("postgresql",)

    def __init__(self, dialect: str):
        self.dialect = dialect

    async def _queries(self, dsn: str):
        import psycopg
        from pgqueuer.queries import Queries

        conn = await psycopg.AsyncConnection.connect(dsn, autocommit=True)
        return conn, Queries.from_psycopg_connection(conn)

    def setup(self, dsn: str) -> None:
        async def go():
            conn, q = await self._queries(dsn)
            await q.install()
            await conn.close()

        asyncio.run(go())

    def reset(self, dsn: str) -> None:
        _dbs.execute(self.dialect, dsn, "TRUNCATE pgqueuer, pgqueuer_log", "VACUUM ANALYZE pgqueuer")

    def prefill(self, dsn: str, n: int) -> None:
        async def go():
            conn, q = await self._queries(dsn)
            for start in range(0, n, 1000):
                m = min(n, start + 1000) - start
                await q.enqueue(["bench"] * m, [b'{"n":1}'] * m, [0] * m)
            await conn.close()

        asyncio.run(go())

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
        self.run(self.q.enqueue("bench", b'{"n":1}', 0))

    def push_batch(self, keys: list[str]) -> None:
        m = len(keys)
        self.run(self.q.enqueue(["bench"] * m, [b'{"n":1}'] * m, [0] * m))

    def _take(self, n: int) -> int:
        jobs = self.run(self.q.dequeue(n, self.eps, self.qm_id, None, dt.timedelta(seconds=300)))
        if jobs:
            self.run(self.q.log_jobs([(job, "successful", None) for job in jobs]))
        return len(jobs)

    def take_ack(self) -> int:
        return self._take(1)

    def take_ack_batch(self) -> int:
        return self._take(BATCH)


class Procrastinate(_Async):
    """procrastinate through its App / JobManager API (defer, fetch_job, finish_job).
    It has no batch fetch, so 'reserve+ack batch' is not measured for it."""

    name = "procrastinate"
    dialects = ("postgresql",)
    workloads = ("push", "reserve_ack", "push_batch")

    def __init__(self, dialect: str):
        self.dialect = dialect

    def _app(self, dsn: str):
        import procrastinate

        app = procrastinate.App(
            connector=procrastinate.PsycopgConnector(conninfo=dsn, min_size=1, max_size=1)
        )

        @app.task(name="bench", queue="bench")
        def bench(n: int = 0) -> None:  # never run: the bench takes jobs itself
            return None

        return app, bench

    def setup(self, dsn: str) -> None:
        async def go():
            app, _ = self._app(dsn)
            async with app.open_async():
                await app.schema_manager.apply_schema_async()

        asyncio.run(go())

    def reset(self, dsn: str) -> None:
        _dbs.execute(
            self.dialect, dsn, "TRUNCATE procrastinate_jobs CASCADE", "VACUUM ANALYZE procrastinate_jobs"
        )

    def prefill(self, dsn: str, n: int) -> None:
        async def go():
            app, task = self._app(dsn)
            async with app.open_async():
                for start in range(0, n, 1000):
                    await task.batch_defer_async(*[{"n": i} for i in range(start, min(n, start + 1000))])

        asyncio.run(go())

    def open(self, dsn: str) -> None:
        self.loop = asyncio.new_event_loop()
        self.app, self.task = self._app(dsn)
        self.ctx = self.app.open_async()
        self.run(self.ctx.__aenter__())
        self.worker_id = self.run(self.app.job_manager.register_worker())

    def close(self) -> None:
        self.run(self.app.job_manager.unregister_worker(self.worker_id))
        self.run(self.ctx.__aexit__(None, None, None))
        self.loop.close()

    def push(self, key: str, i: int) -> None:
        self.run(self.task.defer_async(n=i))

    def push_batch(self, keys: list[str]) -> None:
        self.run(self.task.batch_defer_async(*[{"n": 1} for _ in keys]))

    def take_ack(self) -> int:
        from procrastinate.jobs import Status

        job = self.run(self.app.job_manager.fetch_job(["bench"], self.worker_id))
        if job is None:
            return 0
        self.run(self.app.job_manager.finish_job(job, Status.SUCCEEDED, delete_job=False))
        return 1


SYSTEMS: dict[str, type] = {
    cls.name: cls for cls in (InsertCeiling, PyQueue, PyQueueTwoCalls, PGQueuer, Procrastinate, Naive)
}


def workloads_of(cls: type) -> tuple[str, ...]:
    if cls is PyQueueTwoCalls:
        return ("reserve_ack",)
    return getattr(cls, "workloads", WORKLOADS)


# ===========================================================================
# Running one measurement
# ===========================================================================


def _client(system_cls, dialect, dsn, workload, index, clients, n, cap, barrier, done, results):
    try:
        system = system_cls(dialect)
        system.open(dsn)
        share = range(index, n, clients)  # this client's message numbers
        barrier.wait()
        start = time.perf_counter()
        deadline = start + cap
        count = 0
        if workload == "push":
            for i in share:
                system.push(f"c{index}-{i}", i)
                count += 1
                if (count & 31) == 0 and time.perf_counter() > deadline:
                    break
        elif workload == "push_batch":
            mine = list(share)
            for s in range(0, len(mine), BATCH):
                system.push_batch([f"c{index}-{i}" for i in mine[s : s + BATCH]])
                count += len(mine[s : s + BATCH])
                if time.perf_counter() > deadline:
                    break
        else:
            take = system.take_ack if workload == "reserve_ack" else system.take_ack_batch
            while True:
                got = take()
                if got:
                    count += got
                    with done.get_lock():
                        done.value += got
                        total = done.value
                else:
                    total = done.value
                if total >= n or time.perf_counter() > deadline:
                    break
        end = time.perf_counter()
        system.close()  # pyqueue commits the message it still holds; not timed
        results.put((index, count, start, end, None))
    except BaseException as exc:  # reported by the parent
        results.put((index, 0, 0.0, 0.0, f"{type(exc).__name__}: {exc}"))


def measure(system_cls, dialect, dsn, workload, clients, n, cap) -> dict[str, Any]:
    system = system_cls(dialect)
    system.reset(dsn)
    if workload in ("reserve_ack", "reserve_ack_batch"):
        system.prefill(dsn, n)
    ctx = mp.get_context("fork")
    barrier = ctx.Barrier(clients)
    done = ctx.Value("q", 0)
    results = ctx.Queue()
    procs = [
        ctx.Process(
            target=_client,
            args=(system_cls, dialect, dsn, workload, i, clients, n, cap, barrier, done, results),
        )
        for i in range(clients)
    ]
    for p in procs:
        p.start()
    rows = [results.get(timeout=cap + 300) for _ in procs]
    for p in procs:
        p.join(timeout=60)
    errors = [r[4] for r in rows if r[4]]
    if errors:
        return {"error": errors[0]}
    count = sum(r[1] for r in rows)
    seconds = max(r[3] for r in rows) - min(r[2] for r in rows)
    return {
        "messages": count,
        "seconds": round(seconds, 4),
        "rate": round(count / seconds, 1) if seconds else None,
    }


# ===========================================================================
# Reporting
# ===========================================================================

LABEL = {
    "push": "push (1/call)",
    "reserve_ack": "reserve+ack (1/call)",
    "push_batch": f"push batch ({BATCH})",
    "reserve_ack_batch": f"reserve+ack batch ({BATCH})",
}


def _fmt(rate) -> str:
    return "-" if rate is None else f"{rate:,.0f}"


def markdown(results: list[dict], meta: dict) -> str:
    out = [
        f"Run {meta['started']} on {meta['machine']}; {meta['messages']:,} messages per measurement, "
        f"time cap {meta['cap']} s; msg/s (higher is better).",
        "",
    ]
    by = {(r["dialect"], r["system"], r["workload"], r["clients"]): r.get("rate") for r in results}
    for dialect in meta["dialects"]:
        systems = [s for s in SYSTEMS if any(r["dialect"] == dialect and r["system"] == s for r in results)]
        peers = [s for s in systems if s in PEERS]
        head = ["workload", "clients", *systems]
        if peers:
            head.append("pyqueue / best peer")
        head.append("pyqueue / naive")
        head.append("pyqueue push / INSERT ceiling")
        out += [f"### {dialect}", "", "| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
        for w in WORKLOADS:
            for c in meta["clients"]:
                rates = {s: by.get((dialect, s, w, c)) for s in systems}
                if all(v is None for v in rates.values()):
                    continue
                row = [LABEL[w], str(c), *[_fmt(rates[s]) for s in systems]]
                mine = rates.get("pyqueue")
                if peers:
                    best = max((rates[p] for p in peers if rates[p]), default=None)
                    row.append(f"{mine / best:.2f}x" if mine and best else "-")
                nv = rates.get("naive")
                row.append(f"{mine / nv:.2f}x" if mine and nv else "-")
                ceil = rates.get("INSERT ceiling")
                row.append(f"{100 * mine / ceil:.0f}%" if w == "push" and mine and ceil else "")
                out.append("| " + " | ".join(row) + " |")
        out.append("")
    errors = [r for r in results if r.get("error")]
    if errors:
        out.append(
            "Errors: "
            + "; ".join(
                f"{r['dialect']}/{r['system']}/{r['workload']}/{r['clients']}: {r['error']}" for r in errors
            )
        )
    return "\n".join(out) + "\n"


def plot(results: list[dict], meta: dict, path: str) -> bool:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return False
    dias = meta["dialects"]
    fig, axes = plt.subplots(
        len(dias), len(WORKLOADS), figsize=(4.2 * len(WORKLOADS), 3.6 * len(dias)), squeeze=False
    )
    for di, dialect in enumerate(dias):
        for wi, w in enumerate(WORKLOADS):
            ax = axes[di][wi]
            for s in SYSTEMS:
                pts = sorted(
                    (r["clients"], r["rate"])
                    for r in results
                    if r["dialect"] == dialect and r["system"] == s and r["workload"] == w and r.get("rate")
                )
                if pts:
                    ax.plot(
                        [p[0] for p in pts],
                        [p[1] for p in pts],
                        marker="o",
                        label=s,
                        color=f"C{list(SYSTEMS).index(s)}",
                        linestyle="--" if s in ("INSERT ceiling", "naive") else "-",
                    )
            ax.set_title(f"{dialect}: {LABEL[w]}", fontsize=9)
            ax.set_xscale("log", base=2)
            ax.set_xticks(meta["clients"], [str(c) for c in meta["clients"]])
            ax.set_xlabel("client processes")
            ax.set_ylabel("messages/s")
            ax.set_ylim(bottom=0)
            ax.grid(alpha=0.3)
            ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    return True


def server_settings(dialect: str, dsn: str) -> dict[str, str]:
    if dialect == "postgresql":
        names = (
            "server_version",
            "synchronous_commit",
            "fsync",
            "wal_sync_method",
            "shared_buffers",
            "max_wal_size",
            "autovacuum",
        )
        rows = _dbs.execute(
            dialect, dsn, "SELECT name, setting FROM pg_settings WHERE name IN ('" + "','".join(names) + "')"
        )
    else:
        rows = _dbs.execute(
            dialect,
            dsn,
            "SHOW VARIABLES WHERE Variable_name IN ('version', "
            "'innodb_flush_log_at_trx_commit', 'sync_binlog', 'log_bin', "
            "'innodb_buffer_pool_size', 'transaction_isolation', 'tx_isolation')",
        )
    return {str(k): str(v) for k, v in rows}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true", help="2,000 messages, 3 s cap, clients 1 and 4")
    ap.add_argument("--messages", type=int, default=None, help="messages per measurement (default 10000)")
    ap.add_argument("--cap", type=float, default=None, help="time cap per measurement in seconds (default 8)")
    ap.add_argument("--clients", default=None, help="comma-separated client counts (default 1,4,16)")
    ap.add_argument("--dialects", default="postgresql,mysql")
    ap.add_argument("--systems", default=",".join(SYSTEMS), help="comma-separated, of: " + ", ".join(SYSTEMS))
    ap.add_argument("--workloads", default=",".join(WORKLOADS))
    ap.add_argument("--out", default=os.path.join(os.path.dirname(os.path.abspath(__file__)), "results"))
    args = ap.parse_args(argv)
    n = args.messages or (2000 if args.quick else 10000)
    cap = args.cap or (3.0 if args.quick else 8.0)
    clients = [int(c) for c in (args.clients or ("1,4" if args.quick else "1,4,16")).split(",")]
    dias = [d for d in args.dialects.split(",") if d]
    wanted = [s for s in args.systems.split(",") if s]
    work = [w for w in args.workloads.split(",") if w]
    os.makedirs(args.out, exist_ok=True)
    started = dt.datetime.now(dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
    meta = {
        "started": started,
        "messages": n,
        "cap": cap,
        "clients": clients,
        "dialects": dias,
        "machine": f"{platform.node()} ({os.cpu_count()} CPUs, Python {platform.python_version()})",
        "load_before": os.getloadavg(),
        "servers": {},
    }
    results: list[dict] = []
    t0 = time.time()
    # Every system gets its own fresh database up front; then, for each
    # workload and client count, the systems run back to back, so that a
    # change in the machine's load hits them alike (the ratios compare
    # measurements taken seconds apart, not minutes).
    for dialect in dias:
        dsns: dict[str, str] = {}
        try:
            for sname in wanted:
                cls = SYSTEMS[sname]
                if dialect not in cls.dialects:
                    continue
                try:
                    dsns[sname] = _dbs.create(dialect, sname.split(" ")[0].lower())
                except Exception as exc:  # the dialect's server is not there
                    print(f"[skip] {dialect}: {exc}", flush=True)
                    break
                cls(dialect).setup(dsns[sname])
                if dialect not in meta["servers"]:
                    meta["servers"][dialect] = server_settings(dialect, dsns[sname])
            for w in WORKLOADS:
                if w not in work:
                    continue
                for c in clients:
                    for sname, dsn in dsns.items():
                        cls = SYSTEMS[sname]
                        if w not in workloads_of(cls):
                            continue
                        r = {"dialect": dialect, "system": sname, "workload": w, "clients": c}
                        try:
                            r.update(measure(cls, dialect, dsn, w, c, n, cap))
                        except Exception as exc:
                            r["error"] = f"{type(exc).__name__}: {exc}"
                        results.append(r)
                        print(
                            f"[{time.time() - t0:6.0f}s] {dialect:10} {sname:26} {w:18} {c:2} clients: "
                            f"{r.get('rate') or r.get('error')} msg/s",
                            flush=True,
                        )
        finally:
            for dsn in dsns.values():
                _dbs.drop(dialect, dsn)
    meta["seconds"] = round(time.time() - t0, 1)
    meta["load_after"] = os.getloadavg()
    stem = os.path.join(args.out, "bench-" + started.replace(":", ""))
    with open(stem + ".json", "w") as f:
        json.dump({"meta": meta, "results": results}, f, indent=1)
    table = markdown(results, meta)
    with open(stem + ".md", "w") as f:
        f.write(table)
    for name in ("latest.json", "latest.md", "latest.png"):
        with contextlib_suppress():
            os.remove(os.path.join(args.out, name))
    with open(os.path.join(args.out, "latest.md"), "w") as f:
        f.write(table)
    with open(os.path.join(args.out, "latest.json"), "w") as f:
        json.dump({"meta": meta, "results": results}, f, indent=1)
    if plot(results, meta, stem + ".png"):
        plot(results, meta, os.path.join(args.out, "latest.png"))
    print()
    print(table)
    print(f"wrote {stem}.json/.md/.png and {args.out}/latest.* in {meta['seconds']} s")
    return 0


class contextlib_suppress:
    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return exc[0] is not None and issubclass(exc[0], OSError)


if __name__ == "__main__":
    sys.exit(main())
