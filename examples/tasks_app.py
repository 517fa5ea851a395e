"""An example application of tasks, checked with `mypy --strict` (tests/tasks/test_typing.py).

Run its worker with `pyqueue-sql worker examples.tasks_app:app --dsn ...`; enqueue from Python
with `send_welcome.defer(...)` or from SQL with queue_push('emails', key, 'send_welcome',
'{"to": "a@example.com", "user": {"id": 7, "name": "Ada"}}').
"""

from __future__ import annotations

import datetime as dt
import os
from dataclasses import dataclass

import pyqueue_sql
from pyqueue_sql import App, GiveUp, Job, Retry, RetryPolicy

app = App(os.environ.get("PYQUEUE_DSN", "postgresql://localhost/app"), queue="emails")


@dataclass(frozen=True)
class User:
    id: int
    name: str


class MailServerBusy(Exception):
    pass


@app.middleware
def log_jobs(job: Job, call_next: pyqueue_sql.tasks.CallNext) -> object:
    started = dt.datetime.now(dt.timezone.utc)
    try:
        return call_next()
    finally:
        elapsed = dt.datetime.now(dt.timezone.utc) - started
        print(f"{job.kind} {job.key} took {elapsed.total_seconds():.3f} s")


@app.task(retry=RetryPolicy(base=5, retry_on=MailServerBusy), timeout=30)
def send_welcome(to: str, user: User, lang: str = "en") -> None:
    if not to:
        raise GiveUp("no address")
    print(f"welcome {user.name} <{to}> ({lang})")


@app.task(queue="reports")
async def build_report(day: dt.date, total: int) -> int:
    if total < 0:
        raise Retry(after=60)
    return total


def enqueue() -> pyqueue_sql.TaskHandle[None]:
    handle = send_welcome.configure(key="welcome-7").defer("a@example.com", User(7, "Ada"), lang="fr")
    if not handle.enqueued:
        print("already queued")
    return handle


async def enqueue_report() -> pyqueue_sql.TaskHandle[int]:
    return await build_report.defer_async(dt.date(2026, 11, 26), total=3)
