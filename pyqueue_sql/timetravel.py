"""A time machine for tests: advance_clock(db, delta) moves every stored time of a test database
(its messages' due times, leases and creation times, outcomes, history, rate windows) delta into
the past, as if delta had passed, so that a retry's backoff, a snooze, a delay, an expiry or a
periodic occurrence comes due now instead of after a real wait. The statements are
sql/<dialect>/queries.sql's ``testing_advance_*``.

For a database of tests only: it rewrites every row of the schema's tables, whoever owns them (a
worker of another process that holds a lease sees it expire). What Python reads from its own clock
(datetime.now() in a task) does not move. Used by App.run_pending(advance=) and the pytest fixture
pyqueue_clock (pyqueue_sql.testing).

Periodic tasks: the clock runs every occurrence a worker would have run in the span it moves over,
in order, each with its own time. A schedule's chain keeps the times it would have without the
machine (its next_at and its occurrences' keys do not move), while how far the clock moved since
each schedule was made is kept in this process, per database (by its name): each advance and each
pass of App.run_pending then has the pending occurrence due at its time less that lag
(settle_schedules). So an advance of one period runs one occurrence, and one of k periods the k
occurrences, each seeing the time in its key (the schedule's cadence: on the hour for an hourly
one). A schedule made after the clock moved counts from the database's real time: its times are
that much behind the clock's, its cadence the same."""

from __future__ import annotations

import dataclasses
import datetime as dt
from typing import Any

from . import errors, statements
from .queries import queries

STATEMENTS = (
    statements.TESTING_ADVANCE_MESSAGES,
    statements.TESTING_ADVANCE_RESULTS,
    statements.TESTING_ADVANCE_HISTORY,
    statements.TESTING_ADVANCE_RATES,
    statements.TESTING_ADVANCE_READY_FROM,
)


def seconds_of(delta: dt.timedelta | float | int, what: str = "advance") -> float:
    """A forward step of the clock in seconds: a timedelta or a number, not negative."""
    if isinstance(delta, dt.timedelta):
        seconds = delta.total_seconds()
    elif type(delta) in (int, float):
        seconds = float(delta)
    else:
        raise errors.InvalidArgumentError(
            f"{what} must be a timedelta or seconds, not {type(delta).__name__}"
        )
    if not 0 <= seconds < 10 * 365 * 86400:
        raise errors.InvalidArgumentError(f"{what} must be from 0 to 10 years forward, not {seconds} s")
    return seconds


@dataclasses.dataclass
class _Offset:
    """How far the clock of one database moved in all (seconds), and per schedule (queue, key,
    kind) how far it had moved when the schedule was first seen: its chain's times lag the clock
    by the difference (see the module docstring)."""

    seconds: float = 0.0
    schedules: dict[tuple[str, str, str], float] = dataclasses.field(default_factory=dict)


# (dialect, database name) -> its clock's offset, in this process
_offsets: dict[tuple[str, str], _Offset] = {}


def forget(dialect: str, database: str) -> None:
    """Forgets the clock's offset of a database emptied or dropped (the pytest plugin's reset)."""
    _offsets.pop((dialect, database), None)


def _clock_database(db: Any, cur: Any, texts: Any) -> tuple[str, str]:
    cur.execute(texts[statements.TESTING_CLOCK_DATABASE])
    (name,) = cur.fetchone()
    while cur.nextset():
        pass
    return db.dialect.name, str(name)


def _see_schedules(cur: Any, texts: Any, offset: _Offset) -> None:
    """Notes the schedules made since the clock last looked, at the clock's offset now (a schedule
    counts its first occurrence from the database's real time, so its chain lags the clock from
    then on by what the clock moves after)."""
    cur.execute(texts[statements.SCHEDULES], {"queue": None})
    rows = cur.fetchall()
    while cur.nextset():
        pass
    for row in rows:
        offset.schedules.setdefault((str(row[0]), str(row[1]), str(row[2])), offset.seconds)


def _settle(cur: Any, texts: Any, offset: _Offset) -> None:
    """Has each schedule's pending occurrence due at its time less how far the clock moved since
    the schedule was made."""
    for (queue, key, kind), seen_at in offset.schedules.items():
        lag = offset.seconds - seen_at
        if lag > 0:
            cur.execute(
                texts[statements.TESTING_SETTLE_OCCURRENCES],
                {"seconds": lag, "queue": queue, "key": key, "kind": kind},
            )
    cur.execute(texts[statements.TESTING_ADVANCE_READY_FROM])


def advance_clock(db: Any, delta: dt.timedelta | float | int) -> float:
    """Moves the database's stored times delta into the past, in one transaction (a Database; its
    connection must not be inside a transaction of yours), and has each schedule's pending
    occurrence due at its time less how far the clock moved in all (settle_schedules). Returns
    the seconds moved."""
    seconds = seconds_of(delta)
    if seconds == 0:
        return 0.0
    texts = queries(db.dialect.name)
    with db.transaction():
        cur = db.connection.cursor()
        try:
            offset = _offsets.setdefault(_clock_database(db, cur, texts), _Offset())
            _see_schedules(cur, texts, offset)  # before the move: those made so far lag by it
            for name in STATEMENTS:
                cur.execute(texts[name], {"seconds": seconds})
            offset.seconds += seconds
            _settle(cur, texts, offset)
        finally:
            cur.close()
    return seconds


def settle_schedules(db: Any) -> None:
    """After jobs ran on a database whose clock moved (App.run_pending's passes): the occurrence a
    commit has just pushed is due at its time less the clock's offset, so that the occurrences
    within the span the clock moved over run one after another. Nothing when the clock of no
    database moved in this process."""
    if not _offsets:
        return
    texts = queries(db.dialect.name)
    with db.transaction():
        cur = db.connection.cursor()
        try:
            offset = _offsets.get(_clock_database(db, cur, texts))
            if offset is not None:
                _see_schedules(cur, texts, offset)
                _settle(cur, texts, offset)
        finally:
            cur.close()


class Clock:
    """The pytest fixture pyqueue_clock: ``pyqueue_clock.advance(timedelta(minutes=5))`` (or
    ``advance(minutes=5)``) moves the test database's time 5 minutes on; ``advanced`` says how far
    it went in all."""

    def __init__(self, db: Any) -> None:
        self.db = db
        self.advanced = dt.timedelta(0)

    def advance(
        self,
        delta: dt.timedelta | float | int | None = None,
        /,
        *,
        days: float = 0,
        hours: float = 0,
        minutes: float = 0,
        seconds: float = 0,
    ) -> None:
        """Moves the clock on by delta (a timedelta, or seconds), or by the parts given as
        timedelta takes them: ``advance(hours=1)``."""
        parts = dict(days=days, hours=hours, minutes=minutes, seconds=seconds)
        if delta is None:
            if not all(type(v) in (int, float) for v in parts.values()):
                raise errors.InvalidArgumentError("advance takes numbers of days, hours, minutes, seconds")
            delta = dt.timedelta(**parts)
        elif any(parts.values()):
            raise errors.InvalidArgumentError("advance takes a delta or its parts (hours=...), not both")
        self.advanced += dt.timedelta(seconds=advance_clock(self.db, delta))
