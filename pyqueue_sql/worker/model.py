"""What the worker's modules share: the logger, a reserved message (Job), a queue's route,
the counters and the status snapshot.

This module sits below every other module of the worker: it imports none of them (a route's retry
policy is described by the RetryRule protocol, which policy.RetryPolicy satisfies)."""

from __future__ import annotations

import dataclasses
import heapq
import inspect
import logging
import random
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from operator import attrgetter
from typing import TYPE_CHECKING, Any, Protocol

from ..client import MAX_PROGRESS_BYTES, Reservation
from ..dialects import encode_json
from ..errors import Cancelled, InvalidArgumentError

if TYPE_CHECKING:
    import random

log = logging.getLogger("pyqueue_sql.worker")

# Makes a Job's cancel event once when two threads look at it first together.
_EVENT_MADE = threading.Lock()


@dataclass
class Job:
    """A reserved message handed to a handler."""

    reservation: Reservation
    started_at: float | None = None
    # time.monotonic() by which the reservation has surely expired (taken before the call that
    # reserved or last extended it, plus the lease); None when not known
    lease_until: float | None = None
    lock: threading.Lock = field(default_factory=threading.Lock, repr=False)
    done: bool = False
    # cancel_requested's event, made at its first use (most jobs never look at it)
    _cancel_event: threading.Event | None = field(default=None, repr=False)
    # What the handler returned (stored as the message's result when its kind stores results).
    result: Any = field(default=None, repr=False)
    store_result: bool = False
    # Whether its handler is a coroutine (cancelled at a cancel request, its flag polled quickly).
    runs_async: bool = False
    # Cancels the running coroutine handler (set by the runner while one runs; any thread).
    on_cancel: Callable[[], Any] | None = field(default=None, repr=False)
    # Wakes the worker's writer of progress (set by the runner; any thread).
    on_progress: Callable[[], Any] | None = field(default=None, repr=False)
    _progress: tuple[Any] | None = field(default=None, repr=False)  # the value not written yet
    # Reads the results of the job's parents (set by an App's task handler: pyqueue_sql.tasks)
    parents_reader: Callable[[Job], list[Any]] | None = field(default=None, repr=False)
    # What runs a plain handler's call (an interrupt.Interruptible): the worker raises a time
    # limit, or Cancelled after a cancel's grace, in its thread through it (set by the runner).
    stopper: Any = field(default=None, repr=False)

    # the reservation's fields, read through C getters (the worker reads them several times a job)
    queue = property(attrgetter("reservation.queue"))
    key = property(attrgetter("reservation.key"))
    kind = property(attrgetter("reservation.kind"))
    payload = property(attrgetter("reservation.payload"))
    attempts = property(attrgetter("reservation.attempts"))
    priority = property(attrgetter("reservation.priority"))
    created_at = property(attrgetter("reservation.created_at"))
    scheduled_at_initially = property(attrgetter("reservation.scheduled_at_initially"))
    # the message's headers (a dict), None when it has none
    headers = property(attrgetter("reservation.headers"))

    @classmethod
    def reserved(cls, reservation: Reservation, lease_until: float | None) -> Job:
        """cls(reservation, lease_until=lease_until), every field set as its __init__ sets it,
        without that __init__'s call and assignments: the dispatcher makes one a reserved message.
        The three given fields are set as items of the new __dict__, not as update()'s keywords
        (which build a dict of their own first): about two thirds of the CPU."""
        made = _MADE.get(cls)
        if made is None:
            made = _MADE[cls] = _made_as(cls)
        defaults, lock = made
        job = _new_object(cls)
        fields_of = job.__dict__
        fields_of.update(defaults)
        fields_of["reservation"] = reservation
        fields_of["lease_until"] = lease_until
        fields_of["lock"] = lock()
        return job

    @property
    def cancel_requested(self) -> threading.Event:
        """Set when a cancel of this message was requested (queue_cancel while it runs): a plain
        handler may check it (or wait on it) and stop by raising pyqueue_sql.Cancelled; an async
        def handler is cancelled. The worker learns it from its heartbeat (queue_renew) and, while
        async def handlers run, from a quick poll (see Watch). One event for the job's life, made
        at the first look (any thread)."""
        event = self._cancel_event
        if event is None:
            with _EVENT_MADE:
                event = self._cancel_event
                if event is None:
                    event = self._cancel_event = threading.Event()
        return event

    def _cancel_asked(self) -> bool:
        """cancel_requested.is_set() without making the event (the per-job path of a coroutine
        handler: most jobs are never cancelled, and an event costs a lock and a condition)."""
        event = self._cancel_event
        return event is not None and event.is_set()

    def set_progress(self, value: Any) -> None:
        """Reports the job's progress (any JSON value, at most 64 KiB as JSON): Queue.result (and
        a task's handle.progress()) shows it while the job runs and after it finished. Returns at
        once: the worker writes the latest value soon after (within a fraction of a second), and
        before the job's end. InvalidArgumentError at once for a value JSON cannot hold or one
        too large."""
        size = len(encode_json(value).encode("utf-8"))
        if size > MAX_PROGRESS_BYTES:
            raise InvalidArgumentError(f"progress is {size} bytes of JSON, more than {MAX_PROGRESS_BYTES}")
        self._progress = (value,)
        notify = self.on_progress
        if notify is not None:
            notify()

    @property
    def progress_pending(self) -> bool:
        """Whether a progress value was set and not written yet."""
        return self._progress is not None

    def take_progress(self) -> tuple[Any] | None:
        """The progress value set and not written yet, as a 1-tuple (None: nothing to write)."""
        value, self._progress = self._progress, None
        return value

    def parent_results(self) -> list[Any]:
        """The results of the job's parents (a job deferred with ``after=``), in the order they
        were given, each rebuilt by its task's return annotation (None for a parent that stores
        no result); [] for a job without parents. For a task of an App (a plain handler reads
        them with Queue.parent_results)."""
        reader = self.parents_reader
        if reader is None:
            raise InvalidArgumentError("parent_results() is for a task of an App: use Queue.parent_results")
        return reader(self)

    def raise_if_cancelled(self) -> None:
        """Raises pyqueue_sql.Cancelled when a cancel of this job was requested: a plain (def)
        handler calls it between steps of its work to stop for a cancel."""
        if self.cancel_requested.is_set():
            raise Cancelled("cancel requested")

    def request_cancel(self) -> None:
        """What the worker does when it learns that a cancel was requested (any thread)."""
        first = not self.cancel_requested.is_set()
        self.cancel_requested.set()
        hook = self.on_cancel
        if first and hook is not None:
            hook()


