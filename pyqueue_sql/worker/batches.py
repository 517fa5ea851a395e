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

While a batch runs its jobs are held as the worker's other jobs are: the heartbeat renews them,
status() lists them, a stop lets the batch finish (within the shutdown timeout) and hands back the
jobs of a batch not started. A lane runs one batch at a time; the worker's concurrency is its
plain handlers' (see docs/tasks.md, "Batch tasks")."""

from __future__ import annotations

import inspect
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from .. import errors
from ..dialects import encode_json
from .model import Job, RetryRule, log
from .steps import Acquire, Handle, RetriedCall, Sleep, StoppedError

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


class BatchLanes:
    """Worker's part for batch kinds: the routes (add_batch_handler) and each lane's steps. The
    runner (threaded.Worker) runs each lane's steps on a thread of its own."""

    batch_routes: dict[tuple[str, str], BatchRoute]
    _lane_wakes: dict[tuple[str, str], threading.Event]
    # What it takes from Dispatch (dispatch.py, a message's way) and the runner (threaded.Worker),
    # parts of the same worker
    _job_type: type[Job]

    if TYPE_CHECKING:

        def _hold(self, jobs: list[Job]) -> None: ...
        def _release(self, job: Job, successors: list[Job] = ()) -> None: ...
        def _note_handler_time(self, seconds: float) -> None: ...
        def _defer_ack(self, job: Job, elapsed_ms: float) -> None: ...
        def _acknowledged(self, q: str, entries: list[tuple[Job, float]], held: int) -> None: ...
        def _commit_each_steps(self, entries: list[tuple[Job, float]]) -> Any: ...
        def _fail_steps(
            self, job: Job, error: BaseException, interrupted: bool, elapsed_ms: float
        ) -> Any: ...
        def _hand_back_steps(self, job: Job, delay: float = 0.0) -> Any: ...

    def add_batch_handler(
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
        routes: Any = getattr(self, "routes", {})
        if every_kind and (queue in routes or any(q == queue for q, _ in self.batch_routes)):
            raise errors.InvalidArgumentError(
                f"every_kind=True is for a queue with no other handler, and {queue!r} has one"
            )
        if (queue, kind) in self.batch_routes or (queue in routes and kind in routes[queue].handlers):
            raise errors.InvalidArgumentError(f"queue {queue!r} already has a handler for kind {kind!r}")
        self.batch_routes[(queue, kind)] = BatchRoute(
            queue, kind, fn, size, float(linger), None if timeout is None else float(timeout),
            bool(store_result), retry, bool(every_kind),
        )  # fmt: skip

    def _batch_retry(self, job: Job) -> RetryRule | None:
        """The retry policy of a job of a batch kind (None: the job's kind is not one)."""
        route = self.batch_routes.get((job.queue, job.kind))
        if route is None:
            return None
        if route.retry is not None:
            return route.retry
        plain = getattr(self, "routes", {}).get(job.queue)
        return plain.retry if plain is not None else None

    def batches_idle(self) -> bool:
        """Whether every batch lane's last reserve found nothing (True when there is none)."""
        return all(idle[0] for _, idle in getattr(self, "_lanes", ()))

    # -- a lane's steps ------------------------------------------------------------------
    def _lane_steps(self, route: BatchRoute, idle: list[bool], siblings: threading.Event | None = None):
        """A lane's loop until the stop: reserve a batch, run it, settle each job. idle[0] says
        whether its last reserve found nothing (App.run_pending stops once every lane is idle).
        The first lane of a kind (siblings None) long-polls when nothing is ready; the others wait
        for it on `siblings`, which a lane sets when it reserved a full batch (more may be ready):
        an idle worker keeps one long poll per batch kind, not one per lane."""
        w: Any = self
        backoff = 0.5
        while not w.state.stopping.is_set():
            try:
                yield from self._lane_round_steps(route, idle, siblings)
                backoff = 0.5
            except StoppedError:
                return
            except Exception as exc:  # as the reserve loop does: logged, again after a back-off
                backoff = w.reserve_loop.dispatch_failed(exc, backoff)
                if (yield Sleep(backoff)):
                    return
                backoff = min(backoff * 2, 30.0)

    def _lane_round_steps(self, route: BatchRoute, idle: list[bool], siblings: threading.Event | None):
        """One round of a lane: a batch reserved, run and settled, or a wait when none is ready."""
        w: Any = self
        kinds = None if route.every_kind else [route.kind]
        wake = self._lane_wakes.setdefault((route.queue, route.kind), threading.Event())
        lease_until = w.state.clock() + w.settings.lease
        args = dict(n=route.size, worker=w.reserve_as, timeout=w.settings.lease, kinds=kinds)
        rows = list((yield RetriedCall("reserve", route.queue, kwargs=args)))
        if rows and len(rows) < route.size and route.linger > 0:
            end = w.state.clock() + route.linger
            while len(rows) < route.size and not w.state.stopping.is_set():
                left = end - w.state.clock()
                if left <= 0:
                    break
                args["n"] = route.size - len(rows)
                more = yield RetriedCall("reserve", route.queue, kwargs=args)
                if not more:
                    woke = yield RetriedCall(
                        "wait",
                        route.queue,
                        kwargs=dict(
                            timeout=round(left, 6) or 1e-6, poll=w.settings.long_poll_check, kinds=kinds
                        ),
                    )
                    if not woke:
                        break
                rows.extend(more)
        if not rows:
            idle[0] = True
            if siblings is None:
                yield RetriedCall(
                    "wait",
                    route.queue,
                    kwargs=dict(
                        timeout=w.settings.long_poll_wait, poll=w.settings.long_poll_check, kinds=kinds
                    ),
                )
                wake.set()
            else:
                until = w.state.clock() + w.settings.long_poll_wait
                while not w.state.stopping.is_set() and w.state.clock() < until:
                    if siblings.wait(WAIT_SLICE):
                        break
                siblings.clear()
            return
        idle[0] = False
        if len(rows) == route.size:
            wake.set()
        made = w._job_type.reserved
        jobs = [made(r, lease_until) for r in rows]
        w._hold(jobs)
        if route.every_kind and any(job.kind != route.kind for job in jobs):
            for job in [j for j in jobs if j.kind != route.kind]:
                unknown = errors.UnknownTaskError(
                    f"no handler has kind {job.kind!r} on queue {route.queue!r} (its batch kind: {route.kind!r})"
                )
                yield from self._settle_steps(job, unknown, 0.0)
            jobs = [j for j in jobs if j.kind == route.kind]
            if not jobs:
                return
        w.stats.reserved += len(jobs)
        log.debug(
            "reserved a batch",
            extra={"event": "reserve", "queue": route.queue, "kind": route.kind, "n": len(jobs)},
        )
        yield from self._batch_steps(route, jobs)

    def _batch_steps(self, route: BatchRoute, jobs: list[Job]):
        """Runs one batch: one call of the handler, then each job to its commit or failure."""
        w: Any = self
        if w.state.stopping.is_set():  # reserved as the stop came: back unstarted
            for job in jobs:
                yield from w._hand_back_steps(job)
            return
        started = time.monotonic()
        for job in jobs:
            job.started_at = started
            job.store_result = route.store_result
        fn = route.fn
        if inspect.iscoroutinefunction(fn):

            async def call_async(_lead: Job) -> Any:
                return await fn(jobs)

            call: Callable[[Job], Any] = call_async
        else:

            def call(_lead: Job) -> Any:
                return fn(jobs)

        lead = jobs[0]
        error = yield Handle(call, lead, route.timeout)
        value, lead.result = lead.result, None
        w._note_handler_time((time.monotonic() - started) / len(jobs))
        outcomes = [error] * len(jobs) if error is not None else outcomes_of(jobs, value)
        elapsed_ms = round((time.monotonic() - started) * 1000, 3)
        succeeded: list[Job] = []
        for job, outcome in zip(jobs, outcomes, strict=True):
            if isinstance(outcome, BaseException) or job.progress_pending:
                yield from self._settle_steps(job, outcome, elapsed_ms)
                continue
            job.result = outcome if job.store_result else None
            succeeded.append(job)
        if succeeded:
            yield from self._commit_batch_steps(route, succeeded, elapsed_ms)

    def _commit_batch_steps(self, route: BatchRoute, jobs: list[Job], elapsed_ms: float):
        """Commits a batch's successes in one call (queue_commit_batch, or with their results
        queue_commit_result_batch, whose refusal of a result commits them one by one so that only
        the refused ones fail, as the completer does)."""
        w: Any = self
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
            w.stats.ack_batches += 1
            w._acknowledged(route.queue, entries, held)
        except StoppedError:
            for job in jobs:
                w.policy.abandoned(job)
        except errors.InvalidArgumentError as exc:
            if route.store_result:
                yield from w._commit_each_steps(entries)
            else:
                for job in jobs:
                    w.policy.unfinishable(job, exc)
        except Exception as exc:  # e.g. the queue was dropped meanwhile: the lane goes on
            for job in jobs:
                w.policy.unfinishable(job, exc)
        finally:
            for job in jobs:
                job.done = True
                job.lock.release()
                w._release(job)

    def _settle_steps(self, job: Job, outcome: Any, elapsed_ms: float):
        """One job of a batch to its commit or failure (as Dispatch._job_steps settles a job)."""
        w: Any = self
        error: BaseException | None = outcome if isinstance(outcome, BaseException) else None
        if error is None:
            job.result = outcome if job.store_result else None
            if job.store_result:
                try:  # a result JSON cannot hold fails its job here, not the batch it commits in
                    encode_json(job.result)
                except errors.InvalidPayloadError as exc:
                    error = exc
        interrupted = False if error is None else w.policy.handled(job, error)
        lock = job.lock
        try:
            yield Acquire(lock)
            try:
                if job.progress_pending:
                    yield from w.watch.write_progress_steps(job)
                if error is None:
                    w._defer_ack(job, elapsed_ms)
                else:
                    yield from w._fail_steps(job, error, interrupted, elapsed_ms)
                job.done = True
            finally:
                lock.release()
        except StoppedError:
            w.policy.abandoned(job)
        except Exception as exc:  # e.g. the queue was dropped meanwhile: the lane goes on
            w.policy.unfinishable(job, exc)
        finally:
            w._release(job)
