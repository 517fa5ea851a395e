"""Exceptions raised by pyqueue-sql.

The database routines refuse bad input with a message of the form
``pyqueue:<code>: <detail>``; the dialects map that code to one of these.

Every public exception of the package is defined here, below every other module (this one
imports nothing of the package at import time, and no third-party package), and imported back
where it was first defined, so both paths work: a handler's outcomes Retry, GiveUp, Snooze and
PayloadMismatchError (pyqueue_sql.worker.policy, pyqueue_sql.tasks), the worker's StoppedError,
StartTimeoutError (pyqueue_sql.worker.steps), TimeLimitExceeded and CancelStopped
(pyqueue_sql.worker.interrupt), the migrator's MigrationError and its subclasses (pyqueue_sql.migrate), IngestRejectedError
(pyqueue_sql.spark), EmbeddedPostgresError (pyqueue_sql.embedded). tests/unit/test_errors_module.py
fails on an exception defined elsewhere that is not internal to its module. pyqueue_sql itself exports every one a user catches or raises.
"""

from __future__ import annotations

import datetime as dt
import re
import sys
from typing import Any


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


class ConnectionLostError(ConnectionFailedError):
    """A client call lost its connection to the server (the server was restarted, the session was
    killed: pg_terminate_backend, KILL CONNECTION; the network dropped), on either dialect, sync or
    asyncio. ``took_effect`` says what became of the call: False when it certainly did not (the
    connection was gone before the call was sent, or the call ran inside a transaction that was not
    committed), None when that cannot be known (the call was sent and no answer came: it may have
    committed). The driver's exception is ``__cause__``.

    A Database made by ``connect`` opens a new connection at its next call (a transaction of yours
    that was open is gone: run it again); a wrapped connection (``Database.wrap``) is yours to
    replace. A ConnectionFailedError whose reason is "unreachable", so code that reconnects on a
    connection error (a worker) treats it as one."""

    def __init__(self, message: str, took_effect: bool | None = None) -> None:
        super().__init__(message, "unreachable")
        self.took_effect = took_effect


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


# -- what a handler raises to decide its job's outcome (pyqueue_sql.worker.policy) -----------------


def seconds_of(after: float | dt.timedelta | None, what: str) -> float:
    """A delay given as seconds or a timedelta, as seconds (>= 0)."""
    if after is None:
        return 0.0
    seconds = after.total_seconds() if isinstance(after, dt.timedelta) else after
    if isinstance(seconds, bool) or not isinstance(seconds, (int, float)) or not seconds >= 0:
        raise InvalidArgumentError(f"{what} takes seconds >= 0 or a timedelta, not {after!r}")
    return float(seconds)


class Retry(Exception):
    """Raised by a handler: fail this delivery (it counts as an attempt) and run the message
    again after ``after`` (seconds or a timedelta) instead of the retry policy's delay. On
    the last allowed delivery the message is dead-lettered as after any failure."""

    def __init__(self, after: float | dt.timedelta | None = None, reason: str = "") -> None:
        self.after = seconds_of(after, "Retry(after=)")
        super().__init__(reason or f"retry in {self.after:g} s")


class GiveUp(Exception):
    """Raised by a handler: no further attempt; the message goes to the dead-letter queue now
    (dropped when its queue has none), with this error."""

    def __init__(self, reason: str = "") -> None:
        self.reason = reason
        super().__init__(reason)


class Snooze(Exception):
    """Raised by a handler: give the message back, to run again after ``after`` (seconds or a
    timedelta), without using up an attempt (queue_snooze)."""

    def __init__(self, after: float | dt.timedelta | None = None) -> None:
        self.after = seconds_of(after, "Snooze(after=)")
        super().__init__(f"snoozed for {self.after:g} s")


class PayloadMismatchError(GiveUp, TypeError):
    """A message's payload does not fit its task's signature (an argument of another type than
    its annotation, an unknown or a missing argument, a payload that is not a JSON object): the
    job fails at once, without retries (it is a GiveUp), since it cannot succeed later. Also
    raised by defer for an argument that does not fit its annotation."""


class UnreadablePayloadError(GiveUp, QueueError):
    """A message whose stored payload or headers this client could not read (a
    pyqueue_sql.dialects.UnreadableJSON in its place): the worker fails it at once, without
    running its handler and without retries (it is a GiveUp), naming why; the other messages reserved
    with it run."""


# -- the worker's own (pyqueue_sql.worker.steps, pyqueue_sql.worker.interrupt) --------------------


class StoppedError(Exception):
    """Raised inside a retrying database call when the worker is abandoning it."""


class TimeLimitExceeded(BaseException):
    """Raised inside a plain handler's thread when its timeout has passed (the worker has failed its
    message with TimeoutError already). A BaseException, as KeyboardInterrupt is, so that an
    ``except Exception`` of the handler does not swallow it; its ``finally`` blocks run."""


class CancelStopped(BaseException):
    """Raised inside a plain handler's thread when it still runs CANCEL_GRACE seconds after the
    worker learnt of its job's cancel (pyqueue_sql.worker.watch): its message ends as cancelled. A BaseException,
    as TimeLimitExceeded is, so that an ``except Exception`` of the handler does not swallow it;
    its ``finally`` blocks run."""


class StartTimeoutError(ConnectionFailedError):
    """The worker never connected within its start_timeout: it ends instead of retrying."""

    retryable = False  # type: ignore[assignment]  # (a property in the base class)


# -- the migrator's (pyqueue_sql.migrate) ----------------------------------------------------------


class MigrationError(QueueError):
    """A migrate run refused or could not finish (nothing is undone on MySQL: run it again)."""


class UnrecordedSchemaError(MigrationError):
    """pyqueue-sql objects exist but pyqueue_alembic_version records no revision
    (installed from `pyqueue-sql sql` or by hand). Nothing was changed."""

    def __init__(self, message: str, found: list[str]) -> None:
        super().__init__(message)
        self.found = found


class SchemaMismatchError(MigrationError):
    """adopt=True, but the catalog matches no known revision exactly. Nothing was changed."""


class MigrationInterrupted(MigrationError):
    """The run was interrupted (Ctrl-C, a lost connection); running it again resumes it."""


class MigrationLockTimeout(MigrationError):
    """Another migrator held the migration lock for too long."""


class LiveMessagesError(MigrationError):
    """A downgrade that would drop live messages was not confirmed. Nothing was changed by it."""

    def __init__(self, message: str, live: int) -> None:
        super().__init__(message)
        self.live = live


# -- Spark ingest (pyqueue_sql.spark) --------------------------------------------------------------


class IngestRejectedError(InvalidArgumentError):
    """queue_ingest_flush (MySQL/MariaDB) refused rows: they are in pyqueue_ingest_reject
    with their reasons; the valid rows of the same flush are enqueued."""

    def __init__(self, message: str, result: Any) -> None:  # result: a pyqueue_sql.spark.IngestResult
        super().__init__(message)
        self.result = result


# -- the embedded server (pyqueue_sql.embedded) ----------------------------------------------------


class EmbeddedPostgresError(RuntimeError):
    """The embedded server is not installed or would not start."""


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
    """This package's version (the wheel's file name has it): the code's own, not the installed
    distribution's metadata, which an editable install keeps from when it was installed. Read from
    the package, which Python imported before this module (no import of it here: the package
    imports this module)."""
    return str(sys.modules[__package__].__version__)
