"""What the failover's worker processes run: `pyqueue-sql worker tests.failover.handler:handle`
(Worker, threads) and `tests.failover.handler:handle_async` (AsyncWorker, tasks).

Each run appends two lines to $PYQUEUE_FAILOVER_RECORD, one when the handler starts and one when
it returns: `start|done <key> <attempt> <pid> <unix time>`, each one short O_APPEND write (the
lines of several processes never mix, and a line written is never lost to a buffer). Then it
sleeps payload["sleep"] seconds, so that a kill of the primary finds messages in flight.
"""

from __future__ import annotations

import asyncio
import os
import time


def _record(event: str, job) -> None:
    line = f"{event} {job.key} {job.attempts} {os.getpid()} {time.time():.6f}\n"
    fd = os.open(os.environ["PYQUEUE_FAILOVER_RECORD"], os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, line.encode())
    finally:
        os.close(fd)


def handle(job) -> None:
    _record("start", job)
    time.sleep(float(job.payload.get("sleep", 0)))
    _record("done", job)


async def handle_async(job) -> None:
    _record("start", job)
    await asyncio.sleep(float(job.payload.get("sleep", 0)))
    _record("done", job)
