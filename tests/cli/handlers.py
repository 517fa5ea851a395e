"""The handlers the `pyqueue-sql worker` processes of test_cli_lifecycle.py run. A module of
their own, importing nothing but the standard library: each worker process imports it, and the
test module (pytest with it) cost every one about 0.4 s of CPU more."""

from __future__ import annotations

import os
import time


def failing(job):
    """Fails every delivery (the worker logs each failure)."""
    raise RuntimeError(f"cannot handle {job.key}")


def sleeping(job):
    time.sleep(float(job.payload.get("sleep", 0)))


async def async_record(job):
    import asyncio

    await asyncio.sleep(0.01)
    with open(os.environ["PYQUEUE_TEST_RECORD"], "a") as f:
        f.write(f"async {job.key}\n")
