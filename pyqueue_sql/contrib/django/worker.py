"""The worker's side: the project's Django tasks, each run only on its own queue.

A message's kind names its task (``task.module_path``) and its payload holds
``{"args": [...], "kwargs": {...}}``; both are written by whoever may push. So the worker never
imports what a kind names: the project's tasks are discovered at start-up (registry.discover: the
``tasks`` modules of INSTALLED_APPS and the backend's TASK_MODULES), each is registered as the
handler of its kind on its own queue (``queue_name``) only, and every other kind on a served queue
gets the handler that gives the message up at once (dead-lettered, or its result FAILED), with the
one line saying why. A task is called with the payload's arguments (an ``async def`` task through
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
from .backend import (
    ERROR_PROGRESS_KEY,
    META_PROGRESS_KEY,
    PyQueueBackend,
    enqueued_at,
    parse_time,
    recorded_meta,
    result_id,
)

# What a task may raise to steer its message (retry later, give up, snooze, end as cancelled):
# passed on to the worker as they are, not recorded as the task's failure.
_CONTROL = (pyqueue_sql.Retry, pyqueue_sql.GiveUp, pyqueue_sql.Snooze, pyqueue_sql.Cancelled)


def run_task(job: Any, backend: PyQueueBackend, task: Any, worker_id: str = "pyqueue-sql") -> Any:
    """Runs the project's ``task`` (already resolved from the job's kind and queue) with the job's
    arguments; records a failure (any exception, and any BaseException such as SystemExit but the
    KeyboardInterrupt that stops the worker) as Django's TaskError, sends task_started and
    task_finished, and returns the JSON return value to be stored as the result."""
    close_old_connections()
    try:
        payload = job.payload if isinstance(job.payload, dict) else {}
        args = list(payload.get("args") or [])
        kwargs = dict(payload.get("kwargs") or {})
        now = timezone.now()
        earlier = _earlier_attempts(job, backend)
        started = parse_time(earlier.get("started_at")) or now
        # the ids of the workers of each attempt: those recorded (an attempt that ended without
        # recording, a worker killed, counts as "pyqueue-sql"), then this one's
        recorded = [str(w) for w in earlier.get("worker_ids") or []][: job.attempts - 1]
        worker_ids = recorded + ["pyqueue-sql"] * (job.attempts - 1 - len(recorded)) + [worker_id]
        meta = {
            "started_at": started.isoformat(),
            "last_attempted_at": now.isoformat(),
            "args": args,
            "kwargs": kwargs,
            "worker_ids": worker_ids,
        }
        result = compat.TaskResult(
            task=task,
            id=result_id(job.queue, job.kind, job.key),
            status=compat.TaskResultStatus.RUNNING,
            enqueued_at=enqueued_at(job.key),
            started_at=started,
            finished_at=None,
            last_attempted_at=now,
            args=args,
            kwargs=kwargs,
            backend=backend.alias,
            errors=[],
            worker_ids=list(worker_ids),
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
        except (*_CONTROL, KeyboardInterrupt):
            raise
        except BaseException as exc:  # noqa: BLE001 - SystemExit too: recorded, then passed on
            # Django's TaskError: the exception's import path and its traceback, kept with the
            # result (as the message's progress) for get_result.
            error = compat.TaskError(
                exception_class_path=f"{type(exc).__module__}.{type(exc).__qualname__}",
                traceback="".join(traceback.format_exception(exc))[-60000:],
            )
            job.set_progress(
                {
                    META_PROGRESS_KEY: meta,
                    ERROR_PROGRESS_KEY: {
                        "exception_class_path": error.exception_class_path,
                        "traceback": error.traceback,
                    },
                }
            )
            result.errors.append(error)
            # Inside the except block, as Django's own backends send it: Django's receiver logs
            # the failure with this exception's traceback (and error trackers hook that record).
            _finished(result, compat.TaskResultStatus.FAILED, None, backend)
            raise
        # the task's times and arguments, kept with its result (written before the commit)
        job.set_progress({META_PROGRESS_KEY: meta})
        _finished(result, compat.TaskResultStatus.SUCCESSFUL, value, backend)
        return value
    finally:
        close_old_connections()


def _earlier_attempts(job: Any, backend: PyQueueBackend) -> dict:
    """What the task's earlier attempts recorded (read with queue_result, which the consumer may
    call): nothing on the first attempt."""
    if job.attempts <= 1:
        return {}
    try:
        progress = backend.own_database().queue(job.queue).result(job.key, job.kind).progress
    except pyqueue_sql.QueueError:
        return {}
    return recorded_meta(progress)


def _finished(result: Any, status: Any, value: Any, backend: PyQueueBackend) -> None:
    """task_finished, sent at the end of each attempt (a failed one that will be retried too)."""
    object.__setattr__(result, "status", status)
    object.__setattr__(result, "finished_at", timezone.now())
    object.__setattr__(result, "_return_value", value)
    compat.task_finished.send(type(backend), task_result=result)


def _unknown(backend: PyQueueBackend, queue: str):
    def unknown(job: Any) -> None:
        try:
            backend.task(job.kind, queue)
        except LookupError as exc:
            raise pyqueue_sql.GiveUp(str(exc)) from None
        raise pyqueue_sql.GiveUp(f"the task {job.kind!r} is not served on {queue!r}")  # not reached

    unknown.__qualname__ = f"unknown kinds of {queue}"
    return unknown


def _runner(backend: PyQueueBackend, task: Any, worker_id: str, after: Any = None):
    def run(job: Any) -> Any:
        try:
            return run_task(job, backend, task, worker_id)
        finally:
            if after is not None:
                after()

    run.__qualname__ = f"task {task.module_path}"
    return run


def tasks_by_queue(backend: PyQueueBackend, queues: list[str]) -> dict[str, list[Any]]:
    """{queue: the project's tasks of this backend whose own queue it is}, discovered now."""
    from . import registry

    found = registry.discover(backend.task_modules)
    return {
        queue: sorted(
            (t for t in found.values() if t.backend == backend.alias and t.queue_name == queue),
            key=lambda t: t.module_path,
        )
        for queue in queues
    }


def build_worker(
    backend: PyQueueBackend, queues: list[str], *, after_task: Any = None, **settings: Any
) -> pyqueue_sql.Worker:
    """A Worker (threads) that runs, on each of these queues, the project's tasks whose own queue it
    is (storing their results), and gives up every other kind found there. ``after_task()`` is
    called on the handler's thread after each task ran (it succeeded or failed)."""
    worker = pyqueue_sql.Worker(backend.dsn, **settings)
    for queue, tasks in tasks_by_queue(backend, queues).items():
        for task in tasks:
            worker.add_handler(
                queue, _runner(backend, task, worker.name, after_task), task.module_path, store_result=True
            )
        worker.add_handler(queue, _unknown(backend, queue), None, store_result=True)
    return worker
