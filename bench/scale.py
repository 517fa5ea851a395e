"""Scale: does pyqueue-sql stay fast at a million messages, on both dialects? Each big state
against a small queue measured in the same database (a1, b1, b2, a2), as big / small (1.0 = no
slower); scenarios delayed, backlog, churn, priorities, batches, xmin, xmin_run: bench/README.md, Scale.

    python -m bench scale                          # both dialects, full sizes (tens of minutes)
    python -m bench scale --quick                  # 20,000 rows: a check that it runs
    python -m bench scale --dialects mysql --only delayed,priorities,batches

Large fills use one INSERT ... SELECT (the state is what matters, not how it got there); the churn
goes through the contract routines. Writes <out>/scale-<dialect>-<time>.md and the .json beside it.
"""

from __future__ import annotations

import json
import os
import statistics
import sys
import time

import pyqueue_sql
from bench import common

QUEUE = "scale"
SMALL = 10_000
BATCH_SIZES = (5_000, 10_000, 20_000, 40_000, 100_000)

_DIGITS = (
    "(SELECT 0 AS d UNION ALL SELECT 1 UNION ALL SELECT 2 UNION ALL SELECT 3 UNION ALL SELECT 4 "
    "UNION ALL SELECT 5 UNION ALL SELECT 6 UNION ALL SELECT 7 UNION ALL SELECT 8 UNION ALL SELECT 9)"
)


def _seq_mysql(n: int) -> str:
    """0 .. n-1 as column i (MariaDB has seq_ tables, MySQL does not: a cross join of digits)."""
    digits = len(str(n - 1))
    cols = " + ".join(f"t{k}.d * {10**k}" for k in range(digits))
    tables = ", ".join(f"{_DIGITS} t{k}" for k in range(digits))
    return f"SELECT {cols} AS i FROM {tables} HAVING i < {n}"


def analyze(dialect: str, dsn: str) -> None:
    pg = dialect == "postgresql"
    common.execute(dialect, dsn, "VACUUM ANALYZE pyqueue_message" if pg else "ANALYZE TABLE pyqueue_message")


def fill(
    dialect: str, dsn: str, n: int, prefix: str, delayed: bool, distinct_priorities: bool = False
) -> None:
    """n messages in one statement: ready (scheduled in the past, FIFO by i) or delayed to
    tomorrow; priority 0, or 1..n (each message its own) with distinct_priorities."""
    if dialect == "postgresql":
        at = "now() + interval '1 day'" if delayed else "now() - interval '1 hour' + i * interval '1 us'"
        prio = "i" if distinct_priorities else "0"
        common.execute(
            dialect,
            dsn,
            "INSERT INTO pyqueue_message (queue_name, p_key, p_kind, payload, priority, scheduled_at, "
            "scheduled_at_initially, created_at) "
            f"SELECT '{QUEUE}', '{prefix}' || i, 'job', '{{\"n\": 1}}', {prio}, {at}, {at}, now() "
            f"FROM generate_series(1, {n}) AS i",
        )
    else:
        at = (
            "UTC_TIMESTAMP(6) + INTERVAL 1 DAY"
            if delayed
            else "UTC_TIMESTAMP(6) - INTERVAL 1 HOUR + INTERVAL s.i MICROSECOND"
        )
        prio = "s.i + 1" if distinct_priorities else "0"
        common.execute(
            dialect,
            dsn,
            "INSERT INTO pyqueue_message (queue_name, p_key, p_kind, payload, priority, scheduled_at, "
            "scheduled_at_initially, created_at) "
            f"SELECT '{QUEUE}', CONCAT('{prefix}', s.i), 'job', '{{\"n\": 1}}', {prio}, {at}, {at}, "
            f"UTC_TIMESTAMP(6) FROM ({_seq_mysql(n)}) AS s",
        )
    analyze(dialect, dsn)


def remove(dialect: str, dsn: str, prefix: str) -> None:
    """Deletes the messages whose key starts with prefix (behind the routines' back: setup only)."""
    common.execute(dialect, dsn, f"DELETE FROM pyqueue_message WHERE p_key LIKE '{prefix}%'")
    analyze(dialect, dsn)


