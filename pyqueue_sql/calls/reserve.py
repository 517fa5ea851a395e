"""The reserve topic's calls: pop, reserve (sql/<dialect>/routines/05_reserve.sql). Written sans-IO
(pyqueue_sql.sansio); pyqueue_sql.client's QueueCalls and DatabaseCalls are composed of these
groups."""

from __future__ import annotations

from collections.abc import Sequence

from .. import statements
from ..dialects import Duration, Row, text_value, whole_number
from ..rows import Message, Reservation, named, read_headers, reservations_from_rows
from ..sansio import ONE_TRANSACTION, chunk_sizes, sans_io, statement_call
from .base import QueueCallsBase, default_worker_name


class ReserveCalls(QueueCallsBase):
    """A queue's calls of the reserve topic (see QueueCalls)."""

    @sans_io
    def pop(self, n: int = 1) -> list[Message]:
        """Takes up to n ready messages out of the queue (at-most-once)."""
        d = self.db.dialect
        return [
            Message(
                self.name,
                r.p_key,
                r.p_kind,
                d.codec.read_payload(r.payload),
                r.priority,
                r.attempts,
                d.codec.read_time(r.created_at),
                read_headers(d, r.headers),
            )
            for row in (yield statement_call(statements.POP, queue=self.name, n=whole_number(n, "n")))
            for r in (named(statements.POP, row),)
        ]

    @sans_io
    def reserve(
        self,
        n: int = 1,
        worker: str | None = None,
        timeout: Duration = None,
        kinds: Sequence[str] | None = None,
    ) -> list[Reservation]:
        """Reserves up to n ready messages, highest priority first, FIFO within a priority.

        n over CHUNK_SIZE is reserved in calls of at most CHUNK_SIZE, in one transaction, until n
        are reserved or a call finds fewer than it asked for."""
        d = self.db.dialect
        params = dict(
            queue=self.name,
            worker=text_value(worker or default_worker_name(), "worker"),
            timeout=d.codec.duration(timeout, "timeout"),
            kinds=d.codec.kinds(kinds),
        )
        sizes = chunk_sizes(whole_number(n, "n"))
        if len(sizes) > 1:
            yield ONE_TRANSACTION
        rows: list[Row] = []
        for size in sizes:
            got = yield statement_call(statements.RESERVE, **params, n=size)
            rows += got
            if len(sizes) == 1 or len(got) < size:
                break
        return reservations_from_rows(self.name, d, rows)
