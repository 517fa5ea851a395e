"""pyqueue-sql: a durable message and job queue inside your PostgreSQL or MySQL/MariaDB database.

``pyqueue_sql.connect`` / ``Database`` / ``Queue`` block; ``pyqueue_sql.aio`` has the same client
for asyncio (AsyncDatabase, AsyncQueue; the ``asyncio`` extra), imported only when you use it.
"""

from .client import (
    Database,
    DeadLetter,
    HistoryRow,
    Message,
    MessageInfo,
    NewMessage,
    Publication,
    Queue,
    QueueSettings,
    QueueStats,
    Reservation,
    WorkerRegistration,
    connect,
)
from .errors import (
    InsecureSchemaError,
    InvalidArgumentError,
    InvalidPayloadError,
    PermissionDeniedError,
    QueueError,
    SchemaNotInstalledError,
    SerializationError,
    UnknownQueueError,
    UnsupportedDsnError,
)
from .worker import Job, RetryPolicy, Worker

__all__ = [
    "Database",
    "DeadLetter",
    "HistoryRow",
    "Job",
    "Message",
    "MessageInfo",
    "RetryPolicy",
    "Worker",
    "NewMessage",
    "Publication",
    "Queue",
    "QueueSettings",
    "QueueStats",
    "Reservation",
    "WorkerRegistration",
    "connect",
    "InsecureSchemaError",
    "InvalidArgumentError",
    "InvalidPayloadError",
    "PermissionDeniedError",
    "QueueError",
    "SchemaNotInstalledError",
    "SerializationError",
    "UnknownQueueError",
    "UnsupportedDsnError",
]
__version__ = "0.1.0"
