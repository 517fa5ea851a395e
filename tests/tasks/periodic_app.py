"""An application with periodic tasks, set up by `pyqueue-sql setup tests.tasks.periodic_app:app`
in the tests (its queue: $PYQUEUE_TEST_QUEUE)."""

from __future__ import annotations

import datetime as dt
import os

import pyqueue_sql

app = pyqueue_sql.App(queue=os.environ.get("PYQUEUE_TEST_QUEUE", "periodic-sample"))


@app.periodic(every=3600)
@app.task
def hourly(at: dt.datetime) -> None: ...


@app.periodic(cron="*/5 * * * *", key="five")
@app.task(store_result=True)
def report(timestamp: int) -> int:
    return timestamp
