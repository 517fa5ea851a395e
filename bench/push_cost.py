"""What each part of the live table costs a single-row push.

    python bench/push_cost.py                                  # both dialects, 3 rounds, 10,000 pushes
    python bench/push_cost.py --messages 2000 --rounds 2 --dialects mysql

In a fresh database with pyqueue-sql installed, copies of pyqueue_message are made, each with one
feature removed (or one added), and the same single-row autocommit INSERT of a small JSON payload
is timed into each, by 4 client processes (--clients) connected before a barrier, as in bench.py.
The variants run interleaved in rounds (their order rotates), and each is reported as msg/s
(median, range) and as the median of its per-round ratios to the full copy:

  full copy            every index, check and foreign key of pyqueue_message, its table options, a
                       JSON payload column; INSERT ... ON CONFLICT DO NOTHING / INSERT IGNORE
  - index <name>       the same without that index (each secondary index; on PostgreSQL also the
                       primary key, which is the dedup key)
  - foreign key        without the foreign key to pyqueue_queue
  - JSON parsing       the payload column as text (no parsing or validation of the JSON)
  bare table           no secondary index, no foreign key, text payload: the floor
  + queue row lock     the INSERT reads and locks the queue's row in the same statement (PostgreSQL
                       FOR KEY SHARE in a CTE; MySQL INSERT ... SELECT ... LOCK IN SHARE MODE), as
                       a push that checks its queue exists and holds it does
  routine variants     the full INSERT inside a PL/pgSQL function / stored procedure: as
                       SECURITY INVOKER, SECURITY DEFINER, SECURITY DEFINER SET search_path FROM
                       CURRENT (PostgreSQL; the shipped attributes), with the queue row lock
                       (PostgreSQL) or read (MySQL, as its pyqueue__queue does), and on PostgreSQL
                       with the queue's shared advisory lock and a plain read of the row instead
                       (what queue_push takes at READ COMMITTED)
  queue_push           the routine as shipped (the queue's own table), for reference

Nothing here changes the product: the copies live in the bench's own database, which is dropped at
the end. The copies are made from the installed table (LIKE, and the catalog's foreign keys and
table options), so they follow schema changes.
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

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from bench import bench as B  # noqa: E402
from bench import common  # noqa: E402

QUEUE = "pushcost"
COLS = "(queue_name, p_key, p_kind, payload, priority, scheduled_at, scheduled_at_initially, created_at)"


class Variant(B.System):
    """A single-row push into one table with one statement (sql) taking (queue, key, payload)."""

    role = "variant"
    table = "pyqueue_message"
    sql = ""
    params = "qkp"  # the order of queue (q), key (k) and payload (p) in sql's placeholders
    drain = False  # CALL: read every result set

    def reset(self, dsn: str) -> None:
        common.execute(
            self.dialect, dsn, f"DELETE FROM {self.table}" if self.drain else f"TRUNCATE {self.table}"
        )

    def open(self, dsn: str) -> None:
        self.conn = common.raw_connect(self.dialect, dsn, autocommit=True)

    def push(self, key: str, i: int) -> None:
        values = {"q": QUEUE, "k": key, "p": json.dumps({"n": i, "kind": "bench"})}
        cur = self.conn.cursor()
        cur.execute(self.sql, [values[c] for c in self.params])
        if self.drain:
            while cur.nextset():
                pass


def _variant(name: str, table: str, sql: str, params: str = "qkp", drain: bool = False) -> type[Variant]:
    return type(
        name, (Variant,), {"name": name, "table": table, "sql": sql, "params": params, "drain": drain}
    )


# ---------------------------------------------------------------------------
# PostgreSQL
# ---------------------------------------------------------------------------


def _pg_copy(
    dsn: str, table: str, drop_index: str | None = None, fk: bool = True, text: bool = False
) -> None:
    d = "postgresql"
    common.execute(d, dsn, f"CREATE TABLE {table} (LIKE pyqueue_message INCLUDING ALL)")
    opts = common.execute(
        d,
        dsn,
        "SELECT array_to_string(reloptions, ', ') FROM pg_class WHERE oid = 'pyqueue_message'::regclass",
    )
    if opts and opts[0][0]:
        common.execute(d, dsn, f"ALTER TABLE {table} SET ({opts[0][0]})")
    if fk:
        for (definition,) in common.execute(
            d,
            dsn,
            "SELECT pg_get_constraintdef(oid) FROM pg_constraint WHERE conrelid = 'pyqueue_message'::regclass AND contype = 'f'",
        ):
            common.execute(d, dsn, f"ALTER TABLE {table} ADD {definition}")
    if drop_index is not None:
        common.execute(d, dsn, *_pg_drop_index(dsn, table, drop_index))
    if text:
        common.execute(d, dsn, f"ALTER TABLE {table} ALTER COLUMN payload TYPE text")


def _pg_indexes(dsn: str, table: str) -> list[tuple[str, str, bool]]:
    """(index name, its definition without the name, is it the primary key) of a table."""
    rows = common.execute(
        "postgresql",
        dsn,
        "SELECT c.relname, pg_get_indexdef(i.indexrelid), i.indisprimary FROM pg_index i "
        f"JOIN pg_class c ON c.oid = i.indexrelid WHERE i.indrelid = '{table}'::regclass ORDER BY c.relname",
    )
    return [(n, re.sub(r"^.* USING ", "USING ", definition), bool(p)) for n, definition, p in rows]


def _pg_drop_index(dsn: str, table: str, original: str) -> list[str]:
    """The statements that drop from the copy the index that mirrors the original's index `original`."""
    wanted = dict((n, (df, p)) for n, df, p in _pg_indexes(dsn, "pyqueue_message"))[original]
    for name, definition, primary in _pg_indexes(dsn, table):
        if (definition, primary) == wanted:
            if primary:
                con = common.execute(
                    "postgresql",
                    dsn,
                    f"SELECT conname FROM pg_constraint WHERE conindid = '{name}'::regclass",
                )[0][0]
                return [f"ALTER TABLE {table} DROP CONSTRAINT {con}"]
            return [f"DROP INDEX {name}"]
    raise RuntimeError(f"no copy of index {original} on {table}")


