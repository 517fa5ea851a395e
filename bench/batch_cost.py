"""Batch cost: the server CPU of a batch push row and of a batch drain row, the routines against pgmq
and plain statements on copies of the table; --dialects mysql: MariaDB's bulk enqueue; --sizes: the bulk
enqueue side by side. The variants and how to read the tables: bench/README.md, Batch cost."""

from __future__ import annotations

import contextlib
import functools
import json
import os
import re
import statistics
import time
import uuid
from contextlib import closing

import pyqueue_sql
from bench import common
from bench.bench import HandRolled

HERE = os.path.dirname(os.path.abspath(__file__))
QUEUE = "bench"
BATCH = 100

COLUMNS = "queue_name, p_key, p_kind, payload, priority, scheduled_at, scheduled_at_initially, created_at"
SELECT = "SELECT %s, k, 'job', p, 0, now(), now(), now() FROM unnest(%s::text[], %s::jsonb[]) AS u(k, p)"
# the routine's own INSERT (its first write): ids drawn in the batch's order, rows in key order
ROUTINE_INSERT = (
    "WITH b AS MATERIALIZED (SELECT u.k, u.p, nextval(%s::regclass) AS new_id "
    "FROM unnest(%s::text[], %s::jsonb[]) WITH ORDINALITY AS u(k, p, ord)) "
    "INSERT INTO {t} ({cols}, id) OVERRIDING SYSTEM VALUE "
    "SELECT DISTINCT ON (b.k) %s, b.k, 'job', b.p, 0, now(), now(), now(), b.new_id FROM b ORDER BY b.k, b.new_id"
)
QUEUE_ID = 1  # the integer queue id of the int copies' one queue
INT_QUEUE = (QUEUE_ID, "queue_id", "integer")  # the int copies' queue, its column and type
INT_COLUMNS = (COLUMNS.replace("queue_name", "queue_id"), QUEUE_ID)  # their INSERT's columns, queue


def setup(cur) -> None:
    """Copies of pyqueue_message: scratch_all (its columns, defaults, checks and indexes), scratch_int_narrow
    (an integer queue id for its name; the primary key and ready index only, serving the due index's reads)."""
    cur.execute("CREATE TABLE scratch_all (LIKE pyqueue_message INCLUDING ALL) WITH (fillfactor = 80)")
    name = "scratch_int_narrow"
    cur.execute(
        f"CREATE TABLE {name} (LIKE pyqueue_message INCLUDING DEFAULTS INCLUDING CONSTRAINTS "
        "INCLUDING IDENTITY INCLUDING STORAGE) WITH (fillfactor = 80)"
    )
    cur.execute(f"ALTER TABLE {name} DROP COLUMN queue_name, ADD COLUMN queue_id integer NOT NULL")
    cur.execute(f"ALTER TABLE {name} ADD PRIMARY KEY (queue_id, p_key, p_kind)")
    cur.execute("SELECT pg_get_indexdef('pyqueue_message_ready_idx'::regclass)")
    definition = re.sub(r"INDEX (\w+) ON \S+", f"INDEX {name}_ready_idx ON {name}", cur.fetchone()[0])
    cur.execute(definition.replace("(queue_name,", "(queue_id,"))


# the routine's table in the second database, whose due index is dropped
NODUE = "nodue:pyqueue_message"
# (name, what one call runs, the table to churn) of every variant (pgmq's where it installed)
VARIANTS = [
    ("routine", "queue_push_batch", "pyqueue_message"),
    ("pgmq send_batch", "pgmq.send_batch", f"pgmq.q_{QUEUE}"),
    ("copy: every index", "insert", "scratch_all"),
    ("copy: every index, the routine's INSERT (ids drawn, key order)", "insert_routine", "scratch_all"),
    ("copy: integer queue id, primary key + ready index only", "insert_int", "scratch_int_narrow"),
    ("routine, table without due_idx (a database of its own)", "queue_push_batch_nodue", NODUE),
]
# --sizes: the bulk enqueue's variants: the routine, its peer, the bare insert into the live table's copy
BULK_PG = ("routine", "pgmq send_batch", "copy: every index")
# The drain part: (name, how, table) of every variant.
DRAIN_VARIANTS = [
    ("routine: queue_reserve(100) + queue_commit_batch", "routine", "pyqueue_message"),
    ("pgmq read(100) + delete(ids)", "pgmq", f"pgmq.q_{QUEUE}"),
    ("bare UPDATE + DELETE: every index", "bare", "scratch_all"),
    ("bare UPDATE + DELETE: integer queue id, primary key + ready index only", "bare_int", "scratch_int_narrow"),
]  # fmt: skip


