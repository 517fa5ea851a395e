"""Batch handlers: one call of a function over many messages of one kind (Worker.add_batch_handler,
a task's ``@app.task(batch=N)``).

A batch kind is not one of its queue's routes: the dispatcher never reserves it. Each batch kind has
a lane, a thread of the worker with its own connection, that loops: queue_reserve of up to `size`
messages of that kind (more reserves for up to `linger` seconds while the batch is not full), one
call of the function with the jobs, then each job settled on its own, as a job of a plain handler
is: the batch's successes are committed together in one call (queue_commit_batch, or
queue_commit_result_batch with their results), each failure goes to queue_fail with its kind's
retry policy (GiveUp: queue_give_up, Snooze: queue_snooze), so that every message keeps its own
attempts, result and dead letter. (Committing in the lane, not through the completer, measured
1.08x against 0.85x of a task's no-op drain on PostgreSQL: the lane's per-job work is less.) Nothing is
ready: the lane long-polls (queue_wait) for its kind.

A lane keeps the database busy while its function runs: with the worker's prefetch (not 0) it is
three threads, each with its connection, one reserving the next batch while another runs the
current one and a third commits the successes of the one before (at most one batch reserved ahead,
one waiting for its commit). Before a prefetched batch runs, its jobs whose lease ran low meanwhile
are handed back, as a prefetched job's are. prefetch=0 (run_pending's): one thread does all in turn.

While a batch lingers for more, runs or waits its turn its jobs are held as the worker's other jobs
are (a linger longer than the lease keeps its leases): the heartbeat renews them (the
batch reserved ahead's too), status() lists them, a stop lets the batch finish (within the shutdown
timeout), commits it, and hands back the jobs of a batch not started. A lane runs one batch at a
time; the worker's concurrency is its plain handlers' (see docs/tasks.md, "Batch tasks")."""

from __future__ import annotations

import inspect
import queue
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, TypedDict

from .. import errors
from ..dialects import UnreadableJSON, encode_json
from .model import Job, RetryRule, log, log_expired
from .steps import Acquire, Handle, RetriedCall, Sleep, StoppedError

if TYPE_CHECKING:
    from .dispatch import Dispatch, ReserveLoop
    from .model import Route, RunState
    from .policy import FailurePolicy
    from .registry import Registry
    from .settings import WorkerSettings
    from .watch import Watch

# What a batch handler gets: the jobs, in the order reserved. What it returns: None (every job
# succeeded, no result), or one outcome per job in that order: an exception instance fails that
# job as if its handler had raised it (Retry, GiveUp and Snooze included), anything else is a
# success whose value is the job's result (stored when the kind stores results).
BatchHandler = Callable[[list[Job]], Any]

# How often a lane that waits for its first sibling looks again (and at the stop), seconds.
WAIT_SLICE = 0.25


@dataclass
class BatchRoute:
    """A batch kind of a queue: its handler, the batch's size and linger (seconds a batch not full
    waits for more messages), the batch's time limit, whether results are stored, its retry policy."""

    queue: str
    kind: str
    fn: BatchHandler
    size: int
    linger: float = 0.0
    timeout: float | None = None
    store_result: bool = False
    retry: RetryRule | None = None
    # the lane reserves every kind of its queue, and fails the others (UnknownTaskError)
    every_kind: bool = False


class BatchOptions(TypedDict, total=False):
    """add_batch_handler's options but its size, by name (BatchLanes.add's keyword arguments), for
    type checkers."""

    linger: float
    retry: RetryRule | None
    timeout: float | None
    store_result: bool
    every_kind: bool


def check_batch(size: object, linger: object) -> None:
    """Refuses a batch size that is not an int >= 1 or a linger that is not seconds >= 0."""
    if isinstance(size, bool) or not isinstance(size, int) or size < 1:
        raise errors.InvalidArgumentError(f"a batch's size must be an int >= 1, not {size!r}")
    if isinstance(linger, bool) or not isinstance(linger, (int, float)) or not linger >= 0:
        raise errors.InvalidArgumentError(f"a batch's linger must be seconds >= 0, not {linger!r}")


def outcomes_of(jobs: Sequence[Job], value: Any) -> list[Any]:
    """The handler's return value as one outcome per job (None: every job succeeded): a list or
    tuple of len(jobs); anything else fails every job with an InvalidArgumentError saying so."""
    if value is None:
        return [None] * len(jobs)
    if isinstance(value, (list, tuple)) and len(value) == len(jobs):
        return list(value)
    what = f"{len(value)} outcomes" if isinstance(value, (list, tuple)) else type(value).__name__
    error = errors.InvalidArgumentError(
        f"a batch handler returns None or one outcome per job ({len(jobs)}), not {what}"
    )
    return [error] * len(jobs)