_new_object = object.__new__
# per Job class: the fields' defaults (those made by a factory left out) and the lock's factory
_MADE: dict[type, tuple[dict[str, Any], Callable[[], Any]]] = {}


def _made_as(cls: type[Job]) -> tuple[dict[str, Any], Callable[[], Any]]:
    fields = {f.name: f for f in dataclasses.fields(cls)}
    factories = {name for name, f in fields.items() if f.default_factory is not dataclasses.MISSING}
    if factories != {"lock"} or fields["reservation"].default is not dataclasses.MISSING:
        raise TypeError(f"Job.reserved does not know how to make a {cls.__name__}")
    defaults = {
        name: f.default for name, f in fields.items() if name not in ("reservation", "lock", "lease_until")
    }
    return defaults, fields["lock"].default_factory


Handler = Callable[[Job], Any]
# What a job of a kind needs (Route.plan): its handler (None: the kind has none), its timeout,
# whether its result is stored, whether the handler is a coroutine function.
Plan = tuple[Handler | None, float | None, bool, bool]


class RetryRule(Protocol):
    """What the worker asks of a retry policy (policy.RetryPolicy): whether a failure is retried,
    and the delay before the next delivery after `attempts` deliveries."""

    def retries(self, error: BaseException) -> bool: ...

    def delay(self, attempts: int, rng: random.Random | None = None) -> float: ...


