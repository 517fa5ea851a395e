"""Handlers the worker-process tests run through `pyqueue-sql worker tests.worker.worker_handlers:...`."""

import asyncio
import os
import time


def _record(line: str) -> None:
    with open(os.environ["PYQUEUE_TEST_RECORD"], "a") as f:
        f.write(line + "\n")
        f.flush()
        os.fsync(f.fileno())


def sleepy(job):
    """Sleeps payload["sleep"] seconds; records start and done."""
    _record(f"start {job.key} {job.attempts}")
    time.sleep(float(job.payload.get("sleep", 0)))
    _record(f"done {job.key} {job.attempts}")


async def async_sleepy(job):
    """sleepy for AsyncWorker: awaits payload["sleep"] seconds; records start and done."""
    _record(f"start {job.key} {job.attempts}")
    await asyncio.sleep(float(job.payload.get("sleep", 0)))
    _record(f"done {job.key} {job.attempts}")
