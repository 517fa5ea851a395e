"""Throughput of a steady producer/consumer while a REPEATABLE READ transaction holds the xmin horizon.

    python bench/held_xmin.py                       # PostgreSQL: 10 min hold, pyqueue-sql and pgmq
    python bench/held_xmin.py --minutes 3           # a shorter hold, for iteration
    python bench/held_xmin.py --minutes 0.5 --before 30 --window 10   # a check that it runs
    python bench/held_xmin.py --dialect mysql       # MariaDB/MySQL: pyqueue-sql and a hand-rolled queue

One fresh database holds both systems: pyqueue-sql (installed as `make migrate` would) and pgmq
(installed from the SQL its PyPI package ships, as bench.py does), each with one queue. Two client
processes run at the same time, one per system, each in a loop through the system's public calls,
autocommit:

  pyqueue-sql   queue_push_batch of 100 (Queue.push_many), then 100 x queue_reserve(n=1) +
                queue_commit (Queue.reserve, Queue.commit)
  pgmq          pgmq.send_batch of 100, then 100 x pgmq.read(vt, 1) + pgmq.delete(id)

After --before seconds (default 60), a third connection opens a REPEATABLE READ transaction, takes
its snapshot and keeps it for --minutes (default 10): no row version deleted or updated after that
can be vacuumed away meanwhile, in either system's tables. Every --window seconds (default 30) each
client reports the messages it reserved and committed in that window, and one reserve of each
system runs under EXPLAIN (ANALYZE, BUFFERS) (rolled back): the shared buffers it touches measure
the walk over dead index entries whatever the machine's load. The hold is released at the end.
The table holds, per window, the rate and the buffers per reserve and, per system, the ratio of
its last minute under the hold to before the hold. Both systems share the machine and the hold at
the same time, so a change in load hits them alike; only the ratios mean anything.

With --dialect mysql (MariaDB, MySQL) the second system is the hand-rolled SKIP LOCKED queue of
bench.py (its table and statements): multi-row INSERT IGNORE of 100, then 100 x (SELECT ... LIMIT 1
FOR UPDATE SKIP LOCKED + UPDATE, COMMIT; DELETE). The hold is START TRANSACTION WITH CONSISTENT
SNAPSHOT (REPEATABLE READ) and one read of each table: InnoDB's purge cannot remove the
delete-marked records that read view might still see, so the history list length grows. InnoDB
has no per-statement EXPLAIN BUFFERS for a CALL; per window, with both loops paused between two
calls, one probe reserve of each system (in a transaction rolled back) is measured by the global
Innodb_buffer_pool_read_requests delta around it (the least of 3 tries: another session can only
add to it; a page of delete-marked entries counts once however many it holds), by its time (the
same conditions; other sessions on the server still weigh on it), by its session Handler_read_next and Rows_read deltas (which do not count the
delete-marked records InnoDB skips inside one handler call), and, for the hand-rolled SELECT, by
ANALYZE FORMAT=JSON's r_engine_stats.pages_accessed; and the server's history list length
(information_schema.innodb_metrics trx_rseg_history_len, server-wide).

Writes bench/results/held_xmin-<dialect>-<time>.{json,md} (--out to change). The server's
autovacuum settings are left as they are (the shared test server runs with autovacuum off; the
bench then runs VACUUM on both queue tables before the hold starts). InnoDB's purge runs by
itself; nothing is changed on the MariaDB server.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import multiprocessing as mp
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import psycopg  # noqa: E402

import pyqueue_sql  # noqa: E402
from bench import common  # noqa: E402

QUEUE = "held"
BATCH = 100
PGMQ_SEND_BATCH = "SELECT * FROM pgmq.send_batch(queue_name=>%s::text, msgs=>%s::jsonb[])"
PGMQ_READ = (
    "SELECT msg_id, read_ct, enqueued_at, last_read_at, vt, message, headers "
    "FROM pgmq.read(queue_name=>%s::text, vt=>%s::integer, qty=>%s::integer)"
)
PGMQ_DELETE = "SELECT pgmq.delete(queue_name=>%s::text, msg_id=>%s::bigint)"


def _pyqueue_loop(dsn: str, stop, counts) -> None:
    k = 0
    with pyqueue_sql.connect(dsn) as db:
        q = db.queue(QUEUE)
        while not stop.is_set():
            q.push_many([(f"m{k}-{i}", "job", {"n": i}) for i in range(BATCH)])
            k += 1
            for _ in range(BATCH):
                got = q.reserve(n=1, worker="held", timeout=300)
                if not got:
                    break
                q.commit(got[0])
                counts.value += 1


def _pgmq_loop(dsn: str, stop, counts) -> None:
    from psycopg.types.json import Jsonb

    conn = common.raw_connect("postgresql", dsn)
    cur = conn.cursor()
    while not stop.is_set():
        cur.execute(PGMQ_SEND_BATCH, (QUEUE, [Jsonb({"n": i}) for i in range(BATCH)]))
        cur.fetchall()
        for _ in range(BATCH):
            cur.execute(PGMQ_READ, (QUEUE, 300, 1))
            rows = cur.fetchall()
            if not rows:
                break
            cur.execute(PGMQ_DELETE, (QUEUE, rows[0][0]))
            cur.fetchall()
            counts.value += 1
    conn.close()


LOOPS = {"pyqueue": _pyqueue_loop, "pgmq": _pgmq_loop}
# One reserve of each system, run under EXPLAIN (ANALYZE, BUFFERS) in a transaction rolled back:
# the shared buffers it touches (every statement inside the function counts) measure the walk
# over dead index entries whatever the machine's load. At REPEATABLE READ, where pyqueue-sql's
# reserve leaves the start of the ready range as it is: the figure is a reserve's own read, not
# the once-a-second step that moves the start (its cost is in the throughput).
PROBES = {
    "pyqueue": f"SELECT * FROM queue_reserve('{QUEUE}', 'probe', interval '300 s', 1)",
    "pgmq": f"SELECT * FROM pgmq.read('{QUEUE}', 300, 1)",
}


def _probe_buffers(conn, name: str) -> int:
    cur = conn.cursor()
    for attempt in range(20):  # a row the loop updated after the probe's snapshot: 40001, again
        try:
            cur.execute("BEGIN ISOLATION LEVEL REPEATABLE READ")
            cur.execute("EXPLAIN (ANALYZE, BUFFERS, FORMAT JSON) " + PROBES[name])
            plan = cur.fetchall()[0][0][0]["Plan"]
            return plan.get("Shared Hit Blocks", 0) + plan.get("Shared Read Blocks", 0)
        except psycopg.errors.SerializationFailure:
            time.sleep(0.01 * (attempt + 1))
        finally:
            cur.execute("ROLLBACK")
    return -1  # never got a snapshot the loop left alone


TABLES = {"pyqueue": "pyqueue_message", "pgmq": f"pgmq.q_{QUEUE}"}


def _install(dsn: str) -> None:
    from pgmq.install import install_pgmq_from_sql

    common.install_pyqueue(dsn)
    with pyqueue_sql.connect(dsn) as db:
        db.queue(QUEUE).create(visibility_timeout=300)
    install_pgmq_from_sql(dsn=dsn)
    common.execute("postgresql", dsn, f"SELECT pgmq.create('{QUEUE}')")


def _sizes(dsn: str) -> dict:
    out = {}
    for name, table in TABLES.items():
        [(total, dead)] = common.execute(
            "postgresql",
            dsn,
            f"SELECT pg_total_relation_size('{table}'::regclass), "
            f"(SELECT coalesce(n_dead_tup, 0) FROM pg_stat_user_tables WHERE relid = '{table}'::regclass)",
        )
        out[name] = {"total_bytes": total, "dead_tuples": dead}
    return out


# ---- MariaDB/MySQL ----------------------------------------------------------------------------
# The loops stop between two calls while a probe runs (pause set, idle acknowledged), so the
# server-wide buffer pool counter around a probe counts the probe and not the other loop.


def _wait_while_paused(pause, idle) -> None:
    while pause.is_set():
        idle.value = 1
        time.sleep(0.002)
    idle.value = 0


def _pyqueue_mysql_loop(dsn: str, stop, counts, pause, idle) -> None:
    k = 0
    with pyqueue_sql.connect(dsn) as db:
        q = db.queue(QUEUE)
        while not stop.is_set():
            _wait_while_paused(pause, idle)
            q.push_many([(f"m{k}-{i}", "job", {"n": i}) for i in range(BATCH)])
            k += 1
            for _ in range(BATCH):
                _wait_while_paused(pause, idle)
                got = q.reserve(n=1, worker="held", timeout=300)
                if not got:
                    break
                q.commit(got[0])
                counts.value += 1


def _handrolled_loop(dsn: str, stop, counts, pause, idle) -> None:
    from bench.bench import HandRolled

    system = HandRolled("mysql")
    system.open(dsn)
    k = 0
    try:
        while not stop.is_set():
            _wait_while_paused(pause, idle)
            system.push_batch([f"m{k}-{i}" for i in range(BATCH)])
            k += 1
            for _ in range(BATCH):
                _wait_while_paused(pause, idle)
                if not system.take_ack():
                    break
                counts.value += 1
    finally:
        system.close()


MYSQL_LOOPS = {"pyqueue": _pyqueue_mysql_loop, "handrolled": _handrolled_loop}
MYSQL_TABLES = {"pyqueue": "pyqueue_message", "handrolled": "job"}
# The hand-rolled queue's reserve SELECT as bench.py's HandRolled runs it (LIMIT 1).
HANDROLLED_SELECT = "SELECT id, payload FROM job WHERE run_at <= UTC_TIMESTAMP(6) ORDER BY run_at, id LIMIT 1 FOR UPDATE SKIP LOCKED"
MYSQL_PROBES = {
    "pyqueue": f"CALL queue_reserve('{QUEUE}', 'probe', 300, 1, NULL)",
    "handrolled": HANDROLLED_SELECT,
}
HISTORY_LEN = "SELECT count FROM information_schema.innodb_metrics WHERE name = 'trx_rseg_history_len'"


def _drain(cur) -> None:
    while True:
        if cur.description:
            cur.fetchall()
        if not cur.nextset():
            return


def _status(cur, scope: str, names: tuple[str, ...]) -> dict[str, int]:
    marks = ", ".join(f"'{n}'" for n in names)
    cur.execute(f"SHOW {scope} STATUS WHERE Variable_name IN ({marks})")
    return {name: int(value) for name, value in cur.fetchall()}


SESSION_COUNTERS = ("Handler_read_next", "Handler_read_key", "Handler_read_first", "Rows_read")


def _probe_mysql(conn, name: str) -> dict:
    """One reserve of the system in a transaction rolled back, three times; the least of each figure."""
    cur = conn.cursor()
    best: dict = {}
    for _ in range(3):
        s0 = _status(cur, "SESSION", SESSION_COUNTERS)
        g0 = _status(cur, "GLOBAL", ("Innodb_buffer_pool_read_requests",))
        cur.execute("START TRANSACTION")
        try:
            t = time.perf_counter()
            cur.execute(MYSQL_PROBES[name])
            _drain(cur)
            ms = (time.perf_counter() - t) * 1000.0
        finally:
            cur.execute("ROLLBACK")
        g1 = _status(cur, "GLOBAL", ("Innodb_buffer_pool_read_requests",))
        s1 = _status(cur, "SESSION", SESSION_COUNTERS)
        got = {
            "read_requests": g1["Innodb_buffer_pool_read_requests"] - g0["Innodb_buffer_pool_read_requests"],
            "ms": round(ms, 3),
            # SHOW SESSION STATUS reads counters itself (Rows_read): the statements between the two
            # snapshots are the same each time, so their own share is a constant offset
            **{c: s1[c] - s0[c] for c in SESSION_COUNTERS},
        }
        if name == "handrolled":
            cur.execute("START TRANSACTION")
            try:
                cur.execute("ANALYZE FORMAT=JSON " + HANDROLLED_SELECT)
                plan = json.loads(cur.fetchall()[0][0])
            finally:
                cur.execute("ROLLBACK")
            table = plan["query_block"]["nested_loop"][0]["table"]
            got["pages_accessed"] = table.get("r_engine_stats", {}).get("pages_accessed", -1)
        best = got if not best else {k: min(best[k], v) for k, v in got.items()}
    return best


def _install_mysql(dsn: str) -> None:
    from bench.bench import HandRolled

    common.install_pyqueue(dsn)
    with pyqueue_sql.connect(dsn) as db:
        db.queue(QUEUE).create(visibility_timeout=300)
    HandRolled("mysql").setup(dsn)


def _history_len(cur) -> int:
    cur.execute(HISTORY_LEN)
    return int(cur.fetchall()[0][0])


def run_mysql(args) -> dict:
    dsn = common.create("mysql", "heldxmin")
    try:
        _install_mysql(dsn)
        ctx = mp.get_context("fork")
        stop = ctx.Event()
        pause = ctx.Event()
        counts = {name: ctx.Value("q", 0, lock=False) for name in args.systems}
        idle = {name: ctx.Value("i", 0, lock=False) for name in args.systems}
        procs = [
            ctx.Process(target=MYSQL_LOOPS[name], args=(dsn, stop, counts[name], pause, idle[name]))
            for name in args.systems
        ]
        for p in procs:
            p.start()
        prober = common.raw_connect("mysql", dsn)

        def probe_all() -> dict:
            pause.set()
            deadline = time.perf_counter() + 10.0
            while time.perf_counter() < deadline and not all(idle[n].value for n in args.systems):
                time.sleep(0.002)
            try:
                return {name: _probe_mysql(prober, name) for name in args.systems}
            finally:
                pause.clear()

        probe_all()  # the first call of a session reads the routine and the tables: not counted
        state: dict = {"holder": None, "hold_at": None}

        def take_hold():
            holder = common.raw_connect("mysql", dsn)
            hc = holder.cursor()
            hc.execute("SET SESSION TRANSACTION ISOLATION LEVEL REPEATABLE READ")
            hc.execute("START TRANSACTION WITH CONSISTENT SNAPSHOT")
            for name in args.systems:
                hc.execute(f"SELECT COUNT(*) FROM {MYSQL_TABLES[name]}")
                hc.fetchall()
            return holder

        def add_probes(row: dict) -> None:
            row["history_len"] = _history_len(prober.cursor())
            for name, probe in probe_all().items():
                for key, value in probe.items():
                    row[f"{name}_{key}"] = value

        try:
            windows = _windows(args, counts, state, take_hold, add_probes, "read view held")
        finally:
            stop.set()
            pause.clear()
            for p in procs:
                p.join(timeout=60)
                if p.is_alive():
                    p.terminate()
            if state["holder"] is not None:
                state["holder"].cursor().execute("ROLLBACK")
                state["holder"].close()
            prober.close()
        return _ratios(
            args, windows, state["hold_at"], ("read_requests", "ms", "Handler_read_next", "Rows_read")
        )
    finally:
        common.drop("mysql", dsn)


def _mean(rows: list[dict], key: str) -> float:
    return sum(w[key] for w in rows) / len(rows) if rows else 0.0


def _ratios(args, windows: list[dict], hold_at, probe_keys: tuple[str, ...]) -> dict:
    before = [w for w in windows if not w["held"]]
    held = [w for w in windows if w["held"]]
    last_minute = [w for w in held if w["end_s"] > windows[-1]["end_s"] - 60.0 - 1e-6]
    result: dict = {"hold_started_s": hold_at, "windows": windows}
    for name in args.systems:
        b, lm = _mean(before, name), _mean(last_minute, name)
        result[name] = {
            "before_hold": round(b, 1),
            "last_minute": round(lm, 1),
            "ratio": round(lm / b, 3) if b else None,
        }
        keys = probe_keys + (("pages_accessed",) if f"{name}_pages_accessed" in windows[-1] else ())
        for key in keys:
            result[name][key + "_before_hold"] = round(_mean(before, f"{name}_{key}"), 1)
            result[name][key + "_last_minute"] = round(_mean(last_minute, f"{name}_{key}"), 1)
    if "history_len" in windows[-1]:  # MySQL/MariaDB
        result["history_len_before_hold"] = round(_mean(before, "history_len"))
        result["history_len_last_minute"] = round(_mean(last_minute, "history_len"))
        result["history_len_end"] = windows[-1]["history_len"]
    return result


def _windows(args, counts, state: dict, take_hold, add_probes, label: str) -> list[dict]:
    """The measured part of a run, both dialects: --before seconds of load, then take_hold() opens
    the snapshot (its connection goes to state["holder"], for the caller to release, and the time
    to state["hold_at"]) and the load runs on for --minutes. Per --window: each system's msg/s,
    then add_probes(row) adds the dialect's probe figures. Returns the windows."""
    windows: list[dict] = []
    t0 = time.perf_counter()
    last = {name: 0 for name in args.systems}
    total = args.before + args.minutes * 60
    while time.perf_counter() - t0 < total - 1e-6:
        if state["holder"] is None and time.perf_counter() - t0 >= args.before - 1e-6:
            state["holder"] = take_hold()
            state["hold_at"] = round(time.perf_counter() - t0, 1)
            print(f"[{state['hold_at']:7.1f}s] {label} from now on", flush=True)
        w0 = time.perf_counter()
        end = min(w0 + args.window, t0 + total)
        if state["holder"] is None:
            end = min(end, t0 + args.before)
        time.sleep(max(0.0, end - time.perf_counter()))
        now = time.perf_counter()
        row: dict = {"end_s": round(now - t0, 1), "held": state["holder"] is not None}
        for name in args.systems:
            v = counts[name].value
            row[name] = round((v - last[name]) / (now - w0), 1)
            last[name] = v
        add_probes(row)
        windows.append(row)
        print(f"[{row['end_s']:7.1f}s] " + json.dumps(row), flush=True)
    return windows


