"""The app: a set of tasks on one database (App). It defines them (@app.task, app.periodic,
app.middleware), enqueues them (defer, defer_many), creates their queues and schedules, and builds
the worker that runs them (app.worker, run_pending)."""

from __future__ import annotations

import asyncio
import collections.abc
import datetime as dt
import inspect
import os
import threading
import weakref
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, ParamSpec, TypeVar, overload

from .. import errors
from ..client import Database, ParentResult, Result, connect
from ..errors import UnknownTaskError
from ..timetravel import advance_clock, seconds_of, settle_schedules
from ..worker.model import Job
from ..worker.policy import RetryPolicy
from .batches import BatchTask, batch_task
from .canvas import defer_canvas
from .conversion import Mismatch, from_json
from .periodic import Periodic, declare, every_seconds, schedule
from .running import Middleware, RunReport, current_job, task_handler
from .task import (
    Task,
    TaskCall,
    TaskGroup,
    TaskHandle,
    TaskOptions,
    batches_of,
    check_rate_limit,
    handles_of,
)

if TYPE_CHECKING:
    from ..aio.client import AsyncDatabase
    from ..aio.worker import AsyncWorker
    from ..worker.threaded import Worker

__all__ = ["DEFAULT_QUEUE", "DEFAULT_RESULT_RETENTION", "App", "UnknownTaskError"]

P = ParamSpec("P")
R = TypeVar("R")

DEFAULT_QUEUE = "default"
# run_pending(advance=): at most this many steps of the clock (a job that comes back due at once,
# forever, ends the run), each at least ADVANCE_MIN_STEP seconds
ADVANCE_STEPS = 1000
ADVANCE_MIN_STEP = 0.001

# How long app.create_queues() keeps the results of a queue with a store_result task, when it
# keeps none yet.
DEFAULT_RESULT_RETENTION = dt.timedelta(days=1)


async def _close_at_loop_end(db: AsyncDatabase) -> collections.abc.AsyncIterator[None]:
    """Closes an app's per-loop AsyncDatabase when its event loop shuts down: asyncio.run (and
    loop.shutdown_asyncgens) closes every async generator still suspended on the loop, while the
    loop still runs, which runs this finally. Without it the connection outlived its loop, and its
    finalizer failed later on the closed loop ("Event loop is closed")."""
    try:
        yield
    finally:
        await db.close()


class _PeriodicDecorator:
    """What app.periodic(...) returns: applied to a task (or a function, made a task on the
    decorator's queue), it declares the schedule and returns the task."""

    def __init__(
        self,
        app: App,
        *,
        every: int | None,
        cron: str | None,
        queue: str | None,
        key: str | None,
        kwargs: Mapping[str, Any] | None,
    ) -> None:
        self._app = app
        self._declared: dict[str, Any] = dict(every=every, cron=cron, queue=queue, key=key, kwargs=kwargs)

    @overload
    def __call__(self, target: Task[P, R], /) -> Task[P, R]: ...

    @overload
    def __call__(self, target: Callable[P, R], /) -> Task[P, R]: ...

    def __call__(self, target: Any, /) -> Any:
        return self._app._declare_periodic(target, **self._declared)


