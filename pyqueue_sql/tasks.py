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
"""

from __future__ import annotations

import asyncio
import collections.abc
import contextlib
import contextvars
import dataclasses
import datetime as dt
import decimal
import enum
import inspect
import math
import os
import threading
import time
import types
import typing
import uuid
import weakref
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, Generic, ParamSpec, TypeVar, overload

from . import errors
from .client import Database, NewMessage, ParentResult, Result, connect, headers_value, parent_refs
from .worker.model import Job
from .worker.policy import GiveUp, RetryPolicy

if TYPE_CHECKING:
    from .aio.client import AsyncDatabase
    from .aio.worker import AsyncWorker
    from .worker.threaded import Worker

__all__ = [
    "App",
    "JobReport",
    "PayloadMismatchError",
    "Periodic",
    "RunReport",
    "Task",
    "TaskCall",
    "TaskHandle",
    "UnknownTaskError",
    "current_job",
    "occurrence_time",
    "running_job",
]

P = ParamSpec("P")
R = TypeVar("R")
T = TypeVar("T")

DEFAULT_QUEUE = "default"

# How long app.create_queues() keeps the results of a queue with a store_result task, when it
# keeps none yet.
DEFAULT_RESULT_RETENTION = dt.timedelta(days=1)

_current_job: contextvars.ContextVar[Job | None] = contextvars.ContextVar("pyqueue_sql_job", default=None)


def current_job() -> Job:
    """The job whose task is running (its key, kind, attempts...), inside a task or middleware."""
    job = _current_job.get()
    if job is None:
        raise errors.QueueError("current_job() is for the code a worker runs for a job")
    return job


@contextlib.contextmanager
def running_job(job: Job) -> collections.abc.Iterator[Job]:
    """Makes ``job`` the current_job() of the code run inside: for a handler that runs other code
    on the job's behalf (the Django app's worker runs Django tasks this way)."""
    token = _current_job.set(job)
    try:
        yield job
    finally:
        _current_job.reset(token)


_OCCURRENCE_KEY_FORMAT = "%Y-%m-%dT%H:%M:%SZ"


def occurrence_time(job: Job) -> dt.datetime:
    """The time a job was due (UTC): for a schedule's occurrence, the time in its key
    (``p_key@YYYY-MM-DDTHH:MM:SSZ``, see the contract's Schedules), however late it runs; for any
    other message, the time it was first due (scheduled_at_initially)."""
    _, at, stamp = job.key.rpartition("@")
    if at:
        try:
            return dt.datetime.strptime(stamp, _OCCURRENCE_KEY_FORMAT).replace(tzinfo=dt.timezone.utc)
        except ValueError:
            pass
    initially = job.scheduled_at_initially
    if isinstance(initially, dt.datetime):
        return initially if initially.tzinfo is not None else initially.replace(tzinfo=dt.timezone.utc)
    return dt.datetime.now(dt.timezone.utc).replace(microsecond=0)


class UnknownTaskError(errors.QueueError):
    """A message of a queue the app serves whose kind no task of the app has."""


_key_lock = threading.Lock()
_key_ms = 0  # the millisecond of this process's last key
_key_seq = 0  # its 12-bit counter within that millisecond (RFC 9562, method 1)


def new_key() -> str:
    """A fresh key, time-ordered like a UUIDv7 (48 bits of milliseconds, a 12-bit counter, then
    random bits), so the live table's primary key grows at its right edge (see DESIGN.md, "Tasks
    over the contract"). Within one process each key sorts after the one before, also inside one
    millisecond or when the clock steps back: the counter starts at a random value in its lower
    half at each new millisecond and counts up; when it runs out, the key borrows the next
    millisecond."""
    global _key_ms, _key_seq
    with _key_lock:
        ms = time.time_ns() // 1_000_000
        if ms > _key_ms:
            _key_ms, _key_seq = ms, int.from_bytes(os.urandom(2), "big") & 0x7FF
        elif _key_seq < 0xFFF:
            _key_seq += 1
        else:
            _key_ms, _key_seq = _key_ms + 1, 0
        ms, seq = _key_ms, _key_seq
    raw = bytearray(ms.to_bytes(6, "big") + (0x7000 | seq).to_bytes(2, "big") + os.urandom(8))
    raw[8] = (raw[8] & 0x3F) | 0x80  # RFC 4122 variant
    return str(uuid.UUID(bytes=bytes(raw)))


async def _close_at_loop_end(db: AsyncDatabase) -> collections.abc.AsyncIterator[None]:
    """Closes an app's per-loop AsyncDatabase when its event loop shuts down: asyncio.run (and
    loop.shutdown_asyncgens) closes every async generator still suspended on the loop, while the
    loop still runs, which runs this finally. Without it the connection outlived its loop, and its
    finalizer failed later on the closed loop ("Event loop is closed")."""
    try:
        yield
    finally:
        await db.close()


# -- values to JSON and back ------------------------------------------------------------------


class _NotJson(Exception):
    pass


def _is_pydantic_model(value: Any) -> bool:
    return hasattr(type(value), "model_fields") and hasattr(value, "model_dump")


def _to_json(value: Any) -> Any:
    """value as JSON-native data (dict, list, str, int, float, bool, None); _NotJson if it has none."""
    if value is None or isinstance(value, (bool, str)):
        return value
    if isinstance(value, enum.Enum):
        return _to_json(value.value)
    if isinstance(value, int):
        return int(value)
    if isinstance(value, float):
        if not math.isfinite(value):
            raise _NotJson(f"{value!r} is not a JSON number")
        return value
    if isinstance(value, (dt.datetime, dt.date, dt.time)):
        return value.isoformat()
    if isinstance(value, dt.timedelta):
        return value.total_seconds()
    if isinstance(value, uuid.UUID):
        return str(value)
    if isinstance(value, decimal.Decimal):
        if not value.is_finite():
            raise _NotJson(f"{value!r} is not a JSON number")
        return str(value)
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {f.name: _to_json(getattr(value, f.name)) for f in dataclasses.fields(value)}
    if _is_pydantic_model(value):
        return value.model_dump(mode="json")
    if isinstance(value, collections.abc.Mapping):
        out = {}
        for k, v in value.items():
            if not isinstance(k, str):
                raise _NotJson(f"a JSON object's keys are strings, not {type(k).__name__} ({k!r})")
            out[k] = _to_json(v)
        return out
    if isinstance(value, (list, tuple, set, frozenset)):
        items = [_to_json(v) for v in value]
        if isinstance(value, (set, frozenset)):
            items.sort(key=repr)
        return items
    raise _NotJson(f"JSON has no type for {type(value).__name__}")


_UNION_TYPES: tuple[Any, ...] = (typing.Union, types.UnionType)
_SEQUENCES = (list, collections.abc.Sequence, collections.abc.MutableSequence, collections.abc.Iterable)
_SETS = (set, frozenset, collections.abc.Set, collections.abc.MutableSet)
_MAPPINGS = (dict, collections.abc.Mapping, collections.abc.MutableMapping)


class PayloadMismatchError(GiveUp, TypeError):
    """A message's payload does not fit its task's signature (an argument of another type than
    its annotation, an unknown or a missing argument, a payload that is not a JSON object): the
    job fails at once, without retries (it is a GiveUp), since it cannot succeed later. Also
    raised by defer for an argument that does not fit its annotation."""


class _Mismatch(Exception):
    """JSON data that does not fit an annotation: where in the value (``[2]``, ``['k']``,
    ``.field``), what was expected, what came."""

    def __init__(self, expected: str, data: Any, where: str = "", detail: str = "") -> None:
        self.expected, self.data, self.where, self.detail = expected, data, where, detail
        super().__init__(self.text())

    def inside(self, step: str) -> _Mismatch:
        self.where = step + self.where
        return self

    def text(self) -> str:
        shown = repr(self.data)
        if len(shown) > 60:
            shown = shown[:57] + "..."
        got = "null (None)" if self.data is None else f"{shown} ({_json_type_name(self.data)})"
        return f"is {got}, expected {self.expected}" + (f" ({self.detail})" if self.detail else "")


def _json_type_name(data: Any) -> str:
    names: dict[type, str] = {dict: "object", list: "array"}
    return names.get(type(data), type(data).__name__)


def _type_text(hint: Any) -> str:
    """An annotation as a reader writes it: int | None, list[str], Literal['a', 'b'], Address."""
    if hint is type(None) or hint is None:
        return "None"
    origin = typing.get_origin(hint)
    args = typing.get_args(hint)
    if origin is typing.Annotated:
        return _type_text(args[0])
    if origin is typing.Literal:
        return f"Literal[{', '.join(map(repr, args))}]"
    if origin in _UNION_TYPES:
        return " | ".join(_type_text(a) for a in args)
    if origin is not None:
        name = getattr(origin, "__name__", str(origin))
        return (
            f"{name}[{', '.join('...' if a is Ellipsis else _type_text(a) for a in args)}]" if args else name
        )
    return getattr(hint, "__name__", str(hint).replace("typing.", ""))


def _detail(exc: BaseException) -> str:
    """What a conversion's error says, when it says something a reader can use."""
    if isinstance(exc, decimal.DecimalException):
        return ""  # its text is [<class 'decimal.ConversionSyntax'>]
    errors_of = getattr(exc, "errors", None)
    if callable(errors_of):  # pydantic's ValidationError: its first errors, each on its path
        try:
            return "; ".join(
                f"{'.'.join(map(str, e.get('loc', ()))) or 'value'}: {e.get('msg')}" for e in errors_of()[:3]
            )
        except Exception:
            pass
    return str(exc).splitlines()[0] if str(exc) else type(exc).__name__


