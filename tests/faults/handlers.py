"""The handlers the worker processes of test_faults.py run (`pyqueue-sql worker
tests.faults.handlers:fault_handler`): while the file named by $PYQUEUE_TEST_HOLD exists, it holds
its message; then it sleeps payload["sleep"]; it records its start and end in $PYQUEUE_TEST_RECORD.
A module of their own, importing nothing but the standard library: each worker process imports
it, and the test module (pytest with it) cost every one about 0.4 s of CPU more."""

from __future__ import annotations

import asyncio
import os
import time

HOLD_AT_MOST = 120.0


# -- the handler the worker processes run ------------------------------------------


def _record(line: str) -> None:
    fd = os.open(os.environ["PYQUEUE_TEST_RECORD"], os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, (line + "\n").encode())  # one short O_APPEND write: lines of several processes never mix
    finally:
        os.close(fd)


def _holding(deadline: float) -> bool:
    hold = os.environ.get("PYQUEUE_TEST_HOLD")
    return bool(hold) and os.path.exists(hold) and time.monotonic() < deadline


def fault_handler(job):
    _record(f"start {job.key} {job.attempts} {os.getpid()}")
    deadline = time.monotonic() + HOLD_AT_MOST
    while _holding(deadline):
        time.sleep(0.02)
    time.sleep(float(job.payload.get("sleep", 0)))
    _record(f"done {job.key} {job.attempts} {os.getpid()}")


async def async_fault_handler(job):
    """fault_handler for AsyncWorker: the same records, awaiting instead of sleeping."""
    _record(f"start {job.key} {job.attempts} {os.getpid()}")
    deadline = time.monotonic() + HOLD_AT_MOST
    while _holding(deadline):
        await asyncio.sleep(0.02)
    await asyncio.sleep(float(job.payload.get("sleep", 0)))
    _record(f"done {job.key} {job.attempts} {os.getpid()}")


HANDLERS = {"threads": "fault_handler", "asyncio": "async_fault_handler"}
