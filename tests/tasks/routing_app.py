"""An application whose task has a rate limit and a route, run by `pyqueue-sql worker` in the tests
(its queue: $PYQUEUE_TEST_QUEUE, its route: that name with ".priority"; each run appends
"<queue> <n> <unix time>" to $PYQUEUE_TEST_RECORD)."""

from __future__ import annotations

import os
import time

import pyqueue_sql

QUEUE = os.environ.get("PYQUEUE_TEST_QUEUE", "routing-sample")
PRIORITY = f"{QUEUE}.priority"

app = pyqueue_sql.App(queue=QUEUE, routes=[PRIORITY])


@app.task(rate_limit="5/s")
def fetch(n: int) -> None:
    started = time.time()
    path = os.environ.get("PYQUEUE_TEST_RECORD")
    if path:
        with open(path, "a") as f:
            f.write(f"{pyqueue_sql.current_job().queue} {n} {started:.6f}\n")