_Reader = Callable[[Any], Any]


def _reader(hint: Any) -> _Reader | None:
    """How JSON data is checked against the annotation `hint` and rebuilt as it says: a function
    that returns the value or raises _Mismatch; None when any data is taken as it is (no
    annotation, Any, object, an annotation that does not resolve). JSON-native types are checked
    as they are (an int is not a bool, nor a float; a float takes an int), containers item by
    item, unions in their order, Literal by value and type; the types JSON has none for
    (datetime, UUID, Decimal, Enum, dataclasses, pydantic models...) are rebuilt from what
    _to_json writes, a value they cannot be rebuilt from being a mismatch."""
    if hint is Any or hint is inspect.Parameter.empty or hint is object or isinstance(hint, (str, TypeVar)):
        return None
    origin = typing.get_origin(hint)
    args = typing.get_args(hint)
    expected = _type_text(hint)
    if origin is typing.Annotated:
        return _reader(args[0])
    if hint is type(None) or hint is None:

        def none(data: Any) -> Any:
            if data is None:
                return None
            raise _Mismatch("None", data)

        return none
    if hint in (str, bool, int):

        def exact(data: Any) -> Any:
            if type(data) is hint:
                return data
            raise _Mismatch(expected, data)

        exact.exact = hint  # type: ignore[attr-defined]  # (what containers check inline)
        return exact
    if hint is float:

        def number(data: Any) -> Any:
            kind = type(data)
            if kind is float:
                return data
            if kind is int:
                return float(data)
            raise _Mismatch(expected, data)

        return number
    if origin is typing.Literal:
        allowed = [(a, type(a)) for a in args]

        def literal(data: Any) -> Any:
            for value, kind in allowed:
                if data == value and type(data) is kind:
                    return data
                if isinstance(value, enum.Enum) and data == value.value and type(data) is type(value.value):
                    return value
            raise _Mismatch(expected, data)

        return literal
    if origin in _UNION_TYPES:
        readers = [_reader(a) for a in args]
        if any(r is None for r in readers):
            return None

        optional = (
            next((r for a, r in zip(args, readers) if a is not type(None)), None) if len(args) == 2 else None
        )
        if optional is not None and type(None) in args:

            def optional_value(data: Any) -> Any:
                if data is None:
                    return None
                try:
                    return optional(data)
                except _Mismatch as m:
                    if not m.where:  # the value itself: say both types it could be
                        m.expected = expected
                    raise

            return optional_value

        def union(data: Any) -> Any:
            for r in readers:
                try:
                    return r(data)  # type: ignore[misc]
                except _Mismatch:
                    continue
            raise _Mismatch(expected, data)

        return union
    if origin is tuple or hint is tuple:
        if args and not (len(args) == 2 and args[1] is Ellipsis):
            items = [_reader(a) for a in args]

            def fixed_tuple(data: Any) -> Any:
                if type(data) is not list:
                    raise _Mismatch(expected, data)
                if len(data) != len(items):
                    raise _Mismatch(expected, data, detail=f"{len(data)} items, not {len(items)}")
                return tuple(
                    v if r is None else _read_item(r, v, f"[{i}]")
                    for i, (r, v) in enumerate(zip(items, data))
                )

            return fixed_tuple
        return _array(expected, _reader(args[0]) if args else None, tuple)
    if origin in _SEQUENCES or hint is list:
        return _array(expected, _reader(args[0]) if args else None, None)
    if origin in _SETS or hint in (set, frozenset):
        return _array(
            expected, _reader(args[0]) if args else None, frozenset if frozenset in (origin, hint) else set
        )
    if origin in _MAPPINGS or hint is dict:
        value_reader = _reader(args[1]) if len(args) == 2 else None
        exact_value = getattr(value_reader, "exact", None)

        def mapping(data: Any) -> Any:
            if type(data) is not dict:
                raise _Mismatch(expected, data)
            if value_reader is None:
                return data
            if exact_value is not None and all(type(v) is exact_value for v in data.values()):
                return data
            return {k: _read_item(value_reader, v, f"[{k!r}]") for k, v in data.items()}

        return mapping
    if origin is not None or not isinstance(hint, type):
        return None  # a generic this module does not know: taken as it is
    if dataclasses.is_dataclass(hint):
        return _dataclass_reader(hint, expected)
    json_types: tuple[type, ...]
    if issubclass(hint, enum.Enum):
        convert: Callable[[Any], Any] = hint
        json_types = (str, int, float, bool)
    elif issubclass(hint, (dt.datetime, dt.date, dt.time)):
        convert, json_types = hint.fromisoformat, (str,)
    elif issubclass(hint, dt.timedelta):
        convert, json_types = (lambda data: hint(seconds=data)), (int, float)
    elif issubclass(hint, uuid.UUID):
        convert, json_types = hint, (str,)
    elif issubclass(hint, decimal.Decimal):
        convert, json_types = (lambda data: hint(str(data))), (str, int, float)
    elif hasattr(hint, "model_validate") and hasattr(hint, "model_fields"):
        convert, json_types = hint.model_validate, (dict,)
    else:
        return None  # a class of the application's own: its value as it is

    def convert_value(data: Any) -> Any:
        if type(data) not in json_types:
            raise _Mismatch(expected, data)
        try:
            return convert(data)
        except Exception as exc:
            raise _Mismatch(expected, data, detail=_detail(exc)) from None

    return convert_value


def _read_item(reader: _Reader, data: Any, step: str) -> Any:
    try:
        return reader(data)
    except _Mismatch as m:
        raise m.inside(step) from None


def _array(expected: str, item: _Reader | None, container: Any) -> _Reader:
    exact = getattr(item, "exact", None)

    def array(data: Any) -> Any:
        if type(data) is not list:
            raise _Mismatch(expected, data)
        if item is None:
            return data if container is None else container(data)
        if exact is not None:  # list[str] and the like: one pass, no call per item
            for v in data:
                if type(v) is not exact:
                    break
            else:
                return data if container is None else container(data)
        values = [_read_item(item, v, f"[{i}]") for i, v in enumerate(data)]
        return values if container is None else container(values)

    return array


