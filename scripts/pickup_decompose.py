"""Where the pickup latency of a PostgreSQL Worker under a steady stream goes: the figures of
bench/latest/pickup-decompose-postgresql.md.

    PYTHONPATH=$PWD .venv/bin/python scripts/pickup_decompose.py [--rate 800 --batch 8 --seconds 15]

As `python -m bench latency --stream`: one producer session pushes no-op jobs (push_many of --batch) at
--rate a second into a fresh database; one Worker(concurrency=16) in a process of its own runs them.
The worker's reserve loop is traced (each wait: its start, end and how it ended; each notification;
each reserve: start, end, the keys it got; each handler start), and each job's enqueue -> handler
start is cut into:
  push      enqueue (the producer's clock before the call) -> the push call returned (its commit)
  to_reserve  the push returned -> the start of the reserve that got the job (the wait, or the round
            in flight when the push committed)
  reserve   that reserve's call
  to_start  the reserve returned -> the handler started
and each got-reserve is classed by what started it: a notification, a timed end of a wait (the
linger re-check, a due time, the poll), or no wait (the round after one that got messages).
"""

from __future__ import annotations

import argparse
import collections
import json
import multiprocessing
import statistics
import threading
import time

import pyqueue_sql
from bench import common


def worker_proc(dsn: str, queue: str, ready, stop, out, recheck: float | None = None) -> None:
    from pyqueue_sql.worker import dispatch

    if recheck is not None:
        dispatch.DRAINED_RECHECK = recheck

    trace: list[tuple] = []
    loop = dispatch.ReserveLoop
    orig_wait, orig_woken, orig_reserve = loop.wait_steps, loop.woken, loop.reserve_steps

    def wait_steps(self, timeout, settled_since=None, held=False):
        t0 = time.time()
        woke = yield from orig_wait(self, timeout, settled_since, held)
        trace.append(("wait", t0, time.time(), timeout, bool(woke), held))
        return woke

    def woken(self, channel, payload):
        trace.append(("note", time.time()))
        return orig_woken(self, channel, payload)

    def reserve_steps(self, route, n):
        t0 = time.time()
        before = len(keys_got)
        got = yield from orig_reserve(self, route, n)
        trace.append(("reserve", t0, time.time(), n, keys_got[before:]))
        return got

    keys_got: list[str] = []
    starts: dict[str, float] = {}
    orig_start = None

    loop.wait_steps, loop.woken, loop.reserve_steps = wait_steps, woken, reserve_steps
    from pyqueue_sql.worker import threaded

    orig_start = threaded.Worker._start_jobs

    def start_jobs(self, jobs):
        keys_got.extend(j.key for j in jobs)
        return orig_start(self, jobs)

    threaded.Worker._start_jobs = start_jobs

    def handler(job):
        starts[job.key] = time.time()

    worker = pyqueue_sql.Worker(dsn, concurrency=16)
    worker.add_handler(queue, handler)
    t = threading.Thread(target=worker.run, kwargs={"install_signals": False}, daemon=True)
    t.start()
    ready.set()
    stop.wait()
    worker.stop()
    t.join(timeout=60)
    out.put((trace, starts, worker.stats.wakeups))


def pct(values: list[float], p: int) -> float:
    if not values:
        return float("nan")
    return round(
        statistics.quantiles(values * (2 if len(values) == 1 else 1), n=100, method="inclusive")[p - 1], 2
    )


def measure(dsn: str, rate: float, batch: int, seconds: float, recheck: float | None = None) -> dict:
    db, mp = pyqueue_sql.connect(dsn), multiprocessing.get_context("spawn")
    q = db.queue("bench.stream").create()
    ready, stop, out = mp.Event(), mp.Event(), mp.Queue()
    proc = mp.Process(target=worker_proc, args=(dsn, q.name, ready, stop, out, recheck), daemon=True)
    proc.start()
    ready.wait(60)
    time.sleep(2.0)
    pushes: list[tuple[float, float, list[str]]] = []
    n, t0 = 0, time.monotonic()
    while (now := time.monotonic()) < t0 + seconds:
        if (wait := t0 + n / rate - now) > 0:
            time.sleep(wait)
        keys = [f"s{n + i}" for i in range(batch)]
        t = time.time()
        q.push_many([(k, "noop", {}) for k in keys]) if batch > 1 else q.push(keys[0], "noop", {})
        pushes.append((t, time.time(), keys))
        n += batch
    time.sleep(1.5)
    stop.set()
    trace, starts, wakeups = out.get(timeout=90)
    proc.join(timeout=30)
    db.close()
    return analyse(pushes, trace, starts, wakeups, seconds)


