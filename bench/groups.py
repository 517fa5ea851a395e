"""What FIFO groups cost: push + reserve + commit on a group-less queue against queues whose
messages are spread over 1, 10 and 1,000 groups, interleaved in rounds, as ratios.

    python bench/groups.py                                   both dialects, 3 rounds (~5 min)
    python bench/groups.py --dialects mysql --rounds 1 --messages 1000 --cap 5   a quick check

Per dialect, a fresh database (bench/common.py: pyqueue_bench_groups_<random>, migrated, dropped at
the end). Each round runs every configuration on a fresh queue, in an order that rotates from round
to round; per configuration two phases, each with --clients processes (fork, own connection,
started together behind a barrier):

  push      the clients push their share of --messages one at a time (queue_push for the
            group-less queue, queue_push_grouped with message i in group i % G otherwise)
  consume   the clients reserve one message and commit it (queue_reserve n=1, queue_commit)
            until all are committed or --cap seconds passed

Throughput = messages done / (last client's end - first client's start). With one group the
consume phase is one message at a time whatever the number of clients (each waits for the
previous commit's promotion): that is the point of a group. The report gives per dialect and
configuration the median msg/s of each phase and of the two together (messages / sum of the two
phase times), and the median of the per-round ratios to the group-less queue. Written to
--out (default bench/results/) as groups-<dialect>-<time>.{md,json}.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import os
import statistics
import sys
import time
import uuid

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import pyqueue_sql  # noqa: E402
from bench import common  # noqa: E402
from pyqueue_sql import migrate  # noqa: E402

CONFIGS = {"no group": 0, "1 group": 1, "10 groups": 10, "1,000 groups": 1000}


def _client(kind, dsn, queue, share, groups, total, done, cap, barrier, out):
    db = pyqueue_sql.connect(dsn)
    q = db.queue(queue)
    barrier.wait()
    start = time.time()
    n = 0
    if kind == "push":
        for i in share:
            if groups:
                q.push(f"m{i:07d}", "job", {"i": i}, group=f"g{i % groups}")
            else:
                q.push(f"m{i:07d}", "job", {"i": i})
            n += 1
    else:
        while time.time() - start < cap:
            got = q.reserve(n=1, worker="bench", timeout=60)
            if not got:
                if done.value >= total:
                    break
                time.sleep(0.0005)
                continue
            if q.commit(got[0]):
                n += 1
                with done.get_lock():
                    done.value += 1
    out.put((n, start, time.time()))
    db.close()


def phase(kind, dsn, queue, messages, groups, clients, cap):
    ctx = mp.get_context("fork")
    barrier, out, done = ctx.Barrier(clients), ctx.Queue(), ctx.Value("i", 0)
    shares = [range(c, messages, clients) for c in range(clients)]
    procs = [
        ctx.Process(
            target=_client, args=(kind, dsn, queue, shares[c], groups, messages, done, cap, barrier, out)
        )
        for c in range(clients)
    ]
    for p in procs:
        p.start()
    results = [out.get(timeout=cap + 600) for _ in procs]
    for p in procs:
        p.join()
    n = sum(r[0] for r in results)
    seconds = max(r[2] for r in results) - min(r[1] for r in results)
    return n, seconds


def run_dialect(dialect, args):
    dsn = common.create(dialect, "groups")
    rows = []
    try:
        migrate.upgrade(dsn)
        db = pyqueue_sql.connect(dsn)
        names = list(CONFIGS)
        for round_ in range(args.rounds):
            order = names[round_ % len(names) :] + names[: round_ % len(names)]
            measured = {}
            for name in order:
                q = db.queue(f"bench.groups.{uuid.uuid4().hex[:8]}").create(visibility_timeout=60)
                pushed, push_s = phase(
                    "push", dsn, q.name, args.messages, CONFIGS[name], args.clients, args.cap
                )
                done, consume_s = phase(
                    "consume", dsn, q.name, args.messages, CONFIGS[name], args.clients, args.cap
                )
                measured[name] = {
                    "round": round_,
                    "config": name,
                    "groups": CONFIGS[name],
                    "pushed": pushed,
                    "push_msg_s": pushed / push_s,
                    "consumed": done,
                    "consume_msg_s": done / consume_s,
                    "total_msg_s": done / (push_s + consume_s),
                    "capped": done < pushed,
                }
                q.drop()
                print(
                    f"{dialect} round {round_ + 1} {name:>13}: push {measured[name]['push_msg_s']:8.0f} msg/s, "
                    f"consume {measured[name]['consume_msg_s']:8.0f} msg/s"
                    + (f" (capped: {done} of {pushed})" if done < pushed else ""),
                    flush=True,
                )
            base = measured["no group"]
            for m in measured.values():
                for what in ("push", "consume", "total"):
                    m[f"{what}_ratio"] = m[f"{what}_msg_s"] / base[f"{what}_msg_s"]
            rows += measured.values()
        db.close()
    finally:
        common.drop(dialect, dsn)
    return rows


def report(dialect, rows, args):
    lines = [
        f"## {dialect}: push + reserve + commit, {args.messages} messages, {args.clients} clients, "
        f"{args.rounds} round(s), cap {args.cap} s",
        "",
        "| queue | push msg/s | ratio | consume msg/s | ratio | push+consume msg/s | ratio |",
        "|---|---|---|---|---|---|---|",
    ]
    for name in CONFIGS:
        mine = [r for r in rows if r["config"] == name]
        cells = []
        for what in ("push", "consume", "total"):
            cells.append(f"{statistics.median(r[f'{what}_msg_s'] for r in mine):.0f}")
            cells.append(f"{statistics.median(r[f'{what}_ratio'] for r in mine):.2f}")
        capped = " (capped)" if any(r["capped"] for r in mine) else ""
        lines.append(f"| {name}{capped} | " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--dialects", default="postgresql,mysql")
    ap.add_argument("--messages", type=int, default=4000)
    ap.add_argument("--clients", type=int, default=4)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--cap", type=float, default=20.0, help="seconds at most per phase")
    ap.add_argument("--out", default=os.path.join(os.path.dirname(os.path.abspath(__file__)), "results"))
    args = ap.parse_args()
    common.exit_on_sigterm()
    os.makedirs(args.out, exist_ok=True)
    stamp = time.strftime("%Y%m%d-%H%M%S")
    for dialect in args.dialects.split(","):
        load_before = os.getloadavg()
        rows = run_dialect(dialect, args)
        text = report(dialect, rows, args) + f"\nload average before {load_before}, after {os.getloadavg()}\n"
        print(text)
        base = os.path.join(args.out, f"groups-{dialect}-{stamp}")
        with open(base + ".md", "w") as f:
            f.write(text)
        with open(base + ".json", "w") as f:
            json.dump({"args": vars(args), "rows": rows}, f, indent=1)


if __name__ == "__main__":
    main()
