"""WorkerBase: what Worker (threads) and AsyncWorker (asyncio tasks) share. It makes its parts,
each an object given the settings (worker.settings, WorkerSettings) and the run state they share
(worker.state, RunState) rather than the whole worker: worker.policy (FailurePolicy: a failure's
delay, the outcomes' counts and logs), worker.reserve_loop (ReserveLoop: the reserve loop and the
idle wait), worker.registry (Registry: the registry and the heartbeat), worker.watch (Watch:
progress and the quick cancel poll) and worker.shutdown (Shutdown: stop and signals), worker.dispatch (Dispatch: each message's way to its commit) and
worker.batches (BatchLanes: the batch kinds). This module holds the routes, the start and end of a
run, and status(); the settings resolved against the database are worker.resolved (settings.py)."""

from __future__ import annotations

import dataclasses
import inspect
import sys
import threading
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from .. import dialects, errors
from ..client import WorkerRegistration, default_worker_name
from .batches import BatchHandler, BatchLanes, BatchOptions
from .dispatch import Dispatch, ReserveLoop
from .model import Handler, Job, Route, RunState, WorkerStats, WorkerStatus, log
from .policy import FailurePolicy, RetryPolicy, describe_error
from .registry import Registry, read_limits_steps
from .runners import STUCK_GRACE, Overdue, RunnerPool
from .settings import Resolved, WorkerOptions, WorkerSettings, resolve
from .settings import default_prefetch as default_prefetch
from .shutdown import Shutdown
from .steps import (
    BEGIN,
    FINISH,
    START_RUNNERS,
    STOP_RUNNERS,
    Hooks,
    On,
    Open,
    RetriedCall,
    Shut,
    StoppedError,
)
from .watch import Watch

if TYPE_CHECKING:
    if sys.version_info >= (3, 11):
        from typing import Unpack
    else:
        from typing_extensions import Unpack


