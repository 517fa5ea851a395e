"""A task, a call of it and its handle: Task (the function and its options; payload checks,
defer, configure), TaskCall (one call, for defer_many), TaskHandle (a deferred job: its status,
result, cancel, progress) and the batches defer_many pushes."""

from __future__ import annotations

import collections.abc
import dataclasses
import datetime as dt
import inspect
import math
import re
import time
from collections.abc import Callable, Iterable, Mapping
from typing import TYPE_CHECKING, Any, Concatenate, Generic, Literal, ParamSpec, Protocol, TypeVar, overload

from .. import errors
from ..calls.dependencies import check_run_on
from ..client import Database, NewMessage, Result, headers_value, parent_refs
from ..dialects import JSONValue
from ..errors import PayloadMismatchError as PayloadMismatchError
from ..worker.model import Job
from ..worker.policy import RetryPolicy
from .conversion import (
    Hint,
    Mismatch,
    NotJson,
    Reader,
    exact_or_reader,
    from_json,
    json_type_name,
    to_json,
    type_hints,
    type_name,
)
from .current import current_job
from .keys import new_key, occurrence_time

if TYPE_CHECKING:
    from ..aio.client import AsyncDatabase

__all__ = [
    "Batch",
    "PayloadMismatchError",
    "Signature",
    "Task",
    "TaskCall",
    "TaskHandle",
    "TaskGroup",
    "TaskApp",
    "TaskOptions",
    "batches_of",
    "handles_of",
]

P = ParamSpec("P")
P2 = ParamSpec("P2")
R = TypeVar("R")
T = TypeVar("T")


class TaskApp(Protocol):
    """What a task and its handle use of their app (pyqueue_sql.tasks.app.App, which builds on
    this module)."""

    tasks: dict[tuple[str, str], Task[Any, Any]]
    routes: tuple[str, ...]

    def database(self) -> Database: ...

    async def database_async(self) -> AsyncDatabase: ...

    def defer_many(self, calls: Iterable[TaskCall[Any]]) -> list[TaskHandle[Any]]: ...

    def parent_results_of(self, job: Job, task: Task[Any, Any]) -> list[Any]: ...

    def results(
        self,
        queue: str | None = None,
        *,
        kind: str | None = None,
        state: str | None = None,
        n: int | None = None,
        before: dt.datetime | dt.timedelta | None = None,
    ) -> list[Result]: ...

    async def defer_many_async(self, calls: Iterable[TaskCall[Any]]) -> list[TaskHandle[Any]]: ...

    def defer_canvas(self, canvas: Any) -> Any: ...


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
    app: TaskApp | None = dataclasses.field(default=None, repr=False, compare=False)

    def _app(self) -> TaskApp:
        if self.app is None:
            raise errors.InvalidArgumentError(
                "this handle has no app: build it with app.handle(queue, key, kind)"
            )
        return self.app

    def _queue(self) -> Any:  # a Queue (whose sans-IO methods mypy sees as generators)
        return self._app().database().queue(self.queue)

    def status(self) -> Result:
        """The job's state now (Queue.result): 'ready', 'delayed', 'reserved', 'blocked',
        'waiting' (deferred with after=: its parents have not all succeeded) while it is live;
        'succeeded', 'failed', 'cancelled' once it finished (on a queue that keeps results);
        'dead' when the queue keeps no result of it but its message is in the queue's dead-letter
        queue (dead-lettered from this queue; its last_error is the dead letter's);
        'unknown' otherwise."""
        state: Result = self._queue().result(self.key, self.kind)
        return self._or_dead(state)

    def _or_dead(self, state: Result) -> Result:
        """state, or when it is 'unknown' and the job's message is a dead letter of its queue (in
        the queue's dead-letter queue, dead-lettered from it), the 'dead' Result of it."""
        if state.state != "unknown":
            return state
        dead_letter_queue = self._queue().settings().dead_letter_queue
        if dead_letter_queue is None:
            return state
        letter: Any = self._app().database().queue(dead_letter_queue).message(self.key, self.kind)
        if letter is None or letter.dead_from != self.queue:
            return state
        # (its attempts start over in the dead-letter queue: not the job's)
        return Result(self.queue, self.key, self.kind, "dead", last_error=letter.last_error)

    def progress(self) -> JSONValue:
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
        return self._outcome(self._or_dead(self._queue().wait_result(self.key, self.kind, timeout)))

    async def result_async(self, timeout: float | dt.timedelta | None = None) -> R:
        """result(), awaited on the app's asyncio database (many handles may wait at once: they
        share its connection, each gets its own result)."""
        db = await self._app().database_async()
        return self._outcome(await db.queue(self.queue).wait_result(self.key, self.kind, timeout))

    def _outcome(self, r: Result) -> R:
        where = f"task {self.kind!r} ({self.queue}/{self.key})"
        if r.state == "succeeded":
            tasks = {} if self.app is None else self.app.tasks
            t = tasks.get((self.queue, self.kind))
            if t is None:  # a call routed to another queue (configure(queue=)): its task by kind
                t = next((x for (_, k), x in tasks.items() if k == self.kind), None)
            hint = Any if t is None else t.hints.get("return", Any)
            try:
                value: R = None if r.result is None else from_json(r.result, hint)  # type: ignore[assignment]
            except Mismatch:
                value = r.result  # stored by other code, or the annotation changed since: as it is
            return value
        if r.state == "failed":
            raise errors.TaskFailed(
                f"{where} failed after {r.attempts} attempt(s): {r.last_error}", r.last_error, r.attempts
            )
        if r.state == "dead":
            raise errors.TaskFailed(
                f"{where} failed and is in the dead-letter queue: {r.last_error}", r.last_error
            )
        if r.state == "cancelled":
            raise errors.TaskCancelled(f"{where} was cancelled")
        if r.state == "unknown":
            raise errors.ResultNotFoundError(
                f"{where}: no such job and no result kept (never deferred, its queue keeps no results, "
                "its result expired, or it was removed or moved)"
            )
        raise TimeoutError(f"{where} has not finished (state {r.state})")