def sizes(dialect: str, dsn: str) -> dict[str, int]:
    if dialect == "postgresql":
        stat = "(SELECT n_{}_tup FROM pg_stat_user_tables WHERE relname = 'pyqueue_message')"
        rows = common.execute(
            dialect,
            dsn,
            "SELECT pg_relation_size('pyqueue_message'), pg_indexes_size('pyqueue_message'), "
            "pg_relation_size('pyqueue_message_ready_idx'), pg_relation_size('pyqueue_message_pkey'), "
            f"{stat.format('live')}, {stat.format('dead')}",
        )
        names = (
            "table_bytes",
            "indexes_bytes",
            "ready_idx_bytes",
            "pkey_bytes",
            "live_tuples",
            "dead_tuples",
        )
        return dict(zip(names, rows[0]))
    [(t, i, free, live)] = common.execute(
        dialect,
        dsn,
        "ANALYZE TABLE pyqueue_message",
        "SELECT data_length, index_length, data_free, table_rows FROM information_schema.tables "
        "WHERE table_schema = DATABASE() AND table_name = 'pyqueue_message'",
    )
    hist = common.execute(
        dialect,
        dsn,
        "SELECT count FROM information_schema.innodb_metrics WHERE name = 'trx_rseg_history_len'",
    )
    return {
        "table_bytes": int(t),
        "indexes_bytes": int(i),
        "data_free_bytes": int(free),
        "rows_estimate": int(live),
        "history_list_length": int(hist[0][0]) if hist else None,
    }


def consume(dsn: str, n: int, seconds: float | None = None) -> dict[str, float]:
    """One client takes and commits up to n messages one at a time (commit_reserve)."""
    with pyqueue_sql.connect(dsn) as db:
        q = db.queue(QUEUE)
        held = None
        done = 0
        start = time.perf_counter()
        while done < n and (seconds is None or time.perf_counter() - start < seconds):
            committed, got = q.commit_reserve(held, worker="scale")
            if held is not None:
                done += 1
            held = got[0] if got else None
            if held is None:
                break
        if held is not None:
            q.commit(held)
        elapsed = time.perf_counter() - start
    return {
        "messages": done,
        "seconds": round(elapsed, 3),
        "rate": round(done / elapsed, 1) if elapsed else 0,
    }


def scenario(dialect: str, tag: str, fn) -> dict:
    with common.database(dialect, tag, QUEUE, visibility_timeout=300) as dsn:
        return fn(dsn)


def _mean_rate(*runs: dict) -> float:
    return sum(r["rate"] for r in runs) / len(runs)


def _ratio(big: list[dict], small: list[dict]) -> float | None:
    base = _mean_rate(*small)
    return round(_mean_rate(*big) / base, 3) if base else None


def run_big(d: str, dsn: str, args, delayed: bool) -> dict:
    """The small queue (SMALL ready) consumed, then beside --rows delayed messages (delayed) or as a
    backlog of --rows (not delayed), twice, then again after the big part is removed: a1, b1, b2, a2."""
    fill(d, dsn, SMALL, "r", delayed=False)
    a1 = consume(dsn, args.sample)
    fill(
        d,
        dsn,
        args.rows if delayed else args.rows - SMALL + args.sample,
        "d" if delayed else "b",
        delayed=delayed,
    )
    if delayed:
        _push_ready(dsn, args.sample, prefix="t1-")
    b1 = consume(dsn, args.sample)
    sz = sizes(d, dsn)
    if delayed:
        _push_ready(dsn, args.sample, prefix="t2-")
    b2 = consume(dsn, args.sample)
    remove(d, dsn, "d" if delayed else "b")
    _push_ready(dsn, args.sample, prefix="t3-")
    a2 = consume(dsn, args.sample)
    big, small = ("with", "without") if delayed else ("big", "small")
    out = (
        {"ready": SMALL, "delayed": args.rows}
        if delayed
        else {"small_backlog": SMALL, "big_backlog": args.rows}
    )
    return out | {small: [a1, a2], big: [b1, b2], "sizes": sz, "ratio": _ratio([b1, b2], [a1, a2])}


