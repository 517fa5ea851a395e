"""An application whose tasks store their results, report progress and stop for a cancel, run by
tests/tasks/test_results.py through `pyqueue-sql worker tests.tasks.results_app:app` (its queue
from PYQUEUE_TEST_QUEUE, its database from PYQUEUE_DSN)."""

from __future__ import annotations

import asyncio
import datetime as dt
import os

import pyqueue_sql
from pyqueue_sql import current_job

app = pyqueue_sql.App(queue=os.environ.get("PYQUEUE_TEST_QUEUE", "results"))


@app.task(store_result=True)
def add(a: int, b: int) -> int:
    return a + b


@app.task(store_result=True)
def next_day(day: dt.date) -> dt.date:
    return day + dt.timedelta(days=1)


@app.task(store_result=True)
def broken(why: str) -> None:
    raise ValueError(why)


@app.task(store_result=True)
async def crawl(pages: int) -> int:
    for page in range(pages):
        current_job().set_progress({"page": page, "of": pages})
        await asyncio.sleep(0.1)
    return pages
