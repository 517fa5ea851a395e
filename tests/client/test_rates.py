"""Rate limits through the Python client, on both dialects: Queue.set_rate, Queue.rates and
Database.rates (RateInfo rows: per as a timedelta, next_free_at as an aware UTC datetime), the
client's refusals of bad arguments (one line, before any call), the routine's refusals mapped to
exceptions, and the asyncio client's same methods. The exactness of the rate under concurrency is
the routines' (tests/contract/test_limits_rates.py)."""

from __future__ import annotations

import asyncio
import datetime as dt
import uuid
from decimal import Decimal

import pytest

import pyqueue_sql
from pyqueue_sql import aio, client, errors, rows

UTC = dt.timezone.utc


def test_a_rate_is_shown_with_its_window_as_a_timedelta(db, queue):
    assert queue.rates() == []
    queue.set_rate("mail", 2, 60)
    queue.set_rate(None, 5, dt.timedelta(seconds=1.5))
    whole, mail = queue.rates()
    assert whole == client.RateInfo(queue.name, None, 5, dt.timedelta(seconds=1.5), None, 0)
    assert mail == client.RateInfo(queue.name, "mail", 2, dt.timedelta(seconds=60), None, 0)
    assert not mail.saturated
    assert [r for r in db.rates() if r.queue == queue.name] == [whole, mail]


def test_reservations_fill_the_window_and_the_next_unit_is_named(queue):
    queue.set_rate("mail", 2, 60)
    for key in "abc":
        queue.push(key, "mail", {})
    before = dt.datetime.now(UTC)
    taken = queue.reserve(n=3)
    after = dt.datetime.now(UTC)
    assert [r.key for r in taken] == ["a", "b"]  # the third waits for a unit, first in line
    [rate] = queue.rates()
    assert rate.in_window == 2 and rate.saturated
    assert rate.next_free_at.tzinfo is not None
    slack = dt.timedelta(seconds=1)  # the server's clock against this process's
    assert (
        before + dt.timedelta(seconds=60) - slack
        <= rate.next_free_at
        <= after + dt.timedelta(seconds=60) + slack
    )
    assert queue.message("c", "mail").state == "ready"


def test_n_none_removes_the_rate_and_the_held_message_goes(queue):
    queue.set_rate("mail", 1, 3600)
    queue.push("a", "mail", {})
    queue.push("b", "mail", {})
    assert [r.key for r in queue.reserve(n=2)] == ["a"]
    queue.set_rate("mail", None)
    queue.set_rate("mail", None)  # no rate any more: no error either
    assert queue.rates() == []
    assert [r.key for r in queue.reserve(n=2)] == ["b"]


@pytest.mark.parametrize(
    ("args", "text"),
    [
        (("mail", 0, 60), "n must be a whole number from 1 to 10000"),
        (("mail", 10001, 60), "n must be a whole number from 1 to 10000"),
        (("mail", 2.5, 60), "n must be a whole number, not 2.5"),
        (("mail", True, 60), "n must be a whole number, not True"),
        (("mail", 2), "per is required with n"),
        (("mail", 2, 0), "per must be more than 0 seconds and at most 1 day"),
        (("mail", 2, -1), "per must be more than 0 seconds and at most 1 day"),
        (
            ("mail", 2, dt.timedelta(days=1, microseconds=1)),
            "per must be more than 0 seconds and at most 1 day",
        ),
        (("mail", 2, "60"), "per must be a timedelta or a number of seconds, not str"),
        (("mail", 2, True), "per must be a timedelta or a number of seconds, not a bool"),
        ((7, 2, 60), "kind must be a str, not int"),
    ],
)
def test_bad_arguments_are_refused_in_one_line_before_any_call(queue, args, text):
    with pytest.raises(errors.InvalidArgumentError) as refused:
        queue.set_rate(*args)
    message = str(refused.value)
    assert text in message and "\n" not in message
    assert queue.rates() == []


def test_the_bounds_themselves_are_taken(queue):
    queue.set_rate("a", 1, dt.timedelta(days=1))
    queue.set_rate("b", 10000, 0.001)
    assert [(r.kind, r.n, r.per) for r in queue.rates()] == [
        ("a", 1, dt.timedelta(days=1)),
        ("b", 10000, dt.timedelta(milliseconds=1)),
    ]


def test_the_routines_refusals_are_the_projects_exceptions(db, queue):
    with pytest.raises(errors.UnknownQueueError):
        db.queue(f"t.none.{uuid.uuid4().hex[:8]}").set_rate("mail", 1, 1)
    for kind in ("", "x" * 300):
        with pytest.raises(errors.InvalidArgumentError):
            queue.set_rate(kind, 1, 1)
    assert queue.rates() == []


def test_a_dropped_queue_takes_its_rates_along(db, make_queue):
    q = make_queue()
    q.set_rate(None, 3, 10)
    q.drop()
    assert [r for r in db.rates() if r.queue == q.name] == []


def test_rows_are_read_by_their_leading_columns():
    """A newer queue_rates may add columns after in_window: the row is read all the same."""
    d = pyqueue_sql.client.dialects.for_name("mysql")
    at = dt.datetime(2026, 1, 2, 3, 4, 5)
    row = ("q", None, 4, Decimal("2.500000"), at, 1, "a column of a later release")
    assert rows.rate_from_row(d, row) == client.RateInfo(
        "q", None, 4, dt.timedelta(seconds=2.5), at.replace(tzinfo=UTC), 1
    )


def test_the_asyncio_client_sets_and_reads_rates(dsn, queue):
    async def scenario():
        async with await aio.connect(dsn) as adb:
            q = adb.queue(queue.name)
            await q.set_rate("mail", 3, dt.timedelta(minutes=1))
            mine = await q.rates()
            every = [r for r in await adb.rates() if r.queue == queue.name]
            with pytest.raises(errors.InvalidArgumentError, match="per is required"):
                await q.set_rate("mail", 3)
            await q.set_rate("mail", None)
            return mine, every, await q.rates()

    mine, every, after = asyncio.run(scenario())
    assert mine == every == [client.RateInfo(queue.name, "mail", 3, dt.timedelta(minutes=1), None, 0)]
    assert after == []
