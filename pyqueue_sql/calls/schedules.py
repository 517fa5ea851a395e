"""The schedules topic's calls: recurring messages (sql/<dialect>/routines/17_schedules.sql). Written
sans-IO (pyqueue_sql.sansio); pyqueue_sql.client's QueueCalls and DatabaseCalls are composed of
these groups."""

from __future__ import annotations

import datetime as dt

from .. import statements
from ..dialects import Duration, encode_json, key_value, text_value
from ..rows import ScheduleInfo, schedule_from_row
from ..sansio import sans_io, statement_call
from .base import DatabaseCallsBase, QueueCallsBase


class SchedulesCalls(QueueCallsBase):
    """A queue's calls of the schedules topic (see QueueCalls)."""

    @sans_io
    def schedule_every(self, key: str | int, kind: str, payload: object, every: Duration) -> dt.datetime:
        """A message key@time every ``every`` (whole seconds, aligned to the Unix epoch); returns the first time."""
        d = self.db.dialect
        at = (
            yield statement_call(
                statements.SCHEDULE_EVERY,
                queue=self.name,
                key=key_value(key),
                kind=text_value(kind, "kind"),
                payload=encode_json(payload),
                every=d.codec.duration(every, "every"),
            )
        )[0][0]
        return d.codec.read_time(at)

    @sans_io
    def schedule_cron(self, key: str | int, kind: str, payload: object, cron: str) -> dt.datetime:
        """A message key@time at every minute matching the 5-field cron expression (UTC); returns the first time."""
        d = self.db.dialect
        at = (
            yield statement_call(
                statements.SCHEDULE_CRON,
                queue=self.name,
                key=key_value(key),
                kind=text_value(kind, "kind"),
                payload=encode_json(payload),
                cron=text_value(cron, "cron"),
            )
        )[0][0]
        return d.codec.read_time(at)

    @sans_io
    def unschedule(self, key: str | int, kind: str) -> bool:
        return bool(
            (
                yield statement_call(
                    statements.UNSCHEDULE, queue=self.name, key=key_value(key), kind=text_value(kind, "kind")
                )
            )[0][0]
        )

    @sans_io
    def schedules(self) -> list[ScheduleInfo]:
        return [
            schedule_from_row(self.db.dialect, row)
            for row in (yield statement_call(statements.SCHEDULES, queue=self.name))
        ]


class SchedulesDatabaseCalls(DatabaseCallsBase):
    """A database's calls of the schedules topic (see DatabaseCalls)."""

    @sans_io
    def schedules(self) -> list[ScheduleInfo]:
        """Every queue's recurring messages."""
        return [
            schedule_from_row(self.dialect, row)
            for row in (yield statement_call(statements.SCHEDULES, queue=None))
        ]