def _pg_insert(table: str) -> str:
    return (
        f"INSERT INTO {table} {COLS} VALUES (%s, %s, 'job', %s, 0, clock_timestamp(), clock_timestamp(), "
        "clock_timestamp()) ON CONFLICT DO NOTHING"
    )


PG_LOCKS = {
    None: "",
    "row": "PERFORM 1 FROM pyqueue_queue WHERE queue_name::text = in_queue FOR KEY SHARE;\n    ",
    # what queue_push takes at READ COMMITTED: an in-memory lock, then a plain read of the row
    "advisory": "PERFORM pg_advisory_xact_lock_shared(hashtext('pyqueue-sql queue'), hashtext(in_queue));\n    "
    "PERFORM 1 FROM pyqueue_queue WHERE queue_name::text = in_queue;\n    ",
}


def _pg_function(dsn: str, name: str, attributes: str, lock: str | None) -> None:
    take = PG_LOCKS[lock]
    common.execute(
        "postgresql",
        dsn,
        f"""CREATE FUNCTION {name}(in_queue text, in_key text, in_payload jsonb) RETURNS boolean
LANGUAGE plpgsql {attributes} AS $$
BEGIN
    {take}INSERT INTO pc_full {COLS}
    VALUES (in_queue, in_key, 'job', in_payload, 0, clock_timestamp(), clock_timestamp(), clock_timestamp())
    ON CONFLICT DO NOTHING;
    RETURN FOUND;
END $$""",
    )


