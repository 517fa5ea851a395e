"""A queue at full churn while another session of the same database holds a snapshot (a report):
one client per system runs push 50, reserve 50, settle 50 as fast as it can; after --before s a
second session reads another table inside REPEATABLE READ (PostgreSQL) or START TRANSACTION WITH
CONSISTENT SNAPSHOT (MySQL/MariaDB) and keeps it --minutes; --holder dump: a real `pg_dump` /
`mysqldump --single-transaction` of the database, its output read no further than its first bytes (a
dump writing to a slow disk or network), holds it instead. Method and table: bench/README.md."""

from __future__ import annotations

import contextlib
import importlib.util
import json
import multiprocessing as mp
import os
import queue
import statistics
import subprocess
import time
import urllib.parse
import uuid

import pyqueue_sql
from bench import common
from bench.bench import HandRolled, Pgmq, _payload, claim

QUEUE, BATCH = "held", 50
LEASE = 300  # seconds every system leases what it reserves for (--lease; set before the clients fork)
HORIZON = {  # the server's own figure of what the snapshot holds back
    "postgresql": ("xmin age", "SELECT coalesce(max(age(backend_xmin)), 0) FROM pg_stat_activity"),
    "mysql": ("history list length",
              "SELECT count FROM information_schema.INNODB_METRICS WHERE name = 'trx_rseg_history_len'"),
}  # fmt: skip
HOLD = {"mysql": "START TRANSACTION WITH CONSISTENT SNAPSHOT", "postgresql": "SET TRANSACTION ISOLATION LEVEL REPEATABLE READ"}  # fmt: skip
REPORT_ROWS = {"mysql": "SELECT seq FROM seq_1_to_200000", "postgresql": "SELECT generate_series(1, 200000)"}  # fmt: skip


def _dump(dialect: str, dsn: str) -> subprocess.Popen:
    """A consistent-snapshot dump of the whole database (200,000 report rows: far more than a pipe holds), started and
    left blocked on its output once its first bytes are read: it keeps its snapshot until it is killed."""
    u = urllib.parse.urlsplit(dsn)
    cmd = (["pg_dump", dsn] if dialect == "postgresql" else ["mysqldump", "--single-transaction", "--quick", "-h",
           u.hostname or "127.0.0.1", "-P", str(u.port or 3306), "-u", u.username or "root", u.path.lstrip("/")])  # fmt: skip
    dump = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
    if not dump.stdout.read(1) or time.sleep(1) or dump.poll() is not None:
        raise SystemExit(f"held-snapshot: {cmd[0]} ended before the hold (exit {dump.poll()})")
    return dump


def _pyqueue(dialect: str, dsn: str):
    db = pyqueue_sql.connect(dsn)
    q, k = db.queue(QUEUE), iter(range(1 << 62))
    return (
        lambda: q.push_many([(f"m{next(k)}", "job", {"n": i}) for i in range(BATCH)]),
        lambda: q.reserve(n=BATCH, worker="held", timeout=LEASE),
        q.commit_many,  # how many it settled
        [db.connection],
    )


def _plain(dialect: str, dsn: str):
    """The hand-rolled SKIP LOCKED job table of the routines suite (bench.bench.HandRolled)."""
    job, k = HandRolled(dialect), iter(range(1 << 62))
    job.open(dsn)
    return (
        lambda: job.push_batch([f"m{next(k)}" for _ in range(BATCH)]),
        lambda: job._reserve(BATCH),
        lambda taken: _settle(job.auto, "job", *taken),
        [job.auto, job.conn],  # pushes and settles; the reserve's transactions
    )


# Designs whose tables should not keep what a held snapshot holds back: the job table's DDL renamed, its claim
# (bench.bench.claim), a session for pushes and reserves (a transaction each), one for settles and upkeep.
SEGMENTS, PERIOD = 4, 2  # rotate: tables seg0..seg3; the pushes move to the next every PERIOD s
NOW = {"mysql": "UTC_TIMESTAMP(6)", "postgresql": "now()"}
ROTATE = {  # rotate's SQL of each dialect; "timeout": the error of a lock not had in time
    "mysql": {"share": "LOCK IN SHARE MODE", "insert": "INSERT IGNORE INTO {} (msg_key, payload) VALUES {}",
              "wait": "SET SESSION lock_wait_timeout = 1", "timeout": "1205", "since": "DATETIME(6)",
              "lock": "SELECT GET_LOCK(CONCAT(DATABASE(), '.rotor'), 0)",
              "unlock": "SELECT RELEASE_LOCK(CONCAT(DATABASE(), '.rotor'))"},
    "postgresql": {"share": "FOR SHARE", "insert": "INSERT INTO {} (msg_key, payload) VALUES {} ON CONFLICT DO NOTHING",
                   "wait": "SET lock_timeout = '1s'", "timeout": "55P03", "since": "timestamptz",
                   "lock": "SELECT pg_try_advisory_lock(hashtext('rotor'))",  # a key of this database
                   "unlock": "SELECT pg_advisory_unlock(hashtext('rotor'))"},
}  # fmt: skip


