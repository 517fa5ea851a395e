"""pyqueue-sql: a durable message and job queue inside your PostgreSQL or MySQL/MariaDB database.

``pyqueue_sql.App`` and ``@app.task`` make typed Python functions tasks (pyqueue_sql.tasks), run by
the workers; underneath, the message API.

``pyqueue_sql.connect`` / ``Database`` / ``Queue`` block; ``pyqueue_sql.aio`` has the same client
for asyncio (AsyncDatabase, AsyncQueue; the ``asyncio`` extra), imported only when you use it.
Every exception is defined in pyqueue_sql.errors; those below are the ones a user catches or raises
day to day (the migrator's are imported from pyqueue_sql.migrate, which imports alembic). Each name
below is imported from its module when first used, so `import pyqueue_sql` costs a producer or a
command only what it uses.
"""

from typing import TYPE_CHECKING

from . import logsafe as logsafe  # escapes the records of the package's loggers, before anything logs

# `import pyqueue_sql` loads no more than that: each public name below is imported from its module
# the first time it is used (`from pyqueue_sql import App` or `pyqueue_sql.App`), so a command or a
# producer pays only for what it uses (the worker, the tasks and asyncio load when asked for).
# tests/unit/test_lazy_imports.py checks every name resolves and what stays unloaded.
_LAZY: dict[str, str] = {
    **dict.fromkeys(
        (
            "App",
            "RunReport",
            "Signature",
            "Task",
            "TaskGroup",
            "TaskHandle",
            "chain",
            "chord",
            "current_job",
            "group",
            "running_job",
            "signature",
        ),
        "tasks",
    ),
    **dict.fromkeys(("Job", "RetryPolicy", "Worker"), "worker"),
    **dict.fromkeys(
        (
            "Database",
            "DeadLetter",
            "HistoryRow",
            "Message",
            "MessageInfo",
            "NewMessage",
            "ParentResult",
            "Publication",
            "Queue",
            "QueueSettings",
            "QueueStats",
            "Renewal",
            "Reservation",
            "Result",
            "WorkerRegistration",
            "connect",
        ),
        "client",
    ),
    **dict.fromkeys(
        (
            "Cancelled",
            "ConnectionFailedError",
            "ConnectionLostError",
            "DriverNotInstalledError",
            "GiveUp",
            "InsecureSchemaError",
            "InvalidArgumentError",
            "InvalidPayloadError",
            "PayloadMismatchError",
            "PermissionDeniedError",
            "QueueError",
            "ResultNotFoundError",
            "Retry",
            "SchemaNotInstalledError",
            "SerializationError",
            "Snooze",
            "TaskCancelled",
            "TaskFailed",
            "UnknownQueueError",
            "UnknownTaskError",
            "UnreadablePayloadError",
            "UnsupportedDsnError",
        ),
        "errors",
    ),
}


def __getattr__(name: str) -> object:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    import importlib

    value = getattr(importlib.import_module(f".{module}", __name__), name)
    globals()[name] = value  # the next use is a plain attribute
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *_LAZY})


if TYPE_CHECKING:  # what type checkers and editors see: the names as if imported here
    from .client import (
        Database,
        DeadLetter,
        HistoryRow,
        Message,
        MessageInfo,
        NewMessage,
        ParentResult,
        Publication,
        Queue,
        QueueSettings,
        QueueStats,
        Renewal,
        Reservation,
        Result,
        WorkerRegistration,
        connect,
    )
    from .errors import (
        Cancelled,
        ConnectionFailedError,
        ConnectionLostError,
        DriverNotInstalledError,
        GiveUp,
        InsecureSchemaError,
        InvalidArgumentError,
        InvalidPayloadError,
        PayloadMismatchError,
        PermissionDeniedError,
        QueueError,
        ResultNotFoundError,
        Retry,
        SchemaNotInstalledError,
        SerializationError,
        Snooze,
        TaskCancelled,
        TaskFailed,
        UnknownQueueError,
        UnknownTaskError,
        UnreadablePayloadError,
        UnsupportedDsnError,
    )
    from .tasks import (
        App,
        RunReport,
        Signature,
        Task,
        TaskGroup,
        TaskHandle,
        chain,
        chord,
        current_job,
        group,
        running_job,
        signature,
    )
    from .worker import Job, RetryPolicy, Worker

__all__ = [
    # Tasks: typed functions, deferred and run by workers
    "App",
    "Task",
    "TaskGroup",
    "TaskHandle",
    "RunReport",
    "current_job",
    "running_job",
    # Celery's canvas: task.s(...) signatures deferred one after another, side by side, or both
    "Signature",
    "signature",
    "chain",
    "group",
    "chord",
    # The client: a database, its queues
    "connect",
    "Database",
    "Queue",
    # What the client takes and returns
    "NewMessage",
    "Message",
    "Reservation",
    "Renewal",
    "Result",
    "ParentResult",
    "Publication",
    "MessageInfo",
    "DeadLetter",
    "HistoryRow",
    "QueueSettings",
    "QueueStats",
    "WorkerRegistration",
    # Workers, and what a handler raises to decide a job's outcome
    "Worker",
    "Job",
    "RetryPolicy",
    "Retry",
    "Snooze",
    "GiveUp",
    "Cancelled",
    # Errors
    "QueueError",
    "ConnectionFailedError",
    "ConnectionLostError",
    "UnsupportedDsnError",
    "DriverNotInstalledError",
    "SchemaNotInstalledError",
    "PermissionDeniedError",
    "InsecureSchemaError",
    "UnknownQueueError",
    "InvalidArgumentError",
    "InvalidPayloadError",
    "SerializationError",
    "UnknownTaskError",
    "PayloadMismatchError",
    "UnreadablePayloadError",
    "TaskFailed",
    "TaskCancelled",
    "ResultNotFoundError",
]
__version__ = "0.2.0.dev0"
