"""The results topic's calls: stored results, cancellation, progress, renewal
(sql/<dialect>/routines/13_results.sql). Written sans-IO (pyqueue_sql.sansio); pyqueue_sql.client's
QueueCalls and DatabaseCalls are composed of these groups."""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterable
from dataclasses import replace

from .. import errors, sansio, statements
from ..dialects import Duration, encode_json, key_value, read_token, text_value, token_value
from ..rows import MAX_PROGRESS_BYTES, Renewal, Reservation, Result, named, result_from_rows
from ..sansio import chunks, each_call, sans_io, statement_call
from .base import INT_MAX, INT_MIN, QueueCallsBase, held_reservation, whole_number_within


class ResultsCalls(QueueCallsBase):
    """A queue's calls of the results topic (see QueueCalls)."""

    @sans_io
    def set_result_retention(self, retention: Duration = None) -> None:
        """How long the queue keeps each finished message's result (queue_result): its state
        (succeeded, failed, cancelled), the value its consumer committed, its last error and
        progress. None turns recording off (the rows kept go at the next purge_history); at most
        3650 days."""
        yield statement_call(
            statements.SET_RESULT_RETENTION,
            queue=self.name,
            retention=self.db.dialect.codec.duration(retention, "retention"),
        )

    @sans_io
    def result(self, key: str | int, kind: str) -> Result:
        """The message's state now (a Result; a live message wins over a stored result)."""
        rows = yield statement_call(
            statements.RESULT, queue=self.name, key=key_value(key), kind=text_value(kind, "kind")
        )
        return result_from_rows(self.db.dialect, self.name, key, kind, rows)

    @sans_io
    def results(
        self,
        kind: str | None = None,
        state: str | None = None,
        n: int | None = None,
        before: dt.datetime | dt.timedelta | None = None,
    ) -> list[Result]:
        """The stored outcomes of the queue's finished messages, newest first (queue_results): up
        to n (None: 100, at most 1000) Results, of one kind and one state ('succeeded', 'failed',
        'cancelled') when given, finished before `before` (None: now). The next page: ``before=``
        the last one's finished_at (outcomes of one instant, a batch commit's, are never split
        across pages: a page may hold more than n of them). Live messages are not listed."""
        d = self.db.dialect
        rows = yield statement_call(
            statements.RESULTS,
            queue=self.name,
            kind=None if kind is None else text_value(kind, "kind"),
            state=None if state is None else text_value(state, "state"),
            n=whole_number_within(n, "n", INT_MIN, INT_MAX),
            before=d.codec.time(before, "before"),
        )
        return [
            Result(
                self.name,
                str(r.p_key),
                str(r.p_kind),
                str(r.state),
                d.codec.read_payload(r.result),
                r.last_error,
                int(r.attempts),
                d.codec.read_payload(r.progress),
                d.codec.read_time(r.finished_at),
            )
            for r in (named(statements.RESULTS, row) for row in rows)
        ]

    @sans_io
    def purge_results(
        self,
        state: str | None = None,
        before: dt.datetime | dt.timedelta | None = None,
        n: int | None = None,
    ) -> int:
        """Deletes up to n (None: 10000, at most 100000) of the queue's stored outcomes that
        finished before `before` (None: now), of one state when given, oldest first, whatever the
        result retention (queue_purge_results; the admin capability). Returns how many: fewer
        than n when none is left."""
        rows = yield statement_call(
            statements.PURGE_RESULTS,
            queue=self.name,
            state=None if state is None else text_value(state, "state"),
            before=self.db.dialect.codec.time(before, "before"),
            n=whole_number_within(n, "n", INT_MIN, INT_MAX),
        )
        return int(rows[0][0])

    @sans_io
    def result_wait_once(self, key: str | int, kind: str, timeout: Duration = None) -> Result:
        """One call of queue_result_wait: blocks in the server until the message has finished (or
        is unknown) or timeout passes (at most an hour), and returns its state then. wait_result
        is what to call: on PostgreSQL it LISTENs instead."""
        d = self.db.dialect
        rows = yield statement_call(
            statements.RESULT_WAIT,
            queue=self.name,
            key=key_value(key),
            kind=text_value(kind, "kind"),
            timeout=d.codec.duration(timeout, "timeout"),
        )
        return result_from_rows(d, self.name, key, kind, rows)

    @sans_io
    def result_channel(self) -> str | None:
        """The PostgreSQL NOTIFY channel the results of this queue are announced on
        (queue_result_channel), with the payload {"key", "kind", "state"}."""
        channel = (yield statement_call(statements.RESULT_CHANNEL, queue=self.name))[0][0]
        return None if channel is None else str(channel)

    @sans_io
    def cancel(self, key: str | int, kind: str) -> str:
        """Cancels a message: 'cancelled' (it was waiting: removed, recorded as cancelled, it never
        runs), 'requested' (a consumer holds it: asked to stop, see renew and cancel_held) or
        'unknown' (no live message). A dead letter and a schedule's occurrence are never cancelled
        (InvalidArgumentError): an admin removes one with remove."""
        rows = yield statement_call(
            statements.CANCEL, queue=self.name, key=key_value(key), kind=text_value(kind, "kind")
        )
        return str(rows[0][0])

    @sans_io
    def commit_result(self, r: Reservation, result: object = None) -> bool:
        """commit, storing ``result`` (any JSON value, at most the queue's max_payload) as the
        message's result in the same step. The queue must keep results (set_result_retention).
        False if the reservation no longer holds (nothing is written)."""
        return bool(
            (yield statement_call(statements.COMMIT_RESULT, **self._held(r), result=encode_json(result)))[0][
                0
            ]
        )

    @sans_io
    def commit_result_many(self, items: Iterable[tuple[Reservation, object]]) -> int:
        """commit_result for many (reservation, result) pairs in one call; returns how many still
        held (and are now gone). More than CHUNK_SIZE go in calls of at most CHUNK_SIZE each, run
        as one transaction."""
        pairs = [(held_reservation(r), value) for r, value in items]
        if not pairs:
            return 0
        d = self.db.dialect
        commits = [
            statement_call(
                statements.COMMIT_RESULT_BATCH,
                queue=self.name,
                keys=d.codec.text_array([key_value(r.key) for r, _ in part]),
                kinds=d.codec.text_array([text_value(r.kind, "kind") for r, _ in part]),
                tokens=d.codec.text_array([token_value(r.token) for r, _ in part]),
                results=encode_json([value for _, value in part]),
            )
            for part in chunks(pairs, sansio.CHUNK_SIZE)
        ]
        return sum(int(rows[0][0]) for rows in (yield from each_call(commits)))

    @sans_io
    def set_progress(self, r: Reservation, progress: object) -> bool:
        """Stores progress (any JSON value, at most 64 KiB as JSON text) on the message the
        reservation holds: Queue.result shows it while it runs and after it finished. Kept
        across retries. False if the reservation no longer holds."""
        text = encode_json(progress)
        if len(text.encode("utf-8")) > MAX_PROGRESS_BYTES:
            raise errors.InvalidArgumentError(
                f"progress is {len(text.encode('utf-8'))} bytes of JSON, more than {MAX_PROGRESS_BYTES}"
            )
        return bool((yield statement_call(statements.SET_PROGRESS, **self._held(r), progress=text))[0][0])

    @sans_io
    def renew(self, r: Reservation, timeout: Duration = None) -> Renewal:
        """extend, and whether a cancel was requested: (the reservation with its new token, or
        None when it no longer holds; cancel_requested)."""
        d = self.db.dialect
        rows = yield statement_call(
            statements.RENEW, **self._held(r), timeout=d.codec.duration(timeout, "timeout")
        )
        renewed = named(statements.RENEW, rows[0] if rows else ())  # no row: no token, no cancel
        token, requested = renewed.token, bool(renewed.cancel_requested)
        return Renewal(None if token is None else replace(r, token=read_token(token)), bool(requested))

    @sans_io
    def cancel_held(self, r: Reservation) -> bool:
        """Ends a held message as cancelled (its consumer stopped for a cancel, or cancels it
        itself): removed, recorded as cancelled with its progress. False if the reservation no
        longer holds."""
        return bool((yield statement_call(statements.CANCEL_HELD, **self._held(r)))[0][0])