def _dataclass_reader(hint: type, expected: str) -> _Reader:
    readers: dict[str, _Reader | None] | None = None

    def dataclass_value(data: Any) -> Any:
        nonlocal readers
        if readers is None:  # made at first use: a dataclass may refer to one defined after it
            hints = _type_hints(hint)
            readers = {f.name: _reader(hints.get(f.name, Any)) for f in dataclasses.fields(hint) if f.init}
        if type(data) is not dict:
            raise _Mismatch(expected, data)
        unknown = sorted(set(data) - set(readers))
        if unknown:
            raise _Mismatch(expected, data, detail=f"{expected} has no field {unknown[0]!r}")
        values = {}
        for k, v in data.items():
            r = readers[k]
            values[k] = v if r is None else _read_item(r, v, f".{k}")
        try:
            return hint(**values)
        except Exception as exc:
            raise _Mismatch(expected, data, detail=_detail(exc)) from None

    return dataclass_value


def _exact_or_reader(hint: Any) -> Any:
    """_reader, or for str, int and bool the type itself (checked inline: the worker's common case)."""
    if hint in (str, int, bool):
        return hint
    return _reader(hint)


def _from_json(data: Any, hint: Any) -> Any:
    """JSON-native data as the annotation `hint` says (_reader; as it is when it says nothing);
    _Mismatch when it does not fit."""
    reader = _reader(hint)
    return data if reader is None else reader(data)


def _type_hints(obj: Any) -> dict[str, Any]:
    try:
        return typing.get_type_hints(obj, include_extras=True)
    except Exception:  # an annotation that does not resolve: those values come as they are
        return {}


def _type_name(value: Any) -> str:
    return type(value).__name__


def _result_json(t: Task[Any, Any], value: Any) -> Any:
    """What a store_result task returned, as the JSON stored for it (InvalidPayloadError, the
    job's failure, when JSON has no type for it)."""
    try:
        return _to_json(value)
    except _NotJson as exc:
        raise errors.InvalidPayloadError(
            f"task {t.kind!r}: its result ({_type_name(value)}) cannot be stored as JSON: {exc}"
        ) from None


# -- tasks ------------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class TaskHandle(Generic[R]):
    """What defer did: the message's queue, key and kind, and whether it was enqueued (False: a
    live message with that key and kind was already there, and this one was not added; a handle
    rebuilt by app.handle() says False too: it does not know). ``TaskHandle[R]``: R is the task's
    return type, what result() gives (for mypy: ``fetch.defer(1).result()`` is an int when fetch
    returns an int; app.handle() gives a TaskHandle[Any]).

    It follows the job: status() (a Result: its state, progress...), result(timeout=) (waits for
    the value a ``store_result=True`` task returned), cancel(), progress(). These go through the
    app's database (one per thread, or per event loop for result_async)."""

    queue: str
    key: str
    kind: str
    enqueued: bool
    app: App | None = dataclasses.field(default=None, repr=False, compare=False)

    def _app(self) -> App:
        if self.app is None:
            raise errors.InvalidArgumentError(
                "this handle has no app: build it with app.handle(queue, key, kind)"
            )
        return self.app

    def _queue(self) -> Any:
        return self._app().database().queue(self.queue)

    def status(self) -> Result:
        """The job's state now (Queue.result): 'ready', 'delayed', 'reserved', 'blocked',
        'waiting' (deferred with after=: its parents have not all succeeded) while it is live;
        'succeeded', 'failed', 'cancelled' once it finished (on a queue that keeps results);
        'unknown' otherwise."""
        state: Result = self._queue().result(self.key, self.kind)
        return state

    def progress(self) -> Any:
        """The last progress its handler reported (job.set_progress), None before any."""
        return self.status().progress

    def cancel(self) -> bool:
        """Cancels the job: True when it was cancelled (it was waiting: it never runs; a job that
        waits for it, deferred with after=, is cancelled with it, transitively) or a cancel
        was requested (it runs: an async def task is cancelled, a def task sees
        job.cancel_requested); False when there is no live job (finished or unknown)."""
        return self._queue().cancel(self.key, self.kind) in ("cancelled", "requested")

    def result(self, timeout: float | dt.timedelta | None = None) -> R:
        """Waits for the job to finish and returns what its task returned (rebuilt by the task's
        return annotation; None for a task that does not store its result). Raises TaskFailed
        (with its last error) when it failed for good, TaskCancelled when it was cancelled,
        TimeoutError when it has not finished within timeout seconds (None: no end), and
        ResultNotFoundError when there is neither a live job nor a stored result. (The type says R:
        a task that does not store its result gives None whatever it returned.)"""
        return self._outcome(self._queue().wait_result(self.key, self.kind, timeout))

    async def result_async(self, timeout: float | dt.timedelta | None = None) -> R:
        """result(), awaited on the app's asyncio database (many handles may wait at once: they
        share its connection, each gets its own result)."""
        db = await self._app().database_async()
        return self._outcome(await db.queue(self.queue).wait_result(self.key, self.kind, timeout))

    def _outcome(self, r: Result) -> R:
        where = f"task {self.kind!r} ({self.queue}/{self.key})"
        if r.state == "succeeded":
            t = None if self.app is None else self.app.tasks.get((self.queue, self.kind))
            hint = Any if t is None else t.hints.get("return", Any)
            try:
                value: R = None if r.result is None else _from_json(r.result, hint)  # type: ignore[assignment]
            except _Mismatch:
                value = r.result  # stored by other code, or the annotation changed since: as it is
            return value
        if r.state == "failed":
            raise errors.TaskFailed(
                f"{where} failed after {r.attempts} attempt(s): {r.last_error}", r.last_error, r.attempts
            )
        if r.state == "cancelled":
            raise errors.TaskCancelled(f"{where} was cancelled")
        if r.state == "unknown":
            raise errors.ResultNotFoundError(
                f"{where}: no such job and no result kept (never deferred, its queue keeps no results, "
                "its result expired, or it was removed or moved)"
            )
        raise TimeoutError(f"{where} has not finished (state {r.state})")


@dataclasses.dataclass(frozen=True)
class TaskCall(Generic[R]):
    """One call of a task, for app.defer_many / Task.defer_many (what ``task.call(...)`` or
    ``task.configure(...).call(...)`` returns): the task with its options and the payload of the
    arguments, checked and encoded when the call was made. Its key is made when it is deferred
    (the configured key, else a fresh one): a call deferred twice is two jobs."""

    task: Task[Any, Any]
    payload: dict[str, Any]

    def _message(self) -> tuple[str, Any]:
        o = self.task.options
        if o.after is not None:
            raise _after_in_bulk(self.task)
        key = o.key if o.key is not None else new_key()
        if o.run_at is None and o.priority is None and o.group is None and o.headers is None:
            return key, (key, self.task.kind, self.payload)  # push_many's quickest shape
        return key, NewMessage(key, self.task.kind, self.payload, o.run_at, o.priority, o.group, o.headers)


def _batches(
    app: App, calls: Iterable[TaskCall[Any]]
) -> tuple[list[TaskCall[Any]], dict[tuple[int, str], Any]]:
    """The calls in order, and their messages by (database, queue): one push_many each."""
    listed = list(calls)
    batches: dict[tuple[int, str], Any] = {}
    for c in listed:
        if not isinstance(c, TaskCall):
            raise errors.InvalidArgumentError(
                f"defer_many takes task.call(...) values, not {type(c).__name__}"
            )
        if c.task.app is not app:
            raise errors.InvalidArgumentError(f"a call of task {c.task.kind!r}, a task of another app")
        db = c.task.db
        entry = batches.setdefault((id(db), c.task.queue), [db, c.task.queue, [], []])
        key, message = c._message()
        entry[2].append(key)
        entry[3].append(message)
    return listed, batches


def _handles(
    app: App,
    listed: list[TaskCall[Any]],
    batches: dict[tuple[int, str], Any],
    new: dict[tuple[int, str], int],
) -> list[TaskHandle[Any]]:
    """The handles of deferred calls, in their order. enqueued: True for a call with a fresh key
    (it cannot have been there) and for every call of a queue's batch when all of its messages
    were new; False for a call with a key of its own when some of its batch's were not (the
    batch's count does not say which)."""
    positions = {k: 0 for k in batches}
    handles: list[TaskHandle[Any]] = []
    for c in listed:
        where = (id(c.task.db), c.task.queue)
        entry = batches[where]
        key = entry[2][positions[where]]
        positions[where] += 1
        enqueued = c.task.options.key is None or new[where] == len(entry[2])
        handles.append(TaskHandle(c.task.queue, key, c.task.kind, enqueued, app))
    return handles


