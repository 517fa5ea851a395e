"""The queues topic's calls: create, settings, pause/resume, drop, stats
(sql/<dialect>/routines/03_queues.sql). Written sans-IO (pyqueue_sql.sansio); pyqueue_sql.client's
QueueCalls and DatabaseCalls are composed of these groups."""

from __future__ import annotations

from .. import statements
from ..dialects import Duration, text_value, whole_number
from ..rows import (
    KindStats,
    QueueSettings,
    QueueStats,
    kind_stats_from_row,
    settings_from_row,
    stats_from_row,
)
from ..sansio import sans_io, statement_call
from .base import MAX_PAYLOAD_LIMIT, DatabaseCallsBase, QueueCallsBase, whole_number_within


class QueuesCalls(QueueCallsBase):
    """A queue's calls of the queues topic (see QueueCalls)."""

    @sans_io
    def create(
        self,
        visibility_timeout: Duration = None,
        max_attempts: int | None = None,
        dead_letter_queue: str | QueueCallsBase | None = None,
        history_retention: Duration = None,
    ) -> QueueCallsBase:
        """Creates the queue, or changes the settings passed on an existing one.

        A new queue gets the default for each setting left at None (30 s, 10 deliveries, no
        dead-letter queue, no history). On an existing queue None leaves that setting as it is;
        use reset_setting to put one back to its default."""
        d = self.db.dialect
        if isinstance(dead_letter_queue, QueueCallsBase):
            dead_letter_queue = dead_letter_queue.name
        yield statement_call(
            statements.CREATE,
            queue=self.name,
            visibility_timeout=d.codec.duration(visibility_timeout, "visibility_timeout"),
            max_attempts=whole_number(max_attempts, "max_attempts"),
            dead_letter_queue=text_value(dead_letter_queue, "dead_letter_queue"),
            history_retention=d.codec.duration(history_retention, "history_retention"),
        )
        return self

    @sans_io
    def reset_setting(self, name: str) -> None:
        """Puts one setting back to its default: 'visibility_timeout' (30 s), 'max_attempts' (10),
        'dead_letter_queue' (none), 'history_retention' (none: no history kept),
        'max_reservation' (12 hours) or 'max_payload' (1048576 bytes)."""
        yield statement_call(statements.RESET_SETTING, queue=self.name, setting=text_value(name, "setting"))

    @sans_io
    def set_max_reservation(self, max_reservation: Duration = None) -> None:
        """The longest reservation timeout a consumer may ask for (reserve, commit_reserve,
        extend; longer is refused with InvalidArgumentError). None = the default, 12 hours; not
        below the queue's visibility_timeout."""
        d = self.db.dialect
        yield statement_call(
            statements.SET_MAX_RESERVATION,
            queue=self.name,
            max_reservation=d.codec.duration(max_reservation, "max_reservation"),
        )

    @sans_io
    def set_max_payload(self, max_payload: int | None = None) -> None:
        """The largest payload, in bytes of its JSON text, a push may write into the queue
        (larger is refused with InvalidPayloadError). None = the default, 1048576 (1 MiB);
        1 to 268435456."""
        yield statement_call(
            statements.SET_MAX_PAYLOAD,
            queue=self.name,
            max_payload=whole_number_within(max_payload, "max_payload", 1, MAX_PAYLOAD_LIMIT),
        )

    @sans_io
    def settings(self) -> QueueSettings:
        """The queue's settings (durations as timedelta)."""
        return settings_from_row(
            self.db.dialect, (yield statement_call(statements.SETTINGS, queue=self.name))[0]
        )

    @sans_io
    def drop(self) -> None:
        yield statement_call(statements.DROP, queue=self.name)

    @sans_io
    def pause(self) -> None:
        yield statement_call(statements.PAUSE, queue=self.name)

    @sans_io
    def resume(self) -> None:
        yield statement_call(statements.RESUME, queue=self.name)

    @sans_io
    def stats(self) -> QueueStats:
        return stats_from_row(self.db.dialect, (yield statement_call(statements.STATS, queue=self.name))[0])

    @sans_io
    def kind_stats(self) -> list[KindStats]:
        """The queue's messages by kind (queue_kind_stats), one KindStats a kind that has messages,
        by kind. Reads every message of the queue, as stats() does: an operator's read."""
        return [
            kind_stats_from_row(r) for r in (yield statement_call(statements.KIND_STATS, queue=self.name))
        ]


class QueuesDatabaseCalls(DatabaseCallsBase):
    """A database's calls of the queues topic (see DatabaseCalls)."""

    @sans_io
    def stats(self) -> list[QueueStats]:
        """One row per queue."""
        return [
            stats_from_row(self.dialect, row) for row in (yield statement_call(statements.STATS, queue=None))
        ]

    @sans_io
    def kind_stats(self) -> list[KindStats]:
        """Every queue's messages by kind (queue_kind_stats), by queue and kind."""
        return [kind_stats_from_row(r) for r in (yield statement_call(statements.KIND_STATS, queue=None))]

    @sans_io
    def settings(self) -> list[QueueSettings]:
        """Every queue's settings, ordered by queue name."""
        return [
            settings_from_row(self.dialect, row)
            for row in (yield statement_call(statements.SETTINGS, queue=None))
        ]
