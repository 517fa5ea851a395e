"""What a concurrency limit costs the reserve, as ratios measured side by side.

    python bench/limits_overhead.py --dsn postgresql://postgres@127.0.0.1/somedb
    python bench/limits_overhead.py --dsn mysql://root@127.0.0.1/somedb

The database must have the schema installed (pyqueue-sql migrate). Four queues
get the same messages; each round reserves 10 and commits them, on each queue
in turn (interleaved, so background noise hits all alike):

  none          no limit anywhere in the queue (the baseline)
  other-kind    the queue has a limit, but on a kind that is never reserved
  limited-free  the reserved kind has a limit that is never reached (10000)
  limited-full  the reserved kind has a limit of 5, half of each batch

Prints the median seconds per round and the ratio to the baseline.
"""

from __future__ import annotations

import argparse
import statistics
import time
import uuid

import pyqueue_sql


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--dsn", required=True)
    ap.add_argument("--rounds", type=int, default=300)
    ap.add_argument("--backlog", type=int, default=5000)
    args = ap.parse_args()
    db = pyqueue_sql.connect(args.dsn)
    tag = uuid.uuid4().hex[:8]
    setups = {
        "none": None,
        "other-kind": ("other", 5),
        "limited-free": ("job", 10000),
        "limited-full": ("job", 5),
    }
    queues = {}
    for name, limit in setups.items():
        q = db.queue(f"bench.{name}.{tag}").create(visibility_timeout=3600)
        for start in range(0, args.backlog, 1000):
            q.push_many(
                [(f"m{i:07d}", "job", {"i": i}) for i in range(start, min(args.backlog, start + 1000))]
            )
        if limit:
            q.set_limit(*limit)
        queues[name] = q
    times: dict[str, list[float]] = {name: [] for name in queues}
    try:
        for _ in range(args.rounds):
            for name, q in queues.items():
                t = time.perf_counter()
                got = q.reserve(n=10, worker="bench")
                for r in got:
                    q.commit(r)
                times[name].append(time.perf_counter() - t)
                if len(got) == 0:
                    raise SystemExit(f"{name}: backlog exhausted; raise --backlog")
        base = statistics.median(times["none"])
        print(f"{db.dialect.name}: median seconds per round (reserve 10 + commit each), {args.rounds} rounds")
        for name, ts in times.items():
            med = statistics.median(ts)
            print(f"  {name:13s} {med * 1000:8.3f} ms   x{med / base:5.2f}")
    finally:
        for q in queues.values():
            q.drop()
        db.close()


if __name__ == "__main__":
    main()