def run_churn(d: str, dsn: str, args) -> dict:
    fill(d, dsn, SMALL, "r0", delayed=False)
    before = consume(dsn, args.sample)
    s0 = sizes(d, dsn)
    t = time.perf_counter()
    with pyqueue_sql.connect(dsn) as db:
        q = db.queue(QUEUE)
        # drain what is left, then push/take/commit --rows messages in batches of 1000
        while True:
            _, got = q.commit_reserve(None, n=1000)
            if not got:
                break
            q.commit_many(got)
        for start in range(0, args.rows, 1000):
            q.push_many([(f"c{i}", "job", {"n": i}) for i in range(start, min(args.rows, start + 1000))])
            _, got = q.commit_reserve(None, n=1000)
            q.commit_many(got)
    churn_s = time.perf_counter() - t
    s1 = sizes(d, dsn)
    _push_ready(dsn, SMALL, prefix="r1-")
    after = consume(dsn, args.sample)
    return {
        "before": before,
        "after": after,
        "churned": args.rows,
        "churn_seconds": round(churn_s, 1),
        "sizes_before": s0,
        "sizes_after_churn": s1,
        "sizes_end": sizes(d, dsn),
        "ratio": round(after["rate"] / before["rate"], 3) if before["rate"] else None,
    }


def cycles(dsn: str, n: int, prefix: str, seconds: float) -> dict[str, float]:
    """Up to n producer/consumer cycles on one connection (at least 3, then until `seconds` have
    passed): push 1 ready message (priority 0), reserve it (n=1), commit it. Rate in cycles/s and
    the median time of the reserve alone."""
    with pyqueue_sql.connect(dsn) as db:
        q = db.queue(QUEUE)
        reserve_s = []
        start = time.perf_counter()
        for i in range(n):
            if i >= 3 and time.perf_counter() - start > seconds:
                n = i
                break
            q.push(f"{prefix}{i}", "job", {"n": i}, priority=0)
            t = time.perf_counter()
            got = q.reserve(worker="scale")
            reserve_s.append(time.perf_counter() - t)
            if not got or got[0].key != f"{prefix}{i}":
                raise AssertionError(f"the reserve did not return the one ready message: {got}")
            q.commit(got[0])
        elapsed = time.perf_counter() - start
    return {
        "cycles": n,
        "seconds": round(elapsed, 3),
        "rate": round(n / elapsed, 1),
        "reserve_median_ms": round(1000 * statistics.median(reserve_s), 3),
    }


def run_priorities(d: str, dsn: str, args) -> dict:
    n, cap = min(args.sample, 1000), args.cycle_seconds
    a1 = cycles(dsn, n, "a1-", cap)
    fill(d, dsn, args.priorities, "p", delayed=True, distinct_priorities=True)
    b1 = cycles(dsn, n, "b1-", cap)
    b2 = cycles(dsn, n, "b2-", cap)
    remove(d, dsn, "p")
    a2 = cycles(dsn, n, "a2-", cap)
    reserve_small = (a1["reserve_median_ms"] + a2["reserve_median_ms"]) / 2
    reserve_big = (b1["reserve_median_ms"] + b2["reserve_median_ms"]) / 2
    return {
        "delayed_distinct_priorities": args.priorities,
        "without": [a1, a2],
        "with": [b1, b2],
        "ratio": _ratio([b1, b2], [a1, a2]),
        "reserve_ms_without": round(reserve_small, 3),
        "reserve_ms_with": round(reserve_big, 3),
    }


