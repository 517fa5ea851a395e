"""A queue at full churn while another session of the same database holds a snapshot (a report):
one client per system runs push 50, reserve 50, settle 50 as fast as it can; after --before s a
second session reads another table inside REPEATABLE READ (PostgreSQL) or START TRANSACTION WITH
CONSISTENT SNAPSHOT (MySQL/MariaDB) and keeps it --minutes. Method and table: bench/README.md.

    python -m bench held-snapshot --dialect mysql --minutes 30 --out bench/latest
"""

from __future__ import annotations

import importlib.util
import json
import multiprocessing as mp
import os
import statistics
import time

import pyqueue_sql
from bench import common
from bench.bench import HandRolled, Pgmq

QUEUE, BATCH = "held", 50
HORIZON = {  # the server's own figure of what the snapshot holds back
    "postgresql": ("xmin age", "SELECT coalesce(max(age(backend_xmin)), 0) FROM pg_stat_activity"),
    "mysql": ("history list length",
              "SELECT count FROM information_schema.INNODB_METRICS WHERE name = 'trx_rseg_history_len'"),
}  # fmt: skip


def _pyqueue(dialect: str, dsn: str):
    db = pyqueue_sql.connect(dsn)
    q = db.queue(QUEUE)
    k = iter(range(1 << 62))
    return (
        lambda: q.push_many([(f"m{next(k)}", "job", {"n": i}) for i in range(BATCH)]),
        lambda: q.reserve(n=BATCH, worker="held", timeout=300),
        q.commit_many,
        [db.connection],
    )


def _plain(dialect: str, dsn: str):
    """The hand-rolled SKIP LOCKED job table of the routines suite (bench.bench.HandRolled)."""
    job = HandRolled(dialect)
    job.open(dsn)
    k = iter(range(1 << 62))

    def settle(taken):
        ids, token = taken
        if ids:
            common.query(job.auto, f"DELETE FROM job WHERE token = %s AND id IN ({', '.join(['%s'] * len(ids))})", (token, *ids))  # fmt: skip

    return (
        lambda: job.push_batch([f"m{next(k)}" for _ in range(BATCH)]),
        lambda: job._reserve(BATCH),
        settle,
        [job.auto, job.conn],  # pushes and settles; the reserve's transactions
    )


def _pgmq(dialect: str, dsn: str):
    conn = common.raw_connect("postgresql", dsn)
    bodies = [__import__("psycopg").types.json.Jsonb({"n": i}) for i in range(BATCH)]
    return (
        lambda: common.query(conn, Pgmq.SEND_BATCH, (QUEUE, bodies)),
        lambda: [r[0] for r in common.query(conn, Pgmq.READ, (QUEUE, 300, BATCH))],
        lambda ids: ids and common.query(conn, Pgmq.DELETE_BATCH, (QUEUE, ids)),
        [conn],
    )


SYSTEMS = {"pyqueue": _pyqueue, "plain": _plain, "pgmq": _pgmq}
NAMES = {"pyqueue": "pyqueue-sql", "plain": "SKIP LOCKED job table", "pgmq": "pgmq"}


# The server's thread of a session: PostgreSQL its backend's pid, MariaDB the connection's thread
# (one thread a connection), whose CPU /proc shows.
SESSION = {
    "postgresql": "SELECT pg_backend_pid()",
    "mysql": "SELECT TID FROM information_schema.PROCESSLIST WHERE ID = CONNECTION_ID()",
}


def _loop(name: str, dialect: str, dsn: str, stop, count, times, cpu, sessions) -> None:
    """One client: push, reserve (timed), settle until stop; the times sent every half second, its
    own CPU seconds kept in cpu, its server sessions' pids or thread ids put in sessions."""
    push, reserve, settle, conns = SYSTEMS[name](dialect, dsn)
    for conn, session in zip(conns, sessions):
        session.value = int(common.query(conn, SESSION[dialect])[0][0])
    sent, buf = time.perf_counter(), []
    while not stop.is_set():
        cpu.value = time.process_time()
        push()
        t = time.perf_counter()
        taken = reserve()
        buf.append(time.perf_counter() - t)
        settle(taken)
        count.value += len(taken[0]) if isinstance(taken, tuple) else len(taken)
        if time.perf_counter() - sent >= 0.5:
            times.put((name, buf))
            sent, buf = time.perf_counter(), []


