"""The browse topic's calls: messages, groups, throughput (sql/<dialect>/routines/12_browse.sql).
Written sans-IO (pyqueue_sql.sansio); pyqueue_sql.client's QueueCalls and DatabaseCalls are composed
of these groups."""

from __future__ import annotations

import datetime as dt

from .. import dialects, errors, statements
from ..dialects import key_value, text_value, whole_number
from ..rows import GroupInfo, Horizon, MessageRow, ThroughputRow, group_from_row, named, read_headers
from ..sansio import SansIO, sans_io, statement_call
from .base import DatabaseCallsBase, QueueCallsBase


def throughput_steps(
    d: dialects.Dialect, queue: str | None, since: dt.datetime | dt.timedelta | None
) -> SansIO:
    if isinstance(since, dt.timedelta):
        since = dt.datetime.now(dt.timezone.utc) - since
    rows = yield statement_call(statements.THROUGHPUT, queue=queue, since=d.codec.time(since, "since"))
    return [
        ThroughputRow(
            r.queue,
            d.codec.read_time(r.minute),
            int(r.committed),
            int(r.dead_lettered),
            int(r.moved),
            int(r.popped),
        )
        for r in (named(statements.THROUGHPUT, row) for row in rows)
    ]


class BrowseCalls(QueueCallsBase):
    """A queue's calls of the browse topic (see QueueCalls)."""

    @sans_io
    def messages(
        self,
        state: str | None = None,
        key_prefix: str | None = None,
        after: MessageRow | tuple[str | int, str] | None = None,
        n: int | None = None,
    ) -> list[MessageRow]:
        """A page of this queue's live messages in key order (queue_messages): state 'ready',
        'delayed' or 'reserved' (None = all), keys starting with key_prefix, after the message
        ``after`` (the last row of the previous page, or a (key, kind) pair); n rows at most
        (None = 100, at most 1000)."""
        if after is None:
            after_key, after_kind = None, None
        elif isinstance(after, MessageRow):
            after_key, after_kind = after.key, after.kind
        elif isinstance(after, tuple) and len(after) == 2:
            after_key, after_kind = key_value(after[0], "after key"), text_value(after[1], "after kind")
        else:
            raise errors.InvalidArgumentError("after must be a MessageRow or a (key, kind) pair")
        d = self.db.dialect
        rows = yield statement_call(
            statements.MESSAGES,
            queue=self.name,
            state=text_value(state, "state"),
            key_prefix=key_value(key_prefix, "key_prefix"),
            after_key=after_key,
            after_kind=after_kind,
            n=whole_number(n, "n"),
        )
        return [
            MessageRow(
                self.name,
                r.p_key,
                r.p_kind,
                str(r.state),
                int(r.priority),
                int(r.attempts),
                d.codec.read_time(r.scheduled_at),
                d.codec.read_time(r.created_at),
                r.reserved_by,
                r.last_error,
                r.dead_from,
                read_headers(d, r.headers),
            )
            for row in rows
            for r in (named(statements.MESSAGES, row),)
        ]

    @sans_io
    def groups(self, n: int | None = None) -> list[GroupInfo]:
        """This queue's non-empty FIFO groups ordered by group key, at most n (None = 100, at most
        1000): each with its head message (the one delivered next, or being delivered) and how
        many messages it holds."""
        return [
            group_from_row(row)
            for row in (yield statement_call(statements.GROUPS, queue=self.name, n=whole_number(n, "n")))
        ]

    @sans_io
    def throughput(self, since: dt.datetime | dt.timedelta | None = None) -> list[ThroughputRow]:
        """Messages that left this queue per minute since ``since`` (None = an hour ago; a timedelta
        = that long ago; at most a day), by outcome, from pyqueue_history: only a queue with a
        history_retention has any (queue_throughput). Minutes without any are left out."""
        return (yield from throughput_steps(self.db.dialect, self.name, since))


class BrowseDatabaseCalls(DatabaseCallsBase):
    """A database's calls of the browse topic (see DatabaseCalls)."""

    @sans_io
    def throughput(self, since: dt.datetime | dt.timedelta | None = None) -> list[ThroughputRow]:
        """Every queue's messages that left it per minute since ``since`` (Queue.throughput)."""
        return (yield from throughput_steps(self.dialect, None, since))

    @sans_io
    def horizon(self) -> Horizon:
        """What holds back the database's cleanup of dead rows, consumed messages' included
        (queue_horizon; docs/operations.md, "A long transaction"): the oldest holder's age in
        seconds, the backlog behind it and who it is (pyqueue_sql.rows.Horizon)."""
        d = self.dialect
        [row] = yield statement_call(statements.HORIZON)
        r = named(statements.HORIZON, row)
        texts = [
            None if v is None else v.decode() if isinstance(v, bytes) else str(v)
            for v in (r.holder, r.user_name, r.state)
        ]
        return Horizon(
            None if r.oldest_age_s is None else float(r.oldest_age_s),
            int(r.backlog or 0),
            texts[0],
            None if r.pid is None else int(r.pid),
            texts[1],
            texts[2],
            d.codec.read_time(r.xact_start),
            d.codec.read_time(r.query_start),
        )