# {q}: the queue's column (queue_name, or queue_id on the int copies); the range is read from the
# fill's start (%s after the queue), as the routines read it from their bound (pyqueue_ready_from)
BARE_RESERVE = (
    "WITH c AS (SELECT ctid FROM {t} WHERE {q} = %s AND priority = 0 "
    "AND scheduled_at > '-infinity' AND scheduled_at >= %s AND scheduled_at <= now() "
    "ORDER BY priority, scheduled_at, id LIMIT 100 FOR UPDATE SKIP LOCKED) "
    "UPDATE {t} m SET scheduled_at = now() + interval '30 seconds', attempts = m.attempts + 1, "
    "reserved_by = 'bench', reserve_token = gen_random_uuid() FROM c WHERE m.ctid = c.ctid "
    "RETURNING m.p_key, m.p_kind, m.payload, m.reserve_token"
)
# the statement of the routines' own delete (pyqueue__delete_held): one probe of the key a row
BARE_COMMIT = (
    "DELETE FROM {t} m USING (SELECT %s::{qt} AS q, u.k, u.kd, u.tk "
    "FROM ROWS FROM (unnest(%s::text[]), unnest(%s::text[]), unnest(%s::uuid[])) AS u (k, kd, tk) "
    "ORDER BY u.k, u.kd) AS b "
    "WHERE m.{q}::{qt} = b.q AND m.p_key::text = b.k AND m.p_kind::text = b.kd AND m.reserve_token = b.tk"
)


def drain_once(cur, q, bare, how: str, table: str, since=None) -> int:
    """One call of the drain: up to 100 ready rows taken and acknowledged; how many."""
    if how == "routine":
        got = q.reserve(BATCH, worker="bench")
        if got:
            q.commit_many(got)
        return len(got)
    if how == "pgmq":
        cur.execute("SELECT msg_id, message FROM pgmq.read(%s::text, 30, 100)", (QUEUE,))
        ids = [r[0] for r in cur.fetchall()]
        if ids:
            cur.execute("SELECT * FROM pgmq.delete(%s::text, %s::bigint[])", (QUEUE, ids))
            cur.fetchall()
        return len(ids)
    queue, column, typ = INT_QUEUE if how == "bare_int" else (QUEUE, "queue_name", "text")
    bare.execute(BARE_RESERVE.format(t=table, q=column), (queue, since))
    rows = bare.fetchall()
    if rows:
        keys, kinds, tokens = ([r[i] for r in rows] for i in (0, 1, 3))
        bare.execute(BARE_COMMIT.format(t=table, q=column, qt=typ), (queue, keys, kinds, tokens))
    return len(rows)


def call(cur, q, how: str, table: str, keys: list[str], payloads: list[dict]) -> int:
    """One call of 100 rows; payloads as objects, each variant encoding them as its client would."""
    if how.startswith("queue_push_batch"):
        q.push_many([(k, "job", p) for k, p in zip(keys, payloads)])
        return len(keys)
    texts = [json.dumps(p) for p in payloads[: len(keys)]]
    cols, queue = INT_COLUMNS if how.startswith("insert_int") else (COLUMNS, QUEUE)
    if how == "pgmq.send_batch":
        cur.execute("SELECT pgmq.send_batch(%s, %s::jsonb[])", (QUEUE, texts))
    elif how == "insert_routine":
        # the id sequence looked up once a call, as the routine does
        cur.execute("SELECT pg_get_serial_sequence(%s, 'id')", (table,))
        (sequence,) = cur.fetchone()
        cur.execute(ROUTINE_INSERT.format(t=table, cols=COLUMNS), (sequence, keys, texts, QUEUE))
    else:
        cur.execute(f"INSERT INTO {table} ({cols}) " + SELECT, (queue, keys, texts))
    cur.fetchall() if cur.description else None
    return len(keys)