class TaskGroup(Generic[R]):
    """Handles followed as one (app.group(handles); Celery's GroupResult): results(timeout=) gives
    their values in the handles' order, wait(timeout=) their Results once all have finished,
    ``state`` one word for all of them, cancel() cancels those still live. Each call reads the
    jobs through their app's database, one after another (the timeout is shared by all of them)."""

    def __init__(self, handles: Iterable[TaskHandle[R]]) -> None:
        self.handles: tuple[TaskHandle[R], ...] = tuple(handles)
        for h in self.handles:
            if not isinstance(h, TaskHandle):
                raise errors.InvalidArgumentError(f"a group takes task handles, not {type(h).__name__}")

    def __repr__(self) -> str:
        return f"<TaskGroup of {len(self.handles)} job(s)>"

    def __len__(self) -> int:
        return len(self.handles)

    def __iter__(self) -> collections.abc.Iterator[TaskHandle[R]]:
        return iter(self.handles)

    def results(self, timeout: float | dt.timedelta | None = None) -> list[R]:
        """Waits for every job and returns their values in the handles' order (what each
        handle.result() gives). The first job in that order that failed or was cancelled raises
        (TaskFailed, TaskCancelled); TimeoutError when they have not all finished within timeout
        seconds (None: no end)."""
        return [h._outcome(r) for h, r in zip(self.handles, self._wait(timeout, raise_timeout=True))]

    def wait(self, timeout: float | dt.timedelta | None = None) -> list[Result]:
        """Waits until every job has finished (succeeded, failed or cancelled), or timeout passes;
        returns each one's Result (Queue.result), in the handles' order, raising nothing."""
        return self._wait(timeout, raise_timeout=False)

    def _wait(self, timeout: float | dt.timedelta | None, raise_timeout: bool) -> list[Result]:
        seconds = None if timeout is None else _seconds(timeout)
        deadline = None if seconds is None else time.monotonic() + seconds
        out: list[Result] = []
        for h in self.handles:
            left = None if deadline is None else max(0.0, deadline - time.monotonic())
            r: Result = h._or_dead(h._queue().wait_result(h.key, h.kind, left))
            if raise_timeout and not r.finished and r.state not in ("unknown", "dead"):
                raise TimeoutError(
                    f"group of {len(self.handles)}: task {h.kind!r} ({h.queue}/{h.key}) has not finished "
                    f"(state {r.state})"
                )
            out.append(r)
        return out

    def states(self) -> list[str]:
        """Each job's state now (handle.status().state), in the handles' order."""
        return [h.status().state for h in self.handles]

    @property
    def state(self) -> str:
        """'succeeded' when every job succeeded; 'failed' once one failed, is dead or unknown (and none
        is live), 'cancelled' when one was cancelled and none failed; 'pending' while one is
        live (ready, delayed, reserved, waiting...)."""
        states = set(self.states())
        if states <= {"succeeded"}:
            return "succeeded"
        if states & {"succeeded", "failed", "cancelled", "unknown", "dead"} != states:
            return "pending"
        return "failed" if states & {"failed", "unknown", "dead"} else "cancelled"

    def completed_count(self) -> int:
        """How many jobs succeeded."""
        return self.states().count("succeeded")

    def cancel(self) -> int:
        """Cancels every job still live (handle.cancel()); returns how many were cancelled or asked
        to stop."""
        return sum(1 for h in self.handles if h.cancel())


def _seconds(timeout: float | dt.timedelta) -> float:
    return timeout.total_seconds() if isinstance(timeout, dt.timedelta) else float(timeout)


@dataclasses.dataclass(frozen=True)
class TaskCall(Generic[R]):
    """One call of a task, for app.defer_many / Task.defer_many (what ``task.call(...)`` or
    ``task.configure(...).call(...)`` returns): the task with its options and the payload of the
    arguments, checked and encoded when the call was made. Its key is made when it is deferred
    (the configured key, else a fresh one): a call deferred twice is two jobs."""

    task: Task[Any, Any]
    payload: dict[str, JSONValue]

    def message(self) -> tuple[str, Any]:
        """The key of the job this call becomes now, and its message as Queue.push_many takes it
        (Queue.push_after_many for a call configured with after=)."""
        o = self.task.options
        key = o.key if o.key is not None else new_key()
        if o.after is not None or o.run_on is not None:
            _, push_after = _after_push(self.task, key, self.payload)  # (refused in one line as defer's)
            return key, push_after
        headers = headers_now(o)
        if o.run_at is None and o.priority is None and o.group is None and headers is None:
            return key, (key, self.task.kind, self.payload)  # push_many's quickest shape
        return key, NewMessage(key, self.task.kind, self.payload, o.run_at, o.priority, o.group, headers)


