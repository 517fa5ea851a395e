"""What does keeping history cost a consumer? (both dialects)

Side by side in one run: the same messages are reserved and committed (and
popped) on a queue without history and on one with a history_retention, in
alternating rounds so that other load on the machine hits both alike. Prints
messages per second and the ratio with/without.

    .venv/bin/python bench/history_overhead.py postgresql://postgres@127.0.0.1/DB [n]
    .venv/bin/python bench/history_overhead.py mysql://root@127.0.0.1/DB [n]

The database must have the schema installed (pyqueue-sql migrate --dsn ...).
"""

from __future__ import annotations

import sys
import time
import uuid

import pyqueue_sql

DSN = sys.argv[1]
N = int(sys.argv[2]) if len(sys.argv) > 2 else 2000
ROUNDS = 4


def consume(q: pyqueue_sql.Queue, n: int) -> float:
    q.push_many([(f"m{i}", "job", {"i": i, "text": "x" * 100}) for i in range(n)])
    start = time.perf_counter()
    done = 0
    while done < n:
        batch = q.reserve(n=50)
        for r in batch:
            q.commit(r)
        done += len(batch)
    return time.perf_counter() - start


def pop(q: pyqueue_sql.Queue, n: int) -> float:
    q.push_many([(f"p{i}", "job", {"i": i}) for i in range(n)])
    start = time.perf_counter()
    done = 0
    while done < n:
        done += len(q.pop(100))
    return time.perf_counter() - start


def main() -> None:
    with pyqueue_sql.connect(DSN) as db:
        tag = uuid.uuid4().hex[:6]
        plain = db.queue(f"bench.plain.{tag}").create()
        kept = db.queue(f"bench.hist.{tag}").create(history_retention=3600)
        t = {("commit", "plain"): 0.0, ("commit", "kept"): 0.0, ("pop", "plain"): 0.0, ("pop", "kept"): 0.0}
        for _ in range(ROUNDS):
            for name, q in (("plain", plain), ("kept", kept)):
                t[("commit", name)] += consume(q, N // ROUNDS)
                t[("pop", name)] += pop(q, N // ROUNDS)
        for q in (plain, kept):
            q.drop()
        cur = db.connection.cursor()
        cur.execute("DELETE FROM pyqueue_history WHERE queue_name = %s", (kept.name,))
        cur.close()
    print(f"{db.dialect.name}: {N} messages, reserve(50)+commit each / pop(100)")
    for op in ("commit", "pop"):
        a, b = N / t[(op, "plain")], N / t[(op, "kept")]
        print(f"  {op:6}  no history {a:8.0f} msg/s   with history {b:8.0f} msg/s   ratio {b / a:.2f}")


if __name__ == "__main__":
    main()