# What a read costs, whatever the load. PostgreSQL: the buffers one reserve touches (EXPLAIN ANALYZE
# BUFFERS, REPEATABLE READ, rolled back). MySQL/MariaDB (a CALL has no ANALYZE): the pages a read of
# the first 50 ready entries accesses (ANALYZE FORMAT=JSON), the delete-marked ones it steps over.
PROBE = {
    ("postgresql", "pyqueue"): f"SELECT * FROM queue_reserve('{QUEUE}', 'probe', interval '300 s', {BATCH})",
    ("postgresql", "pgmq"): f"SELECT * FROM pgmq.read('{QUEUE}', 300, {BATCH})",
    ("postgresql", "plain"): f"SELECT id FROM job WHERE run_at <= now() ORDER BY run_at, id LIMIT {BATCH} FOR UPDATE SKIP LOCKED",
    ("mysql", "pyqueue"): f"SELECT m.id FROM pyqueue_message m FORCE INDEX (pyqueue_message_ready_idx) WHERE m.queue_name = '{QUEUE}' "
                          f"AND m.priority = 0 AND m.scheduled_at <= UTC_TIMESTAMP(6) ORDER BY m.scheduled_at, m.id LIMIT {BATCH}",
    ("mysql", "plain"): f"SELECT id FROM job WHERE run_at <= UTC_TIMESTAMP(6) ORDER BY run_at, id LIMIT {BATCH}",
}  # fmt: skip


def _probe(conn, dialect: str, name: str):
    if dialect == "mysql":
        plan = json.loads(common.query(conn, "ANALYZE FORMAT=JSON " + PROBE[dialect, name])[0][0])
        return plan["query_block"]["nested_loop"][0]["table"].get("r_engine_stats", {}).get("pages_accessed")
    cur = conn.cursor()
    for attempt in range(20):  # a row the loop changed after the snapshot: 40001, again
        try:
            cur.execute("BEGIN ISOLATION LEVEL REPEATABLE READ")
            cur.execute("EXPLAIN (ANALYZE, BUFFERS, FORMAT JSON) " + PROBE[dialect, name])
            plan = cur.fetchall()[0][0][0]["Plan"]
            return plan.get("Shared Hit Blocks", 0) + plan.get("Shared Read Blocks", 0)
        except Exception as exc:
            if "40001" not in str(getattr(exc, "sqlstate", "")) + str(exc):
                raise
            time.sleep(0.01 * (attempt + 1))
        finally:
            cur.execute("ROLLBACK")
    return None


def _setup(dialect: str, dsn: str, systems: list[str]) -> None:
    if "plain" in systems:
        HandRolled(dialect).setup(dsn)
    if "pgmq" in systems:
        common.install_pgmq(dsn, QUEUE)
    common.execute(dialect, dsn, "CREATE TABLE report (id int PRIMARY KEY)", "INSERT INTO report VALUES (1)")


def _hold(dialect: str, dsn: str):
    """The report: a snapshot taken by a read of another table, kept open."""
    conn = common.raw_connect(dialect, dsn, autocommit=dialect != "postgresql")
    start = {"mysql": "START TRANSACTION WITH CONSISTENT SNAPSHOT", "postgresql": "SET TRANSACTION ISOLATION LEVEL REPEATABLE READ"}  # fmt: skip
    common.query(conn, start[dialect])
    common.query(conn, "SELECT count(*) FROM report")
    return conn


def _per_msg(a: float | None, b: float | None, msgs: int) -> float | None:
    return round(1e6 * (b - a) / msgs, 1) if a is not None and b is not None and msgs > 0 else None


