"""PostgreSQL: a connection the client opens on a server whose zone is UTC under another name
('Etc/UTC') names it 'UTC', so that psycopg reads each timestamptz into datetime.timezone.utc
without a conversion through ZoneInfo: the same instants, the same SQL. A session in another zone,
and a connection opened outside autocommit, keep the zone they were given."""

from __future__ import annotations

import asyncio
import datetime as dt
from urllib.parse import quote
from zoneinfo import ZoneInfo

import psycopg
import pytest

from pyqueue_sql import aio, dialects

pytestmark = pytest.mark.only_dialect("postgresql")

NOW = "SELECT now(), current_setting('TimeZone'), clock_timestamp()"


def with_zone(dsn: str, zone: str) -> str:
    return f"{dsn}{'&' if '?' in dsn else '?'}options={quote(f'-c TimeZone={zone}')}"


def test_a_utc_server_is_read_in_timezone_utc(dsn):
    zone = with_zone(dsn, "Etc/UTC")  # as Debian's initdb and the Docker images name it
    conn = dialects.for_name("postgresql").connect(zone)
    try:
        now, setting, later = conn.execute(NOW).fetchone()
    finally:
        conn.close()
    assert setting == "UTC" and now.tzinfo is dt.timezone.utc and later.tzinfo is dt.timezone.utc
    assert abs(later - dt.datetime.now(dt.timezone.utc)) < dt.timedelta(minutes=5)


def test_an_asyncio_connection_too(dsn):
    async def read() -> tuple:
        db = await aio.connect(with_zone(dsn, "Etc/UTC"))
        try:
            async with db.connection.cursor() as cur:
                await cur.execute(NOW)
                return await cur.fetchone()
        finally:
            await db.close()

    now, setting, _ = asyncio.run(read())
    assert setting == "UTC" and now.tzinfo is dt.timezone.utc


def test_another_zone_and_a_connection_outside_autocommit_are_left_as_they_are(dsn):
    d = dialects.for_name("postgresql")
    paris = d.connect(with_zone(dsn, "Europe/Paris"))
    try:
        now, setting, _ = paris.execute(NOW).fetchone()
    finally:
        paris.close()
    assert setting == "Europe/Paris" and now.tzinfo == ZoneInfo("Europe/Paris")
    manual = d.connect(with_zone(dsn, "Etc/UTC"), autocommit=False)
    try:
        assert manual.info.transaction_status == psycopg.pq.TransactionStatus.IDLE  # nothing sent
        now, setting, _ = manual.execute(NOW).fetchone()
        manual.rollback()
    finally:
        manual.close()
    assert setting == "Etc/UTC" and now.tzinfo == ZoneInfo("Etc/UTC")