def pg_variants(dsn: str) -> list[type[Variant]]:
    out = []
    _pg_copy(dsn, "pc_full")
    out.append(_variant("full copy", "pc_full", _pg_insert("pc_full")))
    for k, (index, _, primary) in enumerate(_pg_indexes(dsn, "pyqueue_message")):
        table = f"pc_noidx{k}"
        _pg_copy(dsn, table, drop_index=index)
        what = f"- index {index}" + (" (primary key: no dedup)" if primary else "")
        out.append(_variant(what, table, _pg_insert(table)))
    _pg_copy(dsn, "pc_nofk", fk=False)
    out.append(_variant("- foreign key", "pc_nofk", _pg_insert("pc_nofk")))
    _pg_copy(dsn, "pc_text", text=True)
    out.append(_variant("- JSON parsing (text payload)", "pc_text", _pg_insert("pc_text")))
    common.execute(
        "postgresql",
        dsn,
        "CREATE TABLE pc_bare (LIKE pyqueue_message INCLUDING DEFAULTS INCLUDING IDENTITY)",
        "ALTER TABLE pc_bare ALTER COLUMN payload TYPE text",
    )
    out.append(_variant("bare table (no index, no key, no FK, text)", "pc_bare", _pg_insert("pc_bare")))
    lock = (
        "WITH q AS (SELECT queue_name FROM pyqueue_queue WHERE queue_name = %s FOR KEY SHARE) "
        f"INSERT INTO pc_full {COLS} SELECT q.queue_name, %s, 'job', %s, 0, clock_timestamp(), "
        "clock_timestamp(), clock_timestamp() FROM q ON CONFLICT DO NOTHING"
    )
    out.append(_variant("+ queue row lock (FOR KEY SHARE)", "pc_full", lock))
    for name, attributes, with_lock, label in (
        ("pc_fn_invoker", "SECURITY INVOKER", None, "function, SECURITY INVOKER"),
        ("pc_fn_definer", "SECURITY DEFINER", None, "function, SECURITY DEFINER"),
        (
            "pc_fn_shipped",
            "SECURITY DEFINER SET search_path FROM CURRENT",
            None,
            "function, SECURITY DEFINER SET search_path FROM CURRENT",
        ),
        (
            "pc_fn_shipped_lock",
            "SECURITY DEFINER SET search_path FROM CURRENT",
            "row",
            "function as shipped + queue row lock (FOR KEY SHARE)",
        ),
        (
            "pc_fn_shipped_advisory",
            "SECURITY DEFINER SET search_path FROM CURRENT",
            "advisory",
            "function as shipped + queue advisory lock (shared) and row read",
        ),
    ):
        _pg_function(dsn, name, attributes, with_lock)
        out.append(_variant(label, "pc_full", f"SELECT {name}(%s, %s, %s)"))
    out.append(_variant("queue_push (as shipped)", "pyqueue_message", "SELECT queue_push(%s, %s, 'job', %s)"))
    return out


# ---------------------------------------------------------------------------
# MySQL / MariaDB
# ---------------------------------------------------------------------------


def _my_foreign_keys(dsn: str) -> list[str]:
    create = common.execute("mysql", dsn, "SHOW CREATE TABLE pyqueue_message")[0][1]
    return [
        re.sub(r"^CONSTRAINT `[^`]+` ", "", line.strip().rstrip(","))
        for line in create.splitlines()
        if "FOREIGN KEY" in line
    ]


def _my_copy(
    dsn: str, table: str, drop_index: str | None = None, fk: bool = True, text: bool = False
) -> None:
    d = "mysql"
    common.execute(d, dsn, f"CREATE TABLE {table} LIKE pyqueue_message")
    if drop_index is not None:
        common.execute(d, dsn, f"ALTER TABLE {table} DROP INDEX `{drop_index}`")
    if text:
        common.execute(d, dsn, f"ALTER TABLE {table} MODIFY payload LONGTEXT NOT NULL")
    if fk:
        for definition in _my_foreign_keys(dsn):
            common.execute(d, dsn, f"ALTER TABLE {table} ADD {definition}")