def run_batches(d: str, dsn: str, args) -> dict:
    """One call of each batch routine per size, --batch-repeats times (the fastest counts). Once
    a call takes longer than --batch-call-limit seconds, the larger sizes are left out (a
    routine that is not linear would take hours at 100k)."""
    out: dict[str, dict] = {}
    left_out: list[int] = []
    with pyqueue_sql.connect(dsn) as db:
        q = db.queue(QUEUE)
        for size in args.batch_sizes:
            if left_out or (
                out and max(out[max(out, key=int)].values()) * size / 10_000 / 1000 > args.batch_call_limit
            ):
                left_out.append(size)
                continue
            best: dict[str, float] = {}
            for rep in range(args.batch_repeats):
                msgs = [(f"s{size}-{rep}-{i}", "job", {"n": i}) for i in range(size)]
                analyze(d, dsn)
                t = time.perf_counter()
                pushed = q.push_many(msgs)
                t_push = time.perf_counter() - t
                t = time.perf_counter()
                got = q.reserve(size, worker="scale")
                t_reserve = time.perf_counter() - t
                t = time.perf_counter()
                committed = q.commit_many(got)
                t_commit = time.perf_counter() - t
                if pushed != size or len(got) != size or committed != size:
                    raise AssertionError(
                        f"batch of {size}: pushed {pushed}, reserved {len(got)}, committed {committed}"
                    )
                for name, secs in (
                    ("push_batch", t_push),
                    ("reserve_n", t_reserve),
                    ("commit_batch", t_commit),
                ):
                    best[name] = min(best.get(name, secs), secs)
                if max(t_push, t_reserve, t_commit) > args.batch_call_limit:
                    break  # no second repeat of a call this slow
            out[str(size)] = {name: round(secs * 10_000 / size * 1000, 1) for name, secs in best.items()}
            print(f"    batch {size}: ms per 10k rows {out[str(size)]}", flush=True)
    first, last = min(out, key=int), max(out, key=int)
    return {
        "ms_per_10k_rows": out,
        "left_out_sizes": left_out,
        "ratio_largest_to_smallest": {
            name: round(out[last][name] / out[first][name], 3) if out[first][name] else None
            for name in ("push_batch", "reserve_n", "commit_batch")
        },
    }


def _hold_read_view(d: str, dsn: str):
    """A REPEATABLE READ transaction that has read: the xmin horizon (MySQL: a read view) it holds
    until it is rolled back."""
    holder = common.raw_connect(d, dsn, autocommit=False)
    cur = holder.cursor()
    cur.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ")
    if d != "postgresql":
        cur.execute("START TRANSACTION WITH CONSISTENT SNAPSHOT")
    cur.execute("SELECT COUNT(*) FROM pyqueue_queue")
    cur.fetchall()
    return holder


def run_xmin(d: str, dsn: str, args) -> dict:
    hold = args.hold
    _push_ready(dsn, SMALL)
    s0 = sizes(d, dsn)
    before = consume(dsn, args.sample)
    _push_ready(dsn, SMALL, prefix="h")
    holder = _hold_read_view(d, dsn)
    windows = []
    t = time.perf_counter()
    k = 0
    with pyqueue_sql.connect(dsn) as db:
        q = db.queue(QUEUE)
        held = None
        while time.perf_counter() - t < hold:
            w0 = time.perf_counter()
            n = 0
            while time.perf_counter() - w0 < min(15.0, hold / 4):
                q.push_many([(f"w{k}-{i}", "job", {"n": i}) for i in range(100)])
                k += 1
                for _ in range(100):
                    _, got = q.commit_reserve(held, worker="scale")
                    if held is not None:
                        n += 1
                    held = got[0] if got else None
            windows.append(
                {"at_s": round(time.perf_counter() - t, 1), "rate": round(n / (time.perf_counter() - w0), 1)}
            )
            print(f"    xmin held {windows[-1]}", flush=True)
        if held is not None:
            q.commit(held)
    s_held = sizes(d, dsn)
    holder.rollback()
    holder.close()
    if d == "postgresql":
        common.execute(d, dsn, "VACUUM pyqueue_message")
    after = consume(dsn, args.sample)
    return {
        "before": before,
        "windows_while_held": windows,
        "after_release": after,
        "sizes_before": s0,
        "sizes_while_held": s_held,
        "sizes_after_release": sizes(d, dsn),
        "ratio": round(windows[-1]["rate"] / before["rate"], 3) if before["rate"] else None,
    }


