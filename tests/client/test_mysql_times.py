"""MySQL/MariaDB: the connections the client opens read DATETIME and TIMESTAMP columns with a faster
reader than PyMySQL's own, and must read every value exactly as PyMySQL's does: the same datetime,
microseconds included, and the same string for a value that is no datetime (a zero date)."""

from __future__ import annotations

import asyncio
import datetime as dt

import pymysql
import pymysql.converters
import pytest

from pyqueue_sql import aio
from pyqueue_sql.dialects import mysql_connect_args
from pyqueue_sql.dialects.mysql import _read_datetime

pytestmark = pytest.mark.only_dialect("mysql")

# What a server sends for DATETIME(0..6) and TIMESTAMP, and values PyMySQL returns as they are.
TEXTS = [
    "2026-11-26 10:20:31.123456",
    "2026-11-26 10:20:31.000001",
    "2026-11-26 10:20:31.000000",
    "2026-11-26 10:20:31",
    "2026-11-26 10:20:31.5",
    "2026-11-26 10:20:31.123",
    "1000-01-01 00:00:00.000000",
    "9999-12-31 23:59:59.999999",
    "2026-11-26T10:20:31.25",
    "0000-00-00 00:00:00",
    "2026-02-31 10:20:31",
    "2026-11-26",
]

SELECT = (
    "SELECT CAST(%s AS DATETIME(6)), CAST(%s AS DATETIME), CAST(%s AS DATETIME(3)),"
    " TIMESTAMP(%s), NULL + INTERVAL 1 DAY"
)
VALUES = (
    "2026-11-26 10:20:31.123456",
    "2026-11-26 10:20:31",
    "2026-11-26 10:20:31.5",
    "1999-12-31 23:59:59.000001",
)


@pytest.mark.parametrize("text", TEXTS, ids=range(len(TEXTS)))
def test_a_datetime_text_reads_as_pymysql_reads_it(text):
    assert _read_datetime(text) == pymysql.converters.convert_datetime(text)
    assert type(_read_datetime(text)) is type(pymysql.converters.convert_datetime(text))


def _plain(dsn: str) -> tuple:
    """The row as PyMySQL reads it with its own conversions."""
    connection = pymysql.connect(**mysql_connect_args(dsn))
    try:
        with connection.cursor() as cur:
            cur.execute(SELECT, VALUES)
            return cur.fetchone()
    finally:
        connection.close()


def test_the_clients_connection_reads_datetimes_as_pymysql_does(db, dsn):
    expected = _plain(dsn)
    assert expected[0] == dt.datetime(2026, 11, 26, 10, 20, 31, 123456)
    with db.connection.cursor() as cur:
        cur.execute(SELECT, VALUES)
        assert cur.fetchone() == expected


def test_the_async_clients_connection_reads_datetimes_as_pymysql_does(dsn):
    expected = _plain(dsn)

    async def read() -> tuple:
        db = await aio.connect(dsn)
        try:
            async with db.connection.cursor() as cur:
                await cur.execute(SELECT, VALUES)
                return await cur.fetchone()
        finally:
            await db.close()

    assert asyncio.run(read()) == expected


def test_a_reservation_carries_the_rows_times_to_the_microsecond(queue, raw):
    queue.push("k", "kind", {"n": 1})
    (reservation,) = queue.reserve(1, "me")
    [(created, initially)] = raw(
        "SELECT DATE_FORMAT(created_at, '%%Y-%%m-%%d %%H:%%i:%%s.%%f'),"
        " DATE_FORMAT(scheduled_at_initially, '%%Y-%%m-%%d %%H:%%i:%%s.%%f')"
        " FROM pyqueue_message WHERE queue_name = %s AND p_key = 'k'",
        (queue.name,),
    )
    assert reservation.created_at == dt.datetime.fromisoformat(created).replace(tzinfo=dt.timezone.utc)
    assert reservation.scheduled_at_initially == dt.datetime.fromisoformat(initially).replace(
        tzinfo=dt.timezone.utc
    )
