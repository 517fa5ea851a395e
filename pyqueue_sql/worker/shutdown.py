"""Signals and shutdown: stop() (graceful, then forced), SIGTERM/SIGINT, the reports while a
graceful stop waits for running handlers, and what is abandoned at its end."""

from __future__ import annotations

import signal
import time
from typing import TYPE_CHECKING

from .model import log, where_of
from .steps import Acquire, RetriedCall, StoppedError

if TYPE_CHECKING:
    from collections.abc import Callable

    from .model import Job, RunState


class Shutdown:
    """The worker's part for stopping: stop(), the signals, the reports while a graceful stop
    waits, and what is abandoned at its end."""

    def __init__(self, state: RunState, jobs: Callable[[], list[Job]], wake: Callable[[], None]) -> None:
        self.state = state
        self.jobs = jobs  # the messages the worker holds now (the runner's)
        self.wake = wake  # makes the runner's waits notice a stop (from any thread, or a signal handler)
        self.signalled = False  # a SIGTERM/SIGINT came during this run
        self.abandoned: list[Job] = []  # the jobs abandoned at the stop, until they are handed back

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
        if self.state.stop_reason is None:
            self.state.stop_reason = reason or ("stop(force=True)" if force else "stop()")
        elif force and not self.state.hard_stop.is_set():
            self.state.stop_reason += ", then forced"
        self.state.stopping.set()
        if force:
            self.state.hard_stop.set()
        self.wake()

    def on_signal(self, signum: int) -> None:
        """SIGTERM/SIGINT: the first stops gracefully, a second one stops at once."""
        name = signal.Signals(signum).name
        # a stop of the worker's own (max_jobs, too many stuck threads) is no first signal
        signalled, self.signalled = self.signalled, True
        if signalled and self.state.stopping.is_set():
            running = [where_of(j) for j in self.jobs() if not j.done]
            log.warning(
                "%s received again: stopping now; %d running handler(s) abandoned, their messages "
                "handed back: %s",
                name,
                len(running),
                ", ".join(running[:20]),
                extra={
                    "event": "signal",
                    "signal": signum,
                    "force": True,
                    "running": len(running),
                    "keys": running[:20],
                },
            )
            self.stop(force=True, reason=f"{name} (twice)")
        else:
            log.info(
                "%s received: stopping (send it again to stop at once)",
                name,
                extra={"event": "signal", "signal": signum, "force": False},
            )
            self.stop(reason=name)

    def running(self) -> list[str]:
        return [where_of(j) for j in self.jobs() if j.started_at is not None and not j.done]

    def unstarted(self) -> list[str]:
        return [where_of(j) for j in self.jobs() if j.started_at is None and not j.done]

    def report_stopping(self, deadline: float, report_at: float) -> float:
        """Every 10 s of a graceful stop: logs the handlers it waits for; returns the next report time."""
        now = time.monotonic()
        if now < report_at:
            return report_at
        running = self.running()
        if running:
            log.info(
                "stopping: waiting up to %.0f s for %d running handler(s): %s; a second SIGINT/SIGTERM "
                "stops at once",
                deadline - now,
                len(running),
                ", ".join(running[:20]),
                extra={
                    "event": "stopping",
                    "running": len(running),
                    "keys": running[:20],
                    "deadline_in_s": round(deadline - now, 1),
                },
            )
        return now + 10.0

    def abandon_the_rest(self) -> None:
        """At the end of a stop: whatever still runs is abandoned (logged, kept in unfinished) and
        the stop becomes hard. When every handler finished in time it stays graceful: the completer
        still flushes the last successes, retrying through a lost connection, and the runner makes
        the stop hard once that flush is done (or its time is up)."""
        jobs = self.jobs()
        self.abandoned = [j for j in jobs if not j.done]
        left = [where_of(j) for j in jobs]
        self.state.unfinished = left
        if not left:
            return
        why = "the stop was forced" if self.state.hard_stop.is_set() else "the shutdown deadline passed"
        log.error(
            "%s with %d handler(s) still running; their messages are handed back: %s",
            why,
            len(left),
            ", ".join(left[:20]),
            extra={"event": "deadline", "forced": self.state.hard_stop.is_set(), "running": left[:100]},
        )
        self.state.hard_stop.set()

    def give_back_abandoned_steps(self):
        """After _abandon_the_rest: gives back the messages of the handlers abandoned at the stop
        with queue_snooze (ready again at once, the attempt not counted: the worker stopped, the
        job did not fail), so that they do not wait out their lease. A handler that still ends
        later in this process finds its reservation gone (its commit is logged as lost)."""
        for job in self.abandoned:
            yield Acquire(job.lock)
            try:
                if job.done:
                    continue
                held = yield RetriedCall("snooze", job.queue, (job.reservation,), {"delay": 0}, hard=True)
                job.done = True
            except StoppedError:
                continue
            except Exception:
                log.exception(
                    "could not hand back %s; it comes back after its lease",
                    where_of(job),
                    extra={"event": "error", "queue": job.queue, "key": job.key, "kind": job.kind},
                )
                continue
            finally:
                job.lock.release()
            if held:
                self.state.stats.handed_back += 1
            log.warning(
                "handed back %s, its handler abandoned at the stop (ready again, the attempt not counted)",
                where_of(job),
                extra={"event": "abandon_hand_back", "queue": job.queue, "key": job.key, "kind": job.kind},
            )
        self.abandoned = []
