"""Exceptions raised by pyqueue-sql.

The database routines refuse bad input with a message of the form
``pyqueue:<code>: <detail>``; the dialects map that code to one of these.
"""

from __future__ import annotations


class QueueError(Exception):
    """Base class of every error pyqueue-sql raises on its own account."""


class UnknownQueueError(QueueError, LookupError):
    """The named queue does not exist (create it with Queue.create / queue_create)."""


class InvalidArgumentError(QueueError, ValueError):
    """A routine refused an argument: NULL/empty name, too long, n < 1, negative duration..."""


class InvalidPayloadError(InvalidArgumentError):
    """The payload is not JSON (or not serialisable to JSON)."""


class SchemaNotInstalledError(QueueError):
    """The pyqueue-sql tables and routines are not in this database: run `pyqueue-sql migrate`."""


class PermissionDeniedError(QueueError, PermissionError):
    """The database account may not call this routine (or touch this table): grant it the
    capability it needs (`pyqueue-sql grant`, README "Least privilege"). Not a connection
    error: a worker does not reconnect and retry on it."""

    HINT = (
        "grant the account the capability it needs: `pyqueue-sql grant --role NAME --producer|--consumer|"
        "--monitor|--admin|--ingest --apply` (README: Least privilege)"
    )

    def __init__(self, message: str) -> None:
        super().__init__(f"{message}; {self.HINT}")


class UnsupportedDsnError(QueueError, ValueError):
    """The DSN names a database pyqueue-sql does not support."""


class SerializationError(QueueError):
    """The server rolled the transaction back to keep it serializable, or to break a deadlock
    (PostgreSQL 40001 serialization_failure / 40P01 deadlock_detected; MySQL 1213 deadlock).
    Nothing of that transaction was kept. (A MySQL lock wait timeout, 1205, is not one: it
    undoes only the statement and leaves the transaction open, so it is raised as the
    driver's error.)

    A call that the client runs in a transaction of its own (a ``connect()``-ed Database outside
    ``db.transaction()``) is run again by the client a few times, with a short random pause,
    before this is raised. Inside ``db.transaction()`` or on a ``Database.wrap``-ped connection
    it is raised at once: the whole transaction is gone, and the caller must run the whole
    transaction again (its business writes included), not just the failed call."""


class InsecureSchemaError(QueueError):
    """PostgreSQL: a role other than the installing one can CREATE in the install schema, so it
    could plant look-alike functions that the routines would run; the install was refused."""


ERROR_CODES: dict[str, type[QueueError]] = {
    "unknown_queue": UnknownQueueError,
    "invalid_argument": InvalidArgumentError,
    "invalid_payload": InvalidPayloadError,
    "insecure_schema": InsecureSchemaError,
}