def _marks(items) -> str:
    return ", ".join(["%s"] * len(items))


def _settle(auto, table: str, ids: list, token: str) -> int:
    """The rows of ids leased under token deleted; how many."""
    if not ids:
        return 0
    with contextlib.closing(auto.cursor()) as cur:
        cur.execute(f"DELETE FROM {table} WHERE token = %s AND id IN ({_marks(ids)})", (token, *ids))
        return cur.rowcount


def _insert(conn, dialect: str, table: str, k) -> None:
    """BATCH rows of the next keys of k pushed into a job table (a duplicate key skipped), committed."""
    keys = [f"m{next(k)}" for _ in range(BATCH)]
    values = tuple(x for key in keys for x in (key, _payload(key)))
    common.query(conn, ROTATE[dialect]["insert"].format(table, ", ".join(["(%s, %s)"] * BATCH)), values)
    conn.commit()


def _rotate(dialect: str, dsn: str):
    """SEGMENTS job tables in turn: rotor holds the one the pushes go to (current, the next every PERIOD s
    unless it is still in use) and the oldest in use, read first. One no longer current that reads empty is
    emptied by TRUNCATE TABLE (no dead row or index entry left for purge or vacuum), the next the oldest."""
    conn, auto = common.raw_connect(dialect, dsn, autocommit=False), common.raw_connect(dialect, dsn)
    sql, now, k = ROTATE[dialect], NOW[dialect], iter(range(1 << 62))
    common.query(auto, sql["wait"])  # TRUNCATE's lock (metadata; ACCESS EXCLUSIVE): later, not wait
    rotor = f"SELECT current, oldest, since <= {now} - INTERVAL '{PERIOD}' SECOND FROM rotor WHERE id = 1 {sql['share']}"  # fmt: skip

    def push():
        # the shared lock on rotor is the segment's: the move to the next waits for the pushes into it
        current, _, due = common.query(conn, rotor)[0]
        _insert(conn, dialect, f"seg{current}", k)
        if due:
            common.query(auto, f"UPDATE rotor SET current = MOD(current + 1, {SEGMENTS}), since = {now} WHERE id = 1 AND current = %s AND MOD(current + 1, {SEGMENTS}) <> oldest", (current,))  # fmt: skip

    def reserve():
        token, taken = str(uuid.uuid4()), []
        current, oldest, _ = common.query(conn, rotor)[0]
        for s in ((oldest + i) % SEGMENTS for i in range((current - oldest) % SEGMENTS + 1)):
            lease = f"{now} + INTERVAL '{LEASE}' SECOND"
            taken += [(s, i) for i in claim(conn, f"seg{s}", BATCH - len(taken), token, now, lease)]
            if len(taken) == BATCH:
                break
        conn.commit()
        if oldest != current and not any(s == oldest for s, _ in taken):
            truncate(oldest)
        return taken, token

    def truncate(s: int) -> None:
        """seg{s} emptied if still the oldest, no longer current (its pushes committed) and empty; one
        session at a time (a named lock), so that none empties it after it came round again."""
        if common.query(auto, sql["lock"])[0][0] != 1:
            return
        try:
            current, oldest, _ = common.query(auto, rotor)[0]
            if oldest != s or current == s or common.query(auto, f"SELECT 1 FROM seg{s} LIMIT 1"):
                return
            try:
                common.query(auto, f"TRUNCATE TABLE seg{s}")
            except Exception as exc:  # the table's lock not had in time (1 s): later
                if sql["timeout"] not in f"{getattr(exc, 'sqlstate', '')} {exc}":
                    raise
                return
            common.query(auto, f"UPDATE rotor SET oldest = MOD(oldest + 1, {SEGMENTS}) WHERE id = 1")
        finally:
            common.query(auto, sql["unlock"])

    def settle(taken):
        pairs, token = taken
        return sum(
            _settle(auto, f"seg{s}", [i for t, i in pairs if t == s], token) for s in {s for s, _ in pairs}
        )

    return push, reserve, settle, [auto, conn]


