"""A sample application of tasks, run by the tests (in process and through `pyqueue-sql worker`)."""

from __future__ import annotations

import asyncio
import datetime as dt
import decimal
import os
import uuid
from dataclasses import dataclass

import pyqueue_sql

app = pyqueue_sql.App(queue=os.environ.get("PYQUEUE_TEST_QUEUE", "sample"))


@dataclass(frozen=True)
class Address:
    city: str
    zip: str


def _record(line: str) -> None:
    path = os.environ.get("PYQUEUE_TEST_RECORD")
    if path:
        with open(path, "a") as f:
            f.write(line + "\n")


@app.task
def greet(to: str, lang: str = "en") -> str:
    _record(f"greet {to} {lang}")
    return f"{lang}:{to}"


@app.task
def typed(when: dt.datetime, ref: uuid.UUID, amount: decimal.Decimal, where: Address, tags: set[str]) -> None:
    assert isinstance(when, dt.datetime) and isinstance(ref, uuid.UUID)
    assert isinstance(amount, decimal.Decimal) and isinstance(where, Address) and isinstance(tags, set)
    _record(f"typed {when.isoformat()} {ref} {amount} {where.city} {','.join(sorted(tags))}")


async_app = pyqueue_sql.App(queue=os.environ.get("PYQUEUE_TEST_QUEUE", "sample"))


@async_app.task
async def greet_async(to: str) -> None:
    await asyncio.sleep(0)
    _record(f"greet_async {to}")


# A Worker object with handlers of two kinds (`pyqueue-sql worker tests.tasks.sample_app:worker`).
worker = pyqueue_sql.Worker(os.environ.get("PYQUEUE_TEST_WORKER_DSN", "postgresql://unused@127.0.0.1/unused"))


@worker.handler(os.environ.get("PYQUEUE_TEST_QUEUE", "sample"), "a")
def handle_a(job: pyqueue_sql.Job) -> None:
    _record(f"a {job.key}")


@worker.handler(os.environ.get("PYQUEUE_TEST_QUEUE", "sample"), "b")
def handle_b(job: pyqueue_sql.Job) -> None:
    _record(f"b {job.key}")
