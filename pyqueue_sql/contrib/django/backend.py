"""PyQueueBackend: Django's task framework (django.tasks, or the django-tasks backport) on
pyqueue-sql.

A Django task enqueued here is one pyqueue-sql message: on the queue named by the task's
``queue_name``, of the kind ``task.module_path`` (the task's name among the project's tasks: the
worker looks it up there, it never imports it), under a fresh key, with the payload
``{"args": [...], "kwargs": {...}}``. The TaskResult's id is ``"<queue>:<kind>:<key>"``, so that
``get_result(id)`` finds the message, or its stored result, from the id alone.

The enqueue needs only the producer capability: the queues are set up (created, given their
settings and result retention) where the admin capability is held: ``manage.py migrate`` (after
the migrations, on the backend's ``ADMIN_DSN``), ``manage.py pyqueue_setup``, or the worker at its
start when its account may."""

from __future__ import annotations

import datetime as dt
import threading
import uuid
import weakref
from typing import Any

from django.db import DEFAULT_DB_ALIAS

import pyqueue_sql
from pyqueue_sql.tasks import new_key

from . import compat, registry
from .connection import dsn_for, wrapped

# Where the worker records a failed task's exception for get_result (the message's progress,
# which pyqueue-sql keeps with its result): Django's TaskError has the exception's import path and
# its traceback, pyqueue-sql's last_error only "Type: message".
ERROR_PROGRESS_KEY = "django_task_error"
# Where the worker records a task's times and arguments (the message's progress, kept with its
# result, readable from SQL: queue_result(...).progress -> 'django_task'): started_at (the first
# attempt's start), last_attempted_at (this attempt's), args and kwargs, as ISO 8601 and JSON.
META_PROGRESS_KEY = "django_task"
CANCELLED_ERROR = "pyqueue_sql.errors.TaskCancelled"
DEFAULT_RESULT_RETENTION = dt.timedelta(days=1)
_DRIVER_HINT = (
    "PostgreSQL: install psycopg 3 (pip install 'psycopg[binary]'); MySQL/MariaDB: PyMySQL installed as "
    "MySQLdb (import pymysql; pymysql.install_as_MySQLdb() in settings.py)"
)

# Every backend's own connections open in this process (one per thread and backend: Django makes
# a backend per thread), so that close_all() reaches the ones of other threads too.
_OPEN: set[pyqueue_sql.Database] = set()
_OPEN_LOCK = threading.Lock()


def _close_each(opened: set[pyqueue_sql.Database]) -> None:
    """Closes the connections of one backend (``opened``, emptied) and forgets them. Also the
    finalizer of a backend Django dropped (a thread's that ended): it takes no lock, since the
    garbage collector may run it inside a block that holds _OPEN_LOCK."""
    dbs = list(opened)
    opened.clear()
    for db in dbs:
        _OPEN.discard(db)
        try:
            db.close()
        except Exception:  # noqa: BLE001 - a connection the server already dropped
            pass


def close_all() -> int:
    """Closes the own connections (get_result's, cancel's) of every PyQueueBackend of this
    process, in every thread; returns how many. Run when Django closes its connections (the app
    connects it to the end of each request and to the test runner's teardown), and by hand before
    dropping a database or forking."""
    with _OPEN_LOCK:
        opened = list(_OPEN)
        _OPEN.clear()
    for db in opened:
        try:
            db.close()
        except Exception:  # noqa: BLE001 - a connection the server already dropped
            pass
    return len(opened)


def result_id(queue: str, kind: str, key: str) -> str:
    return f"{queue}:{kind}:{key}"


def parse_result_id(value: str) -> tuple[str, str, str]:
    """(queue, kind, key) of a TaskResult id; the queue's name may hold colons, the kind (an
    import path) and the key (a hex UUID) never do."""
    parts = str(value).rsplit(":", 2)
    if len(parts) != 3 or not all(parts):
        raise compat.TaskResultDoesNotExist(value)
    return parts[0], parts[1], parts[2]