def run_xmin_run(d: str, dsn: str, args) -> dict:
    with pyqueue_sql.connect(dsn) as db:
        pushed = db.queue(QUEUE).push_many([(f"r{i}", "job", {"n": i}) for i in range(args.run)])
    before = consume(dsn, args.sample)
    holder = _hold_read_view(d, dsn)
    windows = []
    t = time.perf_counter()
    while time.perf_counter() - t < args.hold:
        window = consume(dsn, args.run, seconds=min(15.0, args.hold / 4))
        windows.append({"at_s": round(time.perf_counter() - t, 1), "rate": window["rate"]})
        print(f"    xmin_run held {windows[-1]}", flush=True)
        if window["messages"] == 0:
            break  # the run is drained
    holder.rollback()
    holder.close()
    return {
        "run": pushed,
        "before": before,
        "windows_while_held": windows,
        "ratio": round(windows[-1]["rate"] / before["rate"], 3) if before["rate"] else None,
    }


SCENARIOS = {
    "delayed": lambda d, dsn, args: run_big(d, dsn, args, delayed=True),
    "backlog": lambda d, dsn, args: run_big(d, dsn, args, delayed=False),
    "churn": run_churn,
    "priorities": run_priorities,
    "batches": run_batches,
    "xmin": run_xmin,
    "xmin_run": run_xmin_run,
}


def _mb(b) -> str:
    return f"{b / 1e6:.1f} MB" if b is not None else "?"


def summary(out: dict) -> str:
    """The markdown table of one dialect's run: every scenario as a ratio to its small figure."""
    r, n, hold = out["results"], "{:,.0f}".format, f"{out['hold_seconds']:.0f} s"

    def vs(x: dict, big: str, small: str, unit: str = "msg/s") -> str:
        return f"{_mean_rate(*x[big]):,.0f} vs {_mean_rate(*x[small]):,.0f} {unit}"

    def held(x: dict) -> str:
        w = x["windows_while_held"]
        rates = ", ".join(str(round(v["rate"])) for v in w)
        return f"{w[-1]['rate']:,.0f} vs {x['before']['rate']:,.0f} msg/s (windows: {rates})"

    rows = {
        "delayed": lambda x: (
            f"{n(SMALL)} ready, with vs without {n(x['delayed'])} delayed",
            vs(x, "with", "without"),
        ),
        "backlog": lambda x: (f"{n(x['big_backlog'])} ready backlog vs {n(SMALL)}", vs(x, "big", "small")),
        "churn": lambda x: (
            f"after churning {n(x['churned'])} messages ({x['churn_seconds']} s) vs fresh",
            f"{x['after']['rate']:,.0f} vs {x['before']['rate']:,.0f} msg/s; table "
            f"{_mb(x['sizes_before']['table_bytes'])} -> {_mb(x['sizes_after_churn']['table_bytes'])}, indexes "
            f"{_mb(x['sizes_before']['indexes_bytes'])} -> {_mb(x['sizes_after_churn']['indexes_bytes'])}",
        ),
        "priorities": lambda x: (
            f"1 ready message below {n(x['delayed_distinct_priorities'])} delayed ones of distinct priorities vs "
            "none (push + reserve + commit cycles)",
            f"{vs(x, 'with', 'without', 'cycles/s')}; reserve {x['reserve_ms_with']} vs {x['reserve_ms_without']} ms",
        ),
        "xmin": lambda x: (
            f"a read view held for {hold} during a producer/consumer loop: last window vs before",
            held(x),
        ),
        "xmin_run": lambda x: (
            f"a read view held for {hold} while one client drains {x['run']:,} messages pushed in one call: "
            "last window vs before",
            held(x),
        ),
    }
    text = [
        f"### {out['dialect']} ({out['started']}, --rows {out['rows']:,}, --sample {out['sample']:,}, "
        f"load average {out['load'][0]:.1f} -> {out['load_after'][0]:.1f})",
        "",
        f"Command: `{out['command']}`",
        "",
        *common.table(
            ["scenario", "figures", "big / small"],
            [(*row(r[name]), f"**{r[name]['ratio']}**") for name, row in rows.items() if name in r],
        ),
    ]
    if "batches" in r:
        x = r["batches"]
        sizes = [(f"{int(size):,}", *v.values()) for size, v in x["ms_per_10k_rows"].items()]
        if x["left_out_sizes"]:
            sizes.append(
                (
                    ", ".join(f"{k:,}" for k in x["left_out_sizes"]),
                    "left out: a call took over --batch-call-limit",
                    "",
                    "",
                )
            )
        sizes.append(("largest / smallest", *(f"**{v}**" for v in x["ratio_largest_to_smallest"].values())))
        text += ["", "Batch routines, one call per batch: ms per 10k rows (flat = linear)", ""]
        text += common.table(["rows in the call", "push_batch", "reserve(n)", "commit_batch"], sizes, "rrrr")
    return "\n".join(text) + "\n"


