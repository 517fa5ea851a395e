"""PostgreSQL live-table layouts, measured at the table level (no routine in the way).

    python bench/pg_layout.py [--rounds 12] [--batches 100] [--singles 400] [--out DIR]
    python bench/pg_layout.py --icu-locale en-US     # the database's default collation ICU en-US

In a fresh database with pyqueue-sql installed it builds copies of `pyqueue_message` (`LIKE ...
INCLUDING ALL EXCLUDING INDEXES`, the table's storage options, then each index from the catalog's
definition), each with one layout change, and times on one connection, in autocommit, the
statements the routines run against the live table, written as the routines write them
(`m.queue_name::text = $1`, the current time passed as a parameter):

- push 1: a single-row INSERT ... ON CONFLICT DO NOTHING (queue_push's statement; a small JSON
  payload);
- push 100: a 100-row INSERT ... SELECT FROM unnest(...) ON CONFLICT DO NOTHING, in key order
  (queue_push_batch's statement);
- claim 100: the reserve's locking read of the first 100 ready rows of priority 0 in ready-index
  order (FOR UPDATE SKIP LOCKED) and its UPDATE of those rows by ctid (scheduled_at moved 30 s
  ahead, attempts + 1, a new token), returning key, kind and token; one statement, the ctids
  collected by an ARRAY subquery (a Tid Scan, as the routine's UPDATE by its ctid array);
- delete 100: queue_commit_batch's DELETE (pyqueue__delete_held): the batch of keys, kinds and
  tokens unnested, sorted by key and joined to the table on (queue, key, kind, token).

Each copy is ANALYZEd (untimed) once it is filled, before the claims: without statistics the
planner may read the whole queue for the DELETE (the routine's function pins that plan with its
settings; here the statistics do). The plans of the claim and the DELETE are recorded per layout in
the JSON, and a plan that reads the table sequentially is reported on stderr.

Layouts (every pyqueue layout holds 4 queues of messages, so the leading column matters; their names
are 14-16 characters long):

  shipped            pyqueue_message as installed
  C keys             queue_name, p_key, p_kind and group_key COLLATE "C" (bytewise comparisons)
  queue id + C keys  a `queue_id integer` instead of queue_name in the table and every index, the
                     other key columns COLLATE "C"
  - due index        the shipped table without pyqueue_message_due_idx
  - group index      the shipped table without pyqueue_message_group_idx
  pgmq table         pgmq's queue table as the reference (msg_id bigint identity primary key,
                     read_ct, enqueued_at, last_read_at, vt, message jsonb, headers jsonb, an index
                     on vt), one table for all; its send, send_batch, read and delete
                     (msg_id = ANY) statements. The read locks the first 100 msg_ids with
                     vt <= now (ORDER BY msg_id, FOR UPDATE SKIP LOCKED) as pgmq.read does, and
                     updates them by msg_id = ANY (ARRAY(...)) rather than pgmq's join to a CTE,
                     which on a table this small picks a hash join over the whole table: both
                     sides then update by a direct probe, so the tables are what differs. No
                     dedup key: pgmq has none

What bytewise keys save depends on the database's default collation, the one the shipped columns
compare with: the server's default (often C.UTF-8 or en_US.UTF-8 from libc), or with --icu-locale a
database created with that ICU locale.

Rounds interleave the layouts in a rotating order; each layout is built fresh in every round. The
report gives each layout's median ms per statement (median of the per-round medians, and their
range) and the medians of its per-round ratios to `shipped` and to `pgmq table` (above 1.00 =
faster than that one). Results: <out>/pg_layout-<time>.{json,md} (default bench/results/).
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import re
import statistics
import sys
import time
import uuid

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from bench import common  # noqa: E402

# queue names of a common length (an integer id saves more, row and index width, the longer they are)
QUEUES = ("orders.created", "emails.outbound", "billing.invoices", "reports.nightly")
PAYLOAD = '{"n": 1, "s": "abc"}'
KEY_COLUMNS = ("queue_name", "p_key", "p_kind", "group_key")
OPS = ("push 1", "push 100", "claim 100", "delete 100", "claim+delete 100")
LAYOUTS = ("shipped", "C keys", "queue id + C keys", "- due index", "- group index", "pgmq table")


def catalog(conn) -> dict:
    """What the copies are made from: the installed table's indexes, storage options, key types."""
    cur = conn.cursor()
    cur.execute(
        "SELECT c.relname, pg_get_indexdef(i.indexrelid) FROM pg_index i"
        " JOIN pg_class c ON c.oid = i.indexrelid WHERE i.indrelid = 'pyqueue_message'::regclass"
        " ORDER BY c.relname"
    )
    indexes = dict(cur.fetchall())
    cur.execute("SELECT coalesce(reloptions, '{}') FROM pg_class WHERE oid = 'pyqueue_message'::regclass")
    options = cur.fetchone()[0]
    cur.execute(
        "SELECT attname, format_type(atttypid, atttypmod) FROM pg_attribute"
        " WHERE attrelid = 'pyqueue_message'::regclass AND attnum > 0 AND NOT attisdropped"
    )
    types = dict(cur.fetchall())
    return {"indexes": indexes, "options": options, "types": types}