def _window(series, times, systems, t0: float, t1: float) -> dict:
    """msg/s, the reserve's p50/p99 (ms) and the CPU a message (µs) of its client and of its server
    session, of each system between t0 and t1 (s since the start)."""
    (ta, ca, ua), (tb, cb, ub) = (min(series, key=lambda s: abs(s[0] - t)) for t in (t0, t1))
    out = {}
    for n in systems:
        ts = sorted(d for t, m, ds in times if m == n and ta < t <= tb for d in ds)
        out[n] = {
            "rate": round((cb[n] - ca[n]) / max(tb - ta, 1e-9), 1),
            "client_us": _per_msg(ua[n][0], ub[n][0], cb[n] - ca[n]),
            "server_us": _per_msg(ua[n][1], ub[n][1], cb[n] - ca[n]),
            "p50_ms": round(1000 * statistics.median(ts), 2) if ts else None,
            "p99_ms": round(1000 * ts[min(len(ts) - 1, int(0.99 * len(ts)))], 2) if ts else None,
        }
    return out


def run(args) -> dict:
    dialect, systems = args.dialect, args.systems
    marks = [m for m in (10, 30, *range(60, int(args.minutes * 60) + 1, 60)) if m <= args.minutes * 60]
    with common.database(dialect, "heldsnap", QUEUE, visibility_timeout=300) as dsn:
        _setup(dialect, dsn, systems)
        ctx = mp.get_context("fork")
        stop, times = ctx.Event(), ctx.Queue()
        counts = {n: ctx.Value("q", 0, lock=False) for n in systems}
        cpus = {n: ctx.Value("d", 0.0, lock=False) for n in systems}
        sessions = {n: [ctx.Value("q", 0, lock=False) for _ in range(2)] for n in systems}
        server = common.server_pid(dialect, dsn) if dialect == "mysql" else None
        procs = [
            ctx.Process(target=_loop, args=(n, dialect, dsn, stop, counts[n], times, cpus[n], sessions[n]))
            for n in systems
        ]
        for p in procs:
            p.start()
        admin = common.raw_connect(dialect, dsn)
        prober = common.raw_connect(dialect, dsn, autocommit=dialect != "postgresql")
        probed = [n for n in systems if (dialect, n) in PROBE]
        for n in probed:  # a session's first call reads the catalogs: not counted
            _probe(prober, dialect, n)
        t0, series, got, rows, holder = time.perf_counter(), [], [], [], None

        def tick(until: float) -> None:
            while (now := time.perf_counter()) < until:
                time.sleep(min(1.0, until - now))
                used = {}
                for n in systems:
                    sids = [v.value for v in sessions[n] if v.value]
                    serv = [
                        common.process_cpu(sid)
                        if dialect == "postgresql"
                        else common.process_cpu(server, sid)
                        for sid in sids
                    ]
                    total = sum(serv) if sids and None not in serv else None
                    used[n] = (cpus[n].value or None, total)
                series.append((time.perf_counter() - t0, {n: counts[n].value for n in systems}, used))
                while True:
                    try:
                        got.append((time.perf_counter() - t0, *times.get_nowait()))
                    except Exception:
                        break

        def row(label: str, at: float, since: float, held: bool) -> dict:
            r = {"at": label, "held": held, "end_s": round(at, 1), **_window(series, got, systems, since, at)}
            r["horizon"] = int(common.query(admin, HORIZON[dialect][1])[0][0])
            r["probe"] = {n: _probe(prober, dialect, n) for n in probed}
            rows.append(r)
            print(f"[{at:7.1f}s] {r}", flush=True)
            return r

        try:
            tick(t0 + args.before)
            base = row("before", args.before, min(10.0, args.before / 3), False)
            holder, hold_at = _hold(dialect, dsn), time.perf_counter() - t0
            for prev, m in zip([0, *marks], marks):
                tick(t0 + hold_at + m)
                at = time.perf_counter() - t0
                r = row(f"{m // 60} min" if m >= 60 else f"{m} s", at, max(at - 30.0, hold_at + prev), True)
                for n in systems:
                    r[n]["ratio"] = round(r[n]["rate"] / base[n]["rate"], 3) if base[n]["rate"] else None
        finally:
            stop.set()
            for p in procs:
                p.join(timeout=30)
                if p.is_alive():
                    p.terminate()
            if holder is not None:
                holder.rollback()
                holder.close()
            after = time.perf_counter() - t0
        return {"rows": rows, "hold_at_s": round(hold_at, 1), "held_s": round(after - hold_at, 1)}


