"""MySQL/MariaDB: what each part of a single-message consume costs when consumers race.

    python bench/mysql_consume_cost.py [--rounds 2] [--messages 8000] [--clients 4]
    python bench/mysql_consume_cost.py --batch 100 --messages 60000   # reserve(100) + commit_batch

4 client processes (--clients) drain a backlog of 8,000 messages (--messages), one message at a
time (--batch: that many at a time), each with its own autocommit PyMySQL connection, in a fresh
database with pyqueue-sql installed. A consumer stops after 30 empty answers in a row; throughput
counts the messages it handed out. Variants, each on a backlog of its own, in rounds that rotate
their order:

- `hand-rolled`: the statements of bench.py's hand-rolled SKIP LOCKED queue on its own table
  (`SELECT ... LIMIT 1 FOR UPDATE SKIP LOCKED` + `UPDATE`, `COMMIT`; `DELETE`);
- `hand-rolled statements on pyqueue_message`: the same statements, sent the same way, on the live
  table (its ready index, priority 0; the `DELETE` by key, kind and token): what the table costs
  without the routines (a reference, not a bound: the routines run other statements);
- `statements in procedures`: the same statements on `pyqueue_message`, in two procedures
  (START TRANSACTION, the SKIP LOCKED read of priority 0, the UPDATE by id, COMMIT, the result
  row; one DELETE by key and token and its result row): what stored procedures cost by themselves;
- `+ settings read with MAX(priority)`: the first, plus the read a reserve starts with (queue row,
  limits, and the queue's top priority as MAX(priority));
- `+ settings read with a probe above 0`: the same with the top priority replaced by whether any
  message lies above priority 0 (what queue_reserve reads);
- `queue_reserve + queue_commit (CALL)`: the routines as shipped, plain CALLs;
- `Queue.reserve + Queue.commit`: the same through the Python client.

With --batch N the procedure variants (single messages by construction) are left out, and the
routines are `queue_reserve(n)` + `queue_commit_batch`.

Besides msg/s: the server's CPU time per message (mariadbd's user + system time over the drain,
read from /proc, so run it on a quiet machine) and the clients' own. Results: a Markdown table on
stdout and in bench/results/mysql_consume_cost-<time>.md (with --batch N:
mysql_consume_cost-batchN-<time>.md).
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import multiprocessing as mp
import os
import statistics
import sys
import time
import uuid

import pymysql

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from bench import common  # noqa: E402

QUEUE = "q"
TEXT = "CHARACTER SET utf8mb4 COLLATE utf8mb4_bin"
CLAIM = f"""
    DECLARE v_id BIGINT;
    DECLARE v_token CHAR(36) {TEXT};
    SET v_token = UUID();
    START TRANSACTION;
    SELECT id INTO v_id FROM pyqueue_message FORCE INDEX (pyqueue_message_ready_idx)
     WHERE queue_name = in_queue AND priority = 0 AND scheduled_at <= UTC_TIMESTAMP(6)
     ORDER BY scheduled_at, id LIMIT 1 FOR UPDATE SKIP LOCKED;
    UPDATE pyqueue_message
       SET scheduled_at = UTC_TIMESTAMP(6) + INTERVAL 300 SECOND, reserve_token = v_token,
           attempts = attempts + 1, reserved_by = 'w'
     WHERE id = v_id;
    COMMIT;
    SELECT p_key, p_kind, payload, reserve_token, priority, attempts, created_at, scheduled_at_initially
      FROM pyqueue_message WHERE id = v_id;"""
SETTINGS = f"""
    DECLARE v_found, v_max, v_top INT;
    DECLARE v_vis DECIMAL(20,6);
    DECLARE v_dlq VARCHAR(128) {TEXT};
    DECLARE v_paused, v_limited BOOLEAN;
    SELECT COUNT(*), MAX(q.visibility_timeout), MAX(q.max_attempts), MAX(q.dead_letter_queue), MAX(q.paused),
           EXISTS (SELECT 1 FROM pyqueue_limit l WHERE l.queue_name = in_queue), {{top}}
      INTO v_found, v_vis, v_max, v_dlq, v_paused, v_limited, v_top
      FROM pyqueue_queue q WHERE q.queue_name = in_queue;"""
TOP_MAX = "(SELECT MAX(m.priority) FROM pyqueue_message m WHERE m.queue_name = in_queue)"
TOP_PROBE = (
    "EXISTS (SELECT 1 FROM pyqueue_message m FORCE INDEX (pyqueue_message_ready_idx)"
    " WHERE m.queue_name = in_queue AND m.priority > 0)"
)


def _claim_procedure(name: str, settings: str = "") -> str:
    """CLAIM as a procedure; with settings, their declarations and read come first."""
    declare, read = (
        (settings.split("SELECT COUNT")[0], "SELECT COUNT" + settings.split("SELECT COUNT")[1])
        if settings
        else ("", "")
    )
    body = CLAIM.replace("DECLARE v_id BIGINT;", "DECLARE v_id BIGINT;" + declare).replace(
        "SET v_token = UUID();", read + "\n    SET v_token = UUID();"
    )
    return f"CREATE PROCEDURE {name}(IN in_queue VARCHAR(128) {TEXT}) BEGIN {body} END"


PROCEDURES = [
    _claim_procedure("bench_claim"),
    _claim_procedure("bench_claim_max", SETTINGS.format(top=TOP_MAX)),
    _claim_procedure("bench_claim_probe", SETTINGS.format(top=TOP_PROBE)),
    f"""CREATE PROCEDURE bench_commit(IN in_queue VARCHAR(128) {TEXT}, IN in_key VARCHAR(255) {TEXT},
        IN in_kind VARCHAR(128) {TEXT}, IN in_token CHAR(36) {TEXT})
    BEGIN
        DELETE FROM pyqueue_message
         WHERE queue_name = in_queue AND p_key = in_key AND p_kind = in_kind AND reserve_token = in_token;
        SELECT ROW_COUNT() AS committed;
    END""",
]
HAND = "hand-rolled statements on pyqueue_message"
VARIANTS = {
    "hand-rolled": None,
    HAND: "hand",
    "statements in procedures": "bench_claim",
    "+ settings read with MAX(priority)": "bench_claim_max",
    "+ settings read with a probe above 0": "bench_claim_probe",
    "queue_reserve + queue_commit (CALL)": "queue_reserve",
    "Queue.reserve + Queue.commit": "client",
}


def _rows(cur, sql: str, args=None) -> list:
    cur.execute(sql, args)
    rows = list(cur.fetchall()) if cur.description else []
    while cur.nextset():
        pass
    return rows


def _delete(cur, sql: str, args: tuple) -> None:
    """An autocommit DELETE of messages taken, sent again when chosen as a deadlock's victim."""
    for _ in range(10):
        try:
            cur.execute(sql, args)
            return
        except pymysql.err.OperationalError as exc:
            if exc.args[0] != 1213:
                raise
    raise RuntimeError("a DELETE was a deadlock's victim 10 times in a row")


