"""The wakeups topic's calls: the queue's channel, its notify window, the next due time, wait
(sql/<dialect>/routines/08_wakeups.sql). Written sans-IO (pyqueue_sql.sansio); pyqueue_sql.client's
QueueCalls and DatabaseCalls are composed of these groups."""

from __future__ import annotations

import datetime as dt
from collections.abc import Sequence

from .. import statements
from ..dialects import Duration
from ..rows import named
from ..sansio import sans_io, statement_call
from .base import QueueCallsBase


class WakeupsCalls(QueueCallsBase):
    """A queue's calls of the wakeups topic (see QueueCalls)."""

    @sans_io
    def channel(self) -> str:
        """The PostgreSQL NOTIFY channel that wakeups of this queue go to (queue_channel)."""
        return str((yield statement_call(statements.CHANNEL, queue=self.name))[0][0])

    @sans_io
    def set_notify_window(self, window: Duration = None) -> None:
        """At most one wakeup (NOTIFY) per window (None = 50 ms, 0 = one per push statement)."""
        yield statement_call(
            statements.SET_NOTIFY_WINDOW,
            queue=self.name,
            window=self.db.dialect.codec.duration(window, "window"),
        )

    @sans_io
    def next_scheduled_at(
        self, kinds: Sequence[str] | None = None
    ) -> tuple[dt.datetime | None, float | None]:
        """(when the next message becomes eligible, seconds from now; 0 = one is ready), or (None, None)."""
        d = self.db.dialect
        r = named(
            statements.NEXT_SCHEDULED_AT,
            (yield statement_call(statements.NEXT_SCHEDULED_AT, queue=self.name, kinds=d.codec.kinds(kinds)))[
                0
            ],
        )
        return d.codec.read_time(r.next_scheduled_at), None if r.wait_s is None else float(r.wait_s)

    @sans_io
    def wait(
        self, timeout: Duration = None, poll: Duration = None, kinds: Sequence[str] | None = None
    ) -> bool:
        """Blocks in the server until a message is ready (True) or timeout passes (False; None = 1 s)."""
        d = self.db.dialect
        return bool(
            (
                yield statement_call(
                    statements.WAIT,
                    queue=self.name,
                    kinds=d.codec.kinds(kinds),
                    timeout=d.codec.duration(timeout, "timeout"),
                    poll=d.codec.duration(poll, "poll"),
                )
            )[0][0]
        )
