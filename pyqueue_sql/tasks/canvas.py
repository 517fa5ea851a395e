"""Celery's canvas over after=: chain, group and chord of signatures (``task.s(...)``, a Signature
of pyqueue_sql.tasks.task), deferred as jobs that wait for each other.

    pyqueue_sql.chain(fetch.s(url), parse.s(), store.s("pages")).defer()   # a TaskHandle of store
    pyqueue_sql.group(resize.s(64), resize.s(256)).defer()                 # a TaskGroup
    pyqueue_sql.chord([score.s(d) for d in docs], best.s()).defer()        # a TaskHandle of best

Nothing here is new SQL: each step is a job pushed with its parents (queue_push_after), a step of a
chain waiting for the step before it, a chord's callback for every job of its group, a failure
callback (``on_error``) with run_on "failure"; all of a canvas's jobs are pushed by defer_many
(queue_push_batch, queue_push_after_batch) in one transaction, so a refused step enqueues nothing.
A step that is not ``si()`` gets the value of the step before it as its first argument (a
chord's callback: the list of its group's values, in the group's order): its headers name that
parameter (CHAIN_ARGUMENT_HEADER, CHORD_ARGUMENT_HEADER) and the worker reads the parents' results
(queue_parent_results) into it when the job runs, so a step whose value is passed on must store
it (``store_result=True``)."""

from __future__ import annotations

import inspect
from collections.abc import Iterable, Iterator
from typing import Any, Generic, Literal, Protocol, TypeVar, overload

from .. import errors
from ..client import Database
from ..dialects import JSONValue
from .keys import new_key
from .task import (
    CHAIN_ARGUMENT_HEADER,
    CHORD_ARGUMENT_HEADER,
    Signature,
    Task,
    TaskCall,
    TaskGroup,
    TaskHandle,
)

__all__ = ["Chain", "Chord", "Group", "Signature", "chain", "chord", "defer_canvas", "group", "signature"]

R = TypeVar("R")
H = TypeVar("H")
H_co = TypeVar("H_co", covariant=True)

Ref = tuple[str, str, str]  # a job: (queue, key, kind), as after= takes it


class Deferrable(Protocol[H_co]):
    """What a step is to mypy: something whose defer() gives a handle of type H."""

    def defer(self) -> H_co: ...


class _Node:
    """What chain, group and chord share: their failure callbacks and defer."""

    errbacks: tuple[Signature[Any], ...]

    def _app(self) -> Any:
        return next(_signatures(self)).task.app


class Group(_Node, Generic[R]):
    """Jobs that run side by side (Celery's group): ``defer()`` gives a TaskGroup of their
    handles, in order; after a group, a chain's next step (a chord's callback) gets the list of
    their values."""

    def __init__(self, members: Iterable[Step], errbacks: tuple[Signature[Any], ...] = ()) -> None:
        self.members: tuple[Step, ...] = tuple(members)
        if not self.members:
            raise errors.InvalidArgumentError("a group needs at least one signature")
        for m in self.members:
            _check_step(m, "a group")
        self.errbacks = errbacks

    def __repr__(self) -> str:
        return f"group({', '.join(map(repr, self.members))})"

    def on_error(self, errback: Signature[Any]) -> Group[R]:
        """A copy with a failure callback: runs once if one of its jobs fails for good or is
        cancelled (see Signature.on_error)."""
        return Group(self.members, (*self.errbacks, _errback(errback)))

    def defer(self) -> TaskGroup[R]:
        handles: TaskGroup[R] = self._app().defer_canvas(self)
        return handles


class Chord(_Node, Generic[R]):
    """A group and a callback that runs once all of the group's jobs have succeeded, with the list
    of their values, in the group's order, as its first argument (Celery's chord). ``defer()``
    gives the callback's handle. A job of the group that fails for good cancels the callback."""

    def __init__(self, header: Group[Any], body: Signature[R], errbacks: tuple[Signature[Any], ...] = ()):
        self.header = header
        self.body = body
        self.errbacks = errbacks

    def __repr__(self) -> str:
        return f"chord({self.header!r}, {self.body!r})"

    def on_error(self, errback: Signature[Any]) -> Chord[R]:
        """A copy with a failure callback: runs once if a job of the group or the callback fails
        for good or is cancelled (see Signature.on_error)."""
        return Chord(self.header, self.body, (*self.errbacks, _errback(errback)))

    def defer(self) -> TaskHandle[R]:
        handle: TaskHandle[R] = self._app().defer_canvas(self)
        return handle