def summary_mysql(out: dict) -> str:
    res = out["result"]
    lines = [
        f"# Held read view, MariaDB ({out['started']}, `python bench/held_xmin.py {' '.join(out['argv'])}`)",
        "",
        f"{out['minutes']} min REPEATABLE READ read view (START TRANSACTION WITH CONSISTENT SNAPSHOT) held "
        f"after {out['before']} s; load average {out['load'][0]:.1f} before, {out['load_after'][0]:.1f} after; "
        "reserve+commit msg/s per system. Buffer pool read requests of one probe reserve (global counter, "
        "both loops paused, least of 3; a page of delete-marked entries counts once however many it holds) and its "
        "time (same conditions; other sessions on the server still weigh on it); history list length server-wide.",
        "",
        "| system | msg/s before the hold | last minute of the hold | ratio | page reads per reserve before"
        " | last minute | ms per probe reserve before | last minute | Handler_read_next before | last minute |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for name in out["systems"]:
        r = res[name]
        lines.append(
            f"| {name} | {r['before_hold']:,.0f} | {r['last_minute']:,.0f} | {r['ratio']}x "
            f"| {r['read_requests_before_hold']:,.0f} | {r['read_requests_last_minute']:,.0f} "
            f"| {r['ms_before_hold']:.2f} | {r['ms_last_minute']:.2f} "
            f"| {r['Handler_read_next_before_hold']:,.0f} | {r['Handler_read_next_last_minute']:,.0f} |"
        )
    lines += [
        "",
        f"History list length: {res['history_len_before_hold']:,} before the hold (mean), "
        f"{res['history_len_last_minute']:,} in its last minute, {res['history_len_end']:,} at its end.",
        "",
        "Per window: msg/s, page read requests and ms of one probe reserve (hand-rolled: also ANALYZE's "
        "pages_accessed of its SELECT).",
        "",
        "| window end (s) | held | history length | "
        + " | ".join(
            f"{n} msg/s | {n} page reads | {n} ms"
            + (" | handrolled pages_accessed" if n == "handrolled" else "")
            for n in out["systems"]
        )
        + " |",
    ]
    lines.append(
        "|---|---|---|"
        + "".join("---|---|---|---|" if n == "handrolled" else "---|---|---|" for n in out["systems"])
    )
    for w in res["windows"]:
        cells = []
        for n in out["systems"]:
            cells += [f"{w[n]:,.0f}", f"{w[n + '_read_requests']:,}", f"{w[n + '_ms']:.2f}"]
            if n == "handrolled":
                cells.append(f"{w['handrolled_pages_accessed']:,}")
        lines.append(
            f"| {w['end_s']} | {'yes' if w['held'] else 'no'} | {w['history_len']:,} | "
            + " | ".join(cells)
            + " |"
        )
    return "\n".join(lines) + "\n"


def run(args) -> dict:
    dsn = common.create("postgresql", "heldxmin")
    try:
        _install(dsn)
        ctx = mp.get_context("fork")
        stop = ctx.Event()
        counts = {name: ctx.Value("q", 0, lock=False) for name in args.systems}
        procs = [ctx.Process(target=LOOPS[name], args=(dsn, stop, counts[name])) for name in args.systems]
        for p in procs:
            p.start()
        prober = common.raw_connect("postgresql", dsn)
        for name in args.systems:  # the first call of a session reads the catalogs: not counted
            _probe_buffers(prober, name)
        state: dict = {"holder": None, "hold_at": None}

        def take_hold():
            for name in args.systems:  # both tables as clean as vacuum makes them
                common.execute("postgresql", dsn, f"VACUUM {TABLES[name]}")
            holder = common.raw_connect("postgresql", dsn, autocommit=False)
            hc = holder.cursor()
            hc.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ")
            hc.execute("SELECT count(*) FROM pg_class")
            hc.fetchall()
            return holder

        def add_probes(row: dict) -> None:
            for name in args.systems:
                row[name + "_buffers"] = _probe_buffers(prober, name)

        try:
            windows = _windows(args, counts, state, take_hold, add_probes, "xmin held")
            sizes_held = _sizes(dsn)
        finally:
            stop.set()
            for p in procs:
                p.join(timeout=60)
                if p.is_alive():
                    p.terminate()
            if state["holder"] is not None:
                state["holder"].rollback()
                state["holder"].close()
            prober.close()
        result = _ratios(args, windows, state["hold_at"], ("buffers",))
        result["sizes_while_held"] = sizes_held
        return result
    finally:
        common.drop("postgresql", dsn)


def summary(out: dict) -> str:
    lines = [
        f"# Held xmin ({out['started']}, `python bench/held_xmin.py {' '.join(out['argv'])}`)",
        "",
        f"{out['minutes']} min REPEATABLE READ snapshot held after {out['before']} s; load average "
        f"{out['load'][0]:.1f} before, {out['load_after'][0]:.1f} after; reserve+commit msg/s per system.",
        "",
        "| system | msg/s before the hold | last minute of the hold | ratio | buffers per reserve before"
        " | last minute |",
        "|---|---|---|---|---|---|",
    ]
    for name in out["systems"]:
        r = out["result"][name]
        lines.append(
            f"| {name} | {r['before_hold']:,.0f} | {r['last_minute']:,.0f} | {r['ratio']}x "
            f"| {r['buffers_before_hold']:,.0f} | {r['buffers_last_minute']:,.0f} |"
        )
    lines += [
        "",
        "Per window: msg/s, and the shared buffers one reserve touched at the window's end.",
        "",
        "| window end (s) | held | " + " | ".join(f"{n} msg/s | {n} buffers" for n in out["systems"]) + " |",
    ]
    lines.append("|---|---|" + "---|---|" * len(out["systems"]))
    for w in out["result"]["windows"]:
        lines.append(
            f"| {w['end_s']} | {'yes' if w['held'] else 'no'} | "
            + " | ".join(f"{w[n]:,.0f} | {w[n + '_buffers']:,}" for n in out["systems"])
            + " |"
        )
    sizes = out["result"]["sizes_while_held"]
    lines += [
        "",
        "At the end of the hold: "
        + "; ".join(
            f"{n} {s['total_bytes'] / 1e6:.1f} MB, {s['dead_tuples']:,} dead tuples" for n, s in sizes.items()
        )
        + ".",
    ]
    return "\n".join(lines) + "\n"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--dialect", default="postgresql", choices=("postgresql", "mysql"))
    ap.add_argument("--minutes", type=float, default=10.0, help="how long the snapshot is held (default 10)")
    ap.add_argument("--before", type=float, default=60.0, help="seconds of load before the hold (default 60)")
    ap.add_argument("--window", type=float, default=30.0, help="seconds per throughput window (default 30)")
    ap.add_argument(
        "--systems",
        default=None,
        help="comma-separated, of: "
        + ", ".join(LOOPS)
        + " (postgresql), "
        + ", ".join(MYSQL_LOOPS)
        + " (mysql)",
    )
    ap.add_argument("--out", default=os.path.join(os.path.dirname(os.path.abspath(__file__)), "results"))
    args = ap.parse_args(argv)
    loops = MYSQL_LOOPS if args.dialect == "mysql" else LOOPS
    args.systems = [s for s in (args.systems or ",".join(loops)).split(",") if s]
    unknown = set(args.systems) - set(loops)
    if unknown:
        ap.error(f"unknown systems {sorted(unknown)} for {args.dialect}")
    common.exit_on_sigterm()
    out = {
        "started": dt.datetime.now(dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
        "argv": sys.argv[1:] if argv is None else list(argv),
        "dialect": args.dialect,
        "minutes": args.minutes,
        "before": args.before,
        "window": args.window,
        "systems": args.systems,
        "load": os.getloadavg(),
    }
    if args.dialect == "mysql":
        out["server_version"] = common.execute("mysql", common.ADMIN["mysql"], "SELECT VERSION()")[0][0]
    out["result"] = run_mysql(args) if args.dialect == "mysql" else run(args)
    out["load_after"] = os.getloadavg()
    os.makedirs(args.out, exist_ok=True)
    stem = os.path.join(args.out, f"held_xmin-{args.dialect}-{out['started'].replace(':', '')}")
    table = summary_mysql(out) if args.dialect == "mysql" else summary(out)
    with open(stem + ".json", "w") as f:
        json.dump(out, f, indent=1)
    with open(stem + ".md", "w") as f:
        f.write(table)
    print(f"wrote {stem}.json and .md\n")
    print(table)
    return 0


if __name__ == "__main__":
    sys.exit(main())
