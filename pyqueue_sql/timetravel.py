"""A time machine for tests: advance_clock(db, delta) moves every stored time of a test database
(its messages' due times, leases and creation times, outcomes, history, rate windows) delta into
the past, as if delta had passed, so that a retry's backoff, a snooze, a delay, an expiry or a
periodic occurrence comes due now instead of after a real wait. The statements are
sql/<dialect>/queries.sql's ``testing_advance_*``.

For a database of tests only: it rewrites every row of the schema's tables, whoever owns them (a
worker of another process that holds a lease sees it expire). What Python reads from its own clock
(datetime.now() in a task) does not move. Used by App.run_pending(advance=) and the pytest fixture
pyqueue_clock (pyqueue_sql.testing)."""

from __future__ import annotations

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


def advance_clock(db: Any, delta: dt.timedelta | float | int) -> float:
    """Moves the database's stored times delta into the past, in one transaction (a Database; its
    connection must not be inside a transaction of yours). Returns the seconds moved."""
    seconds = seconds_of(delta)
    if seconds == 0:
        return 0.0
    texts = queries(db.dialect.name)
    with db.transaction():
        cur = db.connection.cursor()
        try:
            for name in STATEMENTS:
                cur.execute(texts[name], {"seconds": seconds})
        finally:
            cur.close()
    return seconds


class Clock:
    """The pytest fixture pyqueue_clock: ``pyqueue_clock.advance(timedelta(minutes=5))`` moves the
    test database's time 5 minutes on; ``advanced`` says how far it went in all."""

    def __init__(self, db: Any) -> None:
        self.db = db
        self.advanced = dt.timedelta(0)

    def advance(self, delta: dt.timedelta | float | int) -> None:
        self.advanced += dt.timedelta(seconds=advance_clock(self.db, delta))
