"""The job running now: current_job() inside a task or middleware, and running_job(), which makes a
job current for the code run inside. Apart from running.py (the handler that runs a task's jobs)
so that the task's own code (task.py) reads the current job without depending on the module that
runs tasks, which depends on the task: no import cycle between the two."""

from __future__ import annotations

import collections.abc
import contextlib
import contextvars

from .. import errors
from ..worker.model import Job

__all__ = ["current_job", "running_job"]

_current_job: contextvars.ContextVar[Job | None] = contextvars.ContextVar("pyqueue_sql_job", default=None)


def current_job() -> Job:
    """The job whose task is running (its key, kind, attempts...), inside a task or middleware."""
    job = _current_job.get()
    if job is None:
        raise errors.QueueError("current_job() is for the code a worker runs for a job")
    return job


@contextlib.contextmanager
def running_job(job: Job) -> collections.abc.Iterator[Job]:
    """Makes ``job`` the current_job() of the code run inside: for a handler that runs other code
    on the job's behalf (the Django app's worker runs Django tasks this way)."""
    token = _current_job.set(job)
    try:
        yield job
    finally:
        _current_job.reset(token)