@dataclasses.dataclass
class Batch:
    """The calls of defer_many that go to one queue through one database (None: the app's): one
    push_many. ``inserted``: how many of its messages were new, once pushed."""

    db: Database | AsyncDatabase | None
    queue: str
    keys: list[str] = dataclasses.field(default_factory=list)
    messages: list[Any] = dataclasses.field(default_factory=list)
    inserted: int = 0
    # jobs deferred with after=: one Queue.push_after_many (queue_push_after_batch), after the others
    after: bool = False

    def push(self, queue: Any) -> Any:
        """Its one call on the queue (what it returns: awaitable on an asyncio queue)."""
        return queue.push_after_many(self.messages) if self.after else queue.push_many(self.messages)


def batches_of(app: TaskApp, calls: Iterable[TaskCall[Any]]) -> tuple[list[TaskCall[Any]], list[Batch]]:
    """The calls in order, and their messages by (database, queue, with parents or not): one
    push_many each, then one push_after_many each (a parent deferred in the same call goes first)."""
    listed = list(calls)
    batches: dict[tuple[int, str, bool], Batch] = {}
    for c in listed:
        if not isinstance(c, TaskCall):
            raise errors.InvalidArgumentError(
                f"defer_many takes task.call(...) values, not {type(c).__name__}"
            )
        if c.task.app is not app:
            raise errors.InvalidArgumentError(f"a call of task {c.task.kind!r}, a task of another app")
        db = c.task.db
        after = c.task.options.after is not None or c.task.options.run_on is not None
        batch = batches.setdefault((id(db), c.task.queue, after), Batch(db, c.task.queue, after=after))
        key, message = c.message()
        batch.keys.append(key)
        batch.messages.append(message)
    return listed, sorted(batches.values(), key=lambda b: b.after)


def handles_of(app: TaskApp, listed: list[TaskCall[Any]], batches: list[Batch]) -> list[TaskHandle[Any]]:
    """The handles of deferred calls, in their order. enqueued: True for a call with a fresh key
    (it cannot have been there) and for every call of a queue's batch when all of its messages
    were new; False for a call with a key of its own when some of its batch's were not (the
    batch's count does not say which)."""
    by_target = {(id(b.db), b.queue, b.after): b for b in batches}
    positions = dict.fromkeys(by_target, 0)
    handles: list[TaskHandle[Any]] = []
    for c in listed:
        o = c.task.options
        where = (id(c.task.db), c.task.queue, o.after is not None or o.run_on is not None)
        batch = by_target[where]
        key = batch.keys[positions[where]]
        positions[where] += 1
        enqueued = c.task.options.key is None or batch.inserted == len(batch.keys)
        handles.append(TaskHandle(c.task.queue, key, c.task.kind, enqueued, app))
    return handles


@dataclasses.dataclass(frozen=True)
class TaskOptions:
    key: str | None = None
    # the queue this call is routed to (configure(queue=)); None: the task's own
    queue: str | None = None
    run_at: dt.datetime | dt.timedelta | None = None
    priority: int | None = None
    group: str | None = None
    headers: Mapping[str, object] | None = None
    # the parents (queue_push_after's {"queue", "p_key", "p_kind"} each), in order; None: none
    after: tuple[dict[str, str | None], ...] | None = None
    # when a job with parents runs (queue_push_after_on): "success", "failure", "always"; None: success
    run_on: str | None = None
    # the time after which the job is not run (an aware datetime), or how long after each defer
    expires: dt.datetime | dt.timedelta | None = None


EXPIRES_HEADER = "pyqueue.expires_at"

# @app.task(rate_limit=)'s units (Celery's spelling): the window's length in seconds
RATE_UNITS = {"s": 1, "m": 60, "h": 3600}
MAX_RATE_LIMIT_N = 10000  # queue_set_rate's bound on n


def check_rate_limit(rate_limit: object, kind: str) -> tuple[int, int]:
    """@app.task(rate_limit=)'s value, checked: "N/s", "N/m" or "N/h" with N a whole number from 1
    to 10000 (the contract's bound), as (N, the window in seconds); anything else is
    InvalidArgumentError in one line, when the task is defined."""
    m = (
        re.fullmatch(r"\s*([-+]?[0-9]+)\s*/\s*([smh])\s*", rate_limit)
        if isinstance(rate_limit, str)
        else None
    )
    if m is None:
        raise errors.InvalidArgumentError(
            f'task {kind!r}: rate_limit must be "N/s", "N/m" or "N/h" (N jobs a second, a minute or '
            f"an hour), not {rate_limit!r}"
        )
    n = int(m.group(1))
    if not 1 <= n <= MAX_RATE_LIMIT_N:
        raise errors.InvalidArgumentError(
            f"task {kind!r}: rate_limit {rate_limit!r}: N must be from 1 to {MAX_RATE_LIMIT_N}"
        )
    return n, RATE_UNITS[m.group(2)]