class Chain(_Node, Generic[H]):
    """Steps run one after the other (Celery's chain): each waits for the one before to succeed
    and gets its value as its first argument (a ``si()`` step gets none); a step that fails for good
    cancels the rest. ``defer()`` gives the last step's handle (a TaskGroup when it is a group)."""

    def __init__(self, steps: Iterable[Step], errbacks: tuple[Signature[Any], ...] = ()) -> None:
        self.steps: tuple[Step, ...] = tuple(steps)
        if not self.steps:
            raise errors.InvalidArgumentError("a chain needs at least one signature")
        for s in self.steps:
            _check_step(s, "a chain")
        self.errbacks = errbacks

    def __repr__(self) -> str:
        return f"chain({', '.join(map(repr, self.steps))})"

    def on_error(self, errback: Signature[Any]) -> Chain[H]:
        """A copy with a failure callback: runs once if one of its jobs fails for good or is
        cancelled (see Signature.on_error)."""
        return Chain(self.steps, (*self.errbacks, _errback(errback)))

    def defer(self) -> H:
        handle: H = self._app().defer_canvas(self)
        return handle


Step = Signature[Any] | Group[Any] | Chord[Any] | Chain[Any]


def _check_step(step: object, where: str) -> None:
    if not isinstance(step, (Signature, Group, Chord, Chain)):
        raise errors.InvalidArgumentError(
            f"{where} takes signatures (task.s(...)), groups, chords and chains, not {step!r:.60}"
        )


def _errback(errback: object) -> Signature[Any]:
    if not isinstance(errback, Signature):
        raise errors.InvalidArgumentError(f"on_error takes a signature (task.si(...)), not {errback!r:.60}")
    return errback


def _signatures(node: Step | _Node) -> Iterator[Signature[Any]]:
    if isinstance(node, Signature):
        yield node
        for e in node.errbacks:
            yield from _signatures(e)
        return
    if isinstance(node, Group):
        for m in node.members:
            yield from _signatures(m)
    elif isinstance(node, Chord):
        yield from _signatures(node.header)
        yield from _signatures(node.body)
    elif isinstance(node, Chain):
        for s in node.steps:
            yield from _signatures(s)
    for e in node.errbacks:
        yield from _signatures(e)


# -- what users write ---------------------------------------------------------------------------
def signature(
    task: Task[Any, Any],
    args: Iterable[Any] = (),
    kwargs: dict[str, Any] | None = None,
    *,
    immutable: bool = False,
    **options: Any,
) -> Signature[Any]:
    """Celery's ``signature(task, args=(...), kwargs={...}, **options)``: task.s(*args, **kwargs)
    (task.si(...) when immutable) with set(**options). Not checked by mypy: ``task.s(...)`` is."""
    if not isinstance(task, Task):
        raise errors.InvalidArgumentError(f"signature takes a task of an app, not {task!r:.60}")
    made: Signature[Any] = Signature(task, tuple(args), dict(kwargs or {}), immutable=bool(immutable))
    return made.set(**options) if options else made


@overload
def group(*members: Signature[R]) -> Group[R]: ...


@overload
def group(members: Iterable[Signature[R]], /) -> Group[R]: ...


@overload
def group(*members: Step | Iterable[Step]) -> Group[Any]: ...


def group(*members: Any) -> Group[Any]:
    """Celery's group: ``group(s1, s2, ...)`` or ``group([s1, s2, ...])``."""
    return Group(_listed(members))


def chord(header: Group[Any] | Iterable[Step], body: Signature[R]) -> Chord[R]:
    """Celery's ``chord(header, body)``: the header a group (or its signatures), body a signature
    whose first argument gets the list of the header's values."""
    if not isinstance(header, Group):
        header = Group(header)
    if not isinstance(body, Signature):
        raise errors.InvalidArgumentError(
            f"a chord's callback is a signature (task.s(...)), not {body!r:.60}"
        )
    return Chord(header, body)