class WorkerBase:
    """What Worker (threads) and pyqueue_sql.aio.AsyncWorker (asyncio tasks) share: the
    settings, the routes, the parts (see the module docstring), the start and end of a run, the
    logs and status(). A subclass provides _jobs() (the messages it holds) and _wake()
    (makes its waits notice a stop), and runs the loops."""

    runtime = "threads"  # how handlers run (the start event says it): "threads" or "asyncio"
    _job_type: type[Job] = Job  # what a reserved message is made as
    _group_commit = False  # a chained success goes to the runner's committers (AsyncWorker)
    if TYPE_CHECKING:  # settings.Resolved's fields, read-only properties (made below the class)
        name: str
        use_listen: bool
        poll_fallback: float
        commit_reserve: bool
        prefetch: int
        max_stuck: int

    def __init__(self, dsn: str, **settings: Unpack[WorkerOptions]) -> None:
        # The settings are WorkerSettings' fields (declared and checked there, once; the signature
        # below is made from them, WorkerOptions types them); what depends on the database is
        # resolved once (settings.Resolved), each readable as the worker's property.
        self.settings = WorkerSettings(**settings)
        self.dsn = dsn
        self.dialect = dialects.for_dsn(dsn)
        # Behind a transaction pooler (PgBouncer's pool_mode = transaction) a LISTEN is left behind
        # in a server session the next transaction no longer has: the dispatcher (which LISTENs)
        # then connects to listen_dsn, a direct connection to the server, and everything else to dsn.
        listen_dsn = self.settings.listen_dsn
        if listen_dsn is not None and dialects.for_dsn(listen_dsn).name != self.dialect.name:
            raise errors.InvalidArgumentError("listen_dsn must name the same database as dsn, directly")
        self.resolved = resolve(self.settings, self.dialect, default_worker_name())
        self._start_deadline: float | None = None
        self.routes: dict[str, Route] = {}
        self.state = RunState()  # what the parts share while the worker runs
        self.on_start: list[Callable[[Any], Any]] = []
        self.on_heartbeat: list[Callable[[Any], Any]] = []
        self.on_stop: list[Callable[[Any], Any]] = []
        self.on_idle: list[Callable[[Any], Any]] = []  # after an empty reserve, before waiting
        # fn() called on each thread that ran handlers (a handler thread, a runner) as it ends:
        # App.worker adds App.close, which closes the connections its tasks opened on that thread
        self.on_thread_end: list[Callable[[], Any]] = []
        # what became of each handled message: fn(job, outcome, error text or None), outcome one of
        # 'succeeded', 'retry', 'snoozed', 'dead_lettered', 'dropped', 'lost' (called on the thread
        # or task that learnt it; an error it raises is logged)
        self.on_outcome: list[Callable[[Job, str, str | None], Any]] = []
        self.stopped = threading.Event()  # set when run() has finished
        # after run(): why the worker stopped on its own and wants a fresh process (too many stuck
        # handler threads), else None; run() then returns False
        self.failure: str | None = None
        self._state = "stopped"
        self._stop_deadline: float | None = None
        self.inflight: dict[tuple[str, str, str], Job] = {}
        # plain handlers still running kill_grace seconds after their timeout or cancel (runners.py)
        self.overdue = Overdue(self.settings.kill_grace)
        self.runner_pool = RunnerPool(
            self.on_thread_end,
            self._stuck_now,
            self.overdue.seen,
            max(0.0, self.settings.kill_grace - STUCK_GRACE),
        )
        self._setup()  # the runner's own state: its slots and its completer (self.completer)
        self.batches = BatchLanes(
            self.settings,
            self.state,
            self.routes,
            job_type=self._job_type,
            hold=self._hold,
            release=self._release,
        )
        self.batch_routes = self.batches.routes  # (queue, kind) -> BatchRoute: the batch kinds
        self.policy = FailurePolicy(
            self.state, self.routes, self.on_outcome, self.stop, self.batches.retry_of
        )
        self.watch = Watch(self.state, self._jobs, self.overdue.seen, self.settings.kill_grace)
        self.reserve_loop = ReserveLoop(self.settings, self.state, self.routes, self.on_idle, self)
        self.shutdown = Shutdown(self.state, self._jobs, self._wake)
        self.registry = Registry(
            self.settings, self.state, self.name, self.routes, self.on_heartbeat, self._jobs, self.watch
        )
        self.dispatch = Dispatch(
            self.settings,
            self.state,
            self.routes,
            self.policy,
            self.watch,
            self.registry,
            self.runner_pool,
            commit_reserve=self.commit_reserve,
            job_type=self._job_type,
            release=self._release,
            defer_ack=self.completer.put,
            group_commit=self._group_commit,
            reserve_loop=self.reserve_loop,
        )
        self.batches.attach(self.dispatch, self.policy, self.watch, self.registry, self.reserve_loop)

    def dsn_for(self, role: str) -> str:
        """Where a connection of this role goes: the LISTENing dispatcher's to listen_dsn if given."""
        if role == "dispatcher" and self.use_listen and self.settings.listen_dsn is not None:
            return self.settings.listen_dsn
        return self.dsn

    @property
    def stopping(self) -> bool:
        """A stop was asked for (stays True after run() returned, until the next run())."""
        return self.state.stopping.is_set()

    def stop(self, force: bool = False, *, reason: str | None = None) -> None:
        """Asks the worker to stop (safe from a signal handler or another thread).

        Graceful: no more reserves, unstarted messages handed back, running
        handlers get shutdown_timeout seconds. force=True (or a second call with
        it): stop now; running handlers are abandoned and their messages come
        back when their lease ends."""
        self.shutdown.stop(force, reason=reason)

    @property
    def unfinished(self) -> list[str]:
        """After run(): "queue/key/kind" of the handlers abandoned at the stop."""
        return self.state.unfinished

    @property
    def registration(self) -> WorkerRegistration | None:
        """The worker's registration while it runs (register=True), else None."""
        return self.registry.registration

    @property
    def registered(self) -> threading.Event:
        """Set once the registration is known here (after it is visible in the database)."""
        return self.registry.registered

    @property
    def reserve_as(self) -> str:
        """The worker name recorded on reserved messages (the registration's, when registered)."""
        return self.registry.reserve_as

    @property
    def stats(self) -> WorkerStats:
        """The counters of this worker (since it was made)."""
        return self.state.stats

    # -- configuration -----------------------------------------------------------
    def handler(
        self,
        queue: str,
        kind: str | None = None,
        *,
        retry: RetryPolicy | None = None,
        timeout: float | None = None,
        store_result: bool = False,
    ):
        """Decorator: registers fn for messages of `kind` (None = any kind without its own handler)."""

        def register(fn: Handler) -> Handler:
            self.add_handler(queue, fn, kind, retry=retry, timeout=timeout, store_result=store_result)
            return fn

        return register

    def add_handler(
        self,
        queue: str,
        fn: Handler,
        kind: str | None = None,
        *,
        retry: RetryPolicy | None = None,
        timeout: float | None = None,
        store_result: bool = False,
    ) -> None:
        """Registers fn for messages of `kind` on `queue` (None = any kind without its own handler).
        `retry` is the policy of that kind only (the others keep theirs, or the queue's: see
        set_retry); `timeout` the seconds one message of it may take (None: no limit);
        `store_result`: what fn returns (JSON) is committed as the message's result
        (queue_commit_result; the queue must keep results: set_result_retention)."""
        if not callable(fn):
            raise errors.InvalidArgumentError(f"a handler must be callable, not {type(fn).__name__}")
        if timeout is not None and (
            isinstance(timeout, bool) or not isinstance(timeout, (int, float)) or not timeout > 0
        ):
            raise errors.InvalidArgumentError(f"timeout must be seconds > 0 (or None), not {timeout!r}")
        route = self.routes.setdefault(queue, Route(queue, {}, RetryPolicy()))
        if kind in route.handlers:
            raise errors.InvalidArgumentError(f"queue {queue!r} already has a handler for kind {kind!r}")
        route.handlers[kind] = fn
        route.plans.clear()
        if retry is not None:
            route.retries[kind] = retry
        if timeout is not None:
            route.timeouts[kind] = float(timeout)
        if store_result:
            route.stores.add(kind)

    def set_retry(self, queue: str, retry: RetryPolicy) -> None:
        """The retry policy of the queue's kinds whose handler was registered without one."""
        self.routes[queue].retry = retry

    def add_batch_handler(
        self, queue: str, fn: BatchHandler, kind: str, *, size: int, **options: Unpack[BatchOptions]
    ) -> None:
        """Registers fn for the messages of `kind` on `queue`, up to `size` at a time (a batch
        handler: see pyqueue_sql.worker.batches, and BatchLanes.add for the options)."""
        self.batches.add(queue, fn, kind, size=size, **options)

    def batches_idle(self) -> bool:
        """Whether every batch lane's last reserve found nothing (True when there is none)."""
        return self.batches.all_idle()

    # -- what a subclass provides ------------------------------------------------------
    def _setup(self) -> None:
        """The subclass's own state, made in __init__ before the parts: its slots and
        self.completer (what acknowledges successes later: put(job, elapsed_ms))."""
        raise NotImplementedError

    def _hold(self, jobs: list[Job]) -> None:
        """Holds jobs that a batch lane reserved (the runner's slots: heartbeat, status, stop)."""
        raise NotImplementedError

    def _release(self, job: Job, successors: list[Job] = ()) -> None:
        """Frees the job's slot; a successor reserved by its commit takes it over at once."""
        raise NotImplementedError

    def _jobs(self) -> list[Job]:
        """The messages the worker holds now (reserved, started or not); safe from any thread (a
        copy taken in one C call; Worker's holds its slots' lock)."""
        return list(self.inflight.copy().values())

    def _wake(self) -> None:
        """Makes the worker's waits notice a stop (called from any thread, or a signal handler)."""
        raise NotImplementedError

    def _stopping_now(self) -> None:
        """The run ends (its stop is set): the runner's waits that do not read state.stopping notice."""

    def _ended(self) -> None:
        """The run's last step before it logs its stop, or its refusal at the start."""

    # -- life cycle ----------------------------------------------------------------
    def _run_steps(self, install_signals: bool | None):
        """A run, written once for both runners (run()): the checks before the start, the runners
        started (StartRunners), the dispatcher (registration, on_start, the reserve loop) until
        the stop, then the stop (StopRunners), the deregistration and the on_stop hooks. Returns
        True when it stopped cleanly (see Worker.run)."""
        if not self.routes and not self.batch_routes:
            raise errors.InvalidArgumentError("the worker has no handlers")
        if install_signals is None:
            install_signals = threading.current_thread() is threading.main_thread()
        self._starting()
        yield BEGIN
        conn = yield Open("dispatcher")
        try:
            yield On(conn, preflight_steps(self.routes, self.state))
        except BaseException as exc:
            self._ended()
            # run() ends before it started (the preflight check refused): stopped, nothing logged
            self._crashed(exc)
            self._state = "stopped"
            self.stopped.set()
            raise
        finally:
            yield Shut(conn)
        if install_signals:
            self.install_signal_handlers()
        # The start is logged ("worker starting", event "start") once the signal handlers are in
        # place: from this line on a SIGTERM is a graceful stop, not the default death.
        log.info(
            "worker starting",
            extra={
                "event": "start",
                "worker": self.name,
                "queues": sorted(self.routes),
                "concurrency": self.settings.concurrency,
                "dialect": self.dialect.name,
                "listen": self.use_listen,
                "runtime": self.runtime,
            },
        )
        yield START_RUNNERS
        dispatcher = yield Open("dispatcher", dispatcher=True)
        try:
            yield On(dispatcher, self._serving_steps())
        except BaseException as exc:
            self._crashed(exc)
            raise
        finally:
            self.state.stopping.set()
            self._stopping_now()
            self._state = "stopping"
            yield Shut(dispatcher)
            yield STOP_RUNNERS
            conn = yield Open("deregister")
            try:
                yield On(conn, self.registry.deregister_steps())
            finally:
                yield Shut(conn)
            yield FINISH
            yield Hooks(self.on_stop, "on_stop")
            self._ended()
            self._finished()
        return not self.unfinished and self.failure is None

    def _serving_steps(self):
        """The dispatcher's connection from the start to the stop: the registration, the on_start
        hooks, then the reserve loop."""
        if self.settings.register:
            try:
                yield from self.registry.register_steps(False)
            except StoppedError:
                pass
        yield Hooks(self.on_start, None)
        self._state = "running"
        yield from self.reserve_loop.dispatch_steps()

    def _starting(self) -> None:
        """Resets the run's state (run() calls it first, before it installs the signal handlers: a
        signal from then on is not reset away)."""
        if not self.routes and not self.batch_routes:
            raise errors.InvalidArgumentError("the worker has no handlers")
        if self.batch_routes and self.runtime != "threads":
            raise errors.InvalidArgumentError(
                "batch handlers run on the threaded Worker: serve their queues from a Worker of their own"
            )
        check_handlers(self.routes)
        self.connected = False  # until a connection opens: a refused login ends run() (steps.py)
        self._start_deadline = (
            None if self.settings.start_timeout is None else time.monotonic() + self.settings.start_timeout
        )
        self.state.stopping.clear()
        self.state.hard_stop.clear()
        self.stopped.clear()
        self.registered.clear()
        self.state.unfinished = []
        self.failure = None
        self.shutdown.signalled = False
        self.state.stop_reason = None
        self._stop_deadline = None
        self.state.last_error = None
        self._state = "starting"

    def _crashed(self, exc: BaseException) -> None:
        if self.state.stop_reason is None:
            self.state.stop_reason = describe_error(exc)

    def stuck_threads(self) -> int:
        """How many plain handlers' threads are still running past their time limit (a blocking
        call a thread cannot be interrupted in), set aside: more than max_stuck stop the worker."""
        return self.runner_pool.stuck_count()

    def _stuck_now(self, n: int) -> None:
        """A plain handler's thread was set aside as stuck (runners.py), n of them now: more than
        max_stuck stop the worker, whose run() then returns False (the CLI exits 1, and
        `--processes` or the supervisor starts a fresh process: a thread cannot be killed)."""
        if n <= self.max_stuck or self.failure is not None:
            return
        self.failure = (
            f"{n} handler threads stuck past their time limit (more than max_stuck {self.max_stuck}): "
            "the worker stops for a fresh process to take over"
        )
        log.error(
            "%s", self.failure, extra={"event": "too_many_stuck", "stuck": n, "max_stuck": self.max_stuck}
        )
        self.stop(reason="too many stuck handler threads")

    def _finished(self) -> None:
        """Logs the stop (run() calls it last, after the on_stop hooks)."""
        self.runner_pool.close()
        self._state = "stopped"
        self.stopped.set()
        log.info(
            "worker stopped",
            extra={
                "event": "stop",
                "worker": self.name,
                "reason": self.state.stop_reason,
                "unfinished": len(self.unfinished),
                **dataclasses.asdict(self.stats),
            },
        )

    # -- status ------------------------------------------------------------------------
    def status(self) -> WorkerStatus:
        """A snapshot: state, running messages, counters, the stop deadline, the last dispatch error."""
        reg = self.registration
        deadline = self._stop_deadline
        state = self._state
        if state == "running" and self.state.stopping.is_set():
            state = "stopping"
        return WorkerStatus(
            name=self.name,
            state=state,
            reserve_as=self.reserve_as,
            worker_id=None if reg is None else reg.worker_id,
            concurrency=self.settings.concurrency,
            running=tuple(self.shutdown.running()),
            waiting=tuple(self.shutdown.unstarted()),
            stats=dataclasses.replace(self.stats),
            stop_deadline_in_s=None
            if deadline is None or state != "stopping"
            else max(deadline - time.monotonic(), 0.0),
            stop_reason=self.state.stop_reason,
            unfinished=tuple(self.unfinished),
            last_error=self.state.last_error,
        )

    def status_line(self) -> str:
        st = self.status()
        s = st.stats
        running = f"running {len(st.running)}/{st.concurrency}"
        if st.state == "stopping":
            running = f"waiting for {len(st.running)} running"
            if st.stop_deadline_in_s is not None:
                running += f" (deadline in {st.stop_deadline_in_s:.0f} s)"
        line = (
            f"{st.name} {st.state}: {running}, done {s.succeeded}, failed {s.failed}, gave up {s.given_up}, "
            f"snoozed {s.snoozed}, cancelled {s.cancelled}, lost {s.lost}, "
            f"wakeups {s.wakeups}, reconnects {s.reconnects}"
        )
        if st.last_error:
            line += f", error: {st.last_error[:120]}"
        return line


