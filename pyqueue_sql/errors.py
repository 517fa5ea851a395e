"""Exceptions raised by pyqueue-sql.

The database routines refuse bad input with a message of the form
``pyqueue:<code>: <detail>``; the dialects map that code to one of these.

The other public exceptions are defined beside the code that raises them, which this module sits
below (they import it): a handler's outcomes Retry, GiveUp and Snooze (pyqueue_sql.worker.policy),
PayloadMismatchError (pyqueue_sql.tasks), the migrator's MigrationError and its subclasses
(pyqueue_sql.migrate). pyqueue_sql itself exports every one a user catches or raises.
"""

from __future__ import annotations

import re


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
    capability it needs (`pyqueue-sql grant`). The message names that capability when the
    server's message names the refused routine, and every capability otherwise. Not a
    connection error: a worker does not reconnect and retry on it."""

    def __init__(self, message: str) -> None:
        super().__init__(f"{message}; {permission_hint(message)}")


def permission_hint(message: str) -> str:
    """What to grant for a refusal whose server message is ``message``: the capabilities that
    grant the routine it names (pyqueue_sql.privileges), or the choice of every capability."""
    from . import capabilities

    routines = re.findall(r"\b(queue_[a-z_]+)", message or "")
    needed = [c for r in routines for c in capabilities.capabilities_with(r)]
    if needed:
        needed = list(dict.fromkeys(needed))
        others = "".join(f" (or --{c})" for c in needed[1:])
        return (
            f"{routines[0]} is in the {' and '.join(needed)} "
            f"capabilit{'y' if len(needed) == 1 else 'ies'}: grant it with "
            f"`pyqueue-sql grant --role NAME --{needed[0]} --apply`{others}"
        )
    every = "|".join(f"--{c}" for c in capabilities.CAPABILITIES)
    return f"grant the account the capability it needs: `pyqueue-sql grant --role NAME {every} --apply`"


class DriverNotInstalledError(QueueError, ImportError):
    """The database driver a DSN needs is not installed (psycopg, PyMySQL, aiomysql): the
    message names the extra that brings it. An ImportError, so ``except ImportError`` still
    catches it."""

    def __init__(self, module: str, extra: str, what: str) -> None:
        super().__init__(
            f"{what} needs the Python module {module!r}, which is not installed: install the "
            f"{extra!r} extra: {install_command(extra)}",
            name=module,
        )
        self.extra = extra


class UnsupportedDsnError(QueueError, ValueError):
    """The DSN names a database pyqueue-sql does not support, or cannot be used (malformed, an
    unknown option). Its message masks the DSN's password; it chains no driver exception as its
    cause (a driver's text about a malformed DSN quotes the DSN)."""


class ConnectionFailedError(QueueError):
    """A connection to the database server could not be opened, on either dialect, sync or asyncio.
    ``reason`` says why:

    - ``"authentication"``: the server refused the login (wrong password, no such user, an account
      not allowed to log in from this host);
    - ``"authorization"``: the account logged in but may not connect to that database;
    - ``"unknown_database"``: the DSN names a database that does not exist;
    - ``"unreachable"``: anything else: the server refused or timed out, the host name is unknown,
      the server is starting up or has no connection slot left, no host of a multi-host DSN was
      writable.

    The first three are configuration errors that trying again does not mend (``retryable`` is
    False); an unreachable server may come back. The driver's exception is ``__cause__``, the
    DSN's passwords masked in its text too. The message never contains the DSN's password. Also one of the dialect's connection errors, so
    code that reconnects after a lost connection (a worker) tries again on it as before.

    PostgreSQL sends no SQLSTATE for a refused connection: the reason is read from the server's
    message, so a server whose lc_messages is not English reports every failure as unreachable."""

    REASONS = ("authentication", "authorization", "unknown_database", "unreachable")

    def __init__(self, message: str, reason: str = "unreachable") -> None:
        super().__init__(message)
        self.reason = reason if reason in self.REASONS else "unreachable"

    @property
    def retryable(self) -> bool:
        """Whether connecting again with the same DSN may succeed (the server was unreachable)."""
        return self.reason == "unreachable"


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
    """Another account could make the routines act on its own objects, so the step was refused.
    PostgreSQL: a role other than the installing one can CREATE in the install schema (it could
    plant look-alike functions the routines would run); the install was refused. MySQL/MariaDB: the
    account to be granted a capability may create temporary tables in the install database (a
    temporary table would shadow the queue's own tables inside the routines); the grant was refused."""


class Cancelled(Exception):
    """Raised by a handler (or a task) to stop for a cancel: the message ends as cancelled
    (queue_cancel_held) instead of failing. ``job.raise_if_cancelled()`` raises it when a cancel
    was requested; a handler may also raise it unasked, to cancel its own job."""


class TaskFailed(QueueError):
    """TaskHandle.result(): the job failed on its last allowed delivery (dead-lettered or dropped),
    or gave up; ``last_error`` is the error of its last delivery, ``attempts`` its deliveries."""

    def __init__(self, message: str, last_error: str | None = None, attempts: int | None = None) -> None:
        super().__init__(message)
        self.last_error = last_error
        self.attempts = attempts


class TaskCancelled(QueueError):
    """TaskHandle.result(): the job was cancelled (before it ran, or its handler stopped for it)."""


class UnknownTaskError(QueueError):
    """A message of a queue an App serves whose kind no task of the app has (the job fails with it)."""


class ResultNotFoundError(QueueError, LookupError):
    """TaskHandle.result(): no live message and no stored result with that key and kind: never
    deferred, its queue keeps no results, its result expired, or it was removed or moved."""


ERROR_CODES: dict[str, type[QueueError]] = {
    "unknown_queue": UnknownQueueError,
    "invalid_argument": InvalidArgumentError,
    "invalid_payload": InvalidPayloadError,
    "insecure_schema": InsecureSchemaError,
}


def install_command(extra: str) -> str:
    """How to install an extra of this package, which is on no index: from a checkout, or the
    wheel `make wheel` builds."""
    return (
        f"pip install -e '.[{extra}]' (from a checkout) or "
        f"pip install 'dist/pyqueue_sql-{_version()}-py3-none-any.whl[{extra}]' (after `make wheel`)"
    )


def _version() -> str:
    """This distribution's version (the wheel's file name has it)."""
    from importlib import metadata

    try:
        return metadata.version("pyqueue-sql")
    except metadata.PackageNotFoundError:
        return "0.1.0"
