"""The watch over running jobs: writes the progress their handlers report (Job.set_progress), and
reads the cancel flag of the jobs that have run for a while often enough that a cancel reaches
them within a second.

The heartbeat (registry.py) renews each held reservation with queue_renew, which also says
whether a cancel was requested, but only every lease/3 (10 s by default). While a job has run for
CANCEL_POLL_AFTER seconds, the watcher reads its state (queue_result, one light read per such job)
every CANCEL_POLL seconds and, when the flag is set, sets job.cancel_requested: an ``async def``
handler's task is cancelled; a plain (def) handler sees the event (job.raise_if_cancelled(), or a
wait on it) within that second and may stop by itself; one still running CANCEL_GRACE seconds
later gets CancelStopped (a BaseException) raised in its thread (at its next Python bytecode, as a time
limit: interrupt.py), and its message ends as cancelled either way. A worker of
short jobs makes no read. The watcher runs on its own connection (a thread of Worker, a task of
AsyncWorker), which it opens only once it has something to write or read.
"""

from __future__ import annotations

import threading
import time
from typing import TYPE_CHECKING

from .. import errors
from .interrupt import CancelStopped
from .model import Job, log, where_of
from .steps import WATCH, Acquire, RetriedCall, StoppedError, Wait

if TYPE_CHECKING:
    from collections.abc import Callable

    from .model import RunState

# Seconds between two reads of the cancel flag of a running job, once it has run for
# CANCEL_POLL_AFTER seconds (a shorter job costs no read: a worker of many short jobs makes
# none). A cancel then reaches its handler within CANCEL_POLL_AFTER + CANCEL_POLL seconds, plus
# the read's round trip: within a second.
CANCEL_POLL = 0.25
CANCEL_POLL_AFTER = 0.5

# Seconds a plain (def) handler has after the worker learnt of its job's cancel to stop by itself
# (raise_if_cancelled) before Cancelled is raised in its thread.
CANCEL_GRACE = 1.0

# How long the watcher sleeps when there is nothing to poll (it is woken by a progress to write);
# no database call, a look at the jobs held.
WATCH_IDLE = 0.5


class Watch:
    """The worker's part for progress and the quick cancel poll (steps: see steps.py); its loop
    runs on a connection of its own (the runner's watcher)."""

    def __init__(
        self,
        state: RunState,
        jobs: Callable[[], list[Job]],
        on_overdue: Callable[[list[Job], str], None] | None = None,
        kill_grace: float = 5.0,
    ) -> None:
        self.state = state
        self.jobs = jobs  # the messages the worker holds now (the runner's)
        # called with a cancelled job whose plain handler still runs kill_grace seconds after the
        # cancel (WorkerBase._overdue)
        self.on_overdue = on_overdue
        self.kill_grace = kill_grace
        self.cancel_poll_denied = False  # this account may not call queue_result

    def timeout(self) -> float:
        """How long the watcher may sleep now: CANCEL_POLL while a handler has run for
        CANCEL_POLL_AFTER seconds, until the next one will have, else WATCH_IDLE."""
        if self.cancel_poll_denied:
            return WATCH_IDLE
        now = time.monotonic()
        timeout = WATCH_IDLE
        for job in self.jobs():
            if job.started_at is not None and not job.done:
                timeout = min(timeout, max(job.started_at + CANCEL_POLL_AFTER - now, CANCEL_POLL))
        return timeout

    def loop_steps(self):
        """The watcher, until the hard stop: a round each time a progress comes to be written or
        the cancel poll is due (Wait(WATCH)); a round's unexpected error is logged, the next round
        goes on."""
        while not self.state.hard_stop.is_set():
            yield Wait(WATCH, self.timeout())
            if self.state.hard_stop.is_set():
                break
            try:
                yield from self.round_steps()
            except StoppedError:
                break
            except Exception:
                log.exception("watch: unexpected error", extra={"event": "error"})

    def round_steps(self):
        """One round of the watcher: the progress waiting to be written, then the cancel flags
        of the handlers that have run for CANCEL_POLL_AFTER seconds."""
        for job in self.jobs():
            if job.progress_pending and not job.done:
                yield from self.progress_steps(job)
        if self.cancel_poll_denied:
            return
        polled_since = time.monotonic() - CANCEL_POLL_AFTER
        for job in self.jobs():
            if job.started_at is None or job.done or job.cancel_requested.is_set():
                continue
            if job.started_at > polled_since:  # a job this young may well end before a cancel
                continue
            try:
                state = yield RetriedCall("result", job.queue, (job.key, job.kind), hard=True)
            except StoppedError:
                raise
            except errors.PermissionDeniedError:
                self.cancel_poll_denied = True
                log.warning(
                    "this account may not call queue_result: a cancel reaches a running handler "
                    "with the heartbeat only (every lease/3)",
                    extra={"event": "error"},
                )
                return
            except Exception:
                log.exception("watch: could not read a job's cancel flag", extra={"event": "error"})
                continue
            if state.cancel_requested and not job.done:
                self.cancel_seen(job)

    def cancel_seen(self, job: Job) -> None:
        """A cancel was requested for a running job: its event is set, its coroutine cancelled."""
        if job.cancel_requested.is_set():
            return
        log.info(
            "cancel requested: %s",
            where_of(job),
            extra={"event": "cancel_requested", "queue": job.queue, "key": job.key, "kind": job.kind},
        )
        job.request_cancel()
        if job.stopper is not None and not job.runs_async:
            timer = threading.Timer(CANCEL_GRACE, self.stop_for_cancel, (job,))
            timer.daemon = True
            timer.start()
            if self.on_overdue is not None:
                timer = threading.Timer(max(self.kill_grace, CANCEL_GRACE), self.cancel_overdue, (job,))
                timer.daemon = True
                timer.start()

    def cancel_overdue(self, job: Job) -> None:
        """kill_grace after a cancel: a plain handler of the job still running (blocked in a call
        its CancelStopped cannot reach) is overdue."""
        if not job.done and job.started_at is not None and self.on_overdue is not None:
            self.on_overdue([job], "cancel")

    @staticmethod
    def stop_for_cancel(job: Job) -> None:
        """CANCEL_GRACE after a cancel: a plain handler of the job still running gets Cancelled
        raised in its thread (Interruptible.stop: never in a handler of another job)."""
        if job.done or not job.stopper.stop(CancelStopped, job):
            return
        log.warning(
            "the handler of %s did not stop within %g s of its cancel: CancelStopped raised in its "
            "thread (it stops at its next Python bytecode; a blocking call runs on until it returns)",
            where_of(job),
            CANCEL_GRACE,
            extra={"event": "cancel_stopped", "queue": job.queue, "key": job.key, "kind": job.kind},
        )

    def progress_steps(self, job: Job):
        """Writes the job's latest progress (holding its lock: the token does not change meanwhile)."""
        yield Acquire(job.lock)
        try:
            yield from self.write_progress_steps(job)
        finally:
            job.lock.release()

    def write_progress_steps(self, job: Job):
        """Writes the job's progress not written yet (its lock held by the caller)."""
        if job.done:
            return
        value = job.take_progress()
        if value is None:
            return
        try:
            held = yield RetriedCall("set_progress", job.queue, (job.reservation, value[0]), hard=True)
        except StoppedError:
            raise
        except Exception:
            log.exception(
                "could not write the progress of %s",
                where_of(job),
                extra={"event": "error", "queue": job.queue, "key": job.key, "kind": job.kind},
            )
            return
        if not held:
            log.debug("progress of a reservation no longer held", extra={"event": "lost", "key": job.key})