def check_handlers(routes: dict[str, Route]) -> None:
    """Refuses, before the first reserve, a handler that cannot be called with one job."""
    for route in routes.values():
        for kind, fn in route.handlers.items():
            try:
                signature = inspect.signature(fn)
            except (TypeError, ValueError):  # a builtin or C callable: nothing to say
                continue
            try:
                signature.bind(None)
            except TypeError:
                name = getattr(fn, "__qualname__", None) or repr(fn)
                which = "every kind" if kind is None else f"kind {kind!r}"
                raise errors.InvalidArgumentError(
                    f"the handler {name}{signature} of queue {route.queue!r} ({which}) cannot be "
                    "called with one job: a handler takes the job as its one argument"
                ) from None


def preflight_steps(routes: dict[str, Route], state: RunState):
    """Reads each queue's concurrency limits (state.limits) and max_attempts (for the log), and refuses to start when a kind stores its
    results on a queue that keeps none (the first commit of a result would be refused). An account that may not read the settings
    (queue_settings is the monitor's) or a queue that does not exist yet: not checked here."""
    yield from read_limits_steps(routes, state)
    for route in routes.values():
        try:
            settings = yield RetriedCall("settings", route.queue)
        except (errors.PermissionDeniedError, errors.UnknownQueueError):
            continue
        # "attempt n of m" in the log of a retried failure (as read at the start)
        state.max_attempts[route.queue] = settings.max_attempts
        if route.stores and settings.result_retention is None:
            kinds = ", ".join(sorted("every kind" if k is None else repr(k) for k in route.stores))
            raise errors.InvalidArgumentError(
                f"queue {route.queue!r} keeps no results, and the handler of {kinds} stores its "
                "result (store_result=True): give the queue a result retention first "
                f"(db.queue({route.queue!r}).set_result_retention(...), or app.create_queues())"
            )


