"""oban (its Python port) in the burn-down, as py_workers.py runs the Python peers: `enqueue DSN JOBS`,
`work DSN CONCURRENCY SLEEP_MS`. It needs Python >= 3.12: a virtualenv of its own
(bench/peers/.venv-oban, `make bench`); the schema from its `oban install`."""

from __future__ import annotations

import asyncio
import sys

from oban import Oban, worker

QUEUE = "burndown"
CHUNK = 1000
SLEEP_S = 0.0


@worker(queue=QUEUE)
class Noop:
    async def process(self, job):
        if SLEEP_S:
            await asyncio.sleep(SLEEP_S)


async def enqueue(dsn: str, jobs: int) -> None:
    pool = await Oban.create_pool(dsn)
    async with Oban(pool=pool) as oban:
        for start in range(0, jobs, CHUNK):
            await oban.enqueue_many([Noop.new({"n": i}) for i in range(start, min(jobs, start + CHUNK))])
    await pool.close()


async def work(dsn: str, concurrency: int) -> None:
    pool = await Oban.create_pool(dsn, max_size=concurrency + 4)
    oban = Oban(pool=pool, queues={QUEUE: concurrency})  # concurrency: oban's documented per-node limit
    print("ready", flush=True)
    await asyncio.get_running_loop().run_in_executor(None, sys.stdin.readline)
    async with oban:
        await asyncio.Event().wait()


def main() -> None:
    global SLEEP_S
    action, dsn = sys.argv[1], sys.argv[2]
    if action == "enqueue":
        asyncio.run(enqueue(dsn, int(sys.argv[3])))
    elif action == "work":
        SLEEP_S = float(sys.argv[4]) / 1000
        asyncio.run(work(dsn, int(sys.argv[3])))
    else:
        raise SystemExit(f"unknown action {action}")


if __name__ == "__main__":
    main()
