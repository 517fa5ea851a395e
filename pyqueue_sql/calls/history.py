"""The history and dead letters topic's calls: one message and its history, purge, replay, redrive,
dead letters (sql/<dialect>/routines/11_history.sql). Written sans-IO (pyqueue_sql.sansio);
pyqueue_sql.client's QueueCalls and DatabaseCalls are composed of these groups."""

from __future__ import annotations

import datetime as dt

from .. import errors, statements
from ..dialects import key_value, text_value, whole_number
from ..rows import DeadLetter, HistoryRow, MessageInfo, named, read_headers
from ..sansio import sans_io, statement_call
from .base import QueueCallsBase


class HistoryCalls(QueueCallsBase):
    """A queue's calls of the history topic (see QueueCalls)."""

    @sans_io
    def message(self, key: str | int, kind: str) -> MessageInfo | None:
        """The live message with this key and kind (state 'ready', 'delayed' or 'reserved',
        attempts, last error...), or None when there is none."""
        d = self.db.dialect
        rows = yield statement_call(
            statements.MESSAGE, queue=self.name, key=key_value(key), kind=text_value(kind, "kind")
        )
        if not rows:
            return None
        r = named(statements.MESSAGE, rows[0])  # its progress and cancel_requested: Queue.result
        return MessageInfo(
            self.name,
            r.p_key,
            r.p_kind,
            str(r.state),
            d.codec.read_payload(r.payload),
            int(r.priority),
            int(r.attempts),
            d.codec.read_time(r.scheduled_at),
            d.codec.read_time(r.created_at),
            r.reserved_by,
            r.last_error,
            r.dead_from,
            read_headers(d, r.headers),
        )

    @sans_io
    def message_history(self, key: str | int, kind: str) -> list[HistoryRow]:
        """The history rows of the message with this key and kind in this queue, newest first (at
        most 100; only kept when the queue has a history_retention)."""
        d = self.db.dialect
        rows = yield statement_call(
            statements.MESSAGE_HISTORY, queue=self.name, key=key_value(key), kind=text_value(kind, "kind")
        )
        return [
            HistoryRow(
                d.codec.read_time(r.processed_at),
                str(r.outcome),
                r.to_queue,
                int(r.attempts),
                r.reserved_by,
                r.last_error,
            )
            for r in (named(statements.MESSAGE_HISTORY, row) for row in rows)
        ]

    @sans_io
    def purge_history(self, n: int | None = None) -> int:
        """Deletes up to n (None = 10000) history rows past this queue's history_retention; returns how many."""
        return int(
            (yield statement_call(statements.PURGE_HISTORY, queue=self.name, n=whole_number(n, "n")))[0][0]
        )

    @sans_io
    def replay(self, start: dt.datetime | None = None, end: dt.datetime | None = None) -> int:
        """Pushes again the archived messages processed in [start, end) (None = unbounded); dedup applies.
        Returns how many were inserted."""
        d = self.db.dialect
        if isinstance(start, dt.timedelta) or isinstance(end, dt.timedelta):
            raise errors.InvalidArgumentError("start and end must be datetimes")
        return int(
            (
                yield statement_call(
                    statements.REPLAY,
                    queue=self.name,
                    start=d.codec.time(start, "start"),
                    end=d.codec.time(end, "end"),
                )
            )[0][0]
        )

    @sans_io
    def redrive(self, to_queue: str | QueueCallsBase, n: int | None = None) -> int:
        """Moves up to n (None = 1) ready messages of this (dead-letter) queue to to_queue, attempts reset.
        A message whose key and kind are live in to_queue stays here. Returns how many moved."""
        target = to_queue.name if isinstance(to_queue, QueueCallsBase) else to_queue
        return int(
            (
                yield statement_call(
                    statements.REDRIVE,
                    queue=self.name,
                    to_queue=text_value(target, "to_queue"),
                    n=whole_number(n, "n"),
                )
            )[0][0]
        )

    @sans_io
    def dead_letters(self) -> list[DeadLetter]:
        """The messages sitting in this queue, when it is some queue's dead-letter queue (the view
        pyqueue_dead_letters)."""
        d = self.db.dialect
        return [
            DeadLetter(
                r.dead_letter_queue,
                r.from_queue,
                r.p_key,
                r.p_kind,
                d.codec.read_payload(r.payload),
                r.priority,
                None if r.attempts is None else int(r.attempts),
                d.codec.read_time(r.created_at),
                d.codec.read_time(r.dead_lettered_at),
                bool(r.reserved),
                r.last_error,
                read_headers(d, r.headers),
            )
            for row in (yield statement_call(statements.DEAD_LETTERS, queue=self.name))
            for r in (named(statements.DEAD_LETTERS, row),)
        ]