def _leased(dialect: str, dsn: str):
    """A job table whose claim leaves its ready index alone (the lease's end in leased_until, not indexed),
    read from a mark, the first row its last read found, and from the start when fewer than BATCH turn up
    there or 20 times the last read from the start after it (at most 60 s), as pyqueue-sql's mark is."""
    conn, auto = common.raw_connect(dialect, dsn, autocommit=False), common.raw_connect(dialect, dsn)
    now, k = NOW[dialect], iter(range(1 << 62))
    mark = {"at": None, "id": None, "full": 0.0}
    read = (f"SELECT id, run_at FROM leased {{}} WHERE {{}} run_at <= {now} AND (leased_until IS NULL OR leased_until <= {now}) "
            f"ORDER BY run_at, id LIMIT {BATCH} FOR UPDATE SKIP LOCKED")  # fmt: skip
    hint = "FORCE INDEX (leased_ready)" if dialect == "mysql" else ""

    def reserve():
        token, t0 = str(uuid.uuid4()), time.perf_counter()
        rows = []
        if mark["at"] is not None and t0 < mark["full"]:
            rows = common.query(conn, read.format(hint, "(run_at > %s OR (run_at = %s AND id >= %s)) AND"),
                                (mark["at"], mark["at"], mark["id"]))  # fmt: skip
        if len(rows) < BATCH:  # from the start (what the mark's read locked is read again: its own)
            rows = common.query(conn, read.format(hint, ""))
            mark["full"] = time.perf_counter() + min(60.0, 20 * (time.perf_counter() - t0))
        if rows:
            mark["at"], mark["id"] = rows[0][1], rows[0][0]
            ids = [r[0] for r in rows]
            common.query(conn, f"UPDATE leased SET leased_until = {now} + INTERVAL '{LEASE}' SECOND, token = %s WHERE id IN ({_marks(ids)})", (token, *ids))  # fmt: skip
        conn.commit()
        return [r[0] for r in rows], token

    return (
        lambda: _insert(conn, dialect, "leased", k),
        reserve,
        lambda t: _settle(auto, "leased", *t),
        [auto, conn],
    )


def _pgmq(dialect: str, dsn: str):
    conn = common.raw_connect("postgresql", dsn)
    bodies = [__import__("psycopg").types.json.Jsonb({"n": i}) for i in range(BATCH)]
    return (
        lambda: common.query(conn, Pgmq.SEND_BATCH, (QUEUE, bodies)),
        lambda: [r[0] for r in common.query(conn, Pgmq.READ, (QUEUE, LEASE, BATCH))],
        lambda ids: len(common.query(conn, Pgmq.DELETE_BATCH, (QUEUE, ids))) if ids else 0,
        [conn],
    )


SYSTEMS = {"pyqueue": _pyqueue, "plain": _plain, "pgmq": _pgmq, "rotate": _rotate, "leased": _leased}
NAMES = {"pyqueue": "pyqueue-sql", "plain": "SKIP LOCKED job table", "pgmq": "pgmq",
         "rotate": f"{SEGMENTS} rotating job tables",
         "leased": "job table, lease in a column, read from a mark"}  # fmt: skip
ONLY = {"pgmq": "postgresql"}  # the systems of one dialect


def _loop(name: str, dialect: str, dsn: str, stop, count, times, cpu, sessions) -> None:
    """One client: push, reserve (timed), settle until stop, counting what the settle settled; the times
    sent every half second, its CPU seconds in cpu, its server sessions' pids or thread ids in sessions."""
    push, reserve, settle, conns = SYSTEMS[name](dialect, dsn)
    for conn, session in zip(conns, sessions):
        session.value = common.session_id(dialect, conn)
    sent, buf = time.perf_counter(), []
    while not stop.is_set():
        cpu.value = time.process_time()
        push()
        t = time.perf_counter()
        taken = reserve()
        buf.append(time.perf_counter() - t)
        count.value += settle(taken)  # only what the settle reports settled
        if time.perf_counter() - sent >= 0.5:
            times.put((name, buf))
            sent, buf = time.perf_counter(), []


