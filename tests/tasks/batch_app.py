"""An application of batch tasks, run by tests/tasks/test_batch_tasks.py through `pyqueue-sql worker
tests.tasks.batch_app:app` (its queue from PYQUEUE_TEST_QUEUE, its database from PYQUEUE_DSN)."""

from __future__ import annotations

import asyncio
import os
from dataclasses import dataclass

import pyqueue_sql
from pyqueue_sql import GiveUp, Retry

app = pyqueue_sql.App(queue=os.environ.get("PYQUEUE_TEST_QUEUE", "batches"))


@dataclass
class Order:
    n: int
    mode: str = "ok"


@app.task(batch=25, batch_linger=0.2, store_result=True)
def settle(orders: list[Order]) -> list[object]:
    """Each order's outcome by its mode; a success's result says how large its batch was."""
    out: list[object] = []
    for o in orders:
        if o.mode == "retry":
            out.append(Retry(after=0, reason=f"order {o.n} not yet"))
        elif o.mode == "give_up":
            out.append(GiveUp(f"order {o.n} is void"))
        elif o.mode == "fail":
            out.append(ValueError(f"order {o.n} failed"))
        else:
            out.append({"double": o.n * 2, "batch": len(orders)})
    return out


@app.task(batch=10)
async def explode(orders: list[Order]) -> None:
    """Fails every order of its batch with one exception."""
    await asyncio.sleep(0)
    raise RuntimeError(f"the batch of {len(orders)} blew up")
