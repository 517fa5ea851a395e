"""pyqueue-sql: a durable message and job queue inside your PostgreSQL or MySQL/MariaDB database."""

from .client import Database, Message, NewMessage, Queue, QueueStats, Reservation, connect
from .worker import Job, RetryPolicy, Worker
from .errors import (
    InvalidArgumentError,
    InvalidPayloadError,
    PermissionDeniedError,
    QueueError,
    SchemaNotInstalledError,
    UnknownQueueError,
    UnsupportedDsnError,
)

__all__ = [
    "Database", "Job", "Message", "RetryPolicy", "Worker", "NewMessage", "Queue", "QueueStats", "Reservation", "connect",
    "InvalidArgumentError", "InvalidPayloadError", "PermissionDeniedError", "QueueError", "SchemaNotInstalledError",
    "UnknownQueueError", "UnsupportedDsnError",
]
__version__ = "0.1.0"