def build(conn, cat: dict, name: str, table: str) -> None:
    cur = conn.cursor()
    if name == "pgmq table":
        cur.execute(
            f"CREATE TABLE {table} (msg_id bigint PRIMARY KEY GENERATED ALWAYS AS IDENTITY,"
            " read_ct int DEFAULT 0 NOT NULL, enqueued_at timestamptz DEFAULT now() NOT NULL,"
            " last_read_at timestamptz, vt timestamptz NOT NULL, message jsonb, headers jsonb)"
        )
        cur.execute(f"CREATE INDEX {table}_vt_idx ON {table} (vt ASC)")
        return
    queue_id = name == "queue id + C keys"
    first = "queue_id integer NOT NULL, " if queue_id else ""
    cur.execute(f"CREATE TABLE {table} ({first}LIKE pyqueue_message INCLUDING ALL EXCLUDING INDEXES)")
    if cat["options"]:
        cur.execute(f"ALTER TABLE {table} SET ({', '.join(cat['options'])})")
    if queue_id:
        cur.execute(f"ALTER TABLE {table} DROP COLUMN queue_name")
    if name in ("C keys", "queue id + C keys"):
        columns = [c for c in KEY_COLUMNS if not (queue_id and c == "queue_name")]
        cur.execute(
            f"ALTER TABLE {table} "
            + ", ".join(f'ALTER COLUMN {c} TYPE {cat["types"][c]} COLLATE "C"' for c in columns)
        )
    skip = {"- due index": "pyqueue_message_due_idx", "- group index": "pyqueue_message_group_idx"}.get(name)
    for index, definition in cat["indexes"].items():
        if index == skip:
            continue
        sql = definition.replace(
            f"INDEX {index} ON public.pyqueue_message", f"INDEX {table}_{index} ON {table}"
        )
        if queue_id:
            sql = re.sub(r"\bqueue_name\b", "queue_id", sql)
        cur.execute(sql)