# What a read costs, whatever the load. PostgreSQL: the buffers a reserve touches (EXPLAIN ANALYZE, rolled
# back). MariaDB (a CALL has no ANALYZE): the pages a read of the first 50 ready entries accesses (dead too).
PROBE = {
    ("postgresql", "pyqueue"): f"SELECT * FROM queue_reserve('{QUEUE}', 'probe', interval '300 s', {BATCH})",
    ("postgresql", "pgmq"): f"SELECT * FROM pgmq.read('{QUEUE}', 300, {BATCH})",
    ("postgresql", "plain"): f"SELECT id FROM job WHERE run_at <= now() ORDER BY run_at, id LIMIT {BATCH} FOR UPDATE SKIP LOCKED",
    ("mysql", "pyqueue"): f"SELECT m.id FROM pyqueue_message m FORCE INDEX (pyqueue_message_order_idx) WHERE m.queue_name = '{QUEUE}' "
                          f"AND m.priority = 0 AND m.ready_at <= UTC_TIMESTAMP(6) AND m.scheduled_at <= UTC_TIMESTAMP(6) "
                          f"ORDER BY m.ready_at, m.id LIMIT {BATCH}",
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
    job = HandRolled.DDL[dialect]
    if "leased" in systems:  # the job table and a column for the lease's end
        common.execute(dialect, dsn, *(ddl.replace("job", "leased") for ddl in job))
        common.execute(dialect, dsn, f"ALTER TABLE leased ADD leased_until {ROTATE[dialect]['since']} NULL")
    if "rotate" in systems:
        common.execute(dialect, dsn, *(ddl.replace("job", f"seg{s}") for s in range(SEGMENTS) for ddl in job))
        common.execute(dialect, dsn, f"CREATE TABLE rotor (id int PRIMARY KEY, current int NOT NULL, oldest int NOT NULL, since {ROTATE[dialect]['since']} NOT NULL)",
                       f"INSERT INTO rotor VALUES (1, 0, 0, {NOW[dialect]})")  # fmt: skip
    common.execute(
        dialect, dsn, "CREATE TABLE report (id int PRIMARY KEY)", f"INSERT INTO report {REPORT_ROWS[dialect]}"
    )


def _window(series, times, systems, t0: float, t1: float) -> dict:
    """Each system's msg/s, reserve p50/p99 (ms), client and server CPU a message (µs) from t0 to t1 (s)."""
    (ta, ca, ua), (tb, cb, ub) = (min(series, key=lambda s: abs(s[0] - t)) for t in (t0, t1))
    per_msg = lambda a, b, m: round(1e6 * (b - a) / m, 1) if None not in (a, b) and m > 0 else None  # noqa: E731
    out = {}
    for n in systems:
        ts = sorted(d for t, m, ds in times if m == n and ta < t <= tb for d in ds)
        out[n] = {
            "rate": round((cb[n] - ca[n]) / max(tb - ta, 1e-9), 1),
            "client_us": per_msg(ua[n][0], ub[n][0], cb[n] - ca[n]),
            "server_us": per_msg(ua[n][1], ub[n][1], cb[n] - ca[n]),
            "p50_ms": round(1000 * statistics.median(ts), 2) if ts else None,
            "p99_ms": round(1000 * ts[min(len(ts) - 1, int(0.99 * len(ts)))], 2) if ts else None,
        }
    return out


def run(args) -> dict:
    dialect, systems = args.dialect, args.systems
    marks = [m for m in (10, 30, *range(60, int(args.minutes * 60) + 1, 60)) if m <= args.minutes * 60]
    with common.database(dialect, "heldsnap", QUEUE, visibility_timeout=LEASE) as dsn:
        _setup(dialect, dsn, systems)
        ctx = mp.get_context("fork")
        stop, times = ctx.Event(), ctx.Queue()
        counts = {n: ctx.Value("q", 0, lock=False) for n in systems}
        cpus = {n: ctx.Value("d", 0.0, lock=False) for n in systems}
        sessions = {n: [ctx.Value("q", 0, lock=False) for _ in range(2)] for n in systems}
        # a session's CPU: PostgreSQL its backend's process, MariaDB its thread of the server's process
        server = [common.server_pid(dialect, dsn)] if dialect == "mysql" else []
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
                    serv = [common.process_cpu(*server, v.value) for v in sessions[n] if v.value]
                    used[n] = (cpus[n].value or None, sum(serv) if serv and None not in serv else None)
                series.append((time.perf_counter() - t0, {n: counts[n].value for n in systems}, used))
                with contextlib.suppress(queue.Empty):
                    while True:
                        got.append((time.perf_counter() - t0, *times.get_nowait()))

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
            # the report: a snapshot taken by a read of another table, kept open (or a dump's)
            holder = _dump(dialect, dsn) if args.holder == "dump" else common.raw_connect(dialect, dsn, autocommit=dialect != "postgresql")  # fmt: skip
            if args.holder == "report":
                common.query(holder, HOLD[dialect])
                common.query(holder, "SELECT count(*) FROM report")
            hold_at = time.perf_counter() - t0
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
            if isinstance(holder, subprocess.Popen):
                holder.kill()
                holder.wait()
            elif holder is not None:
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
            f"{r[n]['rate']:,.0f}", f"{r[n].get('ratio', 1.0) or 0:.2f}x", f"{r[n]['p50_ms']} / {r[n]['p99_ms']}",
            f"{r[n].get('server_us')} / {r[n].get('client_us')}",
            f"{r['probe'].get(n, ''):,}" if isinstance(r["probe"].get(n), int) else "")))
        for r in res["rows"]
    ]  # fmt: skip
    return "\n".join([
        f"# Held snapshot, {dialect} ({out['started']}, `{out['command']}`)",
        "",
        f"One client a system: push_many {BATCH}, reserve(n={BATCH}), commit_many (the job table: a multi-row INSERT, "
        f"SELECT ... LIMIT {BATCH} FOR UPDATE SKIP LOCKED + UPDATE, DELETE by ids"
        + (f"; {SEGMENTS} job tables taking the pushes in turn, {PERIOD} s each, read oldest first, "
           "emptied by TRUNCATE TABLE" * ("rotate" in systems))
        + f"); every reserve leases for {out.get('lease_s', 300)} s; a snapshot held ({out.get('holder', 'report')}) from "
        f"{res['hold_at_s']} s for {res['held_s']:.0f} s. Load average {out['load'][0]:.1f} before, "
        f"{out['load_after'][0]:.1f} after ({out['cpus']} CPUs). Each row: msg/s over the 30 s (at most) before it, "
        f"the ratio to the row \"before\", the reserve's time, the CPU a message of the system's server sessions "
        f"(PostgreSQL their backends, MariaDB their connections' threads) and of its client process (10 ms ticks of "
        f"/proc and getrusage), the server's {HORIZON[dialect][0]} and "
        + ("the shared buffers one reserve of a session of its own touches (EXPLAIN ANALYZE, rolled back; once a "
           "minute, it holds no live mark: pyqueue-sql's is a read from the queue's bound)." if dialect == "postgresql" else
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
        ("--systems", "", f"comma-separated, of: {', '.join(SYSTEMS)} (default: the first 3)"),
        ("--lease", 300, "seconds a reserve leases its messages for, every system (default 300)"),
        ("--holder", ("report", "dump"), "who holds the snapshot: a session that read a table, or a dump"),
        ("--out", "bench/results", "where held-snapshot-<dialect>.md and .json go"),
    )
    args = ap.parse_args(argv)
    if args.lease <= 0:
        ap.error("--lease must be positive")
    global LEASE
    LEASE = args.lease
    default = ["pyqueue", "plain"] + (["pgmq"] if args.dialect == "postgresql" and importlib.util.find_spec("pgmq") else [])  # fmt: skip
    args.systems = common.names(args.systems, SYSTEMS, ap, "systems") or default
    if other := [n for n in args.systems if ONLY.get(n, args.dialect) != args.dialect]:
        ap.error(f"{', '.join(other)}: not on {args.dialect}")
    common.exit_on_sigterm()
    out = {"started": common.now_utc(), "command": common.command(), "dialect": args.dialect,
           "minutes": args.minutes, "lease_s": LEASE, "holder": args.holder, "systems": args.systems, "load": common.loadavg(), "cpus": os.cpu_count()}  # fmt: skip
    out["result"] = run(args)
    out["load_after"] = common.loadavg()
    common.write(args.out, f"held-snapshot-{args.dialect}", summary(out), out, tag="")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