def check_expires(expires: object) -> dt.datetime | dt.timedelta:
    """configure(expires=)'s value, checked: a positive timedelta or number of seconds, or an aware
    datetime in the future; anything else is InvalidArgumentError in one line."""
    if isinstance(expires, dt.timedelta):
        delay = expires
    elif isinstance(expires, (int, float)) and not isinstance(expires, bool):
        if not math.isfinite(expires):
            raise errors.InvalidArgumentError(f"expires must be a finite number of seconds, not {expires!r}")
        delay = dt.timedelta(seconds=expires)
    elif isinstance(expires, dt.datetime):
        if expires.tzinfo is None or expires.utcoffset() is None:
            raise errors.InvalidArgumentError(
                f"expires must be an aware datetime (with a tzinfo, e.g. UTC), not the naive {expires.isoformat()}"
            )
        if expires <= dt.datetime.now(dt.timezone.utc):
            raise errors.InvalidArgumentError(f"expires is in the past: {expires.isoformat()}")
        return expires
    else:
        raise errors.InvalidArgumentError(
            "expires must be a timedelta, a number of seconds or an aware datetime, "
            f"not {type(expires).__name__}"
        )
    if delay <= dt.timedelta(0):
        raise errors.InvalidArgumentError(f"expires must be a positive delay, not {delay.total_seconds()} s")
    return delay