@dataclass
class Route:
    """A queue's handlers by kind (None: any kind without its own handler), with the retry policy
    and the timeout each was given (a kind without its own: the queue's `retry`, no timeout)."""

    queue: str
    handlers: dict[str | None, Handler]
    retry: RetryRule
    retries: dict[str | None, RetryRule] = field(default_factory=dict)
    timeouts: dict[str | None, float] = field(default_factory=dict)
    stores: set[str | None] = field(default_factory=set)  # the kinds whose results are stored

    # kind -> (its handler or None, its timeout, whether its result is stored, whether the handler
    # is a coroutine function): what a job of the kind needs, looked up once per kind
    # (Worker.add_handler, the only writer, clears it)
    plans: dict[str, Plan] = field(default_factory=dict, repr=False)

    def plan(self, kind: str) -> Plan:
        """(handler_for, timeout_for, stores_result, the handler is a coroutine function) of a
        kind, remembered."""
        try:
            return self.plans[kind]
        except KeyError:
            fn = self.handler_for(kind)
            plan = self.plans[kind] = (
                fn,
                self.timeout_for(kind),
                self.stores_result(kind),
                inspect.iscoroutinefunction(fn),
            )
            return plan

    def kinds(self) -> list[str] | None:
        return None if None in self.handlers else sorted(k for k in self.handlers if k is not None)

    def handler_for(self, kind: str) -> Handler | None:
        return self.handlers.get(kind, self.handlers.get(None))

    def _registered(self, kind: str) -> str | None:
        return kind if kind in self.handlers else None

    def retry_for(self, kind: str) -> RetryRule:
        """The retry policy of a kind: its handler's own, else the queue's."""
        return self.retries.get(self._registered(kind), self.retry)

    def timeout_for(self, kind: str) -> float | None:
        """The seconds a handler of this kind may run (None: no limit)."""
        return self.timeouts.get(self._registered(kind))

    def stores_result(self, kind: str) -> bool:
        """Whether what the handler of this kind returns is stored as the message's result."""
        return self._registered(kind) in self.stores


@dataclass
class WorkerStats:
    """A worker's counters since it started (``worker.stats``; its stop line and status line show
    them), each counted once the database said so: a message is succeeded when its commit (or the
    batch commit that held it) was acknowledged, not when its handler returned."""

    reserved: int = 0
    """Messages reserved (queue_reserve, queue_commit_reserve's next ones, a batch lane's reserve)."""
    succeeded: int = 0
    """Acknowledged successes: a commit (queue_commit, queue_commit_reserve, a message of a
    queue_commit_batch) that returned true, the reservation still held."""
    failed: int = 0
    """Failures recorded by queue_fail: retried later, or dead-lettered / dropped after the last attempt."""
    lost: int = 0
    """Commits, batch commits or fails that returned false: the reservation had expired (the
    message is or was redelivered)."""
    handed_back: int = 0
    """Messages released back to the queue unstarted (queue_release): prefetched at a stop, or
    abandoned by their handler at a stop; the attempt not counted."""
    reconnects: int = 0
    """Connections to the database made again after one was lost."""
    wakeups: int = 0
    """Wakeups received (a NOTIFY, or a long poll that returned because a message came)."""
    db_calls: int = 0
    """Calls of the dispatch loop to the database (reserve, wait, commit, fail, release...)."""
    dispatch_errors: int = 0
    """Errors other than lost connections in the reserve/dispatch loop (logged, retried)."""
    interrupted: int = 0
    """Handlers that raised KeyboardInterrupt (their message handed back; the worker stopped)."""
    commit_reserves: int = 0
    """Commits that reserved the next message in the same call (queue_commit_reserve)."""
    ack_batches: int = 0
    """queue_commit_batch calls that acknowledged several successes at once."""
    lease_low: int = 0
    """Prefetched messages handed back unstarted because their lease ran low first."""
    cancelled: int = 0
    """Handlers that stopped for a cancel (queue_cancel_held)."""
    expired: int = 0
    """Messages this worker's reserves ended unrun (cancelled) because their pyqueue.expires_at
    had passed, as the server told its connection (each also logged once)."""
    given_up: int = 0
    """Messages ended now, not retried (GiveUp, or an error the policy gives up on)."""
    snoozed: int = 0
    """Messages given back for later without using an attempt (Snooze)."""


