"""The worker's side: one pyqueue-sql handler runs every Django task of the backend's queues.

A message's kind is its task's import path, its payload ``{"args": [...], "kwargs": {...}}``: the
handler imports the task (``import_string``), calls it (an ``async def`` task through
``Task.call``, on the worker thread's own loop), and its return value (normalized to JSON, as
Django's own backends do) is stored as the message's result. Django's stale connections are closed
before and after each job (``close_old_connections``), as Django does around a request."""

from __future__ import annotations

import traceback
from typing import Any

from django.db import close_old_connections
from django.utils import timezone

import pyqueue_sql

from . import compat
from .backend import ERROR_PROGRESS_KEY, PyQueueBackend, import_task, result_id


def run_task(job: Any, backend: PyQueueBackend) -> Any:
    close_old_connections()
    try:
        task = import_task(job.kind)
        payload = job.payload if isinstance(job.payload, dict) else {}
        args = list(payload.get("args") or [])
        kwargs = dict(payload.get("kwargs") or {})
        started = timezone.now()
        result = compat.TaskResult(
            task=task,
            id=result_id(job.queue, job.kind, job.key),
            status=compat.TaskResultStatus.RUNNING,
            enqueued_at=None,
            started_at=started,
            finished_at=None,
            last_attempted_at=started,
            args=args,
            kwargs=kwargs,
            backend=backend.alias,
            errors=[],
            worker_ids=["pyqueue-sql"] * job.attempts,
        )
        compat.task_started.send(type(backend), task_result=result)
        try:
            # pyqueue_sql.current_job() inside the task is this job: its progress, its cancel request
            with pyqueue_sql.running_job(job):
                if task.takes_context:
                    value = task.call(compat.TaskContext(task_result=result), *args, **kwargs)
                else:
                    value = task.call(*args, **kwargs)
            value = compat.normalize_json(value)
        except (pyqueue_sql.Retry, pyqueue_sql.GiveUp, pyqueue_sql.Snooze, pyqueue_sql.Cancelled):
            raise
        except Exception as exc:
            # Django's TaskError: the exception's import path and its traceback, kept with the
            # result (as the message's progress) for get_result.
            error = compat.TaskError(
                exception_class_path=f"{type(exc).__module__}.{type(exc).__qualname__}",
                traceback="".join(traceback.format_exception(exc))[-60000:],
            )
            job.set_progress(
                {
                    ERROR_PROGRESS_KEY: {
                        "exception_class_path": error.exception_class_path,
                        "traceback": error.traceback,
                    }
                }
            )
            result.errors.append(error)
            _finished(result, compat.TaskResultStatus.FAILED, None, backend)
            raise
        _finished(result, compat.TaskResultStatus.SUCCESSFUL, value, backend)
        return value
    finally:
        close_old_connections()


def _finished(result: Any, status: Any, value: Any, backend: PyQueueBackend) -> None:
    """task_finished, sent at the end of each attempt (a failed one that will be retried too)."""
    object.__setattr__(result, "status", status)
    object.__setattr__(result, "finished_at", timezone.now())
    object.__setattr__(result, "_return_value", value)
    compat.task_finished.send(type(backend), task_result=result)


def build_worker(backend: PyQueueBackend, queues: list[str], **settings: Any) -> pyqueue_sql.Worker:
    """A Worker (threads) that runs every task of these queues of the backend, storing results."""
    worker = pyqueue_sql.Worker(backend.dsn, **settings)
    for queue in queues:
        worker.add_handler(queue, lambda job: run_task(job, backend), None, store_result=True)
    return worker
