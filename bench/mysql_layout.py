"""MySQL/MariaDB live-table layouts, measured at the table level (no routine in the way).

    python bench/mysql_layout.py [--rounds 5] [--batches 40] [--singles 400]

In a fresh database with pyqueue-sql installed it builds copies of `pyqueue_message`, each with
one layout change, and times on one connection, in autocommit, the statements the routines run
against the live table:

- push 1: a single-row INSERT IGNORE (the routine's statement, the payload a small JSON object);
- push 100: a 100-row INSERT IGNORE;
- claim+delete 100: the reserve's shape (a plain read of the first 100 ready ids in ready-index
  order, one UPDATE by id that moves scheduled_at and stamps the token) and the commit's (one
  DELETE by id of those rows).

Layouts: `shipped` (every index led by `queue_name VARCHAR(128) utf8mb4_bin`); `queue id` (a
`queue_id INT` in the table and in every index instead of the name); `- group index` and
`- due index` (the shipped table without that index). Every layout holds 4 queues of messages so
that the leading column matters. Rounds interleave the layouts in a rotating order; the report
gives each layout's median ms per statement and the median of its per-round ratios to `shipped`
(above 1.00 = faster). Results: bench/results/mysql_layout.json and the Markdown table on stdout.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
import uuid

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from bench import common  # noqa: E402
from pyqueue_sql import migrate  # noqa: E402

QUEUES = ("q0", "q1", "q2", "q3")
PAYLOAD = '{"n": 1, "s": "abc"}'


def layouts() -> dict[str, list[str]]:
    """name -> statements that turn a copy named {t} of pyqueue_message into that layout."""
    return {
        "shipped": [],
        "queue id": [
            "ALTER TABLE {t} ADD COLUMN queue_id INT NOT NULL DEFAULT 0 FIRST,"
            " DROP INDEX pyqueue_message_key_uk, DROP INDEX pyqueue_message_ready_idx,"
            " DROP INDEX pyqueue_message_due_idx, DROP INDEX pyqueue_message_group_idx,"
            " ADD UNIQUE KEY key_uk (queue_id, p_key, p_kind),"
            " ADD KEY ready_idx (queue_id, priority, scheduled_at, id),"
            " ADD KEY due_idx (queue_id, scheduled_at, id),"
            " ADD KEY group_idx (queue_id, group_key, scheduled_at_initially, id)",
        ],
        "- group index": ["ALTER TABLE {t} DROP INDEX pyqueue_message_group_idx"],
        "- due index": ["ALTER TABLE {t} DROP INDEX pyqueue_message_due_idx"],
    }


def queue_column(name: str) -> tuple[str, list]:
    """(the column that names the queue, the value for each of QUEUES) in that layout."""
    if name == "queue id":
        return "queue_id", list(range(len(QUEUES)))
    return "queue_name", list(QUEUES)


def build(conn, name: str, table: str) -> None:
    cur = conn.cursor()
    cur.execute(f"CREATE TABLE {table} LIKE pyqueue_message")
    for statement in layouts()[name]:
        cur.execute(statement.format(t=table))
    if name == "queue id":  # no queue_name in the table's place: it stays, unindexed, as a plain column
        cur.execute(f"ALTER TABLE {table} MODIFY queue_name VARCHAR(128) NULL")


def insert_rows(table: str, column: str, n: int) -> str:
    row = f"(%s, %s, 'k', '{PAYLOAD}', 0, UTC_TIMESTAMP(6), UTC_TIMESTAMP(6), UTC_TIMESTAMP(6), 0)"
    return (
        f"INSERT IGNORE INTO {table} ({column}, p_key, p_kind, payload, priority, scheduled_at,"
        f" scheduled_at_initially, created_at, attempts) VALUES " + ", ".join([row] * n)
    )


def measure(conn, name: str, table: str, batches: int, singles: int) -> dict[str, float]:
    """ms per statement for each operation on one layout."""
    column, values = queue_column(name)
    cur = conn.cursor()
    one, hundred = insert_rows(table, column, 1), insert_rows(table, column, 100)
    out: dict[str, list[float]] = {"push 1": [], "push 100": [], "claim+delete 100": []}
    for i in range(singles):
        started = time.perf_counter()
        cur.execute(one, (values[i % len(values)], uuid.uuid4().hex))
        out["push 1"].append(time.perf_counter() - started)
    for i in range(batches):
        params = []
        for _ in range(100):
            params += [values[i % len(values)], uuid.uuid4().hex]
        started = time.perf_counter()
        cur.execute(hundred, params)
        out["push 100"].append(time.perf_counter() - started)
    index = "ready_idx" if name == "queue id" else "pyqueue_message_ready_idx"
    for i in range(batches):
        queue = values[i % len(values)]
        started = time.perf_counter()
        cur.execute(
            f"SELECT id FROM {table} FORCE INDEX ({index}) WHERE {column} = %s AND priority = 0"
            " AND scheduled_at <= UTC_TIMESTAMP(6) ORDER BY scheduled_at, id LIMIT 100",
            (queue,),
        )
        ids = [row[0] for row in cur.fetchall()]
        if not ids:
            continue
        marks = ", ".join(["%s"] * len(ids))
        cur.execute(
            f"UPDATE {table} SET scheduled_at = UTC_TIMESTAMP(6) + INTERVAL 30 SECOND, attempts = attempts + 1,"
            f" reserve_token = UUID() WHERE id IN ({marks})",
            ids,
        )
        cur.execute(f"DELETE FROM {table} WHERE id IN ({marks})", ids)
        out["claim+delete 100"].append(time.perf_counter() - started)
    return {op: statistics.median(times) * 1000 for op, times in out.items() if times}


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--batches", type=int, default=40)
    parser.add_argument("--singles", type=int, default=400)
    args = parser.parse_args(argv)
    common.exit_on_sigterm()
    dsn = common.create("mysql", "layout")
    names = list(layouts())
    rounds: list[dict[str, dict[str, float]]] = []
    load = os.getloadavg()
    try:
        migrate.upgrade(dsn)
        conn = common.raw_connect("mysql", dsn)
        cur = conn.cursor()
        for q in QUEUES:
            cur.execute("CALL queue_create(%s, NULL, NULL, NULL, NULL)", (q,))
        for r in range(args.rounds):
            order = names[r % len(names) :] + names[: r % len(names)]
            result = {}
            for name in order:
                table = f"layout_{names.index(name)}_{r}"
                build(conn, name, table)
                result[name] = measure(conn, name, table, args.batches, args.singles)
                cur.execute(f"DROP TABLE {table}")
            rounds.append(result)
            print(f"round {r + 1}: " + json.dumps(result), file=sys.stderr)
        conn.close()
    finally:
        common.drop("mysql", dsn)
    ops = list(rounds[0]["shipped"])
    report = {
        "command": "python bench/mysql_layout.py " + " ".join(argv or sys.argv[1:]),
        "load_before": load,
        "load_after": os.getloadavg(),
        "rounds": rounds,
    }
    os.makedirs("bench/results", exist_ok=True)
    with open("bench/results/mysql_layout.json", "w") as f:
        json.dump(report, f, indent=1)
    print(f"| layout (MariaDB) | {' | '.join(f'{op}: ms, vs shipped' for op in ops)} |")
    print("|---" * (len(ops) + 1) + "|")
    for name in names:
        cells = []
        for op in ops:
            ms = statistics.median(rnd[name][op] for rnd in rounds)
            ratios = [rnd["shipped"][op] / rnd[name][op] for rnd in rounds]
            cells.append(
                f"{ms:.3f} ms, {statistics.median(ratios):.2f} ({min(ratios):.2f}-{max(ratios):.2f})"
            )
        print(f"| {name} | {' | '.join(cells)} |")
    print(f"load average before {load[0]:.1f}, after {os.getloadavg()[0]:.1f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