@dataclasses.dataclass(frozen=True)
class _Options:
    key: str | None = None
    run_at: dt.datetime | dt.timedelta | None = None
    priority: int | None = None
    group: str | None = None
    headers: Mapping[str, Any] | None = None
    # the parents (queue_push_after's {"queue", "p_key", "p_kind"} each), in order; None: none
    after: tuple[dict[str, Any], ...] | None = None


def _after_in_bulk(t: Task[Any, Any]) -> errors.InvalidArgumentError:
    return errors.InvalidArgumentError(
        f"task {t.kind!r}: after= is not supported in bulk (queue_push_after pushes one message): "
        "defer each with task.configure(after=[...]).defer(...)"
    )


def _parents_of(handles: Iterable[Any]) -> tuple[dict[str, Any], ...]:
    """configure(after=)'s parents, checked now (client.parent_refs): at least one."""
    refs = tuple(parent_refs(handles))
    if not refs:
        raise errors.InvalidArgumentError("after= needs at least one parent (None: no parents)")
    return refs


class Task(Generic[P, R]):
    """A function the app's workers run for each message of (queue, kind); see the module docstring.

    Calling it runs the function here and now; ``defer(...)`` enqueues it with the same arguments."""

    def __init__(
        self,
        app: App,
        fn: Callable[P, R],
        *,
        queue: str,
        kind: str,
        retry: RetryPolicy | None,
        timeout: float | None,
        options: _Options,
        db: Any = None,
        store_result: bool = False,
    ) -> None:
        self.app = app
        self.fn = fn
        self.queue = queue
        self.kind = kind
        self.retry = retry
        self.timeout = timeout
        self.store_result = store_result
        self.options = options
        self.db = db
        self.is_async = inspect.iscoroutinefunction(fn)
        self.signature = inspect.signature(fn)
        self._hints: dict[str, Any] | None = None
        self._decoding: tuple[dict[str, Any], frozenset[str], bool] | None = None
        self._var_kw_reader: Any = None
        # (parameter, "datetime" | "timestamp"): where a periodic occurrence's time goes, when
        # the function asks for it (see App.periodic)
        self.occurrence_parameter: tuple[str, str] | None = None
        self.__name__ = getattr(fn, "__name__", kind)
        self.__doc__ = getattr(fn, "__doc__", None)
        for p in self.signature.parameters.values():
            if p.kind in (p.POSITIONAL_ONLY, p.VAR_POSITIONAL):
                raise errors.InvalidArgumentError(
                    f"task {kind!r}: its arguments travel by name, so {p} (positional only) is not possible"
                )

    def __repr__(self) -> str:
        return f"<Task {self.queue}/{self.kind} {self.__name__}{self.signature}>"

    def __call__(self, *args: P.args, **kwargs: P.kwargs) -> R:
        return self.fn(*args, **kwargs)

    @property
    def hints(self) -> dict[str, Any]:
        if self._hints is None:
            self._hints = _type_hints(self.fn)
        return self._hints

    def _copy(self, **changes: Any) -> Task[P, R]:
        fields = dict(
            queue=self.queue,
            kind=self.kind,
            retry=self.retry,
            timeout=self.timeout,
            options=self.options,
            db=self.db,
            store_result=self.store_result,
        )
        fields.update(changes)
        return Task(self.app, self.fn, **fields)

    def configure(
        self,
        *,
        key: str | None = None,
        run_at: dt.datetime | dt.timedelta | None = None,
        priority: int | None = None,
        group: str | None = None,
        headers: Mapping[str, Any] | None = None,
        after: Iterable[TaskHandle[Any] | tuple[str, str, str]] | None = None,
    ) -> Task[P, R]:
        """A copy of the task for one defer: a key of your choosing (a unique job: a live message
        with that key and kind is not enqueued again), a run_at (a time, or a delay), a priority,
        a FIFO group, headers (a dict of str to JSON values the job carries beside its arguments:
        current_job().headers in the task; the current trace context is added to them when
        OpenTelemetry is installed).

        after: the jobs this one waits for, its parents (handles, or (queue, key, kind) tuples), in
        the order ``current_job().parent_results()`` gives their results back: the job is 'waiting'
        until every parent has succeeded (queue_push_after), and is cancelled when one fails or is
        cancelled. Its queue and the parents' must keep results. It cannot be combined with
        run_at, priority, group or headers, nor deferred in bulk (defer_many)."""
        o = self.options
        return self._copy(
            options=_Options(
                key=o.key if key is None else key,
                run_at=o.run_at if run_at is None else run_at,
                priority=o.priority if priority is None else priority,
                group=o.group if group is None else group,
                headers=o.headers if headers is None else headers_value(headers),
                after=o.after if after is None else _parents_of(after),
            )
        )

    def using(self, db: Database | AsyncDatabase) -> Task[P, R]:
        """A copy of the task that defers through db: ``Database.wrap(conn)`` of a connection of
        yours makes the job part of your transaction (committed or rolled back with it)."""
        return self._copy(db=db)

    # -- the payload ----------------------------------------------------------------
    def payload(self, *args: P.args, **kwargs: P.kwargs) -> dict[str, Any]:
        """The message payload of a call with these arguments: one JSON object by name. An
        argument JSON cannot carry faithfully is refused (InvalidPayloadError naming it)."""
        try:
            bound = self.signature.bind(*args, **kwargs)
        except TypeError as exc:
            raise TypeError(f"task {self.kind!r}: {exc}") from None
        return self._encode_bound(bound)

    def _partial_payload(self, kwargs: Mapping[str, Any]) -> dict[str, Any]:
        """payload() of some of the arguments (a periodic task's fixed ones)."""
        try:
            bound = self.signature.bind_partial(**kwargs)
        except TypeError as exc:
            raise TypeError(f"task {self.kind!r}: {exc}") from None
        return self._encode_bound(bound)

    def _encode_bound(self, bound: inspect.BoundArguments) -> dict[str, Any]:
        out: dict[str, Any] = {}
        for name, value in bound.arguments.items():
            param = self.signature.parameters[name]
            if param.kind is param.VAR_KEYWORD:
                for k, v in value.items():
                    out[k] = self._encode(k, v, self._var_keyword_hint(param))
            else:
                out[name] = self._encode(name, value, self.hints.get(name, Any))
        return out

    def _var_keyword_hint(self, param: inspect.Parameter) -> Any:
        return self.hints.get(param.name, Any)

    def _encode(self, name: str, value: Any, hint: Any) -> Any:
        if (
            value is None
            or type(value) in (str, int, bool)
            or (type(value) is float and math.isfinite(value))
        ):
            read = self._reader_of(name)
            if read is not None:
                try:
                    if type(read) is type:
                        if type(value) is not read:
                            raise _Mismatch(read.__name__, value)
                    else:
                        read(value)
                except _Mismatch as m:
                    raise errors.InvalidPayloadError(
                        f"task {self.kind!r}: argument {name!r}{m.where} {m.text()}"
                    ) from None
            return value
        try:
            data = _to_json(value)
        except _NotJson as exc:
            raise errors.InvalidPayloadError(
                f"task {self.kind!r}: argument {name!r} ({_type_name(value)}) cannot be sent as JSON: {exc}"
            ) from None
        try:
            back = _from_json(data, hint)
            same = back == value and type(back) is type(value)
        except _Mismatch as m:
            raise errors.InvalidPayloadError(
                f"task {self.kind!r}: argument {name!r}{m.where} {m.text()}"
            ) from None
        except Exception:
            same = False
        if not same:
            raise errors.InvalidPayloadError(
                f"task {self.kind!r}: argument {name!r} ({_type_name(value)}) would not come back as it "
                f"was from JSON (it would be {data!r}"
                + ("" if hint is not Any else "; annotate the parameter with its type")
                + ")"
            )
        return data

    def _reader_of(self, name: str) -> Any:
        readers, _, var_kw = self._decoders()
        if name in readers:
            return readers[name]
        return self._var_kw_reader if var_kw else None

    def _decoders(self) -> tuple[dict[str, Any], frozenset[str], bool]:
        """Per parameter name, how its JSON value is checked and rebuilt (_reader; a type: that
        JSON-native type exactly; None: taken as it is); the required names; whether unknown names
        go to a **kwargs. Made once per task: the worker's per-message path."""
        if self._decoding is None:
            readers: dict[str, Any] = {}
            required = set()
            var_kw = False
            for p in self.signature.parameters.values():
                if p.kind is p.VAR_KEYWORD:
                    var_kw = True
                    self._var_kw_reader = _exact_or_reader(self._var_keyword_hint(p))
                    continue
                readers[p.name] = _exact_or_reader(self.hints.get(p.name, Any))
                if p.default is p.empty and (
                    self.occurrence_parameter is None or p.name != self.occurrence_parameter[0]
                ):
                    required.add(p.name)
            self._decoding = (readers, frozenset(required), var_kw)
        return self._decoding

    def _mismatch(self, text: str) -> PayloadMismatchError:
        return PayloadMismatchError(f"task {self.kind!r}: {text}")

    def arguments(self, payload: Any, job: Job | None = None) -> dict[str, Any]:
        """The keyword arguments of the function for a message's payload (what defer wrote, or any
        JSON object by name): each value checked against its parameter's annotation and rebuilt as
        it says. A payload that does not fit (a value of another type, an unknown or a missing
        argument, not a JSON object) raises PayloadMismatchError, which fails the job at once. For
        a periodic task that asks for its occurrence's time, `job` gives it (see App.periodic)."""
        if type(payload) is not dict:
            raise self._mismatch(
                f"the payload must be a JSON object of its arguments by name, not {_json_type_name(payload)}"
            )
        readers, required, var_kw = self._decoders()
        kwargs: dict[str, Any] = {}
        for name, data in payload.items():
            try:
                read = readers[name]
            except KeyError:
                if not var_kw:
                    raise self._mismatch(f"the payload has an unknown argument {name!r}") from None
                read = self._var_kw_reader
            if read is None:
                kwargs[name] = data
            elif type(read) is type:  # a JSON-native type, exactly: the common case, inline
                if type(data) is not read:
                    raise self._mismatch(f"argument {name!r} {_Mismatch(read.__name__, data).text()}")
                kwargs[name] = data
            else:
                try:
                    kwargs[name] = read(data)
                except _Mismatch as m:
                    raise self._mismatch(f"argument {name!r}{m.where} {m.text()}") from None
        if not required.issubset(kwargs):
            missing = sorted(required - kwargs.keys())
            raise self._mismatch(f"the payload has no argument {missing[0]!r}")
        occurrence = self.occurrence_parameter
        if occurrence is not None and occurrence[0] not in kwargs:
            if job is None:
                raise self._mismatch(f"the payload has no argument {occurrence[0]!r}")
            at = occurrence_time(job)
            kwargs[occurrence[0]] = at if occurrence[1] == "datetime" else int(at.timestamp())
        return kwargs

    # -- enqueueing --------------------------------------------------------------------
    def _push_args(self, args: Any, kwargs: Any) -> tuple[str, dict[str, Any]]:
        """The key of the job, and the arguments of its Queue.push (of its Queue.push_after, with
        "parents", when it was configured with after=)."""
        key = self.options.key if self.options.key is not None else new_key()
        o = self.options
        if o.after is not None:
            others = [
                name
                for name, value in (
                    ("run_at", o.run_at),
                    ("priority", o.priority),
                    ("group", o.group),
                    ("headers", o.headers),
                )
                if value is not None
            ]
            if others:
                raise errors.InvalidArgumentError(
                    f"task {self.kind!r}: after= cannot be combined with {others[0]} "
                    "(a job that waits for its parents runs as soon as the last one succeeded)"
                )
            return key, dict(key=key, kind=self.kind, payload=self.payload(*args, **kwargs), parents=o.after)
        push: dict[str, Any] = dict(
            key=key,
            kind=self.kind,
            payload=self.payload(*args, **kwargs),
            run_at=self.options.run_at,
            priority=self.options.priority,
            group=self.options.group,
        )
        if self.options.headers is not None:
            push["headers"] = self.options.headers
        return key, push

    # A handle's type is what the task's function returns, awaited for an async def.
    @overload
    def defer(
        self: Task[P, collections.abc.Coroutine[Any, Any, T]], *args: P.args, **kwargs: P.kwargs
    ) -> TaskHandle[T]: ...

    @overload
    def defer(self: Task[P, T], *args: P.args, **kwargs: P.kwargs) -> TaskHandle[T]: ...

    def defer(self, *args: Any, **kwargs: Any) -> TaskHandle[Any]:
        """Enqueues the task with these arguments (checked against its signature)."""
        key, push = self._push_args(args, kwargs)
        db = self.db if self.db is not None else self.app.database()
        queue = db.queue(self.queue)
        if inspect.iscoroutinefunction(getattr(queue, "push", None)):
            raise errors.InvalidArgumentError("an asyncio database: use `await task.defer_async(...)`")
        inserted = queue.push_after(**push) if "parents" in push else queue.push(**push)
        return TaskHandle(self.queue, key, self.kind, bool(inserted), self.app)

    @overload
    async def defer_async(
        self: Task[P, collections.abc.Coroutine[Any, Any, T]], *args: P.args, **kwargs: P.kwargs
    ) -> TaskHandle[T]: ...

    @overload
    async def defer_async(self: Task[P, T], *args: P.args, **kwargs: P.kwargs) -> TaskHandle[T]: ...

    async def defer_async(self, *args: Any, **kwargs: Any) -> TaskHandle[Any]:
        """defer, on an asyncio database (the app's, or the one given to using())."""
        key, push = self._push_args(args, kwargs)
        db = self.db if self.db is not None else await self.app.database_async()
        queue = db.queue(self.queue)
        result = queue.push_after(**push) if "parents" in push else queue.push(**push)
        if inspect.isawaitable(result):
            result = await result
        return TaskHandle(self.queue, key, self.kind, bool(result), self.app)

    @overload
    def call(
        self: Task[P, collections.abc.Coroutine[Any, Any, T]], *args: P.args, **kwargs: P.kwargs
    ) -> TaskCall[T]: ...

    @overload
    def call(self: Task[P, T], *args: P.args, **kwargs: P.kwargs) -> TaskCall[T]: ...

    def call(self, *args: Any, **kwargs: Any) -> TaskCall[Any]:
        """One call of the task with these arguments (checked against its signature, and by mypy,
        as defer's), for app.defer_many / Task.defer_many to enqueue with others in one round
        trip; ``task.configure(key=..., run_at=..., priority=..., group=..., headers=...).call(...)``
        carries those options (after= does not: InvalidArgumentError, defer such a job alone)."""
        if self.options.after is not None:
            raise _after_in_bulk(self)
        return TaskCall(self, self.payload(*args, **kwargs))

    def defer_many(self, calls: Iterable[TaskCall[T]]) -> list[TaskHandle[T]]:
        """app.defer_many of calls of this task (InvalidArgumentError for a call of another)."""
        listed = self._own(calls)
        return self.app.defer_many(listed)

    async def defer_many_async(self, calls: Iterable[TaskCall[T]]) -> list[TaskHandle[T]]:
        """defer_many on an asyncio database."""
        listed = self._own(calls)
        return await self.app.defer_many_async(listed)

    def _own(self, calls: Iterable[TaskCall[Any]]) -> list[TaskCall[Any]]:
        listed = list(calls)
        for c in listed:
            if isinstance(c, TaskCall) and (c.task.queue, c.task.kind) != (self.queue, self.kind):
                raise errors.InvalidArgumentError(
                    f"task {self.kind!r}: a call of task {c.task.kind!r} (use app.defer_many for several tasks)"
                )
        return listed


