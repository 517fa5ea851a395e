"""Tasks: typed Python functions over the queue's messages.

    app = pyqueue_sql.App("postgresql://localhost/app")

    @app.task(queue="emails", retry=RetryPolicy(retry_on=ConnectionError), timeout=30)
    def send_welcome(to: str, lang: str = "en") -> None:
        ...

    send_welcome.defer("a@example.com", lang="fr")   # type-checked against the signature
    app.worker(concurrency=8).run()                   # or: pyqueue-sql worker myapp.tasks:app

A task is a (queue, kind) with a function behind it: kind defaults to the function's name. Its
message's payload is the function's arguments bound to their names as one JSON object
({"to": "a@example.com", "lang": "fr"}), so any client that can call queue_push (psql, mysql, Spark)
enqueues the same task. Values JSON has no type for go both ways by the parameter's annotation:
dataclasses, datetime, date, time, timedelta (seconds), UUID, Decimal (as a string), Enum (its value),
tuples, sets, and pydantic models when pydantic is installed. An argument that would not come back
as it was passed (a set or a datetime without its annotation, NaN, a dict with non-str keys, an
object JSON cannot hold) is refused at defer, naming it.

The worker side is pyqueue_sql.Worker / AsyncWorker, with one handler per task that decodes the
payload, runs the app's middleware and calls the function. What a task raises is decided by its
RetryPolicy (retry_on, give_up_on) and by the outcomes it may raise: Retry(after=), Snooze(after=),
GiveUp(reason) (pyqueue_sql.worker.policy).

The package, by what each module holds: keys (new_key, occurrence_time), conversion (values to JSON
and back by annotation), task (Task, TaskCall, TaskHandle), batches (BatchTask, @app.task(batch=N)),
periodic (app.periodic's schedules), canvas (Celery's chain, group and chord of task.s(...)
signatures, over after=), running (current_job, the middleware chain, the worker's
handler of a task, RunReport) and app (App). Every public name is importable from pyqueue_sql.tasks.
"""

from .app import DEFAULT_QUEUE, DEFAULT_RESULT_RETENTION, App, UnknownTaskError
from .batches import BatchTask
from .canvas import Chain, Chord, Group, chain, chord, group, signature
from .keys import new_key, occurrence_time
from .periodic import Periodic
from .running import CallNext, JobReport, Middleware, RunReport, compose, current_job, running_job
from .task import PayloadMismatchError, Signature, Task, TaskCall, TaskGroup, TaskHandle

__all__ = [
    # the app and its tasks
    "App",
    "Task",
    "BatchTask",
    "TaskCall",
    "TaskHandle",
    "TaskGroup",
    "Periodic",
    "DEFAULT_QUEUE",
    "DEFAULT_RESULT_RETENTION",
    # Celery's canvas: signatures (task.s(...)) and how they run together
    "Signature",
    "signature",
    "chain",
    "group",
    "chord",
    "Chain",
    "Group",
    "Chord",
    # inside a running job
    "current_job",
    "running_job",
    "occurrence_time",
    "CallNext",
    "Middleware",
    "compose",
    # run_pending's report
    "RunReport",
    "JobReport",
    # keys
    "new_key",
    # errors
    "PayloadMismatchError",
    "UnknownTaskError",
]
