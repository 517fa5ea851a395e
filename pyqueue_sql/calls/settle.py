"""The settle topic's calls: commit, rollback, snooze, fail, give_up, extend, move, remove, release
(sql/<dialect>/routines/06_settle.sql). Written sans-IO (pyqueue_sql.sansio); pyqueue_sql.client's
QueueCalls and DatabaseCalls are composed of these groups."""

from __future__ import annotations

from dataclasses import replace

from .. import statements
from ..dialects import Duration, encode_json, key_value, read_token, text_value
from ..rows import Reservation
from ..sansio import sans_io, statement_call
from .base import UNCHANGED, QueueCallsBase, error_text


class SettleCalls(QueueCallsBase):
    """A queue's calls of the settle topic (see QueueCalls)."""

    @sans_io
    def commit(self, r: Reservation) -> bool:
        """Deletes the message; False if the reservation no longer holds."""
        return bool((yield statement_call(statements.COMMIT, **self._held(r)))[0][0])

    @sans_io
    def rollback(self, r: Reservation, delay: Duration = None) -> bool:
        """Gives the message back (eligible after delay), or dead-letters it after max_attempts."""
        d = self.db.dialect
        return bool(
            (
                yield statement_call(
                    statements.ROLLBACK, **self._held(r), delay=d.codec.duration(delay, "delay")
                )
            )[0][0]
        )

    @sans_io
    def snooze(self, r: Reservation, delay: Duration = None) -> bool:
        """Gives the message back, eligible after delay, without using up an attempt (this
        delivery does not count toward max_attempts, so a snooze never dead-letters); its last
        error is kept. False if the reservation no longer holds."""
        d = self.db.dialect
        return bool(
            (
                yield statement_call(
                    statements.SNOOZE, **self._held(r), delay=d.codec.duration(delay, "delay")
                )
            )[0][0]
        )

    @sans_io
    def release(self, worker: str | None = None) -> int:
        """Hands back every message of the queue reserved now (by ``worker``, the name the
        reservations were made with, when given): each is ready at once, its reservation no
        longer holds, nothing is deleted and its attempts stay. Returns how many. An admin's way
        out of reservations held too long."""
        return int(
            (
                yield statement_call(
                    statements.RELEASE,
                    queue=self.name,
                    worker=None if worker is None else text_value(worker, "worker"),
                )
            )[0][0]
        )

    @sans_io
    def fail(
        self, r: Reservation, error: BaseException | str | None = None, delay: Duration = None
    ) -> str | None:
        """Gives the message back like rollback and records ``error`` (a str, or an exception,
        stored as "Type: message"; at most 2000 characters) as its last error.

        Returns 'retry' (eligible again after delay), 'dead_lettered' (this was its last allowed
        delivery: moved to the dead-letter queue, last error kept), 'dropped' (last delivery and
        no dead-letter queue), or None when the reservation no longer holds."""
        d = self.db.dialect
        outcome = (
            yield statement_call(
                statements.FAIL,
                **self._held(r),
                delay=d.codec.duration(delay, "delay"),
                error=error_text(error),
            )
        )[0][0]
        return None if outcome is None else str(outcome)

    @sans_io
    def give_up(self, r: Reservation, error: BaseException | str | None = None) -> str | None:
        """Ends the message now, whatever attempts it has left: records ``error`` (as fail does)
        as its last error and moves it to the dead-letter queue, which keeps the error.

        Returns 'dead_lettered', 'dropped' (the queue has no dead-letter queue), or None when the
        reservation no longer holds."""
        outcome = (yield statement_call(statements.GIVE_UP, **self._held(r), error=error_text(error)))[0][0]
        return None if outcome is None else str(outcome)

    @sans_io
    def extend(self, r: Reservation, timeout: Duration = None) -> Reservation | None:
        """Extends the reservation; returns it with its new token, or None if it no longer holds."""
        d = self.db.dialect
        token = (
            yield statement_call(
                statements.EXTEND, **self._held(r), timeout=d.codec.duration(timeout, "timeout")
            )
        )[0][0]
        return None if token is None else replace(r, token=read_token(token))

    @sans_io
    def move(self, r: Reservation, to_queue: str | QueueCallsBase, payload: object = UNCHANGED) -> bool:
        """Commits here and pushes to to_queue in one step; payload replaces the old one if given.
        Moving into the queue it came from keeps the attempt count (another queue starts at 0)."""
        target = to_queue.name if isinstance(to_queue, QueueCallsBase) else to_queue
        return bool(
            (
                yield statement_call(
                    statements.MOVE,
                    **self._held(r),
                    to_queue=text_value(target, "to_queue"),
                    payload=None if payload is UNCHANGED else encode_json(payload),
                )
            )[0][0]
        )

    @sans_io
    def remove(self, key: str | int, kind: str) -> bool:
        """Deletes a message whatever its state; False if there was none."""
        return bool(
            (
                yield statement_call(
                    statements.REMOVE, queue=self.name, key=key_value(key), kind=text_value(kind, "kind")
                )
            )[0][0]
        )
