"""Throughput of a steady producer/consumer while a REPEATABLE READ transaction holds the xmin horizon
(PostgreSQL), pyqueue-sql beside pgmq. Method and table: bench/README.md, Held xmin.

    python -m bench held-xmin                        # 10 min hold, pyqueue-sql and pgmq
    python -m bench held-xmin --minutes 3            # a shorter hold, for iteration

MariaDB's read view: `python -m bench scale --dialects mysql --only xmin,xmin_run`; the hand-rolled
queue beside pyqueue-sql under it ran as `python bench/held_xmin.py --dialect mysql` (commit 2ee9fb7).
"""

from __future__ import annotations

import json
import multiprocessing as mp
import os
import sys
import time

import psycopg

import pyqueue_sql
from bench import common
from bench.bench import Pgmq  # its statements: what pgmq's Python client sends

QUEUE = "held"
BATCH = 100


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
        cur.execute(Pgmq.SEND_BATCH, (QUEUE, [Jsonb({"n": i}) for i in range(BATCH)]))
        cur.fetchall()
        for _ in range(BATCH):
            cur.execute(Pgmq.READ, (QUEUE, 300, 1))
            rows = cur.fetchall()
            if not rows:
                break
            cur.execute(Pgmq.DELETE, (QUEUE, rows[0][0]))
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


def _mean(rows: list[dict], key: str) -> float:
    return sum(w[key] for w in rows) / len(rows) if rows else 0.0


def _ratios(args, windows: list[dict], hold_at) -> dict:
    before = [w for w in windows if not w["held"]]
    last_minute = [w for w in windows if w["held"] and w["end_s"] > windows[-1]["end_s"] - 60.0 - 1e-6]
    result: dict = {"hold_started_s": hold_at, "windows": windows}
    for name in args.systems:
        b, lm = _mean(before, name), _mean(last_minute, name)
        result[name] = {
            "before_hold": round(b, 1),
            "last_minute": round(lm, 1),
            "ratio": round(lm / b, 3) if b else None,
        }
        result[name]["buffers_before_hold"] = round(_mean(before, f"{name}_buffers"), 1)
        result[name]["buffers_last_minute"] = round(_mean(last_minute, f"{name}_buffers"), 1)
    return result


def _windows(args, counts, state: dict, take_hold, add_probes, label: str) -> list[dict]:
    """The measured part of a run: --before seconds of load, then take_hold() opens
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


def run(args) -> dict:
    with common.database("postgresql", "heldxmin", QUEUE, visibility_timeout=300) as dsn:
        common.install_pgmq(dsn, QUEUE)
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
        result = _ratios(args, windows, state["hold_at"])
        result["sizes_while_held"] = sizes_held
        return result


def summary(out: dict) -> str:
    names, res = out["systems"], out["result"]
    head = [
        "system",
        "msg/s before the hold",
        "last minute of the hold",
        "ratio",
        "buffers per reserve before",
        "last minute",
    ]
    keys = ("before_hold", "last_minute", "ratio", "buffers_before_hold", "buffers_last_minute")
    fmt = {"ratio": "{}x"}
    sizes = [
        f"{n} {s['total_bytes'] / 1e6:.1f} MB, {s['dead_tuples']:,} dead tuples"
        for n, s in res["sizes_while_held"].items()
    ]
    return "\n".join([
        f"# Held xmin ({out['started']}, `python -m bench held-xmin {' '.join(out['argv'])}`)",
        "",
        f"{out['minutes']} min REPEATABLE READ snapshot held after {out['before']} s; load average "
        f"{out['load'][0]:.1f} before, {out['load_after'][0]:.1f} after; reserve+commit msg/s per system.",
        "",
        *common.table(head, [(n, *(fmt.get(k, "{:,.0f}").format(res[n][k]) for k in keys)) for n in names]),
        "",
        "Per window: msg/s, and the shared buffers one reserve touched at the window's end.",
        "",
        *common.table(
            ["window end (s)", "held", *(f"{n} {x}" for n in names for x in ("msg/s", "buffers"))],
            [(w["end_s"], "yes" if w["held"] else "no", *(f"{v:,.0f}" for n in names for v in (w[n], w[n + "_buffers"]))) for w in res["windows"]],
        ),
        "",
        "At the end of the hold: " + "; ".join(sizes) + ".",
    ]) + "\n"  # fmt: skip


def main(argv=None) -> int:
    ap = common.parser(
        __doc__,
        ("--minutes", 10.0, "how long the snapshot is held (default 10)"),
        ("--before", 60.0, "seconds of load before the hold (default 60)"),
        ("--window", 30.0, "seconds per throughput window (default 30)"),
        ("--systems", ",".join(LOOPS), "comma-separated, of: " + ", ".join(LOOPS)),
        ("--out", os.path.join(os.path.dirname(os.path.abspath(__file__)), "results"), ""),
    )
    args = ap.parse_args(argv)
    args.systems = [s for s in args.systems.split(",") if s]
    if set(args.systems) - set(LOOPS):
        ap.error(f"unknown systems {sorted(set(args.systems) - set(LOOPS))}")
    common.exit_on_sigterm()
    out = {
        "started": common.now_utc(),
        "argv": sys.argv[1:] if argv is None else list(argv),
        **{k: getattr(args, k) for k in ("minutes", "before", "window", "systems")},
        "load": os.getloadavg(),
    }
    out["result"] = run(args)
    out["load_after"] = os.getloadavg()
    stem = f"held_xmin-postgresql-{out['started'].replace(':', '')}"
    table = summary(out)
    common.write(args.out, stem, table, out)
    print(f"wrote {args.out}/{stem}.json and .md\n")
    print(table)
    return 0


if __name__ == "__main__":
    sys.exit(main())