@overload
def chain(last: Deferrable[H], /) -> Chain[H]: ...


@overload
def chain(s1: Step, last: Deferrable[H], /) -> Chain[H]: ...


@overload
def chain(s1: Step, s2: Step, last: Deferrable[H], /) -> Chain[H]: ...


@overload
def chain(s1: Step, s2: Step, s3: Step, last: Deferrable[H], /) -> Chain[H]: ...


@overload
def chain(s1: Step, s2: Step, s3: Step, s4: Step, last: Deferrable[H], /) -> Chain[H]: ...


@overload
def chain(*steps: Step | Iterable[Step]) -> Chain[Any]: ...


def chain(*steps: Any) -> Chain[Any]:
    """Celery's chain: ``chain(s1, s2, ...)`` or ``chain([s1, s2, ...])``."""
    return Chain(_listed(steps))


def _listed(given: tuple[Any, ...]) -> list[Any]:
    """The steps given one by one, or as one iterable."""
    if len(given) == 1 and not isinstance(given[0], (Signature, _Node)) and isinstance(given[0], Iterable):
        return list(given[0])
    return list(given)


# -- deferring: the jobs of a canvas, each with its parents -----------------------------------------
class _Plan:
    """The jobs of a canvas in the order they are pushed (a parent before its children)."""

    def __init__(self, app: Any) -> None:
        self.app = app
        self.calls: list[TaskCall[Any]] = []
        self.refs: list[Ref] = []
        self.parents: list[tuple[Ref, ...]] = []
        self.tasks: dict[Ref, Task[Any, Any]] = {}
        self.errbacks: set[Ref] = set()

    def jobs_since(self, start: int) -> tuple[Ref, ...]:
        """The jobs added since start, failure callbacks left out (a callback is cancelled when
        its parents succeed: a callback waiting on it would take that for a failure)."""
        return tuple(r for r in self.refs[start:] if r not in self.errbacks)


_VALUE = object()  # the place of the value from the step before, when a signature is bound


def _fed_payload(sig: Signature[Any], listed: bool) -> tuple[str, dict[str, JSONValue]]:
    """A step that gets the value of the step before (listed: the list of a group's values): the
    name of its first parameter, which gets it, and the payload of the other arguments."""
    t = sig.task
    params = list(t.signature.parameters.values())
    what = "the list of the values of the group before it" if listed else "the value of the step before it"
    if not params or params[0].kind is not inspect.Parameter.POSITIONAL_OR_KEYWORD:
        raise errors.InvalidArgumentError(
            f"task {t.kind!r} has no first argument for {what}: use {t.__name__}.si(...), which takes none"
        )
    first = params[0].name
    try:
        bound = t.signature.bind(_VALUE, *sig.args, **sig.kwargs)
    except TypeError as exc:
        raise errors.InvalidArgumentError(
            f"{sig!r} after another step: its first argument {first!r} is {what}, and then {exc} "
            f"(use {t.__name__}.si(...) for a step that takes no value)"
        ) from None
    rest: dict[str, Any] = {}
    for name, value in bound.arguments.items():
        if name == first:
            continue
        if t.signature.parameters[name].kind is inspect.Parameter.VAR_KEYWORD:
            rest.update(value)
        else:
            rest[name] = value
    return first, t.partial_payload(rest)


