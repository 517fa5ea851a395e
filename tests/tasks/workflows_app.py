"""An application of workflow tasks, run by tests/tasks/test_workflows.py through
`pyqueue-sql worker tests.tasks.workflows_app:app` (its queue from PYQUEUE_TEST_QUEUE, its database
from PYQUEUE_DSN): parents that return typed values, and a child that reads them."""

from __future__ import annotations

import datetime as dt
import os

import pyqueue_sql
from pyqueue_sql import current_job

app = pyqueue_sql.App(queue=os.environ.get("PYQUEUE_TEST_QUEUE", "workflows"))


@app.task(store_result=True)
def tomorrow(day: dt.date) -> dt.date:
    return day + dt.timedelta(days=1)


@app.task(store_result=True)
def square(n: int) -> int:
    return n * n


@app.task(store_result=True)
def describe(label: str) -> str:
    return f"{label}: " + ", ".join(f"{type(v).__name__} {v}" for v in current_job().parent_results())
