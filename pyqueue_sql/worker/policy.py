"""The failure policy: how long a failed message waits before its next delivery (RetryPolicy),
the text stored as its last_error, and what the worker counts and logs for each outcome of a
handled message (committed, retried, dead-lettered, dropped, lost, interrupted). Whether a
failure is the message's last allowed delivery (dead letter or drop) is the server's decision
(queue_fail's outcome, from the queue's max_attempts and dead-letter queue)."""

from __future__ import annotations

import datetime as dt
import logging
import random
from dataclasses import dataclass
from typing import TYPE_CHECKING

from .. import errors
from ..display import redact
from ..errors import GiveUp as GiveUp
from ..errors import Retry as Retry
from ..errors import Snooze as Snooze
from ..errors import seconds_of as seconds_of
from .model import Job, log, where_of

if TYPE_CHECKING:
    from collections.abc import Callable
    from typing import Any

    from .model import RetryRule, Route, RunState


ExceptionTypes = type[BaseException] | tuple[type[BaseException], ...]


def _exception_types(value: object, name: str) -> tuple[type[BaseException], ...] | None:
    if value is None:
        return None
    types = value if isinstance(value, tuple) else (value,)
    for t in types:
        if not (isinstance(t, type) and issubclass(t, BaseException)):
            raise errors.InvalidArgumentError(
                f"RetryPolicy {name} takes exception classes (one or a tuple), not {t!r}"
            )
    return types


@dataclass(frozen=True)
class RetryPolicy:
    """Delay before a failed message is eligible again:
    min(max_delay, base * factor ** (attempts - 1)), then multiplied by a random
    factor in [1 - jitter, 1 + jitter] so that failures do not retry in lockstep.
    The defaults: base 1 s, factor 2, max_delay 300 s (the cap of every delay: 5 minutes), jitter
    0.2. A base above max_delay is refused (InvalidArgumentError naming both): give max_delay too.

    Which failures are retried: ``retry_on`` (an exception class or a tuple; None = every
    exception) and ``give_up_on`` (never retried, even when retry_on matches them). A failure
    that is not retried is given up at once (as raising GiveUp), whatever attempts are left."""

    base: float = 1.0
    factor: float = 2.0
    max_delay: float = 300.0
    jitter: float = 0.2
    retry_on: ExceptionTypes | None = None
    give_up_on: ExceptionTypes | None = None

    def __post_init__(self) -> None:
        if self.base < 0 or self.factor < 1 or self.max_delay < 0 or not 0 <= self.jitter <= 1:
            raise errors.InvalidArgumentError(
                "RetryPolicy needs base >= 0, factor >= 1, max_delay >= 0 and 0 <= jitter <= 1"
            )
        if self.base > self.max_delay:
            raise errors.InvalidArgumentError(
                f"RetryPolicy base={self.base:g} s is above max_delay={self.max_delay:g} s, the cap of every "
                f"delay (300 s unless given): give max_delay={self.base:g} or more, or a smaller base"
            )
        object.__setattr__(self, "retry_on", _exception_types(self.retry_on, "retry_on"))
        object.__setattr__(self, "give_up_on", _exception_types(self.give_up_on, "give_up_on") or ())

    def retries(self, error: BaseException) -> bool:
        """Whether a handler's failure with this error is retried (else: given up now)."""
        if isinstance(error, (Retry, Snooze)):
            return True
        if isinstance(error, GiveUp) or isinstance(error, self.give_up_on or ()):
            return False
        return self.retry_on is None or isinstance(error, self.retry_on)

    def delay(self, attempts: int, rng: random.Random | None = None) -> float:
        draw = rng.random() if rng is not None else random.random()
        exponent = max(attempts - 1, 0)
        raw = self.max_delay if exponent > 64 else min(self.max_delay, self.base * self.factor**exponent)
        return float(max(0.0, raw * (1 + self.jitter * (2 * draw - 1))))


def retry_time(delay: float) -> str:
    """When a retry in delay seconds is due, in local time, as the log says it: the time of day,
    with the date before it when that is not today."""
    now = dt.datetime.now()
    at = now + dt.timedelta(seconds=delay)
    return at.strftime("%H:%M:%S" if at.date() == now.date() else "%Y-%m-%d %H:%M:%S")


# The packages whose exceptions come from talking to the database: a driver's message may quote
# the DSN, or a part of it that is the password.
_DATABASE_PACKAGES = frozenset({"psycopg", "psycopg_pool", "pymysql", "aiomysql", "sqlalchemy"})


def _from_the_database(error: BaseException) -> bool:
    package = type(error).__module__.partition(".")[0]
    return isinstance(error, errors.QueueError) or package in _DATABASE_PACKAGES


def describe_error(error: BaseException) -> str:
    """The text stored as a message's last_error (and logged): "ExceptionType: message". The
    message of a database error (a driver's, or pyqueue_sql's own) has every secret it could quote
    masked (display.redact)."""
    text = str(error)
    described = f"{type(error).__name__}: {text}" if text else type(error).__name__
    return redact(described) if _from_the_database(error) else described