def summary(out: dict) -> str:
    res, systems, dialect = out["result"], out["systems"], out["dialect"]
    probe = "buffers" if dialect == "postgresql" else "pages"
    head = ["at", HORIZON[dialect][0], *(f"{NAMES[n]} {x}" for n in systems for x in ("msg/s", "ratio", "p50/p99 ms", "server/client µs", probe))]  # fmt: skip
    body = [
        (r["at"], f"{r['horizon']:,}", *(x for n in systems for x in (
            f"{r[n]['rate']:,.0f}", f"{r[n].get('ratio', 1.0):.2f}x", f"{r[n]['p50_ms']} / {r[n]['p99_ms']}",
            f"{r[n].get('server_us')} / {r[n].get('client_us')}",
            f"{r['probe'].get(n, ''):,}" if isinstance(r["probe"].get(n), int) else "")))
        for r in res["rows"]
    ]  # fmt: skip
    return "\n".join([
        f"# Held snapshot, {dialect} ({out['started']}, `{out['command']}`)",
        "",
        f"One client a system: push_many {BATCH}, reserve(n={BATCH}), commit_many (the job table: a multi-row INSERT, "
        f"SELECT ... LIMIT {BATCH} FOR UPDATE SKIP LOCKED + UPDATE, DELETE by ids); a snapshot held from "
        f"{res['hold_at_s']} s for {res['held_s']:.0f} s. Load average {out['load'][0]:.1f} before, "
        f"{out['load_after'][0]:.1f} after ({out['cpus']} CPUs). Each row: msg/s over the 30 s (at most) before it, "
        f"the ratio to the row \"before\", the reserve's time, the CPU a message of the system's server sessions "
        f"(PostgreSQL their backends, MariaDB their connections' threads) and of its client process (10 ms ticks of "
        f"/proc and getrusage), the server's {HORIZON[dialect][0]} and "
        + ("the shared buffers one reserve touches (EXPLAIN ANALYZE, rolled back)." if dialect == "postgresql" else
           f"the pages a read of the first {BATCH} ready entries from the range's start accesses (ANALYZE FORMAT=JSON)."),
        "",
        *common.table(head, body),
    ]) + "\n"  # fmt: skip


def main(argv=None) -> int:
    ap = common.parser(
        __doc__,
        ("--dialect", ("postgresql", "mysql"), "the server"),
        ("--minutes", 10.0, "how long the snapshot is held (default 10)"),
        ("--before", 60.0, "seconds of load before the hold, the baseline from 10 s (or a third) on"),
        ("--systems", "", "comma-separated, of: pyqueue, plain, pgmq (default: all the dialect has)"),
        ("--out", "bench/results", "where held-snapshot-<dialect>.md and .json go"),
    )
    args = ap.parse_args(argv)
    default = ["pyqueue", "plain"] + (["pgmq"] if args.dialect == "postgresql" and importlib.util.find_spec("pgmq") else [])  # fmt: skip
    args.systems = common.names(args.systems, SYSTEMS, ap, "systems") or default
    common.exit_on_sigterm()
    out = {"started": common.now_utc(), "command": common.command(), "dialect": args.dialect,
           "minutes": args.minutes, "systems": args.systems, "load": common.loadavg(), "cpus": os.cpu_count()}  # fmt: skip
    out["result"] = run(args)
    out["load_after"] = common.loadavg()
    common.write(args.out, f"held-snapshot-{args.dialect}", summary(out), out, tag="")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