def statements(name: str, table: str) -> dict[str, str]:
    """op -> SQL on that layout. Parameters: see measure()."""
    if name == "pgmq table":
        return {
            "push 1": f"INSERT INTO {table} (vt, message, headers) VALUES (%(now)s, %(payload)s::jsonb, NULL)"
            " RETURNING msg_id",
            "push 100": f"INSERT INTO {table} (vt, message, headers)"
            " SELECT %(now)s, unnest(%(payloads)s::jsonb[]), unnest(ARRAY[]::jsonb[]) RETURNING msg_id",
            "claim 100": f"UPDATE {table} m SET last_read_at = %(now)s, vt = %(until)s, read_ct = m.read_ct + 1"
            f" WHERE m.msg_id = ANY (ARRAY(SELECT msg_id FROM {table} WHERE vt <= %(now)s"
            " ORDER BY msg_id ASC LIMIT 100 FOR UPDATE SKIP LOCKED))"
            " RETURNING m.msg_id, m.read_ct, m.enqueued_at, m.last_read_at, m.vt, m.message, m.headers",
            "delete 100": f"DELETE FROM {table} WHERE msg_id = ANY(%(ids)s::bigint[]) RETURNING msg_id",
        }
    if name == "queue id + C keys":
        column, queue, cast = "queue_id", "%(queue)s::integer", "m.queue_id"
    else:
        column, queue, cast = "queue_name", "%(queue)s::text", "m.queue_name::text"
    columns = (
        f"({column}, p_key, p_kind, payload, priority, scheduled_at, scheduled_at_initially, created_at)"
    )
    return {
        "push 1": f"INSERT INTO {table} {columns}"
        " VALUES (%(queue)s, %(key)s, 'job', %(payload)s::jsonb, 0, %(now)s, %(now)s, %(now)s)"
        f" ON CONFLICT ({column}, p_key, p_kind) DO NOTHING",
        "push 100": f"INSERT INTO {table} {columns}"
        f" SELECT {queue}, b.k, b.kd, b.pl, 0, %(now)s, %(now)s, %(now)s"
        " FROM ROWS FROM (unnest(%(keys)s::text[]), unnest(%(kinds)s::text[]), unnest(%(payloads)s::jsonb[]))"
        " AS b (k, kd, pl) ORDER BY b.k, b.kd"
        f" ON CONFLICT ({column}, p_key, p_kind) DO NOTHING",
        "claim 100": f"UPDATE {table} m SET scheduled_at = %(until)s, attempts = m.attempts + 1,"
        f" reserve_token = gen_random_uuid() WHERE m.ctid = ANY (ARRAY(SELECT r.ctid FROM {table} r"
        f" WHERE {cast.replace('m.', 'r.')} = {queue} AND r.priority = 0 AND r.scheduled_at <= %(now)s"
        " ORDER BY r.scheduled_at, r.id LIMIT 100 FOR UPDATE SKIP LOCKED))"
        " RETURNING m.p_key, m.p_kind, m.reserve_token",
        "delete 100": f"DELETE FROM {table} m USING (SELECT {queue} AS q, u.k, u.kd, u.tk"
        " FROM ROWS FROM (unnest(%(keys)s::text[]), unnest(%(kinds)s::text[]), unnest(%(tokens)s::uuid[]))"
        " AS u (k, kd, tk) ORDER BY u.k, u.kd) AS b"
        f" WHERE {cast} = b.q AND m.p_key::text = b.k AND m.p_kind::text = b.kd AND m.reserve_token = b.tk",
    }


def queue_values(name: str) -> list:
    return list(range(len(QUEUES))) if name == "queue id + C keys" else list(QUEUES)


def plans(conn, name: str, sql: dict[str, str]) -> dict[str, str]:
    """EXPLAIN of the claim and the DELETE on the filled, analyzed copy (nothing is run)."""
    now = dt.datetime.now(dt.timezone.utc)
    params = {
        "queue": queue_values(name)[0],
        "now": now,
        "until": now,
        "keys": ["a", "b"],
        "kinds": ["job", "job"],
        "tokens": [uuid.uuid4(), uuid.uuid4()],
        "ids": [1, 2],
    }
    cur = conn.cursor()
    out = {}
    for op in ("claim 100", "delete 100"):
        cur.execute("EXPLAIN (COSTS OFF) " + sql[op], params)
        out[op] = "\n".join(row[0] for row in cur.fetchall())
        if "Seq Scan" in out[op]:
            print(
                f"warning: {name}, {op}: the plan reads the table sequentially:\n{out[op]}", file=sys.stderr
            )
    return out