# -- periodic tasks ------------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class Periodic:
    """A task on a cadence: the contract's schedule (queue, key, kind) with `every` seconds or a
    `cron` expression (UTC) and a fixed payload, which app.create_queues() (or
    app.schedule_periodic()) creates in the database."""

    task: Task[Any, Any]
    key: str
    every: int | None
    cron: str | None
    payload: dict[str, Any]

    @property
    def queue(self) -> str:
        return self.task.queue

    @property
    def kind(self) -> str:
        return self.task.kind


def _is_datetime_hint(hint: Any) -> bool:
    if typing.get_origin(hint) is typing.Annotated:
        hint = typing.get_args(hint)[0]
    if typing.get_origin(hint) in _UNION_TYPES:
        args = [a for a in typing.get_args(hint) if a is not type(None)]
        return len(args) == 1 and _is_datetime_hint(args[0])
    return hint is dt.datetime


def _every_seconds(every: float | dt.timedelta) -> int:
    seconds = every.total_seconds() if isinstance(every, dt.timedelta) else every
    if (
        isinstance(seconds, bool)
        or not isinstance(seconds, (int, float))
        or seconds != int(seconds)
        or seconds < 1
    ):
        raise errors.InvalidArgumentError(
            f"every must be whole seconds >= 1 (or a timedelta of them), not {every!r}"
        )
    return int(seconds)