def run_hooks(hooks: list[Callable[[Any], Any]], worker: Any, what: str) -> None:
    """Calls each hook with the worker; an error one raises is logged, the others still run."""
    for hook in hooks:
        try:
            hook(worker)
        except Exception:
            log.exception("%s hook failed", what)


def listen_refused(worker: WorkerBase) -> errors.QueueError:
    """The error that ends run() when the dispatcher would LISTEN through a transaction pooler
    (raised from its on-connect; the stop also ends a run without registration, whose reserve
    loop would otherwise log the error and connect again, forever)."""
    worker.stop(reason="LISTEN through a transaction pooler")
    which = "dsn" if worker.settings.listen_dsn is None else "listen_dsn too"
    return errors.InvalidArgumentError(
        f"the worker would LISTEN through a transaction pooler ({which}: two client connections "
        "were served by one server session, as PgBouncer's pool_mode = transaction does): the LISTEN "
        "would stay in a session this worker loses, and wakeups would never come. Pass listen_dsn= a "
        "direct connection to the server for the LISTEN (CLI: --listen-dsn), or listen=False to "
        "long-poll (CLI: --no-listen)"
    )


def settings_signature(*extra: inspect.Parameter) -> inspect.Signature:
    """A worker's __init__ signature as help() and inspect show it: dsn, then the runner's own
    keywords (`extra`) and WorkerSettings' fields as keywords with their defaults (declared
    there, once)."""
    keyword = inspect.Parameter.KEYWORD_ONLY
    return inspect.Signature(
        [
            inspect.Parameter("self", inspect.Parameter.POSITIONAL_OR_KEYWORD),
            inspect.Parameter("dsn", inspect.Parameter.POSITIONAL_OR_KEYWORD, annotation="str"),
            *extra,
            *(
                inspect.Parameter(f.name, keyword, default=f.default, annotation=f.type)
                for f in dataclasses.fields(WorkerSettings)
            ),
        ],
        return_annotation="None",
    )


WorkerBase.__init__.__signature__ = settings_signature()  # type: ignore[attr-defined]

# The settings resolved against the database (settings.Resolved), readable as the worker's attributes
# (worker.use_listen, worker.prefetch...), and the others as given (worker.lease, worker.concurrency...)
for _field in dataclasses.fields(Resolved):
    setattr(WorkerBase, _field.name, property(lambda self, _n=_field.name: getattr(self.resolved, _n)))
for _field in dataclasses.fields(WorkerSettings):
    if not hasattr(WorkerBase, _field.name):
        setattr(WorkerBase, _field.name, property(lambda self, _n=_field.name: getattr(self.settings, _n)))
del _field