def _consume(dsn: str, queue: str, variant: str, batch: int, start: mp.Barrier, out: mp.Queue) -> None:
    procedure = VARIANTS[variant]
    done = empty = 0
    if procedure == "client":
        import pyqueue_sql

        db = pyqueue_sql.connect(dsn)
        q = db.queue(queue)
        start.wait()
        began = time.process_time()
        while empty < 30:
            got = q.reserve(batch, worker="w")
            if not got:
                empty += 1
                continue
            if batch == 1:
                q.commit(got[0])
            else:
                q.commit_many(got)
            done, empty = done + len(got), 0
        out.put((done, time.process_time() - began))
        db.close()
        return
    conn = common.raw_connect("mysql", dsn, autocommit=True)
    cur = conn.cursor()
    if procedure in (None, "hand"):
        txn = common.raw_connect("mysql", dsn, autocommit=False)
        tcur = txn.cursor()

    def claim(token: str) -> list:
        """The locking read and the UPDATE of what it took, committed: the rows taken."""
        if procedure is None:
            tcur.execute(
                "SELECT id, payload FROM job WHERE run_at <= UTC_TIMESTAMP(6) ORDER BY run_at, id"
                f" LIMIT {batch} FOR UPDATE SKIP LOCKED"
            )
        else:
            tcur.execute(
                "SELECT id, payload, p_key FROM pyqueue_message FORCE INDEX (pyqueue_message_ready_idx)"
                " WHERE queue_name = %s AND priority = 0 AND scheduled_at <= UTC_TIMESTAMP(6)"
                f" ORDER BY scheduled_at, id LIMIT {batch} FOR UPDATE SKIP LOCKED",
                (queue,),
            )
        rows = list(tcur.fetchall())
        if rows:
            marks = ", ".join(["%s"] * len(rows))
            tcur.execute(
                f"UPDATE job SET run_at = UTC_TIMESTAMP(6) + INTERVAL 300 SECOND, token = %s WHERE id IN ({marks})"
                if procedure is None
                else "UPDATE pyqueue_message SET scheduled_at = UTC_TIMESTAMP(6) + INTERVAL 300 SECOND,"
                f" reserve_token = %s, attempts = attempts + 1, reserved_by = 'w' WHERE id IN ({marks})",
                (token, *(row[0] for row in rows)),
            )
        txn.commit()
        return rows

    start.wait()
    began = time.process_time()
    while empty < 30:
        if procedure in (None, "hand"):
            token = str(uuid.uuid4())
            try:
                rows = claim(token)
            except pymysql.err.OperationalError as exc:  # as bench.py: a deadlock takes nothing
                if exc.args[0] != 1213:
                    raise
                txn.rollback()
                continue
            ids = [row[0] for row in rows]
            marks = ", ".join(["%s"] * len(ids))
            if not ids:
                empty += 1
                continue
            if procedure is None:
                _delete(cur, f"DELETE FROM job WHERE token = %s AND id IN ({marks})", (token, *ids))
            else:
                _delete(
                    cur,
                    "DELETE FROM pyqueue_message WHERE queue_name = %s AND p_kind = 'job' AND reserve_token = %s"
                    f" AND p_key IN ({marks})",
                    (queue, token, *(row[2] for row in rows)),
                )
            done, empty = done + len(ids), 0
            continue
        if procedure == "queue_reserve" and batch > 1:
            rows = _rows(cur, "CALL queue_reserve(%s, 'w', NULL, %s, NULL)", (queue, batch))
            if not rows:
                empty += 1
                continue
            _rows(
                cur,
                "CALL queue_commit_batch(%s, %s, %s, %s)",
                (queue, *(json.dumps([row[i] for row in rows]) for i in (0, 1, 3))),
            )
            done, empty = done + len(rows), 0
            continue
        if procedure == "queue_reserve":
            rows = _rows(cur, "CALL queue_reserve(%s, 'w', NULL, 1, NULL)", (queue,))
        else:
            rows = _rows(cur, f"CALL {procedure}(%s)", (queue,))
        if not rows:
            empty += 1
            continue
        commit = "queue_commit" if procedure == "queue_reserve" else "bench_commit"
        _rows(cur, f"CALL {commit}(%s, %s, %s, %s)", (queue, rows[0][0], rows[0][1], rows[0][3]))
        done, empty = done + 1, 0
    out.put((done, time.process_time() - began))
    conn.close()


