"""Batch tasks: ``@app.task(batch=100)`` over a function that takes a list of items and returns
one outcome per item (docs/tasks.md, "Batch tasks").

Each item is a job of its own: its payload is one JSON object by name, as any task's, of the fields
of the item type (the element type of the function's one parameter, ``list[Item]``: a dataclass, a
NamedTuple, a pydantic model; ``list[dict]`` or no annotation: the payload as it is). So
``send.defer(to="a@example.com")`` (checked against Item's fields), ``task.call(...)`` with
defer_many, and a queue_push from psql all enqueue one item. The worker reserves up to N of them
at once and calls the function once (pyqueue_sql.worker.batches); each job then ends on its own:
an outcome that is an exception instance (Retry, GiveUp, Snooze or any other) fails that job as if
a task had raised it, any other value is a success (stored as its result with store_result=True);
None for the whole list: every item succeeded. An exception the function raises fails every job of
the batch."""

from __future__ import annotations

import collections.abc
import inspect
import typing
from collections.abc import Callable
from typing import Any, TypeVar

from .. import errors
from ..worker.batches import check_batch
from ..worker.model import Job
from .conversion import Mismatch, detail, type_hints
from .running import result_json
from .task import PayloadMismatchError, Task

R = TypeVar("R")

_LISTS = (list, collections.abc.Sequence, collections.abc.Iterable, collections.abc.Collection)


def _element(hint: Any) -> Any:
    """X of list[X] / Sequence[X] / Iterable[X] (Any when unannotated or not a list)."""
    if typing.get_origin(hint) in _LISTS:
        args = typing.get_args(hint)
        return args[0] if args else Any
    return Any


def _as_dict(**fields: Any) -> dict[str, Any]:
    """An item of a batch task whose items are plain dicts: the payload's fields."""
    return fields


def item_type(fn: Callable[..., Any], kind: str) -> Any:
    """The item type of a batch function: the element type of its one required parameter."""
    params = [p for p in inspect.signature(fn).parameters.values() if p.default is p.empty]
    if len(params) != 1 or params[0].kind not in (params[0].POSITIONAL_ONLY, params[0].POSITIONAL_OR_KEYWORD):
        raise errors.InvalidArgumentError(
            f"batch task {kind!r}: the function takes the list of its items as its one argument"
        )
    return _element(type_hints(fn).get(params[0].name, Any))


class BatchTask(Task[..., R]):
    """A task whose function runs over a list of items (see the module docstring). defer(), call()
    and configure() take one item's fields, by name, as the item type's constructor does."""

    def __init__(self, app: Any, fn: Callable[..., Any], *, size: int, linger: float, **task: Any) -> None:
        kind = task["kind"]
        item = item_type(fn, kind)
        maker: Callable[..., Any] = _as_dict if item in (Any, dict) or not callable(item) else item
        super().__init__(app, maker, **task)
        self.batch_fn = fn
        self.item = item
        self.size = size
        self.linger = linger
        # Its jobs run on a lane of the threaded Worker (an async def function on the lane's own
        # event loop): it never asks for the AsyncWorker (app.worker, `pyqueue-sql worker`).
        self.is_async = False
        self.__name__ = getattr(fn, "__name__", kind)
        self.__doc__ = getattr(fn, "__doc__", None)
        # a job's result is one element of what the function returns
        self._hints = {**type_hints(maker), "return": _element(type_hints(fn).get("return", Any))}

    def __repr__(self) -> str:
        return f"<BatchTask {self.queue}/{self.kind} {self.__name__} of up to {self.size}>"

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        """Runs the function here and now on a list of items."""
        return self.batch_fn(*args, **kwargs)

    def _copy(self, **changes: Any) -> BatchTask[R]:
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
        return BatchTask(self.app, self.batch_fn, size=self.size, linger=self.linger, **fields)

    def item_of(self, job: Job) -> Any:
        """The item of a job: its payload checked against the item type's fields and built. What
        the item type's constructor raises (a dataclass's __post_init__, a check of its own) is
        that payload's PayloadMismatchError, naming why: it fails this job alone, as a plain
        task's argument its type refuses does."""
        kwargs = self.arguments(job.payload, job)
        try:
            return self.fn(**kwargs)
        except Exception as exc:
            name, why, said = (
                getattr(self.item, "__name__", repr(self.item)),
                type(exc).__name__,
                detail(exc),
            )
            why += f": {said}" if said != why else ""
            raise PayloadMismatchError(
                f"task {self.kind!r}: the payload does not fit {name} ({why})"
            ) from None

    def handler(self) -> Callable[[list[Job]], Any]:
        """The worker's batch handler (Worker.add_batch_handler): decodes each job's item (a
        payload that does not fit fails its job alone, PayloadMismatchError), calls the function
        once with the items, and returns one outcome per job (a stored result as JSON)."""
        fn, item_of, store, kind = self.batch_fn, self.item_of, self.store_result, self.kind

        def split(jobs: list[Job]) -> tuple[list[Any], list[Any], list[int]]:
            outcomes: list[Any] = [None] * len(jobs)
            items, at = [], []
            for i, job in enumerate(jobs):
                try:
                    items.append(item_of(job))
                    at.append(i)
                except (PayloadMismatchError, Mismatch, TypeError, ValueError) as exc:
                    outcomes[i] = (
                        exc
                        if isinstance(exc, PayloadMismatchError)
                        else PayloadMismatchError(f"task {kind!r}: {exc}")
                    )
            return outcomes, items, at

        def merge(outcomes: list[Any], at: list[int], value: Any) -> list[Any]:
            if value is None:
                values: list[Any] = [None] * len(at)
            elif isinstance(value, (list, tuple)) and len(value) == len(at):
                values = list(value)
            else:
                what = f"{len(value)} outcomes" if isinstance(value, (list, tuple)) else type(value).__name__
                raise errors.InvalidArgumentError(
                    f"batch task {kind!r} returns None or one outcome per item ({len(at)}), not {what}"
                )
            for i, v in zip(at, values, strict=True):
                if store and not isinstance(v, BaseException):
                    try:
                        v = result_json(kind, v)
                    except errors.InvalidPayloadError as exc:
                        v = exc
                outcomes[i] = v
            return outcomes

        if inspect.iscoroutinefunction(fn):

            async def run_async(jobs: list[Job]) -> list[Any]:
                outcomes, items, at = split(jobs)
                return merge(outcomes, at, (await fn(items)) if items else None)

            return run_async

        def run(jobs: list[Job]) -> list[Any]:
            outcomes, items, at = split(jobs)
            return merge(outcomes, at, fn(items) if items else None)

        return run


def batch_task(
    app: Any, fn: Callable[..., Any], *, size: object, linger: object, **task: Any
) -> BatchTask[Any]:
    """``@app.task(batch=size, batch_linger=linger)``: the BatchTask of fn (its size and linger checked)."""
    check_batch(size, linger)
    return BatchTask(app, fn, size=typing.cast(int, size), linger=float(typing.cast(float, linger)), **task)