class App:
    """A set of tasks on one database: defines them (@app.task), enqueues them (Task.defer),
    and builds the worker that runs them (app.worker(), or `pyqueue-sql worker module:app`)."""

    def __init__(
        self,
        database: str | Database | AsyncDatabase | None = None,
        *,
        queue: str = DEFAULT_QUEUE,
        routes: Iterable[str] = (),
    ):
        """`database`: a DSN, or a Database / AsyncDatabase of yours; None: the DSN in the
        PYQUEUE_DSN environment variable (as the CLI reads it), when the app needs one. `queue`:
        the queue of the tasks that name none. `routes`: queues a call may be routed to besides its
        task's own (``task.configure(queue="priority")``, Celery's ``apply_async(queue=...)``): the
        app's workers serve them too, running each of the app's tasks (but batch tasks) by its
        kind, and app.create_queues() creates them."""
        self._dsn: str | None = database if isinstance(database, str) else None
        self._db = None if isinstance(database, str) else database
        self.default_queue = queue
        if isinstance(routes, str):
            routes = (routes,)
        self.routes: tuple[str, ...] = tuple(dict.fromkeys(routes))
        for r in self.routes:
            if not isinstance(r, str) or not r:
                raise errors.InvalidArgumentError(f"routes are queue names, not {r!r}")
        self.tasks: dict[tuple[str, str], Task[Any, Any]] = {}
        self.middlewares: list[Middleware] = []
        self.periodic_tasks: list[Periodic] = []
        self._local = threading.local()
        self._worker_dsn: str | None = None
        self._async_dbs: weakref.WeakKeyDictionary[
            asyncio.AbstractEventLoop, tuple[AsyncDatabase, collections.abc.AsyncIterator[None]]
        ] = weakref.WeakKeyDictionary()

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
        batch: int,
        batch_linger: float = 0.0,
        queue: str | None = None,
        kind: str | None = None,
        retry: RetryPolicy | None = None,
        timeout: float | None = None,
        priority: int | None = None,
        group: str | None = None,
        store_result: bool = False,
        rate_limit: str | None = None,
    ) -> Callable[[Callable[..., Any]], BatchTask[Any]]: ...

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
        rate_limit: str | None = None,
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
        batch: int | None = None,
        batch_linger: float = 0.0,
        rate_limit: str | None = None,
    ) -> Task[P, R] | Callable[[Callable[P, R]], Task[P, R]]:
        """Decorator: makes a function (def or async def) a task of this app, on `queue` (the
        app's default queue) as `kind` (the function's name). `retry` is the policy of this kind
        only, `timeout` the seconds one run may take, `priority` and `group` the defaults of its
        messages. `store_result=True`: what the function returns is stored as the job's result
        (as JSON, by the return annotation) for handle.result(); its queue must keep results
        (app.create_queues() gives it a result retention). `batch=N`: a batch task (BatchTask,
        pyqueue_sql.tasks.batches): the function takes a list of up to N items, each one job, and
        returns one outcome per item; `batch_linger` the seconds a batch not full waits for more.
        `rate_limit` (Celery's spelling): "N/s", "N/m" or "N/h", at most N jobs of this kind start
        in any window of a second, a minute or an hour, on each of its queues (the contract's
        rate, queue_set_rate: exact in every window, whatever the number of workers), set by
        app.create_queues() (and `pyqueue-sql setup`); a bad spelling is refused here."""

        def make(fn: Callable[P, R]) -> Task[P, R]:
            if timeout is not None and (
                isinstance(timeout, bool) or not isinstance(timeout, (int, float)) or not timeout > 0
            ):
                raise errors.InvalidArgumentError(f"timeout must be seconds > 0 (or None), not {timeout!r}")
            rate = None if rate_limit is None else check_rate_limit(rate_limit, kind or fn.__name__)
            made: dict[str, Any] = dict(
                queue=queue or self.default_queue,
                kind=kind or fn.__name__,
                retry=retry,
                timeout=timeout,
                options=TaskOptions(priority=priority, group=group),
                store_result=bool(store_result),
            )
            t: Task[Any, Any] = (
                Task(self, fn, **made)
                if batch is None
                else batch_task(self, fn, size=batch, linger=batch_linger, **made)
            )
            if (t.queue, t.kind) in self.tasks:
                raise errors.InvalidArgumentError(
                    f"the app already has a task {t.kind!r} on queue {t.queue!r}"
                )
            t.rate_limit = rate
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
            every = every_seconds(every)
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
        self.periodic_tasks.append(
            declare(t, self.periodic_tasks, every=every, cron=cron, key=key, kwargs=kwargs)
        )
        return target if isinstance(target, Task) else t

    def schedule_periodic(self, db: Database | None = None) -> list[Periodic]:
        """Creates (or updates) the schedules of the app's periodic tasks in the database (an admin
        routine: app.create_queues() calls it): a schedule already there with the same cadence and
        payload is left as it is (its pending occurrence stays), another is replaced. Returns the
        schedules created or replaced. A schedule no longer declared stays: remove it with
        ``db.queue(queue).unschedule(key, kind)``."""
        return schedule(self.periodic_tasks, db if db is not None else self.database())

    def middleware(self, fn: Middleware) -> Middleware:
        """Decorator: wraps every job of the app's tasks, in the order registered (the first is
        outermost). ``def mw(job, call_next)`` wraps the plain (def) tasks, ``async def mw(job,
        call_next)`` the async ones (``await call_next()``); whatever it raises is the job's failure."""
        self.middlewares.append(fn)
        return fn

    def queues(self) -> list[str]:
        """The queues of the app's tasks and its routes."""
        return sorted({q for q, _ in self.tasks} | set(self.routes))

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
            from ..aio.client import connect as connect_async

            db = await connect_async(dsn)
            closer = _close_at_loop_end(db)
            await closer.__anext__()  # suspended at its yield: the loop now knows it
            held = self._async_dbs[loop] = (db, closer)
        return held[0]

    def create_queues(
        self, *, result_retention: Any = None, db: Database | None = None, **settings: Any
    ) -> list[Periodic]:
        """Creates the queues of the app's tasks (Queue.create: an existing one gets the settings
        given, nothing else), and the ``rate_limit`` of each task on each queue it runs on (a rate
        set otherwise, by `pyqueue-sql queue rate`, stays unless a task declares one). A queue
        with a ``store_result=True`` task (a route: any) keeps results for
        `result_retention` (seconds or a timedelta), by default DEFAULT_RESULT_RETENTION (a day)
        when it keeps none yet. Then the schedules of the app's periodic tasks
        (schedule_periodic): returns those it created or replaced. `db`: another Database than
        the app's (an admin's account on the same database, as `pyqueue-sql setup` uses)."""
        db = db if db is not None else self.database()
        storing = {t.queue for t in self.tasks.values() if t.store_result}
        if any(t.store_result for t in self.tasks.values() if not isinstance(t, BatchTask)):
            storing |= set(self.routes)
        for q in self.queues():
            queue: Any = db.queue(q)
            queue.create(**settings)
            if result_retention is not None:
                queue.set_result_retention(result_retention)
            elif q in storing and queue.settings().result_retention is None:
                queue.set_result_retention(DEFAULT_RESULT_RETENTION)
            here = [t for (tq, _), t in self.tasks.items() if tq == q]
            if q in self.routes:
                here += list(routed_tasks(self, q).values())
            for t in here:
                if t.rate_limit is not None:
                    queue.set_rate(t.kind, t.rate_limit[0], t.rate_limit[1])
        return self.schedule_periodic(db) if self.periodic_tasks else []

    def results(
        self,
        queue: str | None = None,
        *,
        kind: str | None = None,
        state: str | None = None,
        n: int | None = None,
        before: dt.datetime | dt.timedelta | None = None,
    ) -> list[Result]:
        """The finished jobs kept on the app's queues (or on `queue`), newest first (Queue.results,
        queue_results, on each): up to n (None: 100) of them, of one kind and one state
        ('succeeded', 'failed', 'cancelled') when given, finished before `before` (None: now; the
        next page: the last one's finished_at). Only a queue that keeps results has any
        (result_retention). ``task.results(...)`` lists one task's."""
        limit = 100 if n is None else n
        db: Any = self.database()
        found: list[Result] = []
        for q in [queue] if queue is not None else self.queues():
            found += db.queue(q).results(kind=kind, state=state, n=limit, before=before)
        found.sort(
            key=lambda r: r.finished_at or dt.datetime.min.replace(tzinfo=dt.timezone.utc), reverse=True
        )
        return found[:limit]

    def handle(self, queue: str, key: str, kind: str) -> TaskHandle[Any]:
        """A handle on the job (queue, key, kind), e.g. from a key kept elsewhere: its status,
        result, progress, cancel. (Its ``enqueued`` is False: the handle does not know.)"""
        return TaskHandle(queue, key, kind, False, self)

    def group(self, handles: Iterable[TaskHandle[R]]) -> TaskGroup[R]:
        """The handles followed as one (TaskGroup, Celery's GroupResult): ``app.group(
        task.defer_many(calls)).results(timeout=30)`` gives the values in the calls' order."""
        return TaskGroup(handles)

    def defer_canvas(self, canvas: Any) -> Any:
        """Defers a signature, chain, group or chord of the app's tasks (what their defer() calls:
        pyqueue_sql.tasks.canvas), all of its jobs in one transaction; returns its handle."""
        return defer_canvas(self, canvas)

    def defer_many(self, calls: Iterable[TaskCall[Any]]) -> list[TaskHandle[Any]]:
        """Enqueues many calls (``task.call(...)``, of any of the app's tasks) at once: the calls of
        one queue go through Queue.push_many, one round trip per chunk of CHUNK_SIZE messages
        (queue_push_batch, or its grouped / with-headers siblings), all of them one transaction;
        another queue is another push_many (for one transaction over all, run it inside
        ``db.transaction()`` or through ``task.using(Database.wrap(conn))``). Returns the handles in
        the order of the calls (their ``enqueued``: see handles_of)."""
        listed, batches = batches_of(self, calls)
        for batch in batches:
            db = batch.db if batch.db is not None else self.database()
            q: Any = db.queue(batch.queue)
            if inspect.iscoroutinefunction(getattr(q, "push_many", None)):
                raise errors.InvalidArgumentError(
                    "an asyncio database: use `await app.defer_many_async(...)`"
                )
            batch.inserted = int(batch.push(q))
        return handles_of(self, listed, batches)

    async def defer_many_async(self, calls: Iterable[TaskCall[Any]]) -> list[TaskHandle[Any]]:
        """defer_many, on an asyncio database (the app's, or the one given to using())."""
        listed, batches = batches_of(self, calls)
        for batch in batches:
            db = batch.db if batch.db is not None else await self.database_async()
            target: Any = db.queue(batch.queue)
            result = batch.push(target)
            if inspect.isawaitable(result):
                result = await result
            batch.inserted = int(result)
        return handles_of(self, listed, batches)

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
        return task_handler(t, self.middlewares, self._parent_results)

    def _worker_database(self) -> Database:
        """This thread's connection to the database of the app's worker (its DSN; the app's)."""
        dsn = self._worker_dsn or self.dsn
        if dsn is None or dsn == self.dsn:
            return self.database()
        db: Database | None = getattr(self._local, "worker_db", None)
        if db is None:
            db = self._local.worker_db = connect(dsn)
        return db

    def parent_results_of(self, job: Job, task: Task[Any, Any]) -> list[Any]:
        """Task.parent_results(): the results of the job's parents of that task, in order, each
        rebuilt by its return annotation (as it is stored when it does not fit)."""
        queue: Any = self._worker_database().queue(job.queue)
        rows: list[ParentResult] = queue.parent_results(job.key, job.kind)
        hint = task.hints.get("return", Any)
        values: list[Any] = []
        for r in rows:
            if (r.queue, r.kind) != (task.queue, task.kind):
                continue
            if r.state != "succeeded" or r.result is None:
                values.append(None)
                continue
            try:
                values.append(from_json(r.result, hint))
            except Mismatch:
                values.append(r.result)
        return values

    def failed_parents(self) -> list[ParentResult]:
        """In a task of this app deferred with after= (a failure callback: run_on="failure"), the
        parents that failed for good or were cancelled, in the order they were given: each one's
        queue, key, kind, state ('failed' or 'cancelled') and error (its last error)."""
        job = current_job()
        queue: Any = self._worker_database().queue(job.queue)
        rows: list[ParentResult] = queue.parent_results(job.key, job.kind)
        return [r for r in rows if r.state in ("failed", "cancelled")]

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
                values.append(r.result if t is None else from_json(r.result, t.hints.get("return", Any)))
            except Mismatch:
                values.append(r.result)
        return values

    def worker(
        self, *, queues: Sequence[str] | None = None, dsn: str | None = None, **settings: Any
    ) -> Worker | AsyncWorker:
        """A worker for the app's tasks (of `queues` only, when given): an AsyncWorker when some are
        async def, else a Worker (threads); `settings` are the worker's (concurrency, lease, ...:
        pyqueue_sql.worker.settings.WorkerSettings, checked there).
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
        # a route's tasks, by kind: each runs there as on its own queue
        tasks += [
            t._copy(queue=r)
            for r in sorted(wanted & set(self.routes))
            for t in routed_tasks(self, r).values()
        ]
        if not tasks:
            raise errors.InvalidArgumentError("the app has no tasks")
        batched = [t for t in tasks if isinstance(t, BatchTask)]
        tasks = [t for t in tasks if not isinstance(t, BatchTask)]
        if any(t.is_async for t in tasks):
            from ..aio.worker import AsyncWorker

            worker: Worker | AsyncWorker = AsyncWorker(dsn, **settings)
        else:
            from ..worker.threaded import Worker

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
        for bt in batched:  # their lanes reserve their kind only (pyqueue_sql.worker.batches)
            worker.add_batch_handler(
                bt.queue,
                bt.handler(),
                bt.kind,
                size=bt.size,
                linger=bt.linger,
                retry=bt.retry,
                timeout=bt.timeout,
                store_result=bt.store_result,
                # the queue's only task: its lane also fails the kinds no task has (cheaper)
                every_kind=sum(q == bt.queue for q, _ in self.tasks) == 1,
            )
        for q in sorted(wanted - {bt.queue for bt in batched}):  # (a catch-all would take a batch kind)
            worker.add_handler(q, _unknown_kind(self, q))
        worker.on_thread_end.append(self.close)  # the connections its tasks opened on a thread
        return worker

    def run_pending(
        self,
        *,
        queues: Sequence[str] | None = None,
        advance: dt.timedelta | float | None = None,
        **settings: Any,
    ) -> RunReport:
        """Runs the app's ready jobs in this process until none is ready, on the real routines, and
        says what became of each (for tests: ``task.defer(...); assert app.run_pending().succeeded``).
        A job retried with a delay is not waited for.

        advance (a timedelta or seconds; for a test database only): also runs what comes due
        within that span, without waiting for it: the database's clock moves on to the next due
        time (pyqueue_sql.timetravel: every stored time moved into the past), the jobs due then
        run, and so on until the span is spent; then the rest of it passes. So ``run_pending(
        advance=timedelta(minutes=10))`` runs a job, its retries after their backoff and a job
        deferred with run_at in 5 minutes, in milliseconds. (Time in Python does not move.)"""
        report, worker = _pending_pass(self, queues, settings)
        if advance is None:
            return report
        left = seconds_of(advance)
        for _ in range(ADVANCE_STEPS):
            db: Any = self._worker_database()  # (a Queue's sans-IO methods: mypy sees generators)
            waits = [
                w for w in (db.queue(name).next_scheduled_at()[1] for name in worker.routes) if w is not None
            ]
            step = min(waits, default=None)
            if step is None or step > left:
                advance_clock(self._worker_database(), left)
                report.jobs += _pending_pass(self, queues, settings)[0].jobs
                return report
            step = max(step, ADVANCE_MIN_STEP)
            advance_clock(self._worker_database(), step)
            left = max(0.0, left - step)
            report.jobs += _pending_pass(self, queues, settings)[0].jobs
        return report

    async def run_pending_async(self, *, queues: Sequence[str] | None = None, **settings: Any) -> RunReport:
        """run_pending inside a running event loop."""
        report = RunReport()
        while True:
            worker = _pending_worker(self, queues, settings)
            worker.on_outcome.append(report.note)
            ran = len(report.jobs)
            if inspect.iscoroutinefunction(worker.run):
                await worker.run(install_signals=False)
            else:  # a Worker (threads): run on a thread, so that the loop goes on meanwhile
                await asyncio.to_thread(worker.run, install_signals=False)
            if len(report.jobs) == ran or not await asyncio.to_thread(_ready_after_pass, self, worker, True):
                return report


def _unknown_kind(app: App, queue: str) -> Callable[[Job], Any]:
    known = sorted(
        {k for q, k in app.tasks if q == queue} | set(routed_tasks(app, queue) if queue in app.routes else ())
    )

    def unknown(job: Job) -> None:
        raise UnknownTaskError(
            f"no task of this app has kind {job.kind!r} on queue {queue!r} (its tasks there: "
            f"{', '.join(known)})"
        )

    return unknown


def routed_tasks(app: App, queue: str) -> dict[str, Task[Any, Any]]:
    """The tasks a worker runs by kind on a route queue: every task of the app but batch tasks
    and those of a kind declared on that queue itself (InvalidArgumentError when two tasks of
    the app share a kind: a message names only its kind)."""
    own = {k for q, k in app.tasks if q == queue}
    out: dict[str, Task[Any, Any]] = {}
    for (q, k), t in app.tasks.items():
        if k in own or isinstance(t, BatchTask):
            continue
        if k in out:
            raise errors.InvalidArgumentError(
                f"route {queue!r}: two tasks of kind {k!r} (on {out[k].queue!r} and {q!r}): give one of them "
                "another kind="
            )
        out[k] = t
    return out


# -- run_pending's passes ----------------------------------------------------------------
def _pending_worker(app: App, queues: Sequence[str] | None, settings: dict[str, Any]) -> Any:
    settings = {"concurrency": 1, "prefetch": 0, "register": False, "listen": False, **settings}
    worker = app.worker(queues=queues, **settings)
    worker.on_idle.append(lambda w: w.batches_idle() and w.stop(reason="no job ready"))
    return worker


def _pending_pass(app: App, queues: Sequence[str] | None, settings: dict[str, Any]) -> tuple[RunReport, Any]:
    """run_pending without advance: (its report, the last pass's worker)."""
    report = RunReport()
    while True:
        worker = _pending_worker(app, queues, settings)
        worker.on_outcome.append(report.note)
        ran = len(report.jobs)
        if inspect.iscoroutinefunction(worker.run):
            asyncio.run(worker.run(install_signals=False))
        else:
            worker.run(install_signals=False)
        if len(report.jobs) == ran or not _ready_after_pass(app, worker):
            return report, worker


def _ready_after_pass(app: App, worker: Any, own_connection: bool = False) -> bool:
    """Whether a queue of a pass of run_pending that ran jobs has a ready one now: a job that
    waited for one of them (after=) became ready in its commit, which the pass may have made
    after its last reserve. Then run_pending makes another pass. (own_connection: on a
    connection of its own, closed after: run_pending_async asks from a pool's thread.)"""
    db: Any = connect(worker.dsn) if own_connection else app._worker_database()
    try:
        settle_schedules(db)  # a periodic task's next occurrence, on a test database whose clock moved
        return any(db.queue(name).next_scheduled_at()[1] == 0 for name in worker.routes)
    finally:
        if own_connection:
            db.close()