class _PeriodicDecorator:
    """What app.periodic(...) returns: applied to a task (or a function, made a task on the
    decorator's queue), it declares the schedule and returns the task."""

    def __init__(self, app: App, **declared: Any) -> None:
        self._app = app
        self._declared = declared

    @overload
    def __call__(self, target: Task[P, R], /) -> Task[P, R]: ...

    @overload
    def __call__(self, target: Callable[P, R], /) -> Task[P, R]: ...

    def __call__(self, target: Any, /) -> Any:
        return self._app._declare_periodic(target, **self._declared)


# -- the app ------------------------------------------------------------------------------------

CallNext = Callable[[], Any]
"""What a middleware calls to run the rest of the chain (and the task): returns its result (an
awaitable for async middleware)."""
Middleware = Callable[[Job, CallNext], Any]


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

    def _note(self, job: Job, outcome: str, error: str | None) -> None:
        self.jobs.append(JobReport(job.queue, job.key, job.kind, job.attempts, outcome, error))

    def __str__(self) -> str:
        return (
            f"{len(self.jobs)} job(s): {self.succeeded} succeeded, {self.retried} retried, "
            f"{self.snoozed} snoozed, {self.failed} failed"
            + (f", {self.cancelled} cancelled" if self.cancelled else "")
        )