class RetryDue:
    """The clock times at which messages this worker failed (queue_fail with a delay: no wakeup
    is sent) or snoozed become ready again; `at` is the earliest still to come, None when there
    is none to wait for. Handlers note them from any thread or task; the dispatcher's waits end
    at the earliest. Every time is kept, not only the earliest: a retry due 50 ms after a snooze
    would otherwise be forgotten once the snooze's time came, its wakeup left to the server's
    next scheduled_at alone, and that answers a wait of 0 once the retry is due (earliest_due
    ignores it): the dispatcher then waited for the poll fallback."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._times: list[float] = []  # a heap

    def note(self, at: float) -> None:
        with self._lock:
            heapq.heappush(self._times, at)

    @property
    def at(self) -> float | None:
        with self._lock:
            return self._times[0] if self._times else None

    def reached(self, now: float) -> None:
        """Forgets the due times that have come (the reserve that follows takes their messages,
        or the server's next scheduled_at reports them again)."""
        with self._lock:
            while self._times and self._times[0] <= now:
                heapq.heappop(self._times)


class Settles:
    """This worker's settles: how many have ended (a commit, a batch the completer acknowledged, a
    failure, a hand-back...) and how many successes wait for the completer. A settle can free
    what held a reserve back (a concurrency limit's slot, a FIFO group's next message): the
    dispatcher's idle wait ends when one ends, so that a worker held back by a limit its own
    messages fill reserves again as soon as one of them settles, not at its poll fallback."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.done = 0  # settles ended (only compared: a change means one ended)
        self.count = 0  # messages settled
        self.owed = 0  # successes handed to the completer, not acknowledged yet
        self.held = False  # the reserve loop is held back (HeldBack.on): acknowledge at once
        # the reserve loop waits for room under a limit (ReserveLoop.limit_room): acknowledge at once
        self.hurry = False
        self.refill_misses = 0  # the completer's refills in a row that got nothing (Dispatch.refills)
        self.owed_by: dict[tuple[str, str], int] = {}  # owed by (queue, kind)
        # set when a settle ends (after done changes): a Sleep(settled=True) of the threads' runner
        # ends on it, so that the reserve loop waiting for its own settles sees one at once
        self.event = threading.Event()
        # called after a settle ended (and the event was set), on the thread that ended it: how a
        # runner that does not wait on a thread's event hears of it (AsyncWorker wakes its loop)
        self.on_end: Callable[[], None] | None = None

    def deferred(self, queue: str = "", kind: str = "") -> None:
        with self._lock:
            self.owed += 1
            self.owed_by[queue, kind] = self.owed_by.get((queue, kind), 0) + 1

    def owed_of(self, queue: str, kind: str) -> int:
        """Successes of a queue's kind handed to the completer, not acknowledged yet."""
        return self.owed_by.get((queue, kind), 0)

    def ended(self, acked: int = 0, taken: int = 0, kinds: Sequence[tuple[str, str]] = ()) -> None:
        """One settle ended: of one message, or the completer's flush of `acked` successes (their
        (queue, kind) in kinds), of whose freed slots its refill took `taken` again
        (Dispatch.refill_steps). Slots all taken again are no settle for the reserve loop: it would
        find the limit full."""
        with self._lock:
            freed = (acked or 1) - taken
            if freed > 0:
                self.done += 1
                self.count += freed
                self.event.set()
            self.owed -= acked
            owed_by = self.owed_by
            for key in kinds:
                left = owed_by.get(key, 0) - 1
                if left > 0:
                    owed_by[key] = left
                else:
                    owed_by.pop(key, None)
        if freed > 0 and self.on_end is not None:
            self.on_end()


@dataclass(eq=False)
class RunState:
    """What the worker's parts share while it runs, made once by WorkerBase and handed to each
    part (the failure policy, the dispatcher, the registry...): the counters, the stop's events,
    the random source of the retry jitter and each queue's max_attempts as read at the start."""

    stats: WorkerStats = field(default_factory=lambda: WorkerStats())
    stopping: threading.Event = field(default_factory=threading.Event)
    hard_stop: threading.Event = field(default_factory=threading.Event)
    rng: random.Random = field(default_factory=random.Random)
    max_attempts: dict[str, int] = field(default_factory=dict)  # per queue, read at the start
    clock: Callable[[], float] = time.monotonic  # what the waits and the leases read
    stop_reason: str | None = None  # why the run stops (the first reason given)
    retry_due: RetryDue = field(default_factory=lambda: RetryDue())  # retries and snoozes due (no wakeup)
    settles: Settles = field(default_factory=lambda: Settles())  # this worker's settles (held-back waits)
    # each queue's concurrency limits, {queue: {kind: capacity}}, read at the start and at each heartbeat
    # of a registered worker (registry.read_limits_steps; replaced, never changed in place)
    limits: dict[str, dict[str, int]] = field(default_factory=dict)
    handler_avg: float | None = None  # the handlers' average seconds (moving), see ReserveLoop.prefetch_now
    last_error: str | None = None  # the reserve loop's last error, until a round succeeds
    round_ok: bool = False  # a round of the reserve loop succeeded since its last (re)start
    wake_queues: set[str] = field(default_factory=set)  # queues a wakeup named, reserved from first
    channels: dict[str, str] = field(default_factory=dict)  # LISTEN channel -> queue
    unfinished: list[str] = field(default_factory=list)  # after run(): "queue/key/kind" of abandoned handlers


@dataclass(frozen=True)
class WorkerStatus:
    """A snapshot of a worker (Worker.status())."""

    name: str
    state: str  # 'starting', 'running', 'stopping' or 'stopped'
    reserve_as: str
    worker_id: int | None  # None when not registered
    concurrency: int
    running: tuple[str, ...]  # "queue/key/kind" of the messages being handled now
    # "queue/key/kind" of the messages reserved that no handler has started yet (each reserved for
    # a free handler, or prefetched): a stop now hands them back unstarted
    waiting: tuple[str, ...]
    stats: WorkerStats  # a copy
    stop_deadline_in_s: float | None  # while stopping: seconds until running handlers are abandoned
    stop_reason: str | None
    unfinished: tuple[str, ...]  # after a stop: handlers abandoned at the deadline / forced stop
    last_error: str | None  # the reserve loop's last error, until a round succeeds again


def where_of(job: Job) -> str:
    return f"{job.queue}/{job.key}/{job.kind}"


def log_expired(stats: Any, expired: list[Any]) -> None:
    """One log line (event "expired", counted in /metrics) for each message a reserve ended as
    cancelled because its pyqueue.expires_at had passed (dialects.Expired)."""
    for e in expired:
        stats.expired += 1
        late = e.late_s
        log.info(
            "expired: %s/%s/%s ended unrun (cancelled), %s after its expiry %s",
            e.queue,
            e.key,
            e.kind,
            "?" if late is None else (f"{late:.1f} s" if late < 10 else f"{late:.0f} s"),
            "?" if e.expires_at is None else e.expires_at.strftime("%Y-%m-%d %H:%M:%S UTC"),
            extra={"event": "expired", "queue": e.queue, "key": e.key, "kind": e.kind, "late_s": late},
        )