class PyQueueBackend(compat.BaseTaskBackend):
    """``TASKS = {"default": {"BACKEND": "pyqueue_sql.contrib.django.PyQueueBackend", "QUEUES":
    ["default"], "OPTIONS": {...}}}``. OPTIONS: ``DATABASE`` (the Django database alias whose
    connection and transaction an enqueue joins; default "default"), ``DSN`` (the DSN of the
    worker's and get_result's own connections, when it must differ from the one built from
    ``DATABASES``, e.g. another account), ``ADMIN_DSN`` (the account that sets the queues up, on
    ``manage.py migrate`` and ``manage.py pyqueue_setup``; default ``DSN``), ``TASK_MODULES``
    (modules defining tasks beyond the ``tasks`` modules of INSTALLED_APPS), ``RESULT_RETENTION``
    (how long the queues keep results: a timedelta or seconds; default a day), ``QUEUE_SETTINGS``
    (keyword arguments of ``Queue.create`` for every queue, e.g. ``{"max_attempts": 3}``)."""

    supports_defer = True
    supports_async_task = True
    supports_get_result = True
    supports_priority = True

    def __init__(self, alias: str, params: dict) -> None:
        super().__init__(alias, params)
        self.database = self.options.get("DATABASE", DEFAULT_DB_ALIAS)
        retention = self.options.get("RESULT_RETENTION", DEFAULT_RESULT_RETENTION)
        if isinstance(retention, (int, float)) and not isinstance(retention, bool):
            retention = dt.timedelta(seconds=retention)
        self.result_retention = retention
        self.queue_settings = dict(self.options.get("QUEUE_SETTINGS", {}))
        self.task_modules = tuple(str(m) for m in self.options.get("TASK_MODULES", ()) or ())
        self._local = threading.local()
        # this backend's own connections, every thread's: get_result run by aget_result (Django's
        # sync_to_async) opens one in an executor's thread, which close() in the caller's reaches
        self._opened: set[pyqueue_sql.Database] = set()
        weakref.finalize(self, _close_each, self._opened)

    # -- connections -------------------------------------------------------------------
    @property
    def dsn(self) -> str:
        return self.options.get("DSN") or dsn_for(self.database)

    @property
    def admin_dsn(self) -> str:
        return self.options.get("ADMIN_DSN") or self.dsn

    def own_database(self) -> pyqueue_sql.Database:
        """This thread's own connection (get_result, cancel): never in the caller's transaction,
        so a result is read as committed."""
        db = getattr(self._local, "db", None)
        if db is None or db not in _OPEN:  # none yet, or closed by close() or close_all()
            stale, db = db, pyqueue_sql.connect(self.dsn)
            self._local.db = db
            with _OPEN_LOCK:
                self._opened.discard(stale)
                _OPEN.add(db)
                self._opened.add(db)
        return db

    def close_thread(self) -> None:
        """Closes this thread's own connection (the next call opens another): what the end of a
        request closes, leaving the other threads' connections to their requests."""
        db = getattr(self._local, "db", None)
        if db is not None:
            self._local.db = None
            with _OPEN_LOCK:
                _OPEN.discard(db)
                self._opened.discard(db)
            db.close()

    def close(self) -> None:
        """Closes every own connection of this backend, in every thread (get_result's of an
        aget_result ran in an executor's thread too); a thread's next call opens another. For a
        teardown: a call of another thread running meanwhile loses its connection."""
        self._local.db = None
        with _OPEN_LOCK:
            opened = set(self._opened)
            self._opened.difference_update(opened)
        _close_each(opened)

    def setup_queues(self, queues: Any = None, *, dsn: str | None = None) -> list[str]:
        """Creates the backend's queues (or the ones named) with its QUEUE_SETTINGS and result
        retention, on a connection of the admin account (``ADMIN_DSN``, or ``dsn``): what
        ``manage.py migrate`` and ``manage.py pyqueue_setup`` run. Returns the queues set up."""
        names = sorted(set(queues or self.queues))
        with pyqueue_sql.connect(dsn or self.admin_dsn) as db:
            for name in names:
                queue = db.queue(name).create(**self.queue_settings)
                queue.set_result_retention(self.result_retention)
        return names

    def task(self, kind: str, queue: str | None = None) -> Any:
        """The project's task of this kind (registry.resolve): never imported from the name."""
        return registry.resolve(kind, queue, self.alias, self.task_modules)

    # -- enqueue -----------------------------------------------------------------------
    def enqueue(self, task: Any, args: Any, kwargs: Any) -> Any:
        self.validate_task(task)
        key = new_key()  # time-ordered (UUIDv7): the enqueue's time, to the millisecond, is in it
        kind = task.module_path
        payload = {"args": compat.normalize_json(list(args)), "kwargs": compat.normalize_json(dict(kwargs))}
        try:
            wrapped(self.database).queue(task.queue_name).push(
                key, kind, payload, run_at=task.run_after, priority=task.priority
            )
        except pyqueue_sql.UnknownQueueError as exc:
            raise pyqueue_sql.UnknownQueueError(
                f"{exc}: the backend's queues are set up by `manage.py migrate` or `manage.py pyqueue_setup` "
                "(as an account with the admin capability)"
            ) from None

        result = compat.TaskResult(
            task=task,
            id=result_id(task.queue_name, kind, key),
            status=compat.TaskResultStatus.READY,
            enqueued_at=enqueued_at(key),
            started_at=None,
            finished_at=None,
            last_attempted_at=None,
            args=payload["args"],
            kwargs=payload["kwargs"],
            backend=self.alias,
            errors=[],
            worker_ids=[],
        )
        compat.task_enqueued.send(type(self), task_result=result)
        return result

    # -- results -----------------------------------------------------------------------
    def get_result(self, result_id: str) -> Any:
        queue, kind, key = parse_result_id(result_id)
        if self.queues and queue not in self.queues:
            raise compat.TaskResultDoesNotExist(result_id)
        try:
            task = self.task(kind, queue)
        except registry.UnknownTask as exc:
            raise compat.TaskResultDoesNotExist(result_id) from exc
        db = self.own_database()
        state = db.queue(queue).result(key, kind)
        if state.state == "unknown":
            raise compat.TaskResultDoesNotExist(result_id)
        meta = recorded_meta(state.progress)
        args: list = list(meta.get("args") or [])
        kwargs: dict = dict(meta.get("kwargs") or {})
        if not state.finished and not meta:
            try:  # queue_message is the monitor's: a producer-only web tier reads no arguments
                live = db.queue(queue).message(key, kind)
            except pyqueue_sql.PermissionDeniedError:
                live = None
            if live is not None and isinstance(live.payload, dict):
                args = list(live.payload.get("args") or [])
                kwargs = dict(live.payload.get("kwargs") or {})
        return self.task_result(task, result_id, state, args, kwargs)

    def task_result(self, task: Any, id: str, state: pyqueue_sql.Result, args: list, kwargs: dict) -> Any:
        meta = recorded_meta(state.progress)
        Status = compat.TaskResultStatus
        status = {
            "reserved": Status.RUNNING,
            "succeeded": Status.SUCCESSFUL,
            "failed": Status.FAILED,
            "cancelled": Status.FAILED,
        }.get(state.state, Status.READY)
        errors = []
        if state.state == "failed":
            errors.append(_task_error(state))
        elif state.state == "cancelled":
            errors.append(compat.TaskError(exception_class_path=CANCELLED_ERROR, traceback="cancelled"))
        attempts = state.attempts or 0
        result = compat.TaskResult(
            task=task.using(queue_name=id.rsplit(":", 2)[0])
            if task.queue_name != id.rsplit(":", 2)[0]
            else task,
            id=id,
            status=status,
            enqueued_at=enqueued_at(id.rsplit(":", 1)[1]),
            started_at=parse_time(meta.get("started_at")),
            finished_at=state.finished_at,
            last_attempted_at=parse_time(meta.get("last_attempted_at")),
            args=args,
            kwargs=kwargs,
            backend=self.alias,
            errors=errors,
            worker_ids=_worker_ids(meta, attempts),
        )
        if status == Status.SUCCESSFUL:
            object.__setattr__(result, "_return_value", state.result)
        return result

    # -- system checks (manage.py check, runserver, migrate) ----------------------------
    def check(self, **kwargs: Any) -> Any:
        """Errors Django reports before anything runs: the app missing from INSTALLED_APPS, a
        DATABASE that is not in DATABASES, not PostgreSQL or MySQL/MariaDB, or whose driver
        pyqueue-sql cannot run on."""
        from django.apps import apps
        from django.core import checks
        from django.db import connections

        from .connection import DRIVERS, DSN_SCHEMES

        yield from super().check(**kwargs)
        where = f"TASKS[{self.alias!r}]"
        if not apps.is_installed("pyqueue_sql.contrib.django"):
            yield checks.Error(
                f"{where} is a PyQueueBackend, but the app pyqueue_sql.contrib.django is not in INSTALLED_APPS "
                "(its migration installs the schema, and its commands run the worker and set the queues up)",
                hint='add "pyqueue_sql.contrib.django" to INSTALLED_APPS',
                id="pyqueue_sql.E004",
            )
        if self.database not in connections.settings:
            yield checks.Error(
                f"{where}: OPTIONS['DATABASE'] {self.database!r} is not in DATABASES", id="pyqueue_sql.E001"
            )
            return
        try:
            connection = connections[self.database]
            driver = connection.Database.__name__
        except Exception as exc:  # the backend's driver is not installed
            yield checks.Error(
                f"{where}: Django cannot load the driver of DATABASES[{self.database!r}]: {exc}",
                hint=_DRIVER_HINT,
                id="pyqueue_sql.E003",
            )
            return
        if connection.vendor not in DSN_SCHEMES:
            yield checks.Error(
                f"{where}: DATABASES[{self.database!r}] is {connection.vendor}; pyqueue-sql needs PostgreSQL "
                "or MySQL/MariaDB",
                id="pyqueue_sql.E002",
            )
        elif driver not in DRIVERS:
            yield checks.Error(
                f"{where}: DATABASES[{self.database!r}] runs on {driver}, which pyqueue-sql's enqueue cannot use",
                hint=_DRIVER_HINT,
                id="pyqueue_sql.E003",
            )

    # -- cancel (not part of Django's API) -----------------------------------------------
    def cancel(self, result_id: str) -> bool:
        """Cancels the task of this result (Queue.cancel): True when it was cancelled (it was
        waiting) or a cancel was requested (it is running); its result is then FAILED with the
        error pyqueue_sql.errors.TaskCancelled. The same rule as get_result: an id of a queue that is
        not the backend's names no task of it, and is cancelled by nothing (False)."""
        queue, kind, key = parse_result_id(result_id)
        if self.queues and queue not in self.queues:
            return False
        return self.own_database().queue(queue).cancel(key, kind) in ("cancelled", "requested")


