"""The limits topic's calls: concurrency limits and rates (sql/<dialect>/routines/15_limits.sql).
Written sans-IO (pyqueue_sql.sansio); pyqueue_sql.client's QueueCalls and DatabaseCalls are composed
of these groups."""

from __future__ import annotations

import datetime as dt

from .. import dialects, errors, statements
from ..dialects import Duration, text_value, whole_number
from ..rows import MAX_RATE_N, MAX_RATE_PER, LimitInfo, RateInfo, named, rate_from_row
from ..sansio import sans_io, statement_call
from .base import DatabaseCallsBase, QueueCallsBase, whole_number_within


class LimitsCalls(QueueCallsBase):
    """A queue's calls of the limits topic (see QueueCalls)."""

    @sans_io
    def set_limit(self, kind: str, capacity: int | None) -> None:
        """At most capacity messages of kind reserved at once (None removes the limit)."""
        yield statement_call(
            statements.SET_LIMIT,
            queue=self.name,
            kind=text_value(kind, "kind"),
            capacity=whole_number(capacity, "capacity"),
        )

    @sans_io
    def limits(self) -> list[LimitInfo]:
        return [
            LimitInfo(r.queue, r.p_kind, int(r.capacity), int(r.in_use))
            for row in (yield statement_call(statements.LIMITS, queue=self.name))
            for r in (named(statements.LIMITS, row),)
        ]

    @sans_io
    def set_rate(self, kind: str | None, n: int | None, per: Duration = None) -> None:
        """At most n messages of kind delivered in any window of length per (seconds or a
        timedelta), by every path that delivers one (reserve, commit_reserve, pop, a worker's
        prefetch); kind None = every kind of the queue together. A message held back stays
        ready, first in line. n None removes the rate (per is then ignored). n from 1 to
        10000, per more than 0 and at most 1 day."""
        d = self.db.dialect
        n = whole_number_within(n, "n", 1, MAX_RATE_N)
        if n is not None:
            span = dialects.as_timedelta(per, "per")
            if span is None:
                raise errors.InvalidArgumentError(
                    "per is required with n: the window's length (seconds or a timedelta)"
                )
            if not dt.timedelta(0) < span <= MAX_RATE_PER:
                raise errors.InvalidArgumentError(
                    f"per must be more than 0 seconds and at most 1 day (86400 seconds), not {span.total_seconds():g} seconds"
                )
        yield statement_call(
            statements.SET_RATE,
            queue=self.name,
            kind=text_value(kind, "kind"),
            n=n,
            per=None if n is None else d.codec.duration(per, "per"),
        )

    @sans_io
    def rates(self) -> list[RateInfo]:
        """This queue's rate limits (queue_rates): the queue-wide one (kind None) first, then by kind."""
        return [
            rate_from_row(self.db.dialect, row)
            for row in (yield statement_call(statements.RATES, queue=self.name))
        ]


class LimitsDatabaseCalls(DatabaseCallsBase):
    """A database's calls of the limits topic (see DatabaseCalls)."""

    @sans_io
    def limits(self) -> list[LimitInfo]:
        """Every queue's concurrency limits."""
        return [
            LimitInfo(r.queue, r.p_kind, int(r.capacity), int(r.in_use))
            for row in (yield statement_call(statements.LIMITS, queue=None))
            for r in (named(statements.LIMITS, row),)
        ]

    @sans_io
    def rates(self) -> list[RateInfo]:
        """Every queue's rate limits (queue_rates), ordered by queue, then kind (the queue-wide
        rate, kind None, first)."""
        return [
            rate_from_row(self.dialect, row) for row in (yield statement_call(statements.RATES, queue=None))
        ]