class App:
    """A set of tasks on one database: defines them (@app.task), enqueues them (Task.defer),
    and builds the worker that runs them (app.worker(), or `pyqueue-sql worker module:app`)."""

    def __init__(self, database: str | Database | AsyncDatabase | None = None, *, queue: str = DEFAULT_QUEUE):
        """`database`: a DSN, or a Database / AsyncDatabase of yours; None: the DSN in the
        PYQUEUE_DSN environment variable (as the CLI reads it), when the app needs one."""
        self._dsn: str | None = database if isinstance(database, str) else None
        self._db = None if isinstance(database, str) else database
        self.default_queue = queue
        self.tasks: dict[tuple[str, str], Task[Any, Any]] = {}
        self.middlewares: list[Middleware] = []
        self.periodic_tasks: list[Periodic] = []
        self._local = threading.local()
        self._worker_dsn: str | None = None
        self._async_dbs: weakref.WeakKeyDictionary[Any, Any] = weakref.WeakKeyDictionary()

    @property
    def dsn(self) -> str | None:
        """Where the app's tasks are deferred and run: the DSN it was given, else $PYQUEUE_DSN."""
        if self._dsn is None and self._db is None:
            return os.environ.get("PYQUEUE_DSN")
        return self._dsn

    @dsn.setter
    def dsn(self, value: str | None) -> None:
        self._dsn = value
        self.close()

    def __repr__(self) -> str:
        return f"<App {len(self.tasks)} task(s) on {', '.join(self.queues()) or 'no queue'}>"

    # -- defining ----------------------------------------------------------------
    @overload
    def task(self, fn: Callable[P, R], /) -> Task[P, R]: ...

    @overload
    def task(
        self,
        *,
        queue: str | None = None,
        kind: str | None = None,
        retry: RetryPolicy | None = None,
        timeout: float | None = None,
        priority: int | None = None,
        group: str | None = None,
        store_result: bool = False,
    ) -> Callable[[Callable[P, R]], Task[P, R]]: ...

    def task(  # type: ignore[misc]  # (mypy: the factory's P, R are bound by its result's call)
        self,
        fn: Callable[P, R] | None = None,
        /,
        *,
        queue: str | None = None,
        kind: str | None = None,
        retry: RetryPolicy | None = None,
        timeout: float | None = None,
        priority: int | None = None,
        group: str | None = None,
        store_result: bool = False,
    ) -> Task[P, R] | Callable[[Callable[P, R]], Task[P, R]]:
        """Decorator: makes a function (def or async def) a task of this app, on `queue` (the
        app's default queue) as `kind` (the function's name). `retry` is the policy of this kind
        only, `timeout` the seconds one run may take, `priority` and `group` the defaults of its
        messages. `store_result=True`: what the function returns is stored as the job's result
        (as JSON, by the return annotation) for handle.result(); its queue must keep results
        (app.create_queues() gives it a result retention)."""

        def make(fn: Callable[P, R]) -> Task[P, R]:
            if timeout is not None and (
                isinstance(timeout, bool) or not isinstance(timeout, (int, float)) or not timeout > 0
            ):
                raise errors.InvalidArgumentError(f"timeout must be seconds > 0 (or None), not {timeout!r}")
            t: Task[P, R] = Task(
                self,
                fn,
                queue=queue or self.default_queue,
                kind=kind or fn.__name__,
                retry=retry,
                timeout=timeout,
                options=_Options(priority=priority, group=group),
                store_result=bool(store_result),
            )
            if (t.queue, t.kind) in self.tasks:
                raise errors.InvalidArgumentError(
                    f"the app already has a task {t.kind!r} on queue {t.queue!r}"
                )
            self.tasks[(t.queue, t.kind)] = t
            return t

        return make(fn) if fn is not None else make

    def periodic(
        self,
        *,
        every: float | dt.timedelta | None = None,
        cron: str | None = None,
        queue: str | None = None,
        key: str | None = None,
        kwargs: Mapping[str, Any] | None = None,
    ) -> _PeriodicDecorator:
        """Decorator: runs a task on a cadence, `every` seconds (whole seconds, aligned to the Unix
        epoch: every=3600 runs on the hour) or at the minutes of a 5-field `cron` expression (UTC),
        through the contract's schedules (queue_schedule_every / queue_schedule_cron): each
        occurrence is one message, run once whatever the number of workers. Over ``@app.task`` (or
        over a plain function, which becomes a task on `queue`). The function is called with
        `kwargs` (fixed arguments, checked like defer's) and, when it asks for it, the occurrence's
        time: a parameter annotated ``datetime`` gets it (UTC), else one named ``timestamp`` gets it
        as Unix seconds (procrastinate's convention); every other parameter needs a default or a
        value in `kwargs`. `key` names the schedule (default: the task's kind): give one per
        schedule to run the same task on several cadences. app.create_queues() (or
        app.schedule_periodic()) creates the schedules; the task's worker runs the occurrences."""
        if (every is None) == (cron is None):
            raise errors.InvalidArgumentError(
                "periodic takes one of every= (seconds) or cron= (a cron expression)"
            )
        if every is not None:
            every = _every_seconds(every)
        if cron is not None and (not isinstance(cron, str) or not cron.strip()):
            raise errors.InvalidArgumentError(f"cron must be a 5-field cron expression, not {cron!r}")
        return _PeriodicDecorator(self, every=every, cron=cron, queue=queue, key=key, kwargs=kwargs)

    def _declare_periodic(
        self,
        target: Any,
        *,
        every: int | None,
        cron: str | None,
        queue: str | None,
        key: str | None,
        kwargs: Mapping[str, Any] | None,
    ) -> Task[Any, Any]:
        if isinstance(target, Task):
            t: Task[Any, Any] = self.tasks.get((target.queue, target.kind), target)
            if t.app is not self:
                raise errors.InvalidArgumentError(f"task {t.kind!r} is a task of another app")
            if queue is not None and queue != t.queue:
                raise errors.InvalidArgumentError(
                    f"task {t.kind!r} runs on queue {t.queue!r}, not {queue!r}: give queue= to @app.task"
                )
        elif callable(target):
            t = self.task(queue=queue)(target)
        else:
            raise errors.InvalidArgumentError(f"periodic applies to a task or a function, not {target!r}")
        fixed = dict(kwargs or {})
        occurrence: tuple[str, str] | None = None
        for p in t.signature.parameters.values():
            if p.kind is p.VAR_KEYWORD or p.name in fixed:
                continue
            if occurrence is None and _is_datetime_hint(t.hints.get(p.name)):
                occurrence = (p.name, "datetime")
        if occurrence is None:
            p = t.signature.parameters.get("timestamp")  # type: ignore[assignment]
            if p is not None and "timestamp" not in fixed and t.hints.get("timestamp", int) in (int, Any):
                occurrence = ("timestamp", "timestamp")
        for p in t.signature.parameters.values():
            if p.kind is p.VAR_KEYWORD or p.name in fixed or p.default is not p.empty:
                continue
            if occurrence is None or p.name != occurrence[0]:
                raise errors.InvalidArgumentError(
                    f"periodic task {t.kind!r}: argument {p.name!r} has no value: give it in kwargs= "
                    "or a default (only the occurrence's time is passed: a parameter annotated "
                    "datetime, or one named timestamp)"
                )
        payload = t._partial_payload(fixed)
        schedule_key = t.kind if key is None else key
        if any((d.queue, d.key, d.kind) == (t.queue, schedule_key, t.kind) for d in self.periodic_tasks):
            raise errors.InvalidArgumentError(
                f"task {t.kind!r} already has a periodic schedule {schedule_key!r}: give each one its key="
            )
        if occurrence is not None:
            if t.occurrence_parameter not in (None, occurrence):
                raise errors.InvalidArgumentError(
                    f"periodic task {t.kind!r}: its schedules pass the occurrence's time to one parameter"
                )
            t.occurrence_parameter = occurrence
            t._decoding = None
        self.periodic_tasks.append(Periodic(t, schedule_key, every, cron, payload))
        return target if isinstance(target, Task) else t

    def schedule_periodic(self, db: Database | None = None) -> list[Periodic]:
        """Creates (or updates) the schedules of the app's periodic tasks in the database (an admin
        routine: app.create_queues() calls it): a schedule already there with the same cadence and
        payload is left as it is (its pending occurrence stays), another is replaced. Returns the
        schedules created or replaced. A schedule no longer declared stays: remove it with
        ``db.queue(queue).unschedule(key, kind)``."""
        db = db if db is not None else self.database()
        changed: list[Periodic] = []
        existing: dict[str, dict[tuple[str, str], Any]] = {}
        for p in self.periodic_tasks:
            queue: Any = db.queue(p.queue)
            if p.queue not in existing:
                existing[p.queue] = {(s.key, s.kind): s for s in queue.schedules()}
            there = existing[p.queue].get((p.key, p.kind))
            if there is not None and (there.every_s, there.cron, there.payload) == (
                p.every,
                p.cron,
                p.payload,
            ):
                continue
            if p.every is not None:
                queue.schedule_every(p.key, p.kind, p.payload, p.every)
            else:
                queue.schedule_cron(p.key, p.kind, p.payload, p.cron)
            changed.append(p)
        return changed

    def middleware(self, fn: Middleware) -> Middleware:
        """Decorator: wraps every job of the app's tasks, in the order registered (the first is
        outermost). ``def mw(job, call_next)`` wraps the plain (def) tasks, ``async def mw(job,
        call_next)`` the async ones (``await call_next()``); whatever it raises is the job's failure."""
        self.middlewares.append(fn)
        return fn

    def queues(self) -> list[str]:
        return sorted({q for q, _ in self.tasks})

    # -- the databases defer uses ------------------------------------------------------
    def database(self) -> Database:
        """The app's connection for defer: the Database it was given, or one per thread."""
        if self._db is not None:
            return self._db  # type: ignore[return-value]
        dsn = self.dsn
        if dsn is None:
            raise errors.InvalidArgumentError(
                "the app has no database: App(dsn), PYQUEUE_DSN in the environment, or task.using(db)"
            )
        db = getattr(self._local, "db", None)
        if db is None:
            db = self._local.db = connect(dsn)
        return db

    async def database_async(self) -> AsyncDatabase:
        """The app's asyncio connection for defer_async: the AsyncDatabase it was given, or one per
        event loop."""
        if self._db is not None:
            return self._db  # type: ignore[return-value]
        dsn = self.dsn
        if dsn is None:
            raise errors.InvalidArgumentError(
                "the app has no database: App(dsn), PYQUEUE_DSN in the environment, or task.using(db)"
            )
        loop = asyncio.get_running_loop()
        held = self._async_dbs.get(loop)
        if held is None:
            from .aio.client import connect as connect_async

            db = await connect_async(dsn)
            closer = _close_at_loop_end(db)
            await closer.__anext__()  # suspended at its yield: the loop now knows it
            held = self._async_dbs[loop] = (db, closer)
        return held[0]

    def create_queues(
        self, *, result_retention: Any = None, db: Database | None = None, **settings: Any
    ) -> list[Periodic]:
        """Creates the queues of the app's tasks (Queue.create: an existing one gets the settings
        given, nothing else). A queue with a ``store_result=True`` task keeps results for
        `result_retention` (seconds or a timedelta), by default DEFAULT_RESULT_RETENTION (a day)
        when it keeps none yet. Then the schedules of the app's periodic tasks
        (schedule_periodic): returns those it created or replaced. `db`: another Database than
        the app's (an admin's account on the same database, as `pyqueue-sql setup` uses)."""
        db = db if db is not None else self.database()
        storing = {t.queue for t in self.tasks.values() if t.store_result}
        for q in self.queues():
            queue: Any = db.queue(q)
            queue.create(**settings)
            if result_retention is not None:
                queue.set_result_retention(result_retention)
            elif q in storing and queue.settings().result_retention is None:
                queue.set_result_retention(DEFAULT_RESULT_RETENTION)
        return self.schedule_periodic(db) if self.periodic_tasks else []

    def handle(self, queue: str, key: str, kind: str) -> TaskHandle[Any]:
        """A handle on the job (queue, key, kind), e.g. from a key kept elsewhere: its status,
        result, progress, cancel. (Its ``enqueued`` is False: the handle does not know.)"""
        return TaskHandle(queue, key, kind, False, self)

    def defer_many(self, calls: Iterable[TaskCall[Any]]) -> list[TaskHandle[Any]]:
        """Enqueues many calls (``task.call(...)``, of any of the app's tasks) at once: the calls of
        one queue go through Queue.push_many, one round trip per chunk of CHUNK_SIZE messages
        (queue_push_batch, or its grouped / with-headers siblings), all of them one transaction;
        another queue is another push_many (for one transaction over all, run it inside
        ``db.transaction()`` or through ``task.using(Database.wrap(conn))``). Returns the handles in
        the order of the calls (their ``enqueued``: see _handles)."""
        listed, batches = _batches(self, calls)
        new: dict[tuple[int, str], int] = {}
        for where, (db, queue, _, messages) in batches.items():
            db = db if db is not None else self.database()
            q: Any = db.queue(queue)
            if inspect.iscoroutinefunction(getattr(q, "push_many", None)):
                raise errors.InvalidArgumentError(
                    "an asyncio database: use `await app.defer_many_async(...)`"
                )
            new[where] = int(q.push_many(messages))
        return _handles(self, listed, batches, new)

    async def defer_many_async(self, calls: Iterable[TaskCall[Any]]) -> list[TaskHandle[Any]]:
        """defer_many, on an asyncio database (the app's, or the one given to using())."""
        listed, batches = _batches(self, calls)
        new: dict[tuple[int, str], int] = {}
        for where, (db, queue, _, messages) in batches.items():
            db = db if db is not None else await self.database_async()
            target: Any = db.queue(queue)
            result = target.push_many(messages)
            if inspect.isawaitable(result):
                result = await result
            new[where] = int(result)
        return _handles(self, listed, batches, new)

    def close(self) -> None:
        """Closes this thread's connection of the app (the others close with their threads)."""
        for name in ("db", "worker_db"):
            db = getattr(self._local, name, None)
            if db is not None:
                setattr(self._local, name, None)
                db.close()

    # -- running --------------------------------------------------------------------
    def handler(self, t: Task[Any, Any]) -> Callable[[Job], Any]:
        """The worker's handler of a task: decodes the payload, runs the middleware, calls the
        function; for a store_result task, returns its value as JSON (the worker stores it)."""
        run = self._handler(t)
        if not t.store_result:
            return run
        if t.is_async:

            async def stored_async(job: Job) -> Any:
                return _result_json(t, await run(job))

            stored_async.__qualname__ = run.__qualname__
            return stored_async

        def stored(job: Job) -> Any:
            return _result_json(t, run(job))

        stored.__qualname__ = run.__qualname__
        return stored

    def _handler(self, t: Task[Any, Any]) -> Callable[[Job], Any]:
        sync_mws = [m for m in self.middlewares if not inspect.iscoroutinefunction(m)]
        async_mws = [m for m in self.middlewares if inspect.iscoroutinefunction(m)]
        fn = t.fn
        parents = self._parent_results
        if t.is_async:

            async def run_async(job: Job) -> Any:
                token = _current_job.set(job)
                job.parents_reader = parents
                try:

                    async def call(i: int) -> Any:
                        if i == len(async_mws):
                            return await fn(**t.arguments(job.payload, job))
                        return await async_mws[i](job, lambda: call(i + 1))

                    return await call(0)
                finally:
                    _current_job.reset(token)

            run_async.__qualname__ = f"task {t.kind}"
            return run_async

        if not sync_mws:
            arguments = t.arguments

            def run_plain(job: Job) -> Any:
                token = _current_job.set(job)
                job.parents_reader = parents
                try:
                    return fn(**arguments(job.payload, job))
                finally:
                    _current_job.reset(token)

            run_plain.__qualname__ = f"task {t.kind}"
            return run_plain

        def run(job: Job) -> Any:
            token = _current_job.set(job)
            job.parents_reader = parents
            try:

                def call(i: int) -> Any:
                    if i == len(sync_mws):
                        return fn(**t.arguments(job.payload, job))
                    return sync_mws[i](job, lambda: call(i + 1))

                return call(0)
            finally:
                _current_job.reset(token)

        run.__qualname__ = f"task {t.kind}"
        return run

    def _worker_database(self) -> Database:
        """This thread's connection to the database of the app's worker (its DSN; the app's)."""
        dsn = self._worker_dsn or self.dsn
        if dsn is None or dsn == self.dsn:
            return self.database()
        db: Database | None = getattr(self._local, "worker_db", None)
        if db is None:
            db = self._local.worker_db = connect(dsn)
        return db

    def _parent_results(self, job: Job) -> list[Any]:
        """job.parent_results() of a job of the app's tasks: queue_parent_results on this thread's
        connection (of the worker's DSN), each succeeded parent's result rebuilt by its task's
        return annotation (as it is stored when it does not fit, or its task is not the app's);
        None for a parent without a value (it stores no result, or moved on)."""
        queue: Any = self._worker_database().queue(job.queue)
        rows: list[ParentResult] = queue.parent_results(job.key, job.kind)
        values: list[Any] = []
        for r in rows:
            if r.state != "succeeded" or r.result is None:
                values.append(None)
                continue
            t = self.tasks.get((r.queue, r.kind))
            try:
                values.append(r.result if t is None else _from_json(r.result, t.hints.get("return", Any)))
            except _Mismatch:
                values.append(r.result)
        return values

    def _unknown_kind(self, queue: str) -> Callable[[Job], Any]:
        known = sorted(k for q, k in self.tasks if q == queue)

        def unknown(job: Job) -> None:
            raise UnknownTaskError(
                f"no task of this app has kind {job.kind!r} on queue {queue!r} (its tasks there: "
                f"{', '.join(known)})"
            )

        return unknown

    def worker(
        self, *, queues: Sequence[str] | None = None, dsn: str | None = None, **settings: Any
    ) -> Worker | AsyncWorker:
        """A worker for the app's tasks (of `queues` only, when given): an AsyncWorker when some are
        async def, else a Worker (threads); `settings` are the worker's (concurrency, lease, ...).
        A message of a served queue whose kind no task has is failed with UnknownTaskError."""
        dsn = dsn or self.dsn
        if dsn is None:
            raise errors.InvalidArgumentError("the app was given a Database: app.worker(dsn=...) says where")
        self._worker_dsn = dsn  # where its tasks read their parents' results
        wanted = set(self.queues() if queues is None else queues)
        missing = wanted - set(self.queues())
        if missing:
            raise errors.InvalidArgumentError(
                f"the app has no task on queue {sorted(missing)[0]!r} (its queues: {', '.join(self.queues())})"
            )
        tasks = [t for (q, _), t in self.tasks.items() if q in wanted]
        if not tasks:
            raise errors.InvalidArgumentError("the app has no tasks")
        if any(t.is_async for t in tasks):
            from .aio.worker import AsyncWorker

            worker: Worker | AsyncWorker = AsyncWorker(dsn, **settings)
        else:
            from .worker.threaded import Worker

            worker = Worker(dsn, **settings)
        for t in tasks:
            worker.add_handler(
                t.queue,
                self.handler(t),
                t.kind,
                retry=t.retry,
                timeout=t.timeout,
                store_result=t.store_result,
            )
        for q in sorted(wanted):
            worker.add_handler(q, self._unknown_kind(q))
        return worker

    def _pending_worker(self, queues: Sequence[str] | None, settings: dict[str, Any]) -> Any:
        settings = {"concurrency": 1, "prefetch": 0, "register": False, "listen": False, **settings}
        worker = self.worker(queues=queues, **settings)
        worker.on_idle.append(lambda w: w.stop(reason="no job ready"))
        return worker

    def run_pending(self, *, queues: Sequence[str] | None = None, **settings: Any) -> RunReport:
        """Runs the app's ready jobs in this process until none is ready, on the real routines, and
        says what became of each (for tests: ``task.defer(...); assert app.run_pending().succeeded``).
        A job retried with a delay is not waited for."""
        report = RunReport()
        while True:
            worker = self._pending_worker(queues, settings)
            worker.on_outcome.append(report._note)
            ran = len(report.jobs)
            if inspect.iscoroutinefunction(worker.run):
                asyncio.run(worker.run(install_signals=False))
            else:
                worker.run(install_signals=False)
            if len(report.jobs) == ran or not self._ready_after_pass(worker):
                return report

    async def run_pending_async(self, *, queues: Sequence[str] | None = None, **settings: Any) -> RunReport:
        """run_pending inside a running event loop."""
        report = RunReport()
        while True:
            worker = self._pending_worker(queues, settings)
            worker.on_outcome.append(report._note)
            ran = len(report.jobs)
            if inspect.iscoroutinefunction(worker.run):
                await worker.run(install_signals=False)
            else:  # a Worker (threads): run on a thread, so that the loop goes on meanwhile
                await asyncio.to_thread(worker.run, install_signals=False)
            if len(report.jobs) == ran or not await asyncio.to_thread(self._ready_after_pass, worker, True):
                return report

    def _ready_after_pass(self, worker: Any, own_connection: bool = False) -> bool:
        """Whether a queue of a pass of run_pending that ran jobs has a ready one now: a job that
        waited for one of them (after=) became ready in its commit, which the pass may have made
        after its last reserve. Then run_pending makes another pass. (own_connection: on a
        connection of its own, closed after: run_pending_async asks from a pool's thread.)"""
        db: Any = connect(worker.dsn) if own_connection else self._worker_database()
        try:
            return any(db.queue(name).next_scheduled_at()[1] == 0 for name in worker.routes)
        finally:
            if own_connection:
                db.close()