def analyse(pushes, trace, starts, wakeups, seconds) -> dict:
    got_by: dict[str, tuple] = {}
    cause = {}  # reserve start -> what started it
    last_end = None  # the last event before a reserve: ("wait", woke) or ("reserve", got)
    for ev in trace:
        if ev[0] == "reserve":
            if last_end is None or last_end[0] == "reserve":
                c = "after a round" if last_end is None or last_end[1] else "after an empty round"
            else:
                c = "notification" if last_end[1] else f"timed wait ({'held' if last_end[2] else 'idle'})"
            cause[ev[1]] = c
            for k in ev[4]:
                got_by[k] = ev
            last_end = ("reserve", bool(ev[4]))
        elif ev[0] == "wait":
            last_end = ("wait", ev[4], ev[5])
    parts = collections.defaultdict(list)
    classes = collections.Counter()
    waited_timed = []
    for t, t_ret, keys in pushes:
        for k in keys:
            if k not in starts or k not in got_by:
                continue
            r = got_by[k]
            parts["total"].append((starts[k] - t) * 1000)
            parts["push"].append((t_ret - t) * 1000)
            parts["to_reserve"].append((r[1] - t_ret) * 1000)
            parts["reserve"].append((r[2] - r[1]) * 1000)
            parts["to_start"].append((starts[k] - r[2]) * 1000)
            classes[cause[r[1]]] += 1
            if cause[r[1]].startswith("timed"):
                waited_timed.append((r[1] - t_ret) * 1000)
    notes = [ev[1] for ev in trace if ev[0] == "note"]
    reserves = [ev for ev in trace if ev[0] == "reserve"]
    waits = [ev for ev in trace if ev[0] == "wait"]
    # the notification after each push's return (its commit): push commit -> notification delivery
    deliv, i = [], 0
    for t, t_ret, _ in pushes:
        while i < len(notes) and notes[i] < t:
            i += 1
        if i < len(notes):
            deliv.append((notes[i] - t_ret) * 1000)
    out = {
        "jobs": len(parts["total"]),
        "pushes": len(pushes),
        "notifications": len(notes),
        "wakeups": wakeups,
        "reserves": len(reserves),
        "reserves_got": sum(1 for r in reserves if r[4]),
        "reserves_per_s": round(len(reserves) / seconds, 1),
        "waits_timed": sum(1 for w in waits if not w[4]),
        "wait_timeouts_ms_p50": pct([w[3] * 1000 for w in waits], 50),
        "jobs_by_start": dict(classes),
        "timed_wait_jobs_to_reserve_p50_p99": [pct(waited_timed, 50), pct(waited_timed, 99)],
        "first_note_after_push_minus_return_ms_p50_p99": [pct(deliv, 50), pct(deliv, 99)],
    }
    for name, v in parts.items():
        out[name] = {"p50": pct(v, 50), "p95": pct(v, 95), "p99": pct(v, 99), "max": round(max(v), 2)}
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rate", type=float, default=800)
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--seconds", type=float, default=15)
    ap.add_argument("--rounds", type=int, default=1)
    ap.add_argument(
        "--drained-recheck", type=float, help="the worker's DRAINED_RECHECK (seconds) instead of its own"
    )
    args = ap.parse_args()
    for r in range(args.rounds):
        with common.database("postgresql", "dec") as dsn:
            load = common.loadavg()[0]
            m = measure(dsn, args.rate, args.batch, args.seconds, args.drained_recheck)
        print(json.dumps({"round": r + 1, "load": load} | m), flush=True)


if __name__ == "__main__":
    main()