# What the log says happened to a message handed back by an interrupted handler, per outcome.
_INTERRUPTED_THEN = {
    "retry": "handed back",
    "dead_lettered": "moved to the dead-letter queue (that was its last allowed delivery)",
    "dropped": "dropped (its last allowed delivery; the queue has no dead-letter queue)",
}


class FailurePolicy:
    """The worker's part that decides a failed message's delay and counts and logs what became
    of each handled message (the dispatcher and the batch lanes call it)."""

    def __init__(
        self,
        state: RunState,
        routes: dict[str, Route],
        on_outcome: list[Callable[[Job, str, str | None], Any]],
        stop: Callable[..., None],
        batch_retry: Callable[[Job], RetryRule | None],
    ) -> None:
        self.state = state
        self.routes = routes  # the worker's, shared (handlers are added after this is made)
        self.on_outcome = on_outcome  # the worker's list of listeners, shared
        self.stop = stop  # the worker's stop(): a KeyboardInterrupt in a handler stops it
        self.batch_retry = batch_retry  # the retry policy of a batch kind's job (batches.py)

    def handled(self, job: Job, error: BaseException | None) -> bool:
        """Bookkeeping once a handler returned or raised; True when it was interrupted
        (KeyboardInterrupt: the message is handed back and the worker stops)."""
        interrupted = isinstance(error, KeyboardInterrupt)
        if interrupted:
            self.state.stats.interrupted += 1
            self.stop(reason="KeyboardInterrupt in a handler")
        return interrupted

    def failure_delay(self, job: Job, interrupted: bool, error: BaseException | None = None) -> float:
        """Seconds until a failed message's next delivery: none when interrupted (handed back),
        the handler's own choice (Retry(after=)), else its kind's RetryPolicy for this attempt."""
        if interrupted:
            return 0.0
        if isinstance(error, Retry):
            return error.after
        return self.retry_rule(job).delay(job.attempts, self.state.rng)

    def gives_up(self, job: Job, error: BaseException, interrupted: bool) -> bool:
        """Whether a failure ends the message now (GiveUp, or its kind's policy does not retry it)."""
        return not interrupted and not self.retry_rule(job).retries(error)

    def retry_rule(self, job: Job) -> RetryRule:
        """The retry policy of the job's kind: a batch kind's (batches.py), else its route's."""
        rule = self.batch_retry(job)
        if rule is not None:
            return rule
        route = self.routes.get(job.queue)
        return route.retry_for(job.kind) if route is not None else RetryPolicy()

    def outcome(self, job: Job, outcome: str, error: str | None = None) -> None:
        for listener in self.on_outcome:
            try:
                listener(job, outcome, error)
            except Exception:
                log.exception("on_outcome listener failed", extra={"event": "error"})

    def committed(self, job: Job, ok: bool, elapsed_ms: float) -> None:
        if not ok:
            self.lost(job)
            self.outcome(job, "lost")
            return
        self.state.stats.succeeded += 1
        if self.on_outcome:
            self.outcome(job, "succeeded")
        log.debug(
            "done: %s attempt %d in %.0f ms",
            where_of(job),
            job.attempts,
            elapsed_ms,
            extra={
                "event": "commit",
                "queue": job.queue,
                "key": job.key,
                "kind": job.kind,
                "attempts": job.attempts,
                "ms": elapsed_ms,
            },
        )

    def lost(self, job: Job) -> None:
        self.state.stats.lost += 1
        log.warning(
            "reservation of %s no longer held (expired or released); the message is or was redelivered",
            where_of(job),
            extra={"event": "lost", "queue": job.queue, "key": job.key, "kind": job.kind},
        )

    def failed(
        self,
        job: Job,
        error: BaseException,
        text: str,
        outcome: str | None,
        delay: float,
        elapsed_ms: float,
        interrupted: bool,
    ) -> None:
        """Counts and logs a failure by queue_fail's outcome ('retry', 'dead_lettered',
        'dropped', or None: the reservation was no longer held)."""
        if not interrupted:
            self.state.stats.failed += 1
        if outcome is None:
            self.state.stats.lost += 1
        self.outcome(job, outcome or "lost", text)
        extra = {
            "event": "fail",
            "outcome": outcome,
            "queue": job.queue,
            "key": job.key,
            "kind": job.kind,
            "attempts": job.attempts,
            "ms": elapsed_ms,
            "error": text[:500],
        }
        where = f"{where_of(job)} attempt {job.attempts}"
        if outcome is None:
            extra["event"] = "lost"
            log.warning(
                "handler failed: %s: %s; its reservation no longer held (expired or released), the "
                "message is or was redelivered",
                where,
                text[:500],
                exc_info=error,
                extra=extra,
            )
        elif interrupted:
            extra["event"] = "interrupted"
            log.warning(
                "handler interrupted (KeyboardInterrupt): %s: %s; stopping the worker",
                where,
                _INTERRUPTED_THEN.get(outcome, outcome),
                exc_info=error,
                extra=extra,
            )
        elif outcome == "retry":
            # one line per retried attempt; its traceback at DEBUG only (the last failure's is
            # logged with it, at ERROR)
            most = self.state.max_attempts.get(job.queue)
            if most is not None:
                where += f" of {most}"
            at = retry_time(delay)
            extra["retry_in_s"] = round(delay, 3)
            extra["next_try_at"] = at
            if isinstance(error, Retry) and str(error) == f"retry in {error.after:g} s":
                shown = extra["error"] = "Retry"  # its own text says the delay the line says after it
            else:
                shown = text[:500]
            log.warning(
                "handler failed: %s: %s; retry in %s s, at %s",
                where,
                shown,
                f"{delay:.1f}" if delay < 10 else f"{delay:.0f}",
                at,
                extra=extra,
            )
            if log.isEnabledFor(logging.DEBUG):
                log.debug(
                    "the traceback of %s",
                    where,
                    exc_info=error,
                    extra={"event": "traceback", "queue": job.queue, "key": job.key, "kind": job.kind},
                )
        elif outcome == "dead_lettered":
            log.error(
                "handler failed on the last allowed delivery: %s: %s; moved to the dead-letter queue",
                where,
                text[:500],
                exc_info=error,
                extra=extra,
            )
        elif outcome == "dropped":
            log.error(
                "handler failed on the last allowed delivery: %s: %s; dropped (the queue has no "
                "dead-letter queue)",
                where,
                text[:500],
                exc_info=error,
                extra=extra,
            )
        else:
            log.warning(
                "handler failed: %s: %s; outcome %s", where, text[:500], outcome, exc_info=error, extra=extra
            )

    def given_up(
        self, job: Job, error: BaseException, text: str, outcome: str | None, elapsed_ms: float
    ) -> None:
        """Counts and logs a failure that ends the message now (GiveUp, or not retried by its
        policy): outcome 'dead_lettered', 'dropped', or None (the reservation no longer held)."""
        if outcome is None:
            self.failed(job, error, text, None, 0.0, elapsed_ms, False)
            return
        self.state.stats.given_up += 1
        self.outcome(job, outcome, text)
        then = (
            "moved to the dead-letter queue"
            if outcome == "dead_lettered"
            else "dropped (no dead-letter queue)"
        )
        log.error(
            "handler gave up: %s attempt %d: %s; %s",
            where_of(job),
            job.attempts,
            text[:500],
            then,
            exc_info=None if isinstance(error, GiveUp) else error,
            extra={
                "event": "give_up",
                "outcome": outcome,
                "queue": job.queue,
                "key": job.key,
                "kind": job.kind,
                "attempts": job.attempts,
                "ms": elapsed_ms,
                "error": text[:500],
            },
        )

    def cancelled(self, job: Job, held: bool) -> None:
        """Counts and logs a handler that stopped for a cancel (queue_cancel_held's answer)."""
        if not held:
            self.lost(job)
            self.outcome(job, "lost")
            return
        self.state.stats.cancelled += 1
        self.outcome(job, "cancelled")
        log.info(
            "cancelled: %s attempt %d",
            where_of(job),
            job.attempts,
            extra={"event": "cancel", "queue": job.queue, "key": job.key, "kind": job.kind},
        )

    def snoozed(self, job: Job, after: float, held: bool) -> None:
        if not held:
            self.lost(job)
            self.outcome(job, "lost")
            return
        self.state.stats.snoozed += 1
        self.outcome(job, "snoozed")
        log.info(
            "snoozed: %s for %.1f s (the attempt does not count)",
            where_of(job),
            after,
            extra={"event": "snooze", "queue": job.queue, "key": job.key, "kind": job.kind, "after_s": after},
        )

    @staticmethod
    def abandoned(job: Job) -> None:
        log.warning(
            "gave up finishing %s at shutdown; it comes back after its lease",
            where_of(job),
            extra={"event": "abandon", "queue": job.queue, "key": job.key, "kind": job.kind},
        )

    @staticmethod
    def unfinishable(job: Job, exc: BaseException) -> None:
        """A commit or fail that raised (e.g. the queue was dropped meanwhile)."""
        log.error(
            "could not commit or fail %s (%s); the message comes back after its lease",
            where_of(job),
            describe_error(exc)[:500],
            exc_info=exc,
            extra={"event": "error", "queue": job.queue, "key": job.key, "kind": job.kind},
        )

    def handed_back(self, job: Job) -> None:
        self.state.stats.handed_back += 1
        log.info(
            "handed back unstarted message",
            extra={"event": "hand_back", "queue": job.queue, "key": job.key, "kind": job.kind},
        )