def _keys(calls: int, size: int = BATCH) -> list[list[str]]:
    """Random keys, as users' business keys are: each call's, drawn before the clock starts."""
    return [[uuid.uuid4().hex for _ in range(size)] for _ in range(calls)]


def _timed(on: tuple, rows: int, work) -> dict:
    """Per row of work() (`rows` rows): the CPU of the server process or thread on (or None), ours, wall."""
    s0, c0, t0 = common.process_cpu(*on), time.process_time(), time.perf_counter()
    if (done := work()) != rows:
        raise RuntimeError(f"batch-cost: {done} rows of {rows}")
    c1, s1 = time.process_time(), common.process_cpu(*on)
    wall = (time.perf_counter() - t0) / rows * 1e6
    server = None if s0 is None or s1 is None else (s1 - s0) / rows * 1e6
    return dict(server_us_per_row=server, client_us_per_row=(c1 - c0) / rows * 1e6, wall_us_per_row=wall)


def _connect(dsn: str):
    import psycopg

    return psycopg.connect(dsn, autocommit=True, prepare_threshold=None)


def _bulk(args, dsn: str, variants: list, keep: tuple) -> tuple[list, list, range]:
    """--previous-commit: its sql/ in the second database (dsn), whose variant ("name:..." table) is then its
    routine's; --sizes: the variants in keep and it. The variants, sizes, rounds (--sizes: from 0, untimed)."""
    second = next(v[2] for v in variants if ":" in v[2])
    if prev := args.previous_commit:
        common.install_commit("postgresql" if dsn.startswith("postgresql") else "mysql", dsn, prev)
        with pyqueue_sql.connect(dsn) as db:
            db.queue(QUEUE).create()
        variants = [(f"routine, sql/ of {prev}", *v[1:]) if v[2] == second else v for v in variants]
    sizes = [int(s) for s in args.sizes.split(",") if s]
    if sizes:
        variants = [v for v in variants if v[0] in keep or (prev and v[2] == second)]
    return variants, sizes, range(0 if sizes else 1, args.rounds + 1)


