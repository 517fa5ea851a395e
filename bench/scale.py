"""Scale measurements: does the reserve stay fast at a million messages?

    python bench/scale.py                       # PostgreSQL, full sizes (~10 min)
    python bench/scale.py --quick               # 100k instead of 1M, 20 s xmin hold
    python bench/scale.py --dialect mysql

Each scenario runs in its own fresh database (created here, dropped at the
end). Throughput = messages consumed one at a time with queue_commit_reserve
(commit the previous, reserve the next: one call per message) by one client
over a fixed number of messages (--sample, 3000). Each comparison measures
its own baseline in the same database, before and after the change, and
reports the ratio of the means, so a loaded machine shifts both sides alike:

  delayed     10k ready, with vs without 1M delayed messages (run_at tomorrow)
  backlog     a 1M ready backlog vs a 10k one (the first messages drained)
  churn       after 1M messages went through the queue (batch push 1000,
              batch reserve 1000, batch commit), 10k ready again; table and
              index sizes before and after
  xmin        a REPEATABLE READ transaction holds the xmin horizon (MySQL:
              a read view) while a producer/consumer loop runs for 2 minutes;
              throughput per window, sizes before/after, and after release

Large fills use one INSERT ... SELECT (the state is what matters, not how it
got there); the churn goes through the contract routines.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import pyqueue_sql  # noqa: E402
from bench import _dbs  # noqa: E402

QUEUE = "scale"

_DIGITS = (
    "(SELECT 0 AS d UNION ALL SELECT 1 UNION ALL SELECT 2 UNION ALL SELECT 3 UNION ALL SELECT 4 "
    "UNION ALL SELECT 5 UNION ALL SELECT 6 UNION ALL SELECT 7 UNION ALL SELECT 8 UNION ALL SELECT 9)"
)


def _seq_mysql(n: int) -> str:
    digits = len(str(n - 1))
    cols = " + ".join(f"t{k}.d * {10**k}" for k in range(digits))
    tables = ", ".join(f"{_DIGITS} t{k}" for k in range(digits))
    return f"SELECT {cols} AS i FROM {tables} HAVING i < {n}"


def fill(dialect: str, dsn: str, n: int, prefix: str, delayed: bool) -> None:
    """n messages in one statement: ready (scheduled in the past, FIFO by i) or delayed to tomorrow."""
    if dialect == "postgresql":
        at = "now() + interval '1 day'" if delayed else "now() - interval '1 hour' + i * interval '1 us'"
        _dbs.execute(
            dialect,
            dsn,
            "INSERT INTO pyqueue_message (queue_name, p_key, p_kind, payload, priority, scheduled_at, "
            "scheduled_at_initially, created_at) "
            f"SELECT '{QUEUE}', '{prefix}' || i, 'job', '{{\"n\": 1}}', 0, {at}, {at}, now() "
            f"FROM generate_series(1, {n}) AS i",
            "VACUUM ANALYZE pyqueue_message",
        )
    else:
        at = (
            "UTC_TIMESTAMP(6) + INTERVAL 1 DAY"
            if delayed
            else "UTC_TIMESTAMP(6) - INTERVAL 1 HOUR + INTERVAL s.i MICROSECOND"
        )
        _dbs.execute(
            dialect,
            dsn,
            "INSERT INTO pyqueue_message (queue_name, p_key, p_kind, payload, priority, scheduled_at, "
            "scheduled_at_initially, created_at) "
            f"SELECT '{QUEUE}', CONCAT('{prefix}', s.i), 'job', '{{\"n\": 1}}', 0, {at}, {at}, "
            f"UTC_TIMESTAMP(6) FROM ({_seq_mysql(n)}) AS s",
            "ANALYZE TABLE pyqueue_message",
        )


def sizes(dialect: str, dsn: str) -> dict[str, int]:
    if dialect == "postgresql":
        rows = _dbs.execute(
            dialect,
            dsn,
            "SELECT pg_relation_size('pyqueue_message'), "
            "pg_indexes_size('pyqueue_message'), "
            "pg_relation_size('pyqueue_message_ready_idx'), "
            "pg_relation_size('pyqueue_message_pkey'), "
            "(SELECT n_live_tup FROM pg_stat_user_tables WHERE relname = 'pyqueue_message'), "
            "(SELECT n_dead_tup FROM pg_stat_user_tables WHERE relname = 'pyqueue_message')",
        )
        t, i, r, p, live, dead = rows[0]
        return {
            "table_bytes": t,
            "indexes_bytes": i,
            "ready_idx_bytes": r,
            "pkey_bytes": p,
            "live_tuples": live,
            "dead_tuples": dead,
        }
    _dbs.execute(dialect, dsn, "ANALYZE TABLE pyqueue_message")
    rows = _dbs.execute(
        dialect,
        dsn,
        "SELECT data_length, index_length, data_free, table_rows FROM information_schema.tables "
        "WHERE table_schema = DATABASE() AND table_name = 'pyqueue_message'",
    )
    t, i, free, live = rows[0]
    hist = _dbs.execute(
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


def fresh(dialect: str, tag: str) -> str:
    dsn = _dbs.create(dialect, tag)
    _dbs.install_pyqueue(dsn)
    with pyqueue_sql.connect(dsn) as db:
        db.queue(QUEUE).create(visibility_timeout=300)
    return dsn


def scenario(dialect: str, tag: str, fn) -> dict:
    dsn = fresh(dialect, tag)
    try:
        return fn(dsn)
    finally:
        _dbs.drop(dialect, dsn)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--dialect", default="postgresql", choices=("postgresql", "mysql"))
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--big", type=int, default=None, help="the 'million' (default 1,000,000; quick 100,000)")
    ap.add_argument("--sample", type=int, default=3000, help="messages consumed per throughput figure")
    ap.add_argument("--hold", type=float, default=None, help="seconds the xmin horizon is held (default 120)")
    ap.add_argument("--only", default="delayed,backlog,churn,xmin")
    ap.add_argument("--out", default=os.path.join(os.path.dirname(os.path.abspath(__file__)), "results"))
    args = ap.parse_args(argv)
    big = args.big or (100_000 if args.quick else 1_000_000)
    hold = args.hold or (20.0 if args.quick else 120.0)
    d = args.dialect
    only = set(args.only.split(","))
    out: dict = {
        "dialect": d,
        "big": big,
        "sample": args.sample,
        "hold_seconds": hold,
        "started": dt.datetime.now(dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
        "results": {},
    }
    res = out["results"]
    t0 = time.time()

    def log(name):
        print(f"[{time.time() - t0:6.0f}s] {name}: {json.dumps(res[name])}", flush=True)

    # Each comparison measures its baseline in the same database, before and
    # after, so that a loaded machine shifts both sides alike.
    if "delayed" in only:

        def delayed(dsn):
            fill(d, dsn, 10_000, "r", delayed=False)
            a1 = consume(dsn, args.sample)
            fill(d, dsn, big, "d", delayed=True)
            _push_ready(dsn, args.sample, prefix="t1-")
            b1 = consume(dsn, args.sample)
            sz = sizes(d, dsn)
            _push_ready(dsn, args.sample, prefix="t2-")
            b2 = consume(dsn, args.sample)
            _dbs.execute(
                d,
                dsn,
                "DELETE FROM pyqueue_message WHERE p_key LIKE 'd%'",
                "VACUUM ANALYZE pyqueue_message" if d == "postgresql" else "ANALYZE TABLE pyqueue_message",
            )
            _push_ready(dsn, args.sample, prefix="t3-")
            a2 = consume(dsn, args.sample)
            base = (a1["rate"] + a2["rate"]) / 2
            with_delayed = (b1["rate"] + b2["rate"]) / 2
            return {
                "ready": 10_000,
                "delayed": big,
                "without": [a1, a2],
                "with": [b1, b2],
                "sizes": sz,
                "ratio": round(with_delayed / base, 3),
            }

        res["delayed"] = scenario(d, "delayed", delayed)
        log("delayed")
    if "backlog" in only:

        def backlog(dsn):
            fill(d, dsn, 10_000, "r", delayed=False)
            a1 = consume(dsn, args.sample)
            fill(d, dsn, big - 10_000 + args.sample, "b", delayed=False)
            b1 = consume(dsn, args.sample)
            sz = sizes(d, dsn)
            b2 = consume(dsn, args.sample)
            _dbs.execute(
                d,
                dsn,
                "DELETE FROM pyqueue_message WHERE p_key LIKE 'b%'",
                "VACUUM ANALYZE pyqueue_message" if d == "postgresql" else "ANALYZE TABLE pyqueue_message",
            )
            _push_ready(dsn, args.sample, prefix="t3-")
            a2 = consume(dsn, args.sample)
            base = (a1["rate"] + a2["rate"]) / 2
            return {
                "small_backlog": 10_000,
                "big_backlog": big,
                "small": [a1, a2],
                "big": [b1, b2],
                "sizes": sz,
                "ratio": round((b1["rate"] + b2["rate"]) / 2 / base, 3),
            }

        res["backlog"] = scenario(d, "backlog", backlog)
        log("backlog")
    if "churn" in only:

        def churn(dsn):
            fill(d, dsn, 10_000, "r0", delayed=False)
            before = consume(dsn, args.sample)
            s0 = sizes(d, dsn)
            t = time.perf_counter()
            with pyqueue_sql.connect(dsn) as db:
                q = db.queue(QUEUE)
                # drain what is left, then push/take/commit `big` messages in batches of 1000
                while True:
                    _, got = q.commit_reserve(None, n=1000)
                    if not got:
                        break
                    q.commit_many(got)
                for start in range(0, big, 1000):
                    q.push_many([(f"c{i}", "job", {"n": i}) for i in range(start, min(big, start + 1000))])
                    _, got = q.commit_reserve(None, n=1000)
                    q.commit_many(got)
            churn_s = time.perf_counter() - t
            s1 = sizes(d, dsn)
            _push_ready(dsn, 10_000, prefix="r1-")
            after = consume(dsn, args.sample)
            return {
                "before": before,
                "after": after,
                "churned": big,
                "churn_seconds": round(churn_s, 1),
                "sizes_before": s0,
                "sizes_after_churn": s1,
                "sizes_end": sizes(d, dsn),
                "vs_fresh": round(after["rate"] / before["rate"], 3),
            }

        res["churn"] = scenario(d, "churn", churn)
        log("churn")
    if "xmin" in only:

        def xmin(dsn):
            _push_ready(dsn, 10_000)
            s0 = sizes(d, dsn)
            before = consume(dsn, args.sample)
            _push_ready(dsn, 10_000, prefix="h")
            holder = _dbs.raw_connect(d, dsn, autocommit=False)
            cur = holder.cursor()
            if d == "postgresql":
                cur.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ")
            else:
                cur.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ")
                cur.execute("START TRANSACTION WITH CONSISTENT SNAPSHOT")
            cur.execute("SELECT COUNT(*) FROM pyqueue_queue")
            cur.fetchall()
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
                        {
                            "at_s": round(time.perf_counter() - t, 1),
                            "rate": round(n / (time.perf_counter() - w0), 1),
                        }
                    )
                    print(f"    xmin held {windows[-1]}", flush=True)
                if held is not None:
                    q.commit(held)
            s_held = sizes(d, dsn)
            holder.rollback()
            holder.close()
            if d == "postgresql":
                _dbs.execute(d, dsn, "VACUUM pyqueue_message")
            after = consume(dsn, args.sample)
            return {
                "before": before,
                "windows_while_held": windows,
                "after_release": after,
                "sizes_before": s0,
                "sizes_while_held": s_held,
                "sizes_after_release": sizes(d, dsn),
                "last_window_vs_before": round(windows[-1]["rate"] / before["rate"], 3),
            }

        res["xmin"] = scenario(d, "xmin", xmin)
        log("xmin")
    out["seconds"] = round(time.time() - t0, 1)
    os.makedirs(args.out, exist_ok=True)
    path = os.path.join(args.out, f"scale-{d}-{out['started'].replace(':', '')}.json")
    with open(path, "w") as f:
        json.dump(out, f, indent=1)
    print(json.dumps(out, indent=1))
    print(f"wrote {path}")
    return 0


def _push_ready(dsn: str, n: int, prefix: str = "r") -> None:
    with pyqueue_sql.connect(dsn) as db:
        q = db.queue(QUEUE)
        for start in range(0, n, 1000):
            q.push_many([(f"{prefix}{i}", "job", {"n": i}) for i in range(start, min(n, start + 1000))])


if __name__ == "__main__":
    sys.exit(main())