def _plan_signature(
    plan: _Plan,
    sig: Signature[Any],
    parents: tuple[Ref, ...],
    listed: bool,
    run_on: Literal["failure"] | None = None,
) -> Ref:
    task = sig.task
    if task.app is not plan.app:
        raise errors.InvalidArgumentError(f"{sig!r} is a signature of a task of another app")
    options = dict(sig.options)
    queue = options.pop("queue", None)
    if queue is not None and queue != task.queue:
        task = task.configure(queue=queue)  # a route of the app, checked by set()
    if parents and task.options.after is not None:
        raise errors.InvalidArgumentError(
            f"{sig!r}: its task was configured with after=, and it is a step after another: one or the other"
        )
    headers = {**(task.options.headers or {}), **(options.pop("headers", None) or {})}
    if parents and run_on is None and not sig.immutable:
        name, payload = _fed_payload(sig, listed)
        for p in parents:
            if not plan.tasks[p].store_result:
                raise errors.InvalidArgumentError(
                    f"task {p[2]!r} does not store its result, which {sig!r} gets as its first argument: "
                    f"give it @app.task(store_result=True), or use {task.__name__}.si(...)"
                )
        headers[CHORD_ARGUMENT_HEADER if listed else CHAIN_ARGUMENT_HEADER] = name
    else:
        payload = task.payload(*sig.args, **sig.kwargs)
    key = options.pop("key", None) or new_key()
    configured = task.configure(
        key=key,
        after=parents or None,
        run_on=run_on,
        headers=headers or None,
        **options,
    )
    ref = (task.queue, key, task.kind)
    plan.calls.append(TaskCall(configured, payload))
    plan.refs.append(ref)
    plan.parents.append(parents)
    plan.tasks[ref] = task
    if run_on == "failure":
        plan.errbacks.add(ref)
    for errback in sig.errbacks:
        _plan_signature(plan, errback, (ref,), False, run_on="failure")
    return ref


def _plan(plan: _Plan, node: Step, parents: tuple[Ref, ...], listed: bool) -> tuple[tuple[Ref, ...], bool]:
    """Adds node's jobs, its first ones waiting for parents (and given their value, or the list
    of them when listed); returns the jobs a next step waits for, and whether it gets the list of
    their values (after a group) or the value of the one."""
    if isinstance(node, Signature):
        return (_plan_signature(plan, node, parents, listed),), False
    start = len(plan.refs)
    if isinstance(node, Group):
        exits = tuple(r for m in node.members for r in _plan(plan, m, parents, listed)[0])
        out = exits, True
    elif isinstance(node, Chord):
        header, _ = _plan(plan, node.header, parents, listed)
        out = (_plan_signature(plan, node.body, header, True),), False
    else:
        out = parents, listed
        for step in node.steps:
            out = _plan(plan, step, *out)
    jobs = plan.jobs_since(start)
    for errback in node.errbacks:
        _plan_signature(plan, errback, jobs, False, run_on="failure")
    return out


def defer_canvas(app: Any, node: Step) -> Any:
    """Defers a signature, chain, group or chord (App.defer_canvas, which their defer() calls):
    every job's payload is encoded first, then all are pushed with defer_many in one transaction
    of the app's database (a refused one enqueues nothing). Returns the handle of its result: a
    TaskHandle, or a TaskGroup for a group (a chain ending in one)."""
    _check_step(node, "defer_canvas")
    plan = _Plan(app)
    exits, listed = _plan(plan, node, (), False)
    db = app.database()
    if not isinstance(db, Database):
        raise errors.InvalidArgumentError(
            "the app's database is an asyncio one: a canvas is deferred through a blocking Database"
        )
    handles: dict[Ref, TaskHandle[Any]] = {}
    if all(c.task.db is None for c in plan.calls) and db.may_begin:
        with db.transaction():
            _push(app, plan, handles)
    else:
        _push(app, plan, handles)
    if listed:
        return TaskGroup([handles[r] for r in exits])
    return handles[exits[0]]


def _push(app: Any, plan: _Plan, handles: dict[Ref, TaskHandle[Any]]) -> None:
    """defer_many of the plan's calls, in as few runs as the order allows: one run pushes its
    calls without parents first, then those with parents one queue after another, so a job whose
    parent waits in another queue of the same run starts the next run."""
    start = 0
    waiting: dict[Ref, tuple[int, str]] = {}  # the run's jobs with parents: (database, queue)
    for i, (call, parents) in enumerate(zip(plan.calls, plan.parents)):
        where = (id(call.task.db), call.task.queue)
        if any(p in waiting and waiting[p] != where for p in parents):
            _run(app, plan, start, i, handles)
            start, waiting = i, {}
        if parents:
            waiting[plan.refs[i]] = where
    _run(app, plan, start, len(plan.calls), handles)


def _run(app: Any, plan: _Plan, start: int, end: int, handles: dict[Ref, TaskHandle[Any]]) -> None:
    for ref, handle in zip(plan.refs[start:end], app.defer_many(plan.calls[start:end])):
        handles[ref] = handle
