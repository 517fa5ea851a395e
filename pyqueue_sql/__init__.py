"""pyqueue-sql: a durable message and job queue inside your PostgreSQL or MySQL/MariaDB database.

``pyqueue_sql.App`` and ``@app.task`` make typed Python functions tasks (pyqueue_sql.tasks), run by
the workers; underneath, the message API.

``pyqueue_sql.connect`` / ``Database`` / ``Queue`` block; ``pyqueue_sql.aio`` has the same client
for asyncio (AsyncDatabase, AsyncQueue; the ``asyncio`` extra), imported only when you use it.
"""

from . import logsafe as logsafe  # escapes the records of the package's loggers, before anything logs
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
    InsecureSchemaError,
    InvalidArgumentError,
    InvalidPayloadError,
    PermissionDeniedError,
    QueueError,
    ResultNotFoundError,
    SchemaNotInstalledError,
    SerializationError,
    TaskCancelled,
    TaskFailed,
    UnknownQueueError,
    UnsupportedDsnError,
)
from .tasks import App, RunReport, Task, TaskHandle, UnknownTaskError, current_job, running_job
from .worker import Job, RetryPolicy, Worker
from .worker.policy import GiveUp, Retry, Snooze

__all__ = [
    "App",
    "Cancelled",
    "GiveUp",
    "Retry",
    "RunReport",
    "Snooze",
    "Task",
    "TaskHandle",
    "UnknownTaskError",
    "current_job",
    "running_job",
    "Database",
    "DeadLetter",
    "HistoryRow",
    "Job",
    "Message",
    "MessageInfo",
    "RetryPolicy",
    "Worker",
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
    "ConnectionFailedError",
    "InsecureSchemaError",
    "InvalidArgumentError",
    "InvalidPayloadError",
    "PermissionDeniedError",
    "QueueError",
    "ResultNotFoundError",
    "SchemaNotInstalledError",
    "SerializationError",
    "TaskCancelled",
    "TaskFailed",
    "UnknownQueueError",
    "UnsupportedDsnError",
]
__version__ = "0.1.0"