def enqueued_at(key: str) -> dt.datetime | None:
    """The time of the enqueue, from the message's key (a UUIDv7 made by enqueue: its first 48 bits
    are the milliseconds since 1970); None for a key of another form."""
    try:
        value = uuid.UUID(key)
    except ValueError:
        return None
    if value.version != 7:
        return None
    return dt.datetime.fromtimestamp((value.int >> 80) / 1000, tz=dt.timezone.utc)


def recorded_meta(progress: Any) -> dict:
    """What the worker recorded of the task in the message's progress (META_PROGRESS_KEY)."""
    meta = progress.get(META_PROGRESS_KEY) if isinstance(progress, dict) else None
    return meta if isinstance(meta, dict) else {}


def _worker_ids(meta: dict, attempts: int) -> list[str]:
    """One worker id per attempt: those the worker recorded, "pyqueue-sql" for the others (an
    attempt running now, or one that ended without recording: a worker killed)."""
    recorded = [str(w) for w in meta.get("worker_ids") or []][:attempts]
    return recorded + ["pyqueue-sql"] * (attempts - len(recorded))


def parse_time(value: Any) -> dt.datetime | None:
    """A time the worker recorded in a message's meta (ISO 8601), or None if absent or unreadable."""
    if not isinstance(value, str):
        return None
    try:
        return dt.datetime.fromisoformat(value)
    except ValueError:
        return None


def _task_error(state: pyqueue_sql.Result) -> Any:
    recorded = state.progress.get(ERROR_PROGRESS_KEY) if isinstance(state.progress, dict) else None
    if isinstance(recorded, dict) and {"exception_class_path", "traceback"} <= recorded.keys():
        return compat.TaskError(
            exception_class_path=str(recorded["exception_class_path"]), traceback=str(recorded["traceback"])
        )
    text = state.last_error or ""
    name = text.split(":", 1)[0].strip() if ":" in text else "Exception"
    path = name if "." in name else f"builtins.{name}"
    return compat.TaskError(exception_class_path=path, traceback=text)
