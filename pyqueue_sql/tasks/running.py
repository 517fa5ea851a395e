"""Running a task's jobs: the job running now (current_job), the middleware chain composed around
a task's function (compose), the worker's handler of a task (task_handler) and what run_pending
reports (RunReport)."""

from __future__ import annotations

import dataclasses
import inspect
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

from .. import errors
from ..dialects import JSONValue
from ..worker.model import Job
from .conversion import NotJson, to_json, type_name
from .current import current_job, running_job

if TYPE_CHECKING:
    from .task import Task

__all__ = [
    "CallNext",
    "JobReport",
    "Middleware",
    "RunReport",
    "compose",
    "current_job",
    "running_job",
    "task_handler",
]

CallNext = Callable[[], Any]
"""What a middleware calls to run the rest of the chain (and the task): returns its result (an
awaitable for async middleware)."""
Middleware = Callable[[Job, CallNext], Any]


def compose(middlewares: Sequence[Middleware], call: Callable[[Job], Any]) -> Callable[[Job], Any]:
    """call(job) inside the middlewares, the first outermost: one function of the job that calls
    ``middlewares[0](job, call_next)``, whose call_next calls the next middleware the same way, the
    last one's calling ``call(job)``. Built once per task, and the same for def and async def: an
    async middleware's call_next returns the awaitable of the rest of the chain, which it awaits
    (the middlewares and call are then all async def)."""
    for middleware in reversed(middlewares):
        call = _around(middleware, call)
    return call


def _around(middleware: Middleware, call: Callable[[Job], Any]) -> Callable[[Job], Any]:
    def wrapped(job: Job) -> Any:
        return middleware(job, lambda: call(job))

    return wrapped


def task_handler(
    task: Task[Any, Any], middlewares: Sequence[Middleware], parents: Callable[[Job], list[Any]]
) -> Callable[[Job], Any]:
    """The worker's handler of a task: makes the job current_job(), decodes its payload, runs the
    middleware of the task's kind (def middleware around a def task, async def around an async def
    one) and calls the function; for a store_result task, returns its value as JSON (the worker
    stores it). `parents` reads job.parent_results()."""
    fn = task.fn
    arguments = task.arguments
    store = task.store_result
    kind = task.kind
    if task.is_async:

        async def call_async(job: Job) -> Any:
            return await fn(**arguments(job.payload, job))

        chain = compose([m for m in middlewares if inspect.iscoroutinefunction(m)], call_async)

        async def run_async(job: Job) -> Any:
            job.parents_reader = parents
            with running_job(job):
                value = await chain(job)
            return result_json(kind, value) if store else value

        run_async.__qualname__ = f"task {kind}"
        return run_async

    def call(job: Job) -> Any:
        return fn(**arguments(job.payload, job))

    chain = compose([m for m in middlewares if not inspect.iscoroutinefunction(m)], call)

    def run(job: Job) -> Any:
        job.parents_reader = parents
        with running_job(job):
            value = chain(job)
        return result_json(kind, value) if store else value

    run.__qualname__ = f"task {kind}"
    return run


def result_json(kind: str, value: object) -> JSONValue:
    """What a store_result task returned, as the JSON stored for it (InvalidPayloadError, the
    job's failure, when JSON has no type for it)."""
    try:
        return to_json(value)
    except NotJson as exc:
        raise errors.InvalidPayloadError(
            f"task {kind!r}: its result ({type_name(value)}) cannot be stored as JSON: {exc}"
        ) from None


@dataclasses.dataclass(frozen=True)
class JobReport:
    """What became of one job run by run_pending: outcome 'succeeded', 'retry', 'snoozed',
    'dead_lettered', 'dropped', 'cancelled' or 'lost', and the error for a failure."""

    queue: str
    key: str
    kind: str
    attempts: int
    outcome: str
    error: str | None


@dataclasses.dataclass
class RunReport:
    """What run_pending ran: every job and its outcome, and how many of each."""

    jobs: list[JobReport] = dataclasses.field(default_factory=list)

    def _count(self, *outcomes: str) -> int:
        return sum(j.outcome in outcomes for j in self.jobs)

    @property
    def succeeded(self) -> int:
        return self._count("succeeded")

    @property
    def retried(self) -> int:
        """Failures that come back later (their attempt counted)."""
        return self._count("retry")

    @property
    def snoozed(self) -> int:
        return self._count("snoozed")

    @property
    def failed(self) -> int:
        """Jobs that will not run again: dead-lettered or dropped."""
        return self._count("dead_lettered", "dropped")

    @property
    def cancelled(self) -> int:
        """Jobs whose task stopped for a cancel (or cancelled itself)."""
        return self._count("cancelled")

    @property
    def errors(self) -> list[str]:
        """The errors of the failures (retried or not), in the order they happened."""
        return [j.error for j in self.jobs if j.error is not None]

    def note(self, job: Job, outcome: str, error: str | None) -> None:
        """Adds a job's outcome: a worker's on_outcome hook (run_pending hangs it there)."""
        self.jobs.append(JobReport(job.queue, job.key, job.kind, job.attempts, outcome, error))

    def __str__(self) -> str:
        return (
            f"{len(self.jobs)} job(s): {self.succeeded} succeeded, {self.retried} retried, "
            f"{self.snoozed} snoozed, {self.failed} failed"
            + (f", {self.cancelled} cancelled" if self.cancelled else "")
        )