def _my_indexes(dsn: str) -> list[str]:
    rows = common.execute(
        "mysql",
        dsn,
        "SELECT DISTINCT index_name FROM information_schema.statistics WHERE table_schema = DATABASE() "
        "AND table_name = 'pyqueue_message' AND index_name <> 'PRIMARY' ORDER BY index_name",
    )
    return [r[0] for r in rows]


def _my_insert(table: str) -> str:
    return (
        f"INSERT IGNORE INTO {table} {COLS} VALUES (%s, %s, 'job', %s, 0, UTC_TIMESTAMP(6), "
        "UTC_TIMESTAMP(6), UTC_TIMESTAMP(6))"
    )


def _my_procedure(dsn: str, name: str, security: str, read: bool) -> None:
    take = (
        "SELECT COUNT(*), MAX(q.visibility_timeout) INTO v_found, v_vis FROM pyqueue_queue q "
        "WHERE q.queue_name = in_queue;\n    "
        if read
        else ""
    )
    common.execute(
        "mysql",
        dsn,
        f"""CREATE PROCEDURE {name}(
    IN in_queue LONGTEXT CHARACTER SET utf8mb4 COLLATE utf8mb4_bin,
    IN in_key LONGTEXT CHARACTER SET utf8mb4 COLLATE utf8mb4_bin,
    IN in_payload LONGTEXT CHARACTER SET utf8mb4)
SQL SECURITY {security}
BEGIN
    DECLARE v_found INT;
    DECLARE v_vis DECIMAL(20,6);
    {take}INSERT IGNORE INTO pc_full {COLS}
    VALUES (in_queue, in_key, 'job', in_payload, 0, UTC_TIMESTAMP(6), UTC_TIMESTAMP(6), UTC_TIMESTAMP(6));
    SELECT ROW_COUNT() AS inserted;
END""",
    )


def my_variants(dsn: str) -> list[type[Variant]]:
    out = []
    _my_copy(dsn, "pc_full")
    out.append(_variant("full copy", "pc_full", _my_insert("pc_full")))
    for k, index in enumerate(_my_indexes(dsn)):
        table = f"pc_noidx{k}"
        _my_copy(dsn, table, drop_index=index)
        out.append(_variant(f"- index {index}", table, _my_insert(table)))
    _my_copy(dsn, "pc_nofk", fk=False)
    out.append(_variant("- foreign key", "pc_nofk", _my_insert("pc_nofk")))
    _my_copy(dsn, "pc_text", text=True)
    out.append(_variant("- JSON validation (LONGTEXT payload)", "pc_text", _my_insert("pc_text")))
    _my_copy(dsn, "pc_bare", fk=False, text=True)
    for index in _my_indexes(dsn):
        common.execute("mysql", dsn, f"ALTER TABLE pc_bare DROP INDEX `{index}`")
    out.append(_variant("bare table (id only, no FK, LONGTEXT)", "pc_bare", _my_insert("pc_bare")))
    lock = (
        f"INSERT IGNORE INTO pc_full {COLS} SELECT q.queue_name, %s, 'job', %s, 0, UTC_TIMESTAMP(6), "
        "UTC_TIMESTAMP(6), UTC_TIMESTAMP(6) FROM pyqueue_queue q WHERE q.queue_name = %s LOCK IN SHARE MODE"
    )
    out.append(_variant("+ queue row lock (LOCK IN SHARE MODE)", "pc_full", lock, params="kpq"))
    for name, security, read, label in (
        ("pc_proc_invoker", "INVOKER", False, "procedure, SQL SECURITY INVOKER"),
        ("pc_proc_definer", "DEFINER", False, "procedure, SQL SECURITY DEFINER"),
        ("pc_proc_read", "DEFINER", True, "procedure, DEFINER + queue row read"),
    ):
        _my_procedure(dsn, name, security, read)
        out.append(_variant(label, "pc_full", f"CALL {name}(%s, %s, %s)", drain=True))
    out.append(
        _variant(
            "queue_push (as shipped)",
            "pyqueue_message",
            "CALL queue_push(%s, %s, 'job', %s, NULL, NULL)",
            drain=True,
        )
    )
    return out