def run(args) -> tuple[list[dict], dict]:
    prev = args.previous_commit
    with (
        common.database("postgresql", "batchcost", QUEUE) as dsn,
        common.database("postgresql", "batchcost_nodue", QUEUE, install=not prev) as dsn_nodue,
        contextlib.ExitStack() as stack,
    ):
        has_pgmq = True
        try:
            common.install_pgmq(dsn, QUEUE)
        except Exception as exc:  # the peer is named NOT RUN in the report
            has_pgmq = False
            print(f"batch-cost: pgmq NOT RUN: {exc}", flush=True)
        conn, nodue_conn = (stack.enter_context(_connect(d)) for d in (dsn, dsn_nodue))
        cur, nodue = conn.cursor(), nodue_conn.cursor()
        setup(cur)
        todo = [v for v in VARIANTS if has_pgmq or not v[2].startswith("pgmq.")]
        todo, sizes, rounds = _bulk(args, dsn_nodue, todo, BULK_PG)
        query = "SELECT pg_backend_pid(), current_setting('autovacuum'), version()"
        pid, autovacuum, version = common.query(conn, query)[0]
        # the routine through the client on connections of its own, one to a database without the due index
        db, db_nodue = (stack.enter_context(pyqueue_sql.connect(d)) for d in (dsn, dsn_nodue))
        prev or nodue.execute("DROP INDEX pyqueue_message_due_idx")
        qs = {NODUE: db_nodue.queue(QUEUE), "": db.queue(QUEUE)}
        on = {"queue_push_batch": common.session_id("postgresql", db.connection)}
        on["queue_push_batch_nodue"] = common.session_id("postgresql", db_nodue.connection)
        meta = dict(command=common.command(), started=common.now_utc(), rounds=args.rounds, calls=args.calls)
        meta |= dict(batch=BATCH, load_before=common.loadavg(), autovacuum=autovacuum)
        meta |= dict(server=version.split(" on ")[0], pgmq=has_pgmq, sizes=sizes, previous_commit=prev)
        results: list[dict] = []
        payloads = [{"n": i, "body": "x" * 40} for i in range(max([BATCH, *sizes]))]
        for rnd, size in ((r, s) for r in rounds for s in sizes or [BATCH]):
            calls = max(1, args.calls * BATCH // size)
            for name, how, table in common.rotated(todo, rnd):
                q, batches = qs.get(table, qs[""]), _keys(calls, size)
                work = lambda: sum(call(cur, q, how, table, keys, payloads) for keys in batches)  # noqa: E731
                sample = _timed((on.get(how, pid),), calls * size, work)
                results.append({"round": rnd, "size": size, "variant": name, **sample})
            # the churn: every table emptied by DELETE, as consumers do (dead rows and index entries stay)
            for table in dict.fromkeys(t for _, _, t in todo if t):
                where = f" WHERE queue_name = '{QUEUE}'" if table.endswith("pyqueue_message") else ""
                (nodue if table == NODUE else cur).execute(f"DELETE FROM {table.split(':')[-1]}{where}")
            print(f"batch-cost: round {rnd} of {args.rounds} done ({size} a call)", flush=True)
        if not sizes:
            results += drain(args, conn, dsn, db, on["queue_push_batch"], has_pgmq, payloads)
        meta["load_after"] = common.loadavg()
        return results, meta


def drain(args, conn, dsn: str, db, q_pid: int, has_pgmq: bool, payloads: list[dict]) -> list[dict]:
    """The drain's rounds: each variant filled (untimed, by its own fastest path), then drained, timed."""
    # the bare statements' own session: plans by index, as the routines' (which set the same)
    with _connect(dsn) as bare_conn:
        bare = bare_conn.cursor()
        for setting in ("enable_seqscan", "enable_hashjoin", "enable_mergejoin", "enable_bitmapscan"):
            bare.execute(f"SET {setting} = off")
        on = {"bare": common.session_id("postgresql", bare_conn), "routine": q_pid}
        on["bare_int"], pid = on["bare"], common.session_id("postgresql", conn)
        fills = {"routine": "queue_push_batch", "pgmq": "pgmq.send_batch", "bare_int": "insert_int"}
        results, q, cur = [], db.queue(QUEUE), conn.cursor()
        todo = [v for v in DRAIN_VARIANTS if has_pgmq or v[1] != "pgmq"]
        for rnd in range(args.rounds):
            for name, how, table in common.rotated(todo, rnd):
                (since,) = common.query(conn, "SELECT now()")[0]
                for keys in _keys(args.calls):
                    call(cur, q, fills.get(how, "insert"), table, keys, payloads)
                once = functools.partial(drain_once, cur, q, bare, how, table, since)
                sample = _timed((on.get(how, pid),), args.calls * BATCH, lambda: sum(iter(once, 0)))
                results.append({"round": rnd + 1, "part": "drain", "variant": name, **sample})
            print(f"batch-cost: drain round {rnd + 1} of {args.rounds} done", flush=True)
    return results


def _table(results: list[dict], base: str, vs_name: str, vs) -> list[str]:
    """A row a variant: its server CPU, vs(name, its median, the base's median), client CPU, wall, a row."""
    med = {}
    for name in dict.fromkeys(r["variant"] for r in results):
        rs = [r for r in results if r["variant"] == name]
        server = [r["server_us_per_row"] for r in rs if r["server_us_per_row"] is not None]
        med[name] = (server, [r["client_us_per_row"] for r in rs], [r["wall_us_per_row"] for r in rs])
    b = statistics.median(med[base][0]) if base in med and med[base][0] else None
    rows = []
    for name, (server, client, wall) in med.items():
        s = statistics.median(server) if server else None
        rows.append([name, common.spread(server), vs(name, s, b), common.spread(client), common.spread(wall)])
    header = ["variant", "server CPU µs/row", vs_name, "client CPU µs/row", "wall µs/row"]
    return [*common.table(header, rows, "lrrrr"), ""]


def summarize(results: list[dict], meta: dict) -> str:
    drain = [r for r in results if r.get("part") == "drain"]
    results = [r for r in results if r.get("part") != "drain"]

    def copies(name, s, base):  # a copy's server CPU a row less the copy's with every index
        return f"{s - base:+.2f}" if s is not None and base is not None and name.startswith("copy:") else ""

    def x_pgmq(_name, s, base):  # the server CPU a row against pgmq's
        return f"{s / base:.2f}" if s is not None and base else ""

    lines = [
        "# Batch cost: where a row of a PostgreSQL batch push spends the server's time",
        "",
        f"Command: `{meta['command']}`; {meta['started']}, {meta['server']}, {meta['rounds']} round(s) of "
        f"{meta['calls']} calls of {meta['batch']} rows per variant on one connection, rounds interleaved, "
        f"the variants' order rotating; load average {meta['load_before']} before, {meta['load_after']} after. "
        "Per row, median over the rounds (min-max): server CPU of the connection's server process (/proc, "
        "10 ms ticks), client CPU of this process, wall. Every table churns, never vacuumed (autovacuum = "
        f"{meta['autovacuum']}); `vs every index`: a copy's server CPU less the copy's with every index. "
        "Method: bench/README.md, Batch cost.",
        "",
        *_table(results, "copy: every index", "vs every index", copies),
    ]
    if not meta.get("pgmq"):
        lines += ["- pgmq send_batch: NOT RUN (its PyPI package's SQL did not install here)", ""]
    if drain:
        lines += [
            "## Drain: a row taken (100 a call) and acknowledged",
            "",
            f"The same {meta['rounds']} round(s), each variant filled with {meta['calls']} x {meta['batch']} "
            "rows (untimed), then drained 100 a call; server CPU of the draining session, client CPU of this "
            "process, per row; `x pgmq`: the server CPU a row against pgmq's. Method: bench/README.md, Batch cost.",
            "",
            *_table(drain, "pgmq read(100) + delete(ids)", "x pgmq", x_pgmq),
        ]
    return "\n".join(lines)


# ---- MariaDB: bulk enqueue, 5,000 rows a call, against the plain job table ----

MY_BULK = 5000
MY_ROW = "(%s, %s, 'job', %s, 0, UTC_TIMESTAMP(6), UTC_TIMESTAMP(6), UTC_TIMESTAMP(6))"
SCRATCH_FK = "FOREIGN KEY (queue_name) REFERENCES pyqueue_queue (queue_name) ON DELETE CASCADE"
LEAN = "lean:pyqueue_message"  # the routine's table in a database of its own, with its key indexes only
DROP_SECONDARY = ", ".join(f"DROP INDEX pyqueue_message_{i}_idx" for i in ("ready", "due", "group"))


# (name, what one call runs, the table to churn) of every MariaDB variant
MY_VARIANTS = [
    ("routine: Queue.push_many (queue_push_batch)", "routine", "pyqueue_message"),
    ("routine, table with the primary key and the key index only (a database of its own)", "routine", LEAN),
    ("plain job table: multi-row INSERT IGNORE", "job", "job"),
    ("copy: every index and the foreign key, INSERT IGNORE", "insert_ignore", "scratch_all"),
]  # fmt: skip
# --sizes: the routine, the plain job table (the peer), the live table's copy (the bare insert)
BULK_MY = tuple(MY_VARIANTS[i][0] for i in (0, 2, 3))


def mysql_call(cur, q, how: str, table: str, keys: list[str], payloads: list[dict]) -> int:
    """One call of MY_BULK rows; payloads as objects, each variant encoding them as its client would."""
    texts = [json.dumps(p) for p in payloads[: len(keys)]]
    if how == "routine":
        q.push_many([(k, "job", p) for k, p in zip(keys, payloads)])
    elif how == "job":
        cur.execute(HandRolled("mysql").insert_sql(len(keys)), [v for kv in zip(keys, texts) for v in kv])
    else:  # the copy: a multi-row INSERT IGNORE
        cur.execute(
            f"INSERT IGNORE INTO {table} ({COLUMNS}) VALUES {', '.join([MY_ROW] * len(keys))}",
            [v for k, t in zip(keys, texts) for v in (QUEUE, k, t)],
        )
    return len(keys)


def run_mysql(args) -> tuple[list[dict], dict]:
    calls, prev = max(1, args.calls * BATCH // MY_BULK), args.previous_commit
    with (
        common.database("mysql", "batchcost", QUEUE) as dsn,
        common.database("mysql", "batchcost_lean", QUEUE, install=not prev) as dsn_lean,
        contextlib.ExitStack() as stack,
    ):
        server = common.server_pid("mysql", dsn)
        conn, lean_conn = (
            stack.enter_context(closing(common.raw_connect("mysql", d))) for d in (dsn, dsn_lean)
        )
        cur, lean = conn.cursor(), lean_conn.cursor()
        # the routines suite's plain job table, and the scratch copy (LIKE copies no foreign key: added)
        cur.execute(HandRolled.DDL["mysql"][0])
        cur.execute("CREATE TABLE scratch_all LIKE pyqueue_message")
        cur.execute(f"ALTER TABLE scratch_all ADD CONSTRAINT scratch_all_fk {SCRATCH_FK}")
        todo, sizes, rounds = _bulk(args, dsn_lean, MY_VARIANTS, BULK_MY)
        (version,) = common.query(conn, "SELECT VERSION()")[0]
        db, db_lean = (stack.enter_context(pyqueue_sql.connect(d)) for d in (dsn, dsn_lean))
        prev or lean.execute(f"ALTER TABLE pyqueue_message {DROP_SECONDARY}")
        # each variant timed by the server thread of the connection it runs on
        qs = {
            t: (d.queue(QUEUE), common.session_id("mysql", d.connection))
            for t, d in (("pyqueue_message", db), (LEAN, db_lean))
        }
        tid = common.session_id("mysql", conn)
        meta = dict(command=common.command(), started=common.now_utc(), rounds=args.rounds, calls=calls)
        meta |= dict(batch=MY_BULK, load_before=common.loadavg(), server=f"MariaDB {version}")
        meta |= dict(sizes=sizes, previous_commit=prev, thread_cpu=common.process_cpu(server, tid) is not None)  # fmt: skip
        results: list[dict] = []
        payloads = [{"n": i, "body": "x" * 40} for i in range(max([MY_BULK, *sizes]))]
        for rnd, size in ((r, s) for r in rounds for s in sizes or [MY_BULK]):
            calls = max(1, args.calls * BATCH // size)
            for name, how, table in common.rotated(todo, rnd):
                (q, on), batches = qs.get(table, (None, tid)), _keys(calls, size)
                work = lambda: sum(mysql_call(cur, q, how, table, keys, payloads) for keys in batches)  # noqa: E731
                sample = _timed((server, on), calls * size, work)
                results.append({"round": rnd, "size": size, "part": "mysql", "variant": name, **sample})
            # the churn: every table emptied by DELETE (InnoDB purges in the background)
            cur.execute("DELETE FROM pyqueue_message WHERE queue_name = %s", (QUEUE,))
            lean.execute("DELETE FROM pyqueue_message WHERE queue_name = %s", (QUEUE,))
            for table in dict.fromkeys(t for _, _, t in MY_VARIANTS if t.startswith(("scratch", "job"))):
                cur.execute(f"DELETE FROM {table}")
            print(f"batch-cost: MariaDB round {rnd} of {args.rounds} done ({size} a call)", flush=True)
        meta["load_after"] = common.loadavg()
        return results, meta


def summarize_mysql(results: list[dict], meta: dict) -> str:
    plain = "plain job table: multi-row INSERT IGNORE"
    plain_over = lambda _name, s, base: f"{base / s:.2f}" if s and base else ""  # noqa: E731
    return "\n".join([
        "# Batch cost, MariaDB: a row of a bulk enqueue against the plain job table",
        "",
        f"Command: `{meta['command']}`; {meta['started']}, {meta['server']}, {meta['rounds']} round(s) of "
        f"{meta['calls']} calls of {meta['batch']:,} rows per variant, rounds interleaved, the variants' order "
        f"rotating; load average {meta['load_before']} before, {meta['load_after']} after. Server CPU: the "
        "connection's server thread (`information_schema.PROCESSLIST.TID`, `/proc/<server>/task/<tid>`, "
        "10 ms ticks), per row, median over the rounds (min-max); `plain / this`: the plain job table's "
        "server CPU a row over this variant's (the bulk target's ratio, >= 0.5 for `push_many`); client CPU: "
        "this process's; wall: the client's clock. Method: bench/README.md, Batch cost.",
        "",
        *_table(results, plain, "plain / this", plain_over),
    ])  # fmt: skip


def summarize_bulk(results: list[dict], meta: dict, peer: str, bare: str) -> str:
    """--sizes: a row a size and variant: rows/s, the server's and the client's CPU a row, the ratios
    to the peer and to the bare insert (rate: this / base; server CPU: base / this)."""
    rows, by = [], {(r["size"], r["variant"], r["round"]): r for r in results if r["round"]}
    for size, name in dict.fromkeys((s, v) for s, v, _ in by):
        mine = [r for (s, v, _), r in by.items() if (s, v) == (size, name)]

        def x(base: str, key: str) -> str:
            pairs = [(by.get((size, base, r["round"]), {}).get(key), r[key]) for r in mine]
            return common.spread([b / t for b, t in pairs if b and t])

        rate = common.spread([1e6 / r["wall_us_per_row"] for r in mine], ".0f")
        server = common.spread([r["server_us_per_row"] for r in mine], ".1f")
        client = common.spread([r["client_us_per_row"] for r in mine], ".1f")
        w, c = "wall_us_per_row", "server_us_per_row"
        rows.append([f"{size:,}", name, rate, x(peer, w), x(bare, w), server, x(peer, c), x(bare, c), client])
    header = "a call|variant|rows/s|x peer|x bare|server µs/row|x peer|x bare|client µs/row".split("|")
    return "\n".join([
        f"# Bulk enqueue, {meta['server']}: push_many against {peer} (the peer) and {bare} (bare)", "",
        f"Command: `{meta['command']}`; {meta['started']}, load average {meta['load_before']} before, "
        f"{meta['load_after']} after; one connection a variant, {meta['rounds']} timed rounds after an untimed "
        "one (the churn: every table emptied by DELETE after each round, never vacuumed), the variants' order "
        "rotating, sizes interleaved. Medians (min-max) over the rounds; `x`: per-round ratios, rows/s this / "
        "base, server CPU base / this (above 1: better). Method: bench/README.md, Batch cost.", "",
        *common.table(header, rows, "llrrrrrrr"), ""])  # fmt: skip


def main() -> None:
    ap = common.parser(
        __doc__,
        ("--rounds", 7, "rounds, the variants' order rotating"),
        ("--calls", 300, "calls of 100 rows per variant and round"),
        ("--quick", False, "1 round of 20 calls; writes to bench/results/"),
        ("--dialects", "postgresql", "postgresql, mysql (the MariaDB bulk enqueue part), or both"),
        ("--out", None, "directory of batch-cost.md/.json (default bench/latest, --quick bench/results)"),
        ("--sizes", "", "bulk enqueue: rows a call (500,5000): the routine, its peer and the bare insert"),
        ("--previous-commit", None, "a commit whose sql/ runs beside (with --sizes: the routine's)"),
    )
    args = ap.parse_args()
    common.exit_on_sigterm()
    if args.quick:
        args.rounds, args.calls = 1, 20
    out = args.out or os.path.join(HERE, "results" if args.quick else "latest")
    parts = {
        "postgresql": ("batch-cost", run, summarize),
        "mysql": ("batch-cost-mysql", run_mysql, summarize_mysql),
    }
    if args.sizes:
        bulk = {"postgresql": (BULK_PG[1], BULK_PG[2]), "mysql": (BULK_MY[1], BULK_MY[2])}
        parts = {d: (f"{n}-bulk", r, functools.partial(summarize_bulk, peer=bulk[d][0], bare=bulk[d][1]))
                 for d, (n, r, _) in parts.items()}  # fmt: skip
    for name, runner, summary in (parts[d] for d in parts if d in args.dialects.split(",")):
        results, meta = runner(args)
        common.write(out, name, summary(results, meta), {"meta": meta, "results": results}, "batch-cost: ")


if __name__ == "__main__":
    main()