def headers_now(o: TaskOptions) -> Mapping[str, object] | None:
    """The headers of a job deferred now with options o: its configured headers, with its expiry (a
    delay counted from now) as the header pyqueue.expires_at, the UTC time the routines compare."""
    if o.expires is None:
        return o.headers
    when = o.expires if isinstance(o.expires, dt.datetime) else dt.datetime.now(dt.timezone.utc) + o.expires
    stamp = when.astimezone(dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%fZ")
    return {**(o.headers or {}), EXPIRES_HEADER: stamp}


def _check_route(task: Task[Any, Any], queue: object) -> None:
    """configure(queue=)'s queue, checked: the task's own, or one of its app's routes, where the
    app's workers run the task by kind (InvalidArgumentError otherwise, in one line)."""
    if not isinstance(queue, str) or not queue:
        raise errors.InvalidArgumentError(f"task {task.kind!r}: queue must be a queue's name, not {queue!r}")
    if queue == task.queue:
        return
    if queue not in task.app.routes:
        raise errors.InvalidArgumentError(
            f"task {task.kind!r} cannot be routed to queue {queue!r}: no worker of the app would run it "
            f"there (its queue is {task.queue!r}; declare the route with App(routes=[{queue!r}]))"
        )
    if getattr(task, "batch_fn", None) is not None:  # a BatchTask: its lane serves its own queue
        raise errors.InvalidArgumentError(
            f"batch task {task.kind!r} runs on its own queue {task.queue!r}, not on a route"
        )


def _parents_of(handles: Iterable[Any]) -> tuple[dict[str, str | None], ...]:
    """configure(after=)'s parents, checked now (client.parent_refs): at least one."""
    refs = tuple(parent_refs(handles))
    if not refs:
        raise errors.InvalidArgumentError("after= needs at least one parent (None: no parents)")
    return refs


class _Arguments:
    """How a task's arguments travel: each encoded as JSON by name and checked to come back as it
    was (Task.payload), and read back for the function as its annotations say (Task.arguments,
    with the decoders made here once per task: the worker's per-message path)."""

    def __init__(self, task: Task[Any, Any]) -> None:
        self.task = task
        self.decoding: tuple[dict[str, type | Reader | None], frozenset[str], bool] | None = None
        self.var_kw_reader: type | Reader | None = None

    def encode_bound(self, bound: inspect.BoundArguments) -> dict[str, JSONValue]:
        t = self.task
        out: dict[str, JSONValue] = {}
        for name, value in bound.arguments.items():
            param = t.signature.parameters[name]
            if param.kind is param.VAR_KEYWORD:
                for k, v in value.items():
                    out[k] = self.encode(k, v, t.hints.get(param.name, Any))
            else:
                out[name] = self.encode(name, value, t.hints.get(name, Any))
        return out

    def encode(self, name: str, value: object, hint: Hint) -> JSONValue:
        t = self.task
        if (
            value is None
            or type(value) in (str, int, bool)
            or (type(value) is float and math.isfinite(value))
        ):
            read = self.reader_of(name)
            if read is not None:
                try:
                    if type(read) is type:
                        if type(value) is not read:
                            raise Mismatch(read.__name__, value)
                    else:
                        read(value)
                except Mismatch as m:
                    raise errors.InvalidPayloadError(
                        f"task {t.kind!r}: argument {name!r}{m.where} {m.text()}"
                    ) from None
            return value
        try:
            data = to_json(value)
        except NotJson as exc:
            raise errors.InvalidPayloadError(
                f"task {t.kind!r}: argument {name!r} ({type_name(value)}) cannot be sent as JSON: {exc}"
            ) from None
        try:
            back = from_json(data, hint)
            same = back == value and type(back) is type(value)
        except Mismatch as m:
            raise errors.InvalidPayloadError(
                f"task {t.kind!r}: argument {name!r}{m.where} {m.text()}"
            ) from None
        except Exception:
            same = False
        if not same:
            raise errors.InvalidPayloadError(
                f"task {t.kind!r}: argument {name!r} ({type_name(value)}) would not come back as it "
                f"was from JSON (it would be {data!r}"
                + ("" if hint is not Any else "; annotate the parameter with its type")
                + ")"
            )
        return data

    def reader_of(self, name: str) -> type | Reader | None:
        readers, _, var_kw = self.decoders()
        if name in readers:
            return readers[name]
        return self.var_kw_reader if var_kw else None

    def decoders(self) -> tuple[dict[str, type | Reader | None], frozenset[str], bool]:
        """Per parameter name, how its JSON value is checked and rebuilt (reader_for; a type: that
        JSON-native type exactly; None: taken as it is); the required names; whether unknown names
        go to a **kwargs. Made once per task: the worker's per-message path."""
        if self.decoding is None:
            t = self.task
            readers: dict[str, type | Reader | None] = {}
            required = set()
            var_kw = False
            for p in t.signature.parameters.values():
                if p.kind is p.VAR_KEYWORD:
                    var_kw = True
                    self.var_kw_reader = exact_or_reader(t.hints.get(p.name, Any))
                    continue
                readers[p.name] = exact_or_reader(t.hints.get(p.name, Any))
                if p.default is p.empty and (
                    t.occurrence_parameter is None or p.name != t.occurrence_parameter[0]
                ):
                    required.add(p.name)
            self.decoding = (readers, frozenset(required), var_kw)
        return self.decoding

    def mismatch(self, text: str) -> PayloadMismatchError:
        return PayloadMismatchError(f"task {self.task.kind!r}: {text}")


class Task(Generic[P, R]):
    """A function the app's workers run for each message of (queue, kind); see the module docstring.

    Calling it runs the function here and now; ``defer(...)`` enqueues it with the same arguments."""

    def __init__(
        self,
        app: TaskApp,
        fn: Callable[P, R],
        *,
        queue: str,
        kind: str,
        retry: RetryPolicy | None,
        timeout: float | None,
        options: TaskOptions,
        db: Database | AsyncDatabase | None = None,
        store_result: bool = False,
    ) -> None:
        self.app = app
        self.fn = fn
        self.queue = queue
        self.kind = kind
        self.retry = retry
        self.timeout = timeout
        self.store_result = store_result
        # @app.task(rate_limit=): (n, window in seconds), set on its queues by app.create_queues()
        self.rate_limit: tuple[int, int] | None = None
        self.options = options
        self.db = db
        self.is_async = inspect.iscoroutinefunction(fn)
        self.signature = inspect.signature(fn)
        self._hints: dict[str, Hint] | None = None
        self._arguments = _Arguments(self)  # how its arguments travel as JSON
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
    def hints(self) -> dict[str, Hint]:
        if self._hints is None:
            self._hints = type_hints(self.fn)
        return self._hints

    def pass_occurrence(self, occurrence: tuple[str, str]) -> None:
        """Has the worker pass a periodic occurrence's time to a parameter: (its name, "datetime"
        or "timestamp"), see App.periodic; a payload may then leave that argument out."""
        self.occurrence_parameter = occurrence
        self._arguments.decoding = None

    def _copy(self, **changes: Any) -> Task[P, R]:
        fields: dict[str, Any] = dict(
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
        queue: str | None = None,
        key: str | None = None,
        run_at: dt.datetime | dt.timedelta | None = None,
        priority: int | None = None,
        group: str | None = None,
        headers: Mapping[str, object] | None = None,
        after: Iterable[TaskHandle[Any] | tuple[str, str, str]] | None = None,
        run_on: Literal["success", "failure", "always"] | None = None,
        expires: dt.datetime | dt.timedelta | float | None = None,
    ) -> Task[P, R]:
        """A copy of the task for one defer (or for the calls of defer_many). queue: routes the
        call to that queue (Celery's ``apply_async(queue=...)``): the task's own queue or one of the
        app's ``App(routes=...)``, where the app's workers run every task by its kind; any other is
        InvalidArgumentError here, not a job no worker runs. A key of your choosing (a unique job: a live message
        with that key and kind is not enqueued again), a run_at (a time, or a delay), a priority,
        a FIFO group, headers (a dict of str to JSON values the job carries beside its arguments:
        current_job().headers in the task; the current trace context is added to them when
        OpenTelemetry is installed).

        after: the jobs this one waits for, its parents (handles, or (queue, key, kind) tuples), in
        the order ``current_job().parent_results()`` gives their results back: the job is 'waiting'
        until every parent has succeeded (queue_push_after), and is cancelled when one fails or is
        cancelled. Its queue and the parents' must keep results. With run_at it runs at the later
        of run_at and its parents' end; priority, headers and expires apply as without parents; a
        group does not combine with it (InvalidArgumentError). Calls with after= are deferred in
        bulk too: defer_many sends them in one queue_push_after_batch per queue.

        run_on (with after=): "success" (the default) as above; "failure", a failure callback
        (Celery's link_error): it runs once, when a parent fails for good (dead-lettered, dropped
        or cancelled), reads which one and its last error with ``app.failed_parents()``, and is
        cancelled when every parent succeeds; "always": it runs once every parent has ended,
        whichever way.

        expires (Celery's expires): a job not started by then is not run: a delay from each defer
        (a timedelta, or seconds) or an aware datetime. Carried as the header pyqueue.expires_at; a
        worker's reserve that meets the job after it ends it instead, its state 'cancelled' with
        the last error 'expired at <time>' (docs/tasks.md, "Expiry")."""
        if run_on is not None:
            check_run_on(run_on)
        if expires is not None:
            expires = check_expires(expires)
        if queue is not None:
            _check_route(self, queue)
        o = self.options
        return self._copy(
            queue=self.queue if queue is None else queue,
            options=TaskOptions(
                queue=o.queue if queue is None else queue,
                key=o.key if key is None else key,
                run_at=o.run_at if run_at is None else run_at,
                priority=o.priority if priority is None else priority,
                group=o.group if group is None else group,
                headers=o.headers if headers is None else headers_value(headers),
                after=o.after if after is None else _parents_of(after),
                run_on=o.run_on if run_on is None else run_on,
                expires=o.expires if expires is None else expires,
            ),
        )

    def using(self, db: Database | AsyncDatabase) -> Task[P, R]:
        """A copy of the task that defers through db: ``Database.wrap(conn)`` of a connection of
        yours makes the job part of your transaction (committed or rolled back with it)."""
        return self._copy(db=db)

    # -- the payload ----------------------------------------------------------------
    def payload(self, *args: P.args, **kwargs: P.kwargs) -> dict[str, JSONValue]:
        """The message payload of a call with these arguments: one JSON object by name. An
        argument JSON cannot carry faithfully is refused (InvalidPayloadError naming it)."""
        try:
            bound = self.signature.bind(*args, **kwargs)
        except TypeError as exc:
            raise TypeError(f"task {self.kind!r}: {exc}") from None
        return self._arguments.encode_bound(bound)

    def partial_payload(self, kwargs: Mapping[str, object]) -> dict[str, JSONValue]:
        """payload() of some of the arguments, by name (a periodic task's fixed ones)."""
        try:
            bound = self.signature.bind_partial(**kwargs)
        except TypeError as exc:
            raise TypeError(f"task {self.kind!r}: {exc}") from None
        return self._arguments.encode_bound(bound)

    def arguments(self, payload: JSONValue, job: Job | None = None) -> dict[str, Any]:
        """The keyword arguments of the function for a message's payload (what defer wrote, or any
        JSON object by name): each value checked against its parameter's annotation and rebuilt as
        it says. A payload that does not fit (a value of another type, an unknown or a missing
        argument, not a JSON object) raises PayloadMismatchError, which fails the job at once. For
        a periodic task that asks for its occurrence's time, `job` gives it (see App.periodic)."""
        codec = self._arguments
        if type(payload) is not dict:
            raise codec.mismatch(
                f"the payload must be a JSON object of its arguments by name, not {json_type_name(payload)}"
            )
        readers, required, var_kw = codec.decoders()
        kwargs: dict[str, Any] = {}
        for name, data in payload.items():
            try:
                read = readers[name]
            except KeyError:
                if not var_kw:
                    raise codec.mismatch(f"the payload has an unknown argument {name!r}") from None
                read = codec.var_kw_reader
            if read is None:
                kwargs[name] = data
            elif type(read) is type:  # a JSON-native type, exactly: the common case, inline
                if type(data) is not read:
                    raise codec.mismatch(f"argument {name!r} {Mismatch(read.__name__, data).text()}")
                kwargs[name] = data
            else:
                try:
                    kwargs[name] = read(data)
                except Mismatch as m:
                    raise codec.mismatch(f"argument {name!r}{m.where} {m.text()}") from None
        if job is not None and job.headers is not None:  # a step of a chain or chord: its parents' values
            kwargs.update(parents_argument(job, kwargs))
        if not required.issubset(kwargs):
            missing = sorted(required - kwargs.keys())
            raise codec.mismatch(f"the payload has no argument {missing[0]!r}")
        occurrence = self.occurrence_parameter
        if occurrence is not None and occurrence[0] not in kwargs:
            if job is None:
                raise codec.mismatch(f"the payload has no argument {occurrence[0]!r}")
            at = occurrence_time(job)
            kwargs[occurrence[0]] = at if occurrence[1] == "datetime" else int(at.timestamp())
        return kwargs

    def results(
        self,
        *,
        state: str | None = None,
        n: int | None = None,
        before: dt.datetime | dt.timedelta | None = None,
    ) -> list[Result]:
        """The finished jobs of this task kept on its queue, newest first (app.results of its
        queue and kind: up to n, None 100; of one state when given; finished before `before`)."""
        found: list[Result] = self.app.results(self.queue, kind=self.kind, state=state, n=n, before=before)
        return found

    # -- inside a child (after=) ---------------------------------------------------------
    @overload
    def parent_results(self: Task[P, collections.abc.Coroutine[Any, Any, T]]) -> list[T]: ...

    @overload
    def parent_results(self: Task[P, T]) -> list[T]: ...

    def parent_results(self) -> list[Any]:
        """Inside a job deferred with after=: the results of its parents that are jobs of this
        task, in the order given, each rebuilt as this task's return type (for mypy a list of what
        the function returns: ``square.parent_results()`` is a list[int] when square returns an
        int). current_job().parent_results() gives every parent's, untyped."""
        return self.app.parent_results_of(current_job(), self)

    @overload
    def parent_result(self: Task[P, collections.abc.Coroutine[Any, Any, T]]) -> T: ...

    @overload
    def parent_result(self: Task[P, T]) -> T: ...

    def parent_result(self) -> Any:
        """parent_results() of a job that has exactly one parent of this task: its result
        (InvalidArgumentError when it has none or several)."""
        values = self.parent_results()
        if len(values) != 1:
            raise errors.InvalidArgumentError(
                f"the job has {len(values)} parent(s) of task {self.kind!r} ({self.queue}), not one: "
                f"use {self.__name__}.parent_results()"
            )
        return values[0]

    # -- enqueueing --------------------------------------------------------------------
    def _push_args(self, args: tuple[Any, ...], kwargs: dict[str, Any]) -> tuple[str, dict[str, Any]]:
        """The key of the job, and the arguments of its Queue.push (of its Queue.push_after, with
        "parents", when it was configured with after=)."""
        key = self.options.key if self.options.key is not None else new_key()
        o = self.options
        if o.after is not None or o.run_on is not None:
            return _after_push(self, key, self.payload(*args, **kwargs))
        push: dict[str, Any] = dict(
            key=key,
            kind=self.kind,
            payload=self.payload(*args, **kwargs),
            run_at=self.options.run_at,
            priority=self.options.priority,
            group=self.options.group,
        )
        headers = headers_now(self.options)
        if headers is not None:
            push["headers"] = headers
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
        trip; ``task.configure(key=..., run_at=..., priority=..., group=..., headers=..., after=...,
        run_on=..., expires=...).call(...)`` carries those options (calls with after= go in one
        queue_push_after_batch per queue)."""
        return TaskCall(self, self.payload(*args, **kwargs))

    def defer_many(self, calls: Iterable[TaskCall[T]]) -> list[TaskHandle[T]]:
        """app.defer_many of calls of this task (InvalidArgumentError for a call of another), each
        with this task's configure(...) options where the call has none of its own (see _own)."""
        listed = _own(self, calls)
        return self.app.defer_many(listed)

    async def defer_many_async(self, calls: Iterable[TaskCall[T]]) -> list[TaskHandle[T]]:
        """defer_many on an asyncio database."""
        listed = _own(self, calls)
        return await self.app.defer_many_async(listed)

    # -- Celery's signatures (pyqueue_sql.tasks.canvas: chain, group, chord) --------------------
    # A signature fits the function, or all of it but its first argument, which a step of a chain
    # gets from the step before (mypy checks both; the position decides at defer).
    @overload
    def s(
        self: Task[P2, collections.abc.Coroutine[Any, Any, T]], *args: P2.args, **kwargs: P2.kwargs
    ) -> Signature[T]: ...

    @overload
    def s(self: Task[P2, T], *args: P2.args, **kwargs: P2.kwargs) -> Signature[T]: ...

    @overload
    def s(
        self: Task[Concatenate[Any, P2], collections.abc.Coroutine[Any, Any, T]],
        *args: P2.args,
        **kwargs: P2.kwargs,
    ) -> Signature[T]: ...

    @overload
    def s(self: Task[Concatenate[Any, P2], T], *args: P2.args, **kwargs: P2.kwargs) -> Signature[T]: ...

    def s(self, *args: Any, **kwargs: Any) -> Signature[Any]:
        """A signature (Celery's ``task.s(...)``): this call, deferred later by itself
        (``.defer()``) or as a step of pyqueue_sql.chain / group / chord, where it gets the
        value of the step before as its first argument (the arguments given are the rest)."""
        return Signature(self, args, kwargs)

    @overload
    def si(
        self: Task[P, collections.abc.Coroutine[Any, Any, T]], *args: P.args, **kwargs: P.kwargs
    ) -> Signature[T]: ...

    @overload
    def si(self: Task[P, T], *args: P.args, **kwargs: P.kwargs) -> Signature[T]: ...

    def si(self, *args: Any, **kwargs: Any) -> Signature[Any]:
        """An immutable signature (Celery's ``task.si(...)``): every argument given, and none from
        the step before it in a chain (it still runs after that step has succeeded)."""
        return Signature(self, args, kwargs, immutable=True)


def _after_push(task: Task[Any, Any], key: str, payload: dict[str, JSONValue]) -> tuple[str, dict[str, Any]]:
    """The arguments of Queue.push_after (one item of push_after_many) of a job configured
    with after=: its parents, run_on, run_at (due at the later of it and its parents' end),
    priority and headers (an expiry among them); a group, or run_on without after=, refused."""
    o = task.options
    if o.after is None:
        raise errors.InvalidArgumentError(
            f"task {task.kind!r}: run_on= says when a job with parents runs: give after="
        )
    if o.group is not None:
        raise errors.InvalidArgumentError(
            f"task {task.kind!r}: after= cannot be combined with group "
            "(a job that waits for its parents is in no FIFO group)"
        )
    push_after: dict[str, Any] = dict(key=key, kind=task.kind, payload=payload, parents=o.after)
    if o.run_on not in (None, "success"):
        push_after["run_on"] = o.run_on
    headers = headers_now(o)
    for name, value in (("run_at", o.run_at), ("priority", o.priority), ("headers", headers)):
        if value is not None:
            push_after[name] = value
    return key, push_after


def _own(task: Task[Any, Any], calls: Iterable[TaskCall[Any]]) -> list[TaskCall[Any]]:
    """The calls, each with this task's configure(...) options (and using()'s database) where
    the call has none of its own: ``task.configure(priority=9).defer_many([task.call(1)])``
    defers at priority 9, as ``task.configure(priority=9).defer(1)`` does. Options that cannot
    apply to many jobs are refused in one line (a key names one job)."""
    listed = list(calls)
    o = task.options
    if o.key is not None and len(listed) > 1:
        raise errors.InvalidArgumentError(
            f"task {task.kind!r}: configure(key=...) names one job, not the {len(listed)} of defer_many: "
            "give each call its key (task.configure(key=k).call(...))"
        )
    configured = o != TaskOptions() or task.db is not None
    merged: dict[int, Task[Any, Any]] = {}  # one copy per distinct task of the calls
    out = []
    for c in listed:
        if isinstance(c, TaskCall) and (c.task.kind, c.task.fn) != (task.kind, task.fn):
            raise errors.InvalidArgumentError(
                f"task {task.kind!r}: a call of task {c.task.kind!r} (use app.defer_many for several tasks)"
            )
        if configured and isinstance(c, TaskCall):
            t = merged.get(id(c.task))
            if t is None:
                t = merged[id(c.task)] = _merged(c.task, task)
            c = TaskCall(t, c.payload)
        out.append(c)
    return out


def _merged(task: Task[P, R], outer: Task[Any, Any]) -> Task[P, R]:
    """This call's task with outer's options (and database) wherever it has none of its own."""
    mine, theirs = task.options, outer.options
    options = TaskOptions(
        **{
            f.name: getattr(mine, f.name) if getattr(mine, f.name) is not None else getattr(theirs, f.name)
            for f in dataclasses.fields(TaskOptions)
        }
    )
    return task._copy(
        options=options,
        db=task.db if task.db is not None else outer.db,
        queue=options.queue if options.queue is not None else task.queue,
    )


# The headers of a step of a chain or chord (pyqueue_sql.tasks.canvas): the name of the parameter
# that gets the value of its one parent (a chain's step before it), or the list of its parents'
# values in order (a chord's callback). The worker reads the values with queue_parent_results.
CHAIN_ARGUMENT_HEADER = "pyqueue.chain_argument"
CHORD_ARGUMENT_HEADER = "pyqueue.chord_argument"


def parents_argument(job: Job, given: Mapping[str, object]) -> dict[str, Any]:
    """The argument a step of a chain or chord gets from its parents (job.parent_results(), each
    rebuilt by its task's return annotation), by the name its headers give; {} for another job."""
    headers = job.headers or {}
    name = headers.get(CHAIN_ARGUMENT_HEADER)
    listed = name is None
    if listed:
        name = headers.get(CHORD_ARGUMENT_HEADER)
        if name is None:
            return {}
    if not isinstance(name, str) or name in given:
        raise PayloadMismatchError(
            f"task {job.kind!r}: the header naming the argument for its parents' values is {name!r}, "
            "which is not a parameter its payload leaves out"
        )
    values = job.parent_results()
    return {name: values if listed else values[0]}


@dataclasses.dataclass(frozen=True)
class Signature(Generic[R]):
    """One call of a task not deferred yet (Celery's signature, made by ``task.s(...)`` or
    ``task.si(...)``): deferred by itself with ``.defer()`` (a TaskHandle[R]), or as a step of
    pyqueue_sql.chain / group / chord (pyqueue_sql.tasks.canvas). ``set(...)`` gives its options,
    ``on_error(errback)`` a failure callback. Its arguments are checked against the function now
    and encoded when it is deferred."""

    task: Task[Any, Any]
    args: tuple[Any, ...]
    kwargs: Mapping[str, Any]
    immutable: bool = False  # si(): takes no value from the step before it
    # set()'s: queue, key, run_at, priority, expires, headers (as configure takes them)
    options: Mapping[str, Any] = dataclasses.field(default_factory=dict)
    errbacks: tuple[Signature[Any], ...] = ()

    def __post_init__(self) -> None:
        sig = self.task.signature
        try:
            sig.bind(*self.args, **self.kwargs)
        except TypeError as exc:
            if self.immutable:
                raise TypeError(f"task {self.task.kind!r}: {exc}") from None
            try:  # the rest of its arguments, after the value of the step before it
                sig.bind(None, *self.args, **self.kwargs)
            except TypeError:
                raise TypeError(f"task {self.task.kind!r}: {exc}") from None

    def __repr__(self) -> str:
        shown = [repr(a) for a in self.args] + [f"{k}={v!r}" for k, v in self.kwargs.items()]
        return f"{self.task.__name__}.{'si' if self.immutable else 's'}({', '.join(shown)})"

    def set(
        self,
        *,
        queue: str | None = None,
        key: str | None = None,
        run_at: dt.datetime | dt.timedelta | None = None,
        priority: int | None = None,
        expires: dt.datetime | dt.timedelta | float | None = None,
        headers: Mapping[str, object] | None = None,
    ) -> Signature[R]:
        """A copy with these options (Celery's ``sig.set(...)``; countdown and eta are run_at as
        a timedelta or a datetime), those configure() takes, checked now as configure checks
        them: queue, the queue its job goes to (the task's by default; another must be one of
        the app's routes, App(routes=[...]), which its workers serve), key, run_at, priority,
        expires, headers."""
        offered: dict[str, Any] = dict(
            queue=queue, key=key, run_at=run_at, priority=priority, expires=expires, headers=headers
        )
        given = {k: v for k, v in offered.items() if v is not None}
        self.task.configure(**given)  # refused here, in one line, as configure refuses it
        return dataclasses.replace(self, options={**self.options, **given})

    def on_error(self, errback: Signature[Any]) -> Signature[R]:
        """A copy with a failure callback (Celery's ``link_error``): a job of errback, deferred
        with this one, that runs once if this job fails for good or is cancelled (never when it
        succeeds), as ``configure(after=[...], run_on="failure")`` does. errback takes every
        argument it is given (it gets no value) and reads what failed with app.failed_parents()."""
        if not isinstance(errback, Signature):
            raise errors.InvalidArgumentError(f"on_error takes a signature (task.si(...)), not {errback!r}")
        return dataclasses.replace(self, errbacks=(*self.errbacks, errback))

    def defer(self) -> TaskHandle[R]:
        """Enqueues the call (with its failure callbacks, in one transaction): its handle."""
        handle: TaskHandle[R] = self.task.app.defer_canvas(self)
        return handle