def _unreadable(job: Job) -> errors.UnreadablePayloadError:
    """The failure of a job whose payload or headers no client reads (an UnreadableJSON)."""
    what, value = (
        ("payload", job.payload) if type(job.payload) is UnreadableJSON else ("headers", job.headers)
    )
    return errors.UnreadablePayloadError(f"{what} unreadable: {value.reason}")


class Pipe:
    """A prefetching lane's hand-offs between its three threads (BatchLanes.lane): the batches
    reserved (at most one reserved and not started), then None once the reserver has ended; the
    successes to commit (at most one batch waiting), then None once the runner has ended."""

    def __init__(self) -> None:
        self.ready: queue.SimpleQueue[list[Job] | None] = queue.SimpleQueue()
        self.ahead = threading.Semaphore(1)
        self.commits: queue.SimpleQueue[tuple[list[Job], float] | None] = queue.SimpleQueue()
        self.commit_slots = threading.Semaphore(1)


class BatchLanes:
    """A worker's batch kinds: their routes (add, the worker's add_batch_handler) and each lane's
    steps. The runner (threaded.Worker) runs each lane's steps on a thread of its own, holding its
    jobs with `hold` and freeing their slots with `release`; each job is settled by Dispatch's
    steps (its failure, its deferred success, a hand-back) as a plain handler's job is."""

    def __init__(
        self,
        settings: WorkerSettings,
        state: RunState,
        routes: dict[str, Route],
        *,
        job_type: type[Job],
        hold: Callable[[list[Job]], None],
        release: Callable[..., None],
    ) -> None:
        self.settings = settings
        self.state = state
        self.stats = state.stats
        self.plain_routes = routes  # the worker's plain handlers' routes, shared
        self.routes: dict[tuple[str, str], BatchRoute] = {}  # (queue, kind) -> BatchRoute
        self.wakes: dict[tuple[str, str], threading.Event] = {}  # set when more of a kind may be ready
        self.idle: list[list[bool]] = []  # each lane's: its last reserve found nothing
        self.job_type = job_type
        self.hold = hold
        self.release = release
        # the parts it works with, made after it (the failure policy asks it for a batch kind's
        # retry policy): set by attach()
        self.dispatch: Dispatch
        self.policy: FailurePolicy
        self.watch: Watch
        self.registry: Registry
        self.reserve_loop: ReserveLoop

    def attach(
        self,
        dispatch: Dispatch,
        policy: FailurePolicy,
        watch: Watch,
        registry: Registry,
        reserve_loop: ReserveLoop,
    ) -> None:
        self.dispatch, self.policy, self.watch = dispatch, policy, watch
        self.registry, self.reserve_loop = registry, reserve_loop

    def add(
        self,
        queue: str,
        fn: BatchHandler,
        kind: str,
        *,
        size: int,
        linger: float = 0.0,
        retry: RetryRule | None = None,
        timeout: float | None = None,
        store_result: bool = False,
        every_kind: bool = False,
    ) -> None:
        """Registers fn for the messages of `kind` on `queue`, up to `size` at a time (see the
        module docstring). `timeout`: the seconds one call of fn may take (every job of a batch
        that overruns fails with TimeoutError); `retry`, `store_result` as add_handler's.
        every_kind=True: for a queue with no other handler, the lane reserves without a kinds
        filter (cheaper: 5.7-7.9 ms against 8.1-9.8 ms for 100 messages on MariaDB, one
        connection, 2026-11-28) and fails a message of another kind with UnknownTaskError."""
        if not callable(fn):
            raise errors.InvalidArgumentError(f"a handler must be callable, not {type(fn).__name__}")
        if not isinstance(kind, str) or not kind:
            raise errors.InvalidArgumentError("a batch handler serves one kind: give kind=")
        check_batch(size, linger)
        if timeout is not None and (
            isinstance(timeout, bool) or not isinstance(timeout, (int, float)) or not timeout > 0
        ):
            raise errors.InvalidArgumentError(f"timeout must be seconds > 0 (or None), not {timeout!r}")
        routes = self.plain_routes
        if every_kind and (queue in routes or any(q == queue for q, _ in self.routes)):
            raise errors.InvalidArgumentError(
                f"every_kind=True is for a queue with no other handler, and {queue!r} has one"
            )
        if (queue, kind) in self.routes or (queue in routes and kind in routes[queue].handlers):
            raise errors.InvalidArgumentError(f"queue {queue!r} already has a handler for kind {kind!r}")
        self.routes[(queue, kind)] = BatchRoute(
            queue, kind, fn, size, float(linger), None if timeout is None else float(timeout),
            bool(store_result), retry, bool(every_kind),
        )  # fmt: skip

    def retry_of(self, job: Job) -> RetryRule | None:
        """The retry policy of a job of a batch kind (None: the job's kind is not one)."""
        route = self.routes.get((job.queue, job.kind))
        if route is None:
            return None
        if route.retry is not None:
            return route.retry
        plain = self.plain_routes.get(job.queue)
        return plain.retry if plain is not None else None

    def all_idle(self) -> bool:
        """Whether every batch lane's last reserve found nothing (True when there is none)."""
        return all(idle[0] for idle in self.idle)

    def lane(self, route: BatchRoute, first: bool) -> list[tuple[str, Any]]:
        """A new lane of a batch kind: the steps of each of its threads, by name. The first lane
        of a kind long-polls, the others wait for its wakes. With a prefetch (the worker's
        `prefetch` not 0) three threads: one reserves the next batch while another runs the
        current one and a third commits the one before; else one thread does all in turn."""
        idle = [False]
        self.idle.append(idle)
        siblings = None if first else self.wakes.setdefault((route.queue, route.kind), threading.Event())
        if self.settings.prefetch == 0:
            return [("", self.lane_steps(route, idle, siblings))]
        pipe = Pipe()
        return [
            ("reserve", self.lane_steps(route, idle, siblings, pipe)),
            ("run", self.runner_steps(route, pipe)),
            ("commit", self.committer_steps(route, pipe)),
        ]

    # -- a lane's steps ------------------------------------------------------------------
    def reserve_noting_expired(self, route: Any, args: dict[str, Any]):
        """A reserve of the route's queue, its expiries logged and counted (log_expired)."""
        rows, expired = yield RetriedCall("reserve", route.queue, kwargs=args, expired=True)
        log_expired(self.stats, expired)
        return rows

    def lane_steps(
        self,
        route: BatchRoute,
        idle: list[bool],
        siblings: threading.Event | None = None,
        pipe: Pipe | None = None,
    ):
        """A lane's loop until the stop: reserve a batch, run it, settle each job (with a pipe:
        reserve a batch and hand it to the lane's runner, once the one before has started).
        idle[0] says whether its last reserve found nothing (App.run_pending stops once every
        lane is idle). The first lane of a kind (siblings None) long-polls when nothing is ready;
        the others wait for it on `siblings`, which a lane sets when it reserved a full batch
        (more may be ready): an idle worker keeps one long poll per batch kind, not one per lane."""
        backoff = 0.5
        try:
            while not self.state.stopping.is_set():
                if pipe is not None and not pipe.ahead.acquire(timeout=WAIT_SLICE):
                    continue  # a batch reserved ahead has not started yet
                if pipe is not None and self.state.stopping.is_set():
                    # the stop came while it waited for the runner to take the batch reserved ahead
                    # (which the runner now hands back): no reserve that could take it again
                    pipe.ahead.release()
                    break
                jobs: list[Job] = []
                try:
                    if pipe is None:
                        yield from self.lane_round_steps(route, idle, siblings)
                    else:
                        jobs = yield from self.reserve_round_steps(route, idle, siblings)
                    backoff = 0.5
                except StoppedError:
                    return
                except Exception as exc:  # as the reserve loop does: logged, again after a back-off
                    backoff = self.reserve_loop.dispatch_failed(exc, backoff)
                    if (yield Sleep(backoff)):
                        return
                    backoff = min(backoff * 2, 30.0)
                finally:
                    if pipe is not None:
                        if jobs:
                            pipe.ready.put(jobs)
                        else:
                            pipe.ahead.release()
        finally:
            if pipe is not None:
                pipe.ready.put(None)

    def runner_steps(self, route: BatchRoute, pipe: Pipe):
        """A prefetching lane's runner: each batch its reserver hands over (which frees the
        reserver to reserve the next one), run unless the stop came (handed back), its jobs whose
        lease ran low while it waited handed back first, as a prefetched job's are; its successes
        handed to the committer. Ends after the reserver has ended, then ends the committer."""
        try:
            while (jobs := pipe.ready.get()) is not None:
                pipe.ahead.release()
                try:
                    if not self.state.stopping.is_set():
                        for job in [j for j in jobs if self.dispatch.lease_low(j)]:
                            jobs.remove(job)
                            yield from self.dispatch.hand_back_steps(job)
                    if jobs:
                        yield from self.batch_steps(route, jobs, pipe)
                except StoppedError:
                    return
                except Exception:  # never lose the lane (each job was settled or released)
                    log.exception("a batch failed", extra={"event": "error", "queue": route.queue})
        finally:
            pipe.commits.put(None)

    def committer_steps(self, route: BatchRoute, pipe: Pipe):
        """A prefetching lane's committer: the successes of each batch its runner ran, committed
        in one call while the runner runs the next batch, until the runner ends."""
        while (item := pipe.commits.get()) is not None:
            pipe.commit_slots.release()
            yield from self.commit_batch_steps(route, *item)

    def lane_round_steps(self, route: BatchRoute, idle: list[bool], siblings: threading.Event | None):
        """One round of a lane: a batch reserved, run and settled, or a wait when none is ready."""
        jobs = yield from self.reserve_round_steps(route, idle, siblings)
        if jobs:
            yield from self.batch_steps(route, jobs)

    def reserve_round_steps(self, route: BatchRoute, idle: list[bool], siblings: threading.Event | None):
        """A batch reserved and held (its jobs of another kind failed), or [] after a wait when
        none is ready."""
        kinds = None if route.every_kind else [route.kind]
        wake = self.wakes.setdefault((route.queue, route.kind), threading.Event())
        args = dict(n=route.size, worker=self.registry.reserve_as, timeout=self.settings.lease, kinds=kinds)
        made = self.job_type.reserved
        jobs: list[Job] = []

        def held(rows: Sequence[Any], lease_until: float) -> list[Job]:
            # held at once, so that the heartbeat extends them while the batch lingers for more
            # (a linger longer than the lease would otherwise see them lapse and come back)
            more = [made(r, lease_until) for r in rows]
            self.hold(more)
            return more

        try:
            lease_until = self.state.clock() + self.settings.lease
            jobs += held((yield from self.reserve_noting_expired(route, args)), lease_until)
            if jobs and len(jobs) < route.size and route.linger > 0:
                end = self.state.clock() + route.linger
                while len(jobs) < route.size and not self.state.stopping.is_set():
                    left = end - self.state.clock()
                    if left <= 0:
                        break
                    args["n"] = route.size - len(jobs)
                    lease_until = self.state.clock() + self.settings.lease
                    more = held((yield from self.reserve_noting_expired(route, args)), lease_until)
                    if not more:
                        woke = yield RetriedCall(
                            "wait",
                            route.queue,
                            kwargs=dict(
                                timeout=round(left, 6) or 1e-6,
                                poll=self.settings.long_poll_check,
                                kinds=kinds,
                            ),
                        )
                        if not woke:
                            break
                    jobs.extend(more)
        except BaseException:
            for job in jobs:  # not extended any more: they come back after their lease
                self.release(job)
            raise
        if not jobs:
            idle[0] = True
            if siblings is None:
                yield RetriedCall(
                    "wait",
                    route.queue,
                    kwargs=dict(
                        timeout=self.settings.long_poll_wait, poll=self.settings.long_poll_check, kinds=kinds
                    ),
                )
                wake.set()
            else:
                until = self.state.clock() + self.settings.long_poll_wait
                while not self.state.stopping.is_set() and self.state.clock() < until:
                    if siblings.wait(WAIT_SLICE):
                        break
                siblings.clear()
            return []
        idle[0] = False
        if len(jobs) == route.size:
            wake.set()
        if route.every_kind and any(job.kind != route.kind for job in jobs):
            for job in [j for j in jobs if j.kind != route.kind]:
                unknown = errors.UnknownTaskError(
                    f"no handler has kind {job.kind!r} on queue {route.queue!r} (its batch kind: {route.kind!r})"
                )
                yield from self.settle_steps(job, unknown, 0.0)
            jobs = [j for j in jobs if j.kind == route.kind]
            if not jobs:
                return []
        self.stats.reserved += len(jobs)
        log.debug(
            "reserved a batch",
            extra={"event": "reserve", "queue": route.queue, "kind": route.kind, "n": len(jobs)},
        )
        return jobs

    def batch_steps(self, route: BatchRoute, jobs: list[Job], pipe: Pipe | None = None):
        """Runs one batch: one call of the handler, then each job to its commit or failure (its
        successes committed here, or with a pipe handed to the lane's committer)."""
        if self.state.stopping.is_set():  # reserved as the stop came: back unstarted
            for job in jobs:
                yield from self.dispatch.hand_back_steps(job)
            return
        holds = self.dispatch.runners.holds
        for job in [j for j in jobs if holds(j)]:
            # its earlier attempt still runs in a batch's thread stuck past its time limit
            jobs.remove(job)
            yield from self.dispatch.stuck_retry_steps(job)
        if not jobs:
            return
        started = time.monotonic()
        for job in jobs:
            job.started_at = started
            job.store_result = route.store_result
        for job in [j for j in jobs if UnreadableJSON in (type(j.payload), type(j.headers))]:
            # JSON no client reads fails its job alone, unrun (as Dispatch.plan_of fails a plain
            # handler's); the other jobs of the batch go to the handler
            jobs.remove(job)
            yield from self.settle_steps(job, _unreadable(job), 0.0)
        if not jobs:
            return
        fn = route.fn
        if inspect.iscoroutinefunction(fn):

            async def call_async(_lead: Job) -> Any:
                return await fn(jobs)

            call: Callable[[Job], Any] = call_async
        else:

            def call(_lead: Job) -> Any:
                return fn(jobs)

        lead = jobs[0]
        error = yield Handle(call, lead, route.timeout, jobs)
        value, lead.result = lead.result, None
        self.dispatch.note_handler_time((time.monotonic() - started) / len(jobs))
        outcomes = [error] * len(jobs) if error is not None else outcomes_of(jobs, value)
        elapsed_ms = round((time.monotonic() - started) * 1000, 3)
        succeeded: list[Job] = []
        for job, outcome in zip(jobs, outcomes, strict=True):
            if isinstance(outcome, BaseException) or job.progress_pending:
                yield from self.settle_steps(job, outcome, elapsed_ms)
                continue
            job.result = outcome if job.store_result else None
            succeeded.append(job)
        if not succeeded:
            return
        if pipe is None:
            yield from self.commit_batch_steps(route, succeeded, elapsed_ms)
        else:
            pipe.commit_slots.acquire()  # at most one batch waits for the committer
            pipe.commits.put((succeeded, elapsed_ms))

    def commit_batch_steps(self, route: BatchRoute, jobs: list[Job], elapsed_ms: float):
        """Commits a batch's successes in one call (queue_commit_batch, or with their results
        queue_commit_result_batch, whose refusal of a result commits them one by one so that only
        the refused ones fail, as the completer does)."""
        entries = [(job, elapsed_ms) for job in jobs]
        for job in jobs:
            yield Acquire(job.lock)
        try:
            if route.store_result:
                items = [(j.reservation, j.result) for j in jobs]
                held = yield RetriedCall("commit_result_many", route.queue, (items,), hard=True)
            else:
                held = yield RetriedCall(
                    "commit_many", route.queue, ([j.reservation for j in jobs],), hard=True
                )
            self.stats.ack_batches += 1
            self.dispatch.acknowledged(route.queue, entries, held)
        except StoppedError:
            for job in jobs:
                self.policy.abandoned(job)
        except errors.InvalidArgumentError as exc:
            if route.store_result:
                yield from self.dispatch.commit_each_steps(entries)
            else:
                for job in jobs:
                    self.policy.unfinishable(job, exc)
        except Exception as exc:  # e.g. the queue was dropped meanwhile: the lane goes on
            for job in jobs:
                self.policy.unfinishable(job, exc)
        finally:
            for job in jobs:
                job.done = True
                job.lock.release()
                self.release(job)

    def settle_steps(self, job: Job, outcome: Any, elapsed_ms: float):
        """One job of a batch to its commit or failure (as Dispatch.job_steps settles a job)."""
        error: BaseException | None = outcome if isinstance(outcome, BaseException) else None
        if error is None:
            job.result = outcome if job.store_result else None
            if job.store_result:
                try:  # a result JSON cannot hold fails its job here, not the batch it commits in
                    encode_json(job.result)
                except errors.InvalidPayloadError as exc:
                    error = exc
        interrupted = False if error is None else self.policy.handled(job, error)
        lock = job.lock
        try:
            yield Acquire(lock)
            try:
                if job.progress_pending:
                    yield from self.watch.write_progress_steps(job)
                if error is None:
                    self.dispatch.defer_ack(job, elapsed_ms)
                else:
                    yield from self.dispatch.fail_steps(job, error, interrupted, elapsed_ms)
                job.done = True
            finally:
                lock.release()
        except StoppedError:
            self.policy.abandoned(job)
        except Exception as exc:  # e.g. the queue was dropped meanwhile: the lane goes on
            self.policy.unfinishable(job, exc)
        finally:
            self.release(job)