# ---------------------------------------------------------------------------


def run_dialect(dialect: str, args) -> dict:
    import pyqueue_sql

    dsn = common.create(dialect, "pushcost")
    try:
        common.install_pyqueue(dsn)
        with pyqueue_sql.connect(dsn) as db:
            db.queue(QUEUE).create()
        variants = pg_variants(dsn) if dialect == "postgresql" else my_variants(dsn)
        rates: dict[str, dict[int, float]] = {v.name: {} for v in variants}
        errors: dict[str, str] = {}
        t0 = time.time()
        for rnd in range(args.rounds):
            order = variants[rnd % len(variants) :] + variants[: rnd % len(variants)]
            for v in order:
                r = B.measure(v, dialect, dsn, "push", args.clients, args.messages, args.cap)
                if r.get("rate"):
                    rates[v.name][rnd] = r["rate"]
                else:
                    errors[v.name] = r.get("error", "no rate")
                print(
                    f"[{time.time() - t0:5.0f}s] {dialect} round {rnd + 1} {v.name:58} {r.get('rate') or r}",
                    flush=True,
                )
    finally:
        common.drop(dialect, dsn)
    full = rates["full copy"]
    rows = []
    for name, v in rates.items():
        if not v:
            continue
        ratios = B._ratio(v, full)
        rows.append(
            {
                "variant": name,
                "median": statistics.median(v.values()),
                "min": min(v.values()),
                "max": max(v.values()),
                "vs_full": statistics.median(ratios) if ratios else None,
                "vs_full_range": (min(ratios), max(ratios)) if ratios else None,
            }
        )
    return {"dialect": dialect, "rows": rows, "errors": errors, "rates": rates}


def markdown(res: dict, meta: dict) -> str:
    out = [
        f"### {res['dialect']}: single-row pushes, {meta['clients']} clients, {meta['messages']:,} per "
        f"measurement, {meta['rounds']} round(s) ({meta['started']}, load {meta['load'][0]:.1f})",
        "",
        "| variant | msg/s (median) | range | vs full copy |",
        "|---|---:|---|---|",
    ]
    for r in res["rows"]:
        vs = ""
        if r["vs_full"] is not None:
            lo, hi = r["vs_full_range"]
            vs = f"{r['vs_full']:.2f}" + (f" ({lo:.2f}-{hi:.2f})" if meta["rounds"] > 1 else "")
        out.append(f"| {r['variant']} | {r['median']:,.0f} | {r['min']:,.0f}-{r['max']:,.0f} | {vs} |")
    if res["errors"]:
        out += ["", *[f"- {k}: {v}" for k, v in res["errors"].items()]]
    return "\n".join(out) + "\n"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--dialects", default="postgresql,mysql")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--messages", type=int, default=10000, help="pushes per measurement")
    ap.add_argument("--clients", type=int, default=4)
    ap.add_argument("--cap", type=float, default=5.0, help="time cap per measurement in seconds")
    ap.add_argument("--out", default=os.path.join(os.path.dirname(os.path.abspath(__file__)), "results"))
    args = ap.parse_args(argv)
    common.exit_on_sigterm()
    meta = {
        "started": dt.datetime.now(dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
        "clients": args.clients,
        "messages": args.messages,
        "rounds": args.rounds,
        "load": os.getloadavg(),
    }
    tables, results = [], []
    for dialect in [d for d in args.dialects.split(",") if d]:
        res = run_dialect(dialect, args)
        results.append(res)
        tables.append(markdown(res, meta))
    os.makedirs(args.out, exist_ok=True)
    stem = os.path.join(args.out, "push_cost-" + meta["started"].replace(":", ""))
    with open(stem + ".json", "w") as f:
        json.dump({"meta": meta, "results": results}, f, indent=1)
    with open(stem + ".md", "w") as f:
        f.write("\n".join(tables))
    print()
    print("\n".join(tables))
    print(f"wrote {stem}.md and .json")
    return 0


if __name__ == "__main__":
    sys.exit(main())