def main(argv=None) -> int:
    ap = common.parser(
        __doc__,
        ("--dialects --dialect", "postgresql,mysql", "comma-separated"),
        ("--quick", False, "--rows 20000, --sample 500, --hold 10: a check that it runs"),
        ("--rows --big", 0, "the 'million' (default 1,000,000)"),
        ("--priorities", 100_000, "distinct priorities (capped at --rows)"),
        ("--sample", 0, "messages consumed per throughput figure (default 3000)"),
        ("--run", 200_000, "messages pushed in one call for xmin_run"),
        ("--hold", 0.0, "seconds the xmin horizon is held (default 120)"),
        ("--batch-sizes", ",".join(map(str, BATCH_SIZES)), "rows per batch call"),
        ("--batch-repeats", 2, "calls per batch size (the fastest counts)"),
        ("--batch-call-limit", 60.0, "seconds a batch call may take before larger sizes are left out"),
        ("--cycle-seconds", 30.0, "time cap of each priorities measurement"),
        ("--only", ",".join(SCENARIOS), "comma-separated, of: " + ", ".join(SCENARIOS)),
        (
            "--out",
            os.path.join(os.path.dirname(os.path.abspath(__file__)), "results"),
            "where the reports go",
        ),
    )
    args = ap.parse_args(argv)
    common.exit_on_sigterm()
    args.rows = args.rows or (20_000 if args.quick else 1_000_000)
    args.sample = args.sample or (500 if args.quick else 3000)
    if args.rows < SMALL + args.sample:
        ap.error(f"--rows must be at least {SMALL + args.sample:,} (the small queue plus a sample)")
    args.priorities, args.run = min(args.priorities, args.rows), min(args.run, args.rows)
    args.hold = args.hold or (10.0 if args.quick else 120.0)
    args.batch_sizes = [b for b in map(int, args.batch_sizes.split(",")) if b <= args.rows] or [args.rows]
    args.only = set(args.only.split(","))
    if args.only - set(SCENARIOS):
        ap.error(f"unknown scenarios {sorted(args.only - set(SCENARIOS))}; known: {', '.join(SCENARIOS)}")
    tables = []
    for d in [x for x in args.dialects.split(",") if x]:
        out = {"dialect": d, "rows": args.rows, "priorities": args.priorities, "sample": args.sample}
        out |= {"hold_seconds": args.hold, "command": common.command(), "started": common.now_utc()}
        out |= {"load": os.getloadavg(), "results": {}}
        t0 = time.time()
        for name in (name for name in SCENARIOS if name in args.only):
            print(f"[{time.time() - t0:6.0f}s] {d} {name} ...", flush=True)
            out["results"][name] = x = scenario(d, name, lambda dsn, fn=SCENARIOS[name]: fn(d, dsn, args))
            shown = {k: v for k, v in x.items() if k in ("ratio", "ratio_largest_to_smallest")}
            print(f"[{time.time() - t0:6.0f}s] {d} {name}: {json.dumps(shown)}", flush=True)
        out["seconds"], out["load_after"] = round(time.time() - t0, 1), os.getloadavg()
        tables.append(summary(out))
        stem = f"scale-{d}-{out['started'].replace(':', '')}"
        common.write(args.out, stem, tables[-1], out)
        print(f"wrote {args.out}/{stem}.json and .md")
    print("\n\n" + "\n".join(tables))
    return 0


def _push_ready(dsn: str, n: int, prefix: str = "r") -> None:
    with pyqueue_sql.connect(dsn) as db:
        q = db.queue(QUEUE)
        for start in range(0, n, 1000):
            q.push_many([(f"{prefix}{i}", "job", {"n": i}) for i in range(start, min(n, start + 1000))])


if __name__ == "__main__":
    sys.exit(main())
