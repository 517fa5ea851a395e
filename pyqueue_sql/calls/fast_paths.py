"""The fast paths topic's calls: commit_reserve, commit_many
(sql/<dialect>/routines/09_fast_paths.sql). Written sans-IO (pyqueue_sql.sansio);
pyqueue_sql.client's QueueCalls and DatabaseCalls are composed of these groups."""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from .. import sansio, statements
from ..dialects import Duration, key_value, text_value, token_value, whole_number
from ..rows import Reservation, reservations_from_rows
from ..sansio import chunks, each_call, sans_io, statement_call, statement_call_sets
from .base import QueueCallsBase, default_worker_name, held_reservation


class FastPathsCalls(QueueCallsBase):
    """A queue's calls of the fast paths topic (see QueueCalls)."""

    @sans_io
    def commit_reserve(
        self,
        previous: Reservation | None,
        n: int = 1,
        worker: str | None = None,
        timeout: Duration = None,
        kinds: Sequence[str] | None = None,
    ) -> tuple[bool | None, list[Reservation]]:
        """Commits ``previous`` (None: nothing to commit) and reserves up to n more, in one call.

        Returns (committed, reservations): committed is the commit's result
        (None when previous was None). One call per message for a consumer
        that works one message at a time: one round trip. On MySQL/MariaDB the
        call is one transaction of its own, so that its history row, its delete
        and its claims stand or fall together: on MariaDB the procedure opens it,
        on MySQL 8.0 the client (START TRANSACTION, CALL, COMMIT, sent together).
        """
        d = self.db.dialect
        held = (
            dict(queue=self.name, key=None, kind=None, token=None)
            if previous is None
            else self._held(previous)
        )
        params = dict(
            held,
            worker=text_value(worker or default_worker_name(), "worker"),
            timeout=d.codec.duration(timeout, "timeout"),
            n=whole_number(n, "n"),
            kinds=d.codec.kinds(kinds),
        )
        committed, rows = d.codec.read_commit_reserve(
            (yield statement_call_sets(statements.COMMIT_RESERVE, **params))
        )
        return (None if committed is None else bool(committed)), reservations_from_rows(self.name, d, rows)

    @sans_io
    def commit_many(self, reservations: Iterable[Reservation]) -> int:
        """Commits many reservations in one call; returns how many still held (and are now gone).
        More than CHUNK_SIZE go in calls of at most CHUNK_SIZE each, run as one transaction."""
        items = list(reservations)
        if not items:
            return 0
        d = self.db.dialect
        # the checks of each reservation, skipped for a str where they would return it as it is
        # (a worker commits every message it ran here: bench/README.md, Worker CPU)
        items = [r if type(r) is Reservation else held_reservation(r) for r in items]
        commits = [
            statement_call(
                statements.COMMIT_BATCH,
                queue=self.name,
                keys=d.codec.text_array([r.key if type(r.key) is str else key_value(r.key) for r in part]),
                kinds=d.codec.text_array(
                    [r.kind if type(r.kind) is str else text_value(r.kind, "kind") for r in part]
                ),
                tokens=d.codec.text_array(
                    [r.token if type(r.token) is str else token_value(r.token) for r in part]
                ),
            )
            for part in chunks(items, sansio.CHUNK_SIZE)
        ]
        return sum(int(rows[0][0]) for rows in (yield from each_call(commits)))