def measure(
    conn, name: str, table: str, batches: int, singles: int, explain: dict | None
) -> dict[str, float]:
    """ms per statement (median) for each operation on one layout, in a fresh copy."""
    sql = statements(name, table)
    values = queue_values(name)
    cur = conn.cursor()
    times: dict[str, list[float]] = {op: [] for op in OPS}

    def timed(op: str, params: dict) -> list:
        started = time.perf_counter()
        cur.execute(sql[op], params)
        rows = cur.fetchall() if cur.description else []
        times[op].append(time.perf_counter() - started)
        return rows

    for i in range(singles):
        now = dt.datetime.now(dt.timezone.utc)
        timed(
            "push 1",
            {"queue": values[i % len(values)], "key": uuid.uuid4().hex, "payload": PAYLOAD, "now": now},
        )
    for i in range(batches):
        now = dt.datetime.now(dt.timezone.utc)
        keys = [uuid.uuid4().hex for _ in range(100)]
        params = {"queue": values[i % len(values)], "keys": keys, "kinds": ["job"] * 100, "now": now}
        params["payloads"] = [PAYLOAD] * 100
        timed("push 100", params)
    cur.execute(f"ANALYZE {table}")
    if explain is not None:
        explain[name] = plans(conn, name, sql)
    for i in range(batches):
        now = dt.datetime.now(dt.timezone.utc)
        queue = values[i % len(values)]
        started = time.perf_counter()
        claimed = timed("claim 100", {"queue": queue, "now": now, "until": now + dt.timedelta(seconds=30)})
        if not claimed:
            times["claim 100"].pop()
            continue
        if name == "pgmq table":
            timed("delete 100", {"ids": [row[0] for row in claimed]})
        else:
            keys, kinds, tokens = (list(column) for column in zip(*claimed))
            timed("delete 100", {"queue": queue, "keys": keys, "kinds": kinds, "tokens": tokens})
        times["claim+delete 100"].append(time.perf_counter() - started)
    return {op: statistics.median(t) * 1000 for op, t in times.items() if t}


def summarize(rounds: list[dict[str, dict[str, float]]]) -> dict[str, dict[str, dict]]:
    """layout -> op -> median ms, range, and the per-round ratios to shipped and to pgmq's table."""
    out: dict[str, dict[str, dict]] = {}
    for name in LAYOUTS:
        out[name] = {}
        for op in OPS:
            ms = [rnd[name][op] for rnd in rounds if op in rnd.get(name, {})]
            if not ms:
                continue
            cell: dict = {"ms": statistics.median(ms), "min": min(ms), "max": max(ms)}
            for ref in ("shipped", "pgmq table"):
                ratios = [
                    rnd[ref][op] / rnd[name][op] for rnd in rounds if op in rnd[name] and op in rnd[ref]
                ]
                if ratios:
                    cell[f"vs {ref}"] = (statistics.median(ratios), min(ratios), max(ratios))
            out[name][op] = cell
    return out


def markdown(summary: dict, meta: dict) -> str:
    def ratio(cell: dict, ref: str) -> str:
        median, lo, hi = cell[f"vs {ref}"]
        return f"{median:.2f} ({lo:.2f}-{hi:.2f})"

    lines = [
        f"`{meta['command']}`, {meta['started']}, {meta['rounds']} rounds, {meta['batches']} batches of 100 and "
        f"{meta['singles']} single pushes per layout and round, one connection, autocommit, PostgreSQL "
        f"{meta['server']}, database collation {meta['collation']}; load average "
        f"{meta['load_before'][0]:.1f} before, {meta['load_after'][0]:.1f} after.",
        "",
        "ms per statement: median of the per-round medians (range); vs shipped / vs pgmq table: median of the "
        "per-round ratios (range), above 1.00 = faster than that one.",
        "",
    ]
    for op in OPS:
        lines += [f"| {op} (PostgreSQL 15) | ms | vs shipped | vs pgmq table |", "|---|---|---|---|"]
        for name in LAYOUTS:
            cell = summary[name].get(op)
            if cell:
                lines.append(
                    f"| {name} | {cell['ms']:.3f} ({cell['min']:.3f}-{cell['max']:.3f}) | {ratio(cell, 'shipped')}"
                    f" | {ratio(cell, 'pgmq table')} |"
                )
        lines.append("")
    return "\n".join(lines)


