"""The workers draining a backlog: AsyncWorker and the threaded Worker side by side, as jobs/s
and ratios, in worker processes like `pyqueue-sql worker` runs them.

    python bench/async_worker.py                                  # both dialects, no-op jobs
    python bench/async_worker.py --dialect postgresql --messages 20000 --wait-ms 10
    python bench/async_worker.py --variant threads --variant threads:prefetch=0 --rounds 3

For each dialect, a fresh database (bench/common.py); for each variant and round, a fresh queue of
--messages messages pushed in batches; then --processes worker processes of --concurrency
handlers each are started on the full backlog and timed from the moment they are told to go
(imported, connected, handlers registered) until the queue holds no message (the last commit).

  threads   Worker, handler `def`: time.sleep(wait) (nothing when --wait-ms is 0)
  asyncio   AsyncWorker, handler `async def`: await asyncio.sleep(wait) (nothing when 0)

A variant is a runtime with settings for the worker, e.g. ``threads:prefetch=0,ack_interval=0``
(ints, floats, true/false/none). The variants alternate round by round (the order rotates), so
that a load that comes and goes on the machine falls on each; prints the median and best jobs/s
of each, its ratio to the first variant, the workers' own CPU and database calls per job, and
writes the rounds to --json. The ideal for jobs that wait is
processes * concurrency / wait.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import subprocess
import sys
import time
import uuid

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from bench import common  # noqa: E402


def _value(text: str):
    low = text.lower()
    if low in ("true", "false"):
        return low == "true"
    if low == "none":
        return None
    for kind in (int, float):
        try:
            return kind(text)
        except ValueError:
            pass
    raise SystemExit(f"not a number, true, false or none: {text!r}")


def parse_variant(text: str) -> tuple[str, dict]:
    runtime, _, rest = text.partition(":")
    if runtime not in ("threads", "asyncio"):
        raise SystemExit(f"a variant starts with threads or asyncio: {text!r}")
    settings = {}
    for part in filter(None, rest.split(",")):
        name, eq, value = part.partition("=")
        if not eq:
            raise SystemExit(f"a setting is name=value: {part!r}")
        settings[name.strip()] = _value(value.strip())
    return runtime, settings


# -- one worker process -------------------------------------------------------------------


def child(dsn: str, queue: str, runtime: str, settings: dict, concurrency: int, wait_s: float) -> None:
    """Runs one worker until SIGTERM; starts when its stdin says go; prints its stats at the end."""
    from pyqueue_sql import Worker
    from pyqueue_sql.aio.worker import AsyncWorker

    common = dict(concurrency=concurrency, poll_fallback=1.0, **settings)
    if runtime == "asyncio":
        worker = AsyncWorker(dsn, **common)

        if wait_s:

            @worker.handler(queue)
            async def handle(job):
                await asyncio.sleep(wait_s)

        else:

            @worker.handler(queue)
            async def handle(job):
                pass

        def run():
            asyncio.run(worker.run())

    else:
        worker = Worker(dsn, **common)

        if wait_s:

            @worker.handler(queue)
            def handle(job):
                time.sleep(wait_s)

        else:

            @worker.handler(queue)
            def handle(job):
                pass

        def run():
            worker.run()

    print("ready", flush=True)
    sys.stdin.readline()
    cpu = time.process_time()
    run()
    stats = worker.stats
    print(
        json.dumps(
            {
                "succeeded": stats.succeeded,
                "lost": stats.lost,
                "db_calls": stats.db_calls,
                "cpu_s": time.process_time() - cpu,
            }
        ),
        flush=True,
    )


# -- the parent: one measured drain --------------------------------------------------------


def measure(dialect: str, dsn: str, variant: str, args, wait_s: float) -> dict:
    import pyqueue_sql

    runtime, settings = parse_variant(variant)
    db = pyqueue_sql.connect(dsn)
    name = f"bench.{runtime}.{uuid.uuid4().hex[:6]}"
    queue = db.queue(name).create()
    for start in range(0, args.messages, 1000):
        queue.push_many([(f"m{i:07d}", "k", {}) for i in range(start, min(start + 1000, args.messages))])
    cmd = [
        sys.executable,
        os.path.abspath(__file__),
        "--child",
        json.dumps([dsn, name, runtime, settings, args.concurrency, wait_s]),
    ]
    procs = [
        subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        for _ in range(args.processes)
    ]
    try:
        for p in procs:
            if p.stdout.readline().strip() != "ready":
                raise RuntimeError("a worker process did not start")
        started = time.perf_counter()
        for p in procs:
            p.stdin.write("go\n")
            p.stdin.flush()
        while True:
            s = queue.stats()
            if s.ready + s.reserved + s.delayed == 0:
                break
            if any(p.poll() is not None for p in procs):
                raise RuntimeError("a worker process ended early")
            time.sleep(0.01)
        elapsed = time.perf_counter() - started
        for p in procs:
            p.terminate()
        children = [json.loads(p.communicate(timeout=120)[0].strip().splitlines()[-1]) for p in procs]
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
        queue.drop()
        db.close()
    done = sum(c["succeeded"] for c in children)
    return {
        "variant": variant,
        "jobs_per_s": args.messages / elapsed,
        "seconds": elapsed,
        "succeeded": done,
        "lost": sum(c["lost"] for c in children),
        "worker_cpu_ms_per_job": 1000 * sum(c["cpu_s"] for c in children) / max(done, 1),
        "db_calls_per_job": sum(c["db_calls"] for c in children) / max(done, 1),
    }


def main() -> None:
    if len(sys.argv) == 3 and sys.argv[1] == "--child":
        child(*json.loads(sys.argv[2]))
        return
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--dialect", choices=("postgresql", "mysql"), action="append")
    ap.add_argument("--messages", type=int, default=50000)
    ap.add_argument("--processes", type=int, default=2)
    ap.add_argument("--concurrency", type=int, default=16)
    ap.add_argument("--wait-ms", type=float, default=0.0, help="what each handler waits (0: no-op jobs)")
    ap.add_argument("--rounds", type=int, default=3, help="rounds, each variant once a round, rotating")
    ap.add_argument(
        "--variant", action="append", help="runtime[:name=value,...]; default: threads and asyncio"
    )
    ap.add_argument("--json", help="where to write every round (default bench/results/async_worker.json)")
    args = ap.parse_args()
    common.exit_on_sigterm()
    variants = args.variant or ["threads", "asyncio"]
    for v in variants:
        parse_variant(v)
    wait_s = args.wait_ms / 1000
    ideal = f", ideal {args.processes * args.concurrency / wait_s:,.0f} jobs/s" if wait_s else ""
    load = os.getloadavg()
    print(
        f"{args.messages} jobs, {args.processes} processes x {args.concurrency} handlers, "
        f"each waits {args.wait_ms:g} ms{ideal}; load average {load[0]:.2f} {load[1]:.2f} {load[2]:.2f}"
    )
    out = {"args": vars(args), "load_before": load, "results": {}}
    for dialect in args.dialect or ["postgresql", "mysql"]:
        dsn = common.create(dialect, "drain")
        try:
            common.install_pyqueue(dsn)
            rounds: list[dict] = []
            for r in range(args.rounds):
                order = variants[r % len(variants) :] + variants[: r % len(variants)]
                for v in order:
                    res = measure(dialect, dsn, v, args, wait_s)
                    rounds.append(res)
                    print(
                        f"  {dialect} round {r + 1} {v:<40} {res['jobs_per_s']:8,.0f} jobs/s  "
                        f"worker CPU {res['worker_cpu_ms_per_job']:.3f} ms/job  "
                        f"db calls {res['db_calls_per_job']:.3f}/job  lost {res['lost']}",
                        flush=True,
                    )
            out["results"][dialect] = rounds
            base = statistics.median(x["jobs_per_s"] for x in rounds if x["variant"] == variants[0])
            for v in variants:
                rates = [x["jobs_per_s"] for x in rounds if x["variant"] == v]
                med = statistics.median(rates)
                print(
                    f"{dialect:<11} {v:<40} median {med:8,.0f} jobs/s (best {max(rates):8,.0f})  "
                    f"x{med / base:.2f} of {variants[0]}"
                )
        finally:
            common.drop(dialect, dsn)
    out["load_after"] = os.getloadavg()
    path = args.json or os.path.join(
        os.path.dirname(os.path.abspath(__file__)), "results", "async_worker.json"
    )
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w") as f:
        json.dump(out, f, indent=2)
    print(f"rounds written to {path}")


if __name__ == "__main__":
    main()