def _fill(dsn: str, variant: str, queue: str, n: int) -> None:
    conn = common.raw_connect("mysql", dsn)
    cur = conn.cursor()
    for start in range(0, n, 500):
        keys = range(start, min(n, start + 500))
        if VARIANTS[variant] is None:
            values = ", ".join(f"('k{i}', '{{\"n\": {i}}}')" for i in keys)
            cur.execute(f"INSERT IGNORE INTO job (msg_key, payload) VALUES {values}")
        else:
            batch = ", ".join(f'{{"p_key": "k{i}", "p_kind": "job", "payload": {{"n": {i}}}}}' for i in keys)
            _rows(cur, "CALL queue_push_batch(%s, %s, NULL, NULL, NULL, NULL)", (queue, f"[{batch}]"))
    conn.close()


def _drain(dsn: str, variant: str, queue: str, clients: int, batch: int) -> dict:
    start = mp.Barrier(clients + 1)
    out: mp.Queue = mp.Queue()
    procs = [
        mp.Process(target=_consume, args=(dsn, queue, variant, batch, start, out)) for _ in range(clients)
    ]
    pid = common.server_pid("mysql", dsn)
    for p in procs:
        p.start()
    cpu = common.server_cpu("mysql", pid)
    start.wait()
    began = time.perf_counter()
    results = [out.get(timeout=600) for _ in procs]
    wall = time.perf_counter() - began
    for p in procs:
        p.join(timeout=30)
    server = common.server_cpu("mysql", pid)
    done = sum(r[0] for r in results)
    return {
        "msg_s": done / wall,
        "server_us": (server - cpu) / done * 1e6 if cpu is not None and server is not None and done else None,
        "client_us": sum(r[1] for r in results) / done * 1e6 if done else None,
    }


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--messages", type=int, default=8000)
    parser.add_argument("--clients", type=int, default=4)
    parser.add_argument("--batch", type=int, default=1, help="messages per reserve and commit (default 1)")
    args = parser.parse_args(argv)
    if args.batch < 1:
        parser.error("--batch must be at least 1")
    variants = [
        v for v in VARIANTS if args.batch == 1 or VARIANTS[v] in (None, "hand", "queue_reserve", "client")
    ]
    common.exit_on_sigterm()
    dsn = common.create("mysql", "consume")
    stamp = dt.datetime.now(dt.timezone.utc)
    runs: dict[str, list[dict]] = {v: [] for v in variants}
    try:
        common.install_pyqueue(dsn)
        common.execute(
            "mysql",
            dsn,
            "CREATE TABLE job (id BIGINT AUTO_INCREMENT PRIMARY KEY, msg_key VARCHAR(255) NOT NULL, "
            "payload JSON NOT NULL, run_at DATETIME(6) NOT NULL DEFAULT (UTC_TIMESTAMP(6)), "
            "token CHAR(36) NULL, UNIQUE KEY job_key (msg_key), KEY job_ready (run_at, id)) ENGINE=InnoDB",
            *PROCEDURES,
        )
        names = variants
        for r in range(args.rounds):
            order = names[r % len(names) :] + names[: r % len(names)]
            for variant in order:
                queue = f"{QUEUE}{r}.{names.index(variant)}"
                if VARIANTS[variant] is not None:
                    common.execute("mysql", dsn, f"CALL queue_create('{queue}', NULL, NULL, NULL, NULL)")
                else:
                    common.execute("mysql", dsn, "TRUNCATE job")
                _fill(dsn, variant, queue, args.messages)
                run = _drain(dsn, variant, queue, args.clients, args.batch)
                runs[variant].append(run)
                print(f"round {r + 1} {variant}: {run['msg_s']:,.0f} msg/s", flush=True)
    finally:
        common.drop("mysql", dsn)

    def median(variant: str, key: str) -> str:
        values = [run[key] for run in runs[variant] if run[key] is not None]
        return f"{statistics.median(values):,.0f}" if values else "-"

    hand = [run["msg_s"] for run in runs["hand-rolled"]]
    lines = [
        f"Run {stamp:%Y-%m-%dT%H:%M:%SZ}: {args.clients} clients, {args.messages:,} messages, {args.rounds} round(s),"
        f" {args.batch} message(s) per reserve and commit; medians over the rounds.",
        "",
        "| variant | msg/s | vs hand-rolled | server CPU µs/msg | client CPU µs/msg |",
        "|---|---:|---:|---:|---:|",
    ]
    for variant in variants:
        ratio = statistics.median(run["msg_s"] / h for run, h in zip(runs[variant], hand))
        lines.append(
            f"| {variant} | {median(variant, 'msg_s')} | {ratio:.2f}x | {median(variant, 'server_us')}"
            f" | {median(variant, 'client_us')} |"
        )
    text = "\n".join(lines) + "\n"
    print("\n" + text)
    os.makedirs("bench/results", exist_ok=True)
    suffix = f"-batch{args.batch}" if args.batch > 1 else ""
    with open(f"bench/results/mysql_consume_cost{suffix}-{stamp:%Y-%m-%dT%H%M%SZ}.md", "w") as f:
        f.write(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