def create_database(icu_locale: str | None) -> str:
    """The bench's own database (dropped by common.drop), with the server's default collation or an ICU one."""
    if icu_locale is None:
        return common.create("postgresql", "pglayout")
    if not re.fullmatch(r"[A-Za-z0-9_-]+", icu_locale):
        raise SystemExit(f"--icu-locale: not a locale name: {icu_locale!r}")
    name = f"pyqueue_bench_pglayout_{uuid.uuid4().hex[:8]}"
    admin = common.ADMIN["postgresql"]
    conn = common.raw_connect("postgresql", admin)
    try:
        conn.execute(
            f"CREATE DATABASE \"{name}\" TEMPLATE template0 LOCALE_PROVIDER icu ICU_LOCALE '{icu_locale}'"
            " LOCALE 'C.UTF-8'"
        )
    finally:
        conn.close()
    return common._replace_db(admin, name)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--rounds", type=int, default=12)
    parser.add_argument(
        "--batches", type=int, default=100, help="100-row pushes and 100-row claims per measurement"
    )
    parser.add_argument("--singles", type=int, default=400, help="single-row pushes per measurement")
    parser.add_argument(
        "--icu-locale",
        help="the database's default collation an ICU locale (e.g. en-US) instead of the server's default",
    )
    parser.add_argument("--out", default=os.path.join(os.path.dirname(os.path.abspath(__file__)), "results"))
    args = parser.parse_args(argv)
    common.exit_on_sigterm()
    started = dt.datetime.now(dt.timezone.utc)
    meta = {
        "command": " ".join(["python bench/pg_layout.py", *(sys.argv[1:] if argv is None else argv)]),
        "started": started.strftime("%Y-%m-%d %H:%M UTC"),
        "rounds": args.rounds,
        "batches": args.batches,
        "singles": args.singles,
        "load_before": os.getloadavg(),
    }
    dsn = create_database(args.icu_locale)
    rounds: list[dict[str, dict[str, float]]] = []
    explain: dict[str, dict[str, str]] = {}
    try:
        common.install_pyqueue(dsn)
        conn = common.raw_connect("postgresql", dsn)
        meta["server"] = conn.execute("SHOW server_version").fetchone()[0]
        meta["collation"] = conn.execute(
            "SELECT CASE datlocprovider WHEN 'i' THEN 'ICU ' || daticulocale ELSE 'libc ' || datcollate END"
            " FROM pg_database WHERE datname = current_database()"
        ).fetchone()[0]
        cat = catalog(conn)
        for r in range(args.rounds):
            order = LAYOUTS[r % len(LAYOUTS) :] + LAYOUTS[: r % len(LAYOUTS)]
            result = {}
            for name in order:
                table = f"layout_{LAYOUTS.index(name)}_{r}"
                build(conn, cat, name, table)
                result[name] = measure(
                    conn, name, table, args.batches, args.singles, explain if r == 0 else None
                )
                conn.execute(f"DROP TABLE {table}")
            rounds.append(result)
            print(f"round {r + 1}: " + json.dumps(result), file=sys.stderr, flush=True)
        conn.close()
    finally:
        common.drop("postgresql", dsn)
    meta["load_after"] = os.getloadavg()
    summary = summarize(rounds)
    text = markdown(summary, meta)
    os.makedirs(args.out, exist_ok=True)
    stem = os.path.join(args.out, "pg_layout-" + started.strftime("%Y-%m-%dT%H%M%SZ"))
    with open(stem + ".json", "w") as f:
        json.dump({**meta, "summary": summary, "rounds": rounds, "plans": explain}, f, indent=1)
    with open(stem + ".md", "w") as f:
        f.write(text)
    print(text)
    print(f"results: {stem}.json, {stem}.md")
    return 0


if __name__ == "__main__":
    sys.exit(main())
