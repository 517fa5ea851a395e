"""A client call that loses its connection raises errors.ConnectionLostError, on both dialects, sync
and asyncio: its session is killed from a second, admin connection (PostgreSQL
pg_terminate_backend, MariaDB/MySQL KILL CONNECTION), idle or in the middle of a call. The error
says whether the call took effect (False: it did not; None: it cannot be known), its message is one
line, the driver's exception is its cause, and the next call of the same client opens a new
connection and works."""

from __future__ import annotations

import asyncio
import threading
import time
import uuid

import pytest

import pyqueue_sql
from pyqueue_sql import aio, dialects, errors


def _kill(dsn: str, session: int) -> None:
    """Ends another connection's server session, as an admin does."""
    d = dialects.for_dsn(dsn)
    admin = d.connect(dsn)
    try:
        cur = admin.cursor()
        if d.name == "postgresql":
            cur.execute("SELECT pg_catalog.pg_terminate_backend(%s)", (session,))
        else:
            cur.execute(f"KILL CONNECTION {int(session)}")
        cur.close()
    finally:
        admin.close()


_SESSION = {"postgresql": "SELECT pg_catalog.pg_backend_pid()", "mysql": "SELECT CONNECTION_ID()"}


def _session(db: pyqueue_sql.Database) -> int:
    cur = db.connection.cursor()
    try:
        cur.execute(_SESSION[db.dialect.name])
        return cur.fetchone()[0]
    finally:
        cur.close()


async def _session_async(db: aio.AsyncDatabase) -> int:
    connection = db.connection
    if db.dialect.name == "postgresql":
        async with connection.cursor() as cur:
            await cur.execute(_SESSION["postgresql"])
            return (await cur.fetchone())[0]
    async with connection.cursor() as cur:
        await cur.execute(_SESSION["mysql"])
        return (await cur.fetchone())[0]


def _check(lost: errors.ConnectionLostError, took_effect: bool | None) -> None:
    assert lost.took_effect is took_effect, lost
    assert isinstance(lost, errors.QueueError) and lost.retryable
    message = str(lost)
    assert message.startswith("the connection to the database was lost (") and "\n" not in message
    assert ("did not take effect" if took_effect is False else "cannot be known") in message
    assert "the next call opens a new connection" in message
    assert type(lost.__cause__).__module__.split(".")[0] in ("psycopg", "pymysql"), lost.__cause__


@pytest.fixture
def queue_name(db):
    name = f"lost.{uuid.uuid4().hex[:10]}"
    queue = db.queue(name).create()
    yield name
    queue.drop()


def test_a_killed_session_is_a_connection_lost_error_and_the_next_call_reconnects(dsn, db, queue_name):
    client = pyqueue_sql.connect(dsn)
    try:
        queue = client.queue(queue_name)
        queue.push("before", "k", {})
        first = _session(client)
        _kill(dsn, first)
        with pytest.raises(errors.ConnectionLostError) as caught:
            queue.push_many([("m1", "k", {}), ("m2", "k", {})])
        _check(caught.value, None)  # sent, no answer: it may have committed
        assert queue.push("after", "k", {}) is True  # the next call opens a new connection
        assert _session(client) != first
        assert {r.key for r in queue.reserve(n=10)} >= {"before", "after"}
    finally:
        client.close()


def test_a_session_killed_inside_a_transaction_did_not_take_effect(dsn, db, queue_name):
    client = pyqueue_sql.connect(dsn)
    try:
        queue = client.queue(queue_name)
        with pytest.raises(errors.ConnectionLostError) as caught:
            with client.transaction():
                queue.push("t1", "k", {})
                _kill(dsn, _session(client))
                queue.push("t2", "k", {})
        _check(caught.value, False)
        assert queue.push("t3", "k", {}) is True  # reconnected, outside the lost transaction
        assert sorted(r.key for r in db.queue(queue_name).reserve(n=10)) == ["t3"]  # t1 was rolled back
    finally:
        client.close()


def test_a_session_killed_in_the_middle_of_a_call_ends_that_call_at_once(dsn, db, queue_name):
    """A call blocked in the server (queue_result_wait's long poll) whose session is killed."""
    client = pyqueue_sql.connect(dsn)
    try:
        queue = client.queue(queue_name)
        queue.push("w", "k", {})
        session = _session(client)
        killer = threading.Timer(0.5, _kill, (dsn, session))
        killer.start()
        started = time.monotonic()
        with pytest.raises(errors.ConnectionLostError) as caught:
            queue.result_wait_once("w", "k", 20)
        killer.join()
        assert time.monotonic() - started < 10  # ended by the kill, not by the wait's timeout
        _check(caught.value, None)
        assert queue.message("w", "k").state == "ready"  # the next call reconnects
    finally:
        client.close()


def test_the_asyncio_client_raises_it_and_reconnects_too(dsn, db, queue_name):
    async def scenario() -> None:
        client = await aio.connect(dsn)
        try:
            queue = client.queue(queue_name)
            first = await _session_async(client)
            _kill(dsn, first)
            with pytest.raises(errors.ConnectionLostError) as caught:
                await queue.push_many([("a1", "k", {}), ("a2", "k", {})])
            _check(caught.value, None)
            assert await queue.push("a3", "k", {}) is True
            assert await _session_async(client) != first

            with pytest.raises(errors.ConnectionLostError) as caught:
                async with client.transaction():
                    await queue.push("a4", "k", {})
                    _kill(dsn, await _session_async(client))
                    await queue.push("a5", "k", {})
            _check(caught.value, False)
            assert await queue.push("a6", "k", {}) is True
        finally:
            await client.close()

    asyncio.run(scenario())
    keys = {r.key for r in db.queue(queue_name).reserve(n=20)}
    assert {"a3", "a6"} <= keys and not keys & {"a4", "a5"}


def test_a_wrapped_connection_that_is_lost_is_the_callers_to_replace(dsn, db, queue_name):
    d = dialects.for_dsn(dsn)
    connection = d.connect(dsn)
    wrapped = pyqueue_sql.Database.wrap(connection)
    try:
        _kill(dsn, _session(wrapped))
        with pytest.raises(errors.ConnectionLostError) as caught:
            wrapped.queue(queue_name).push("x", "k", {})
        assert caught.value.took_effect is None
        assert "replace it" in str(caught.value) and "\n" not in str(caught.value)
    finally:
        connection.close()


def test_a_session_killed_while_wait_result_waits_is_a_connection_lost_error(dsn, db, queue_name):
    """wait_result waits on LISTEN (PostgreSQL) or in the server's long poll (MySQL/MariaDB)."""
    client = pyqueue_sql.connect(dsn)
    try:
        queue = client.queue(queue_name)
        queue.push("r", "k", {})
        killer = threading.Timer(0.5, _kill, (dsn, _session(client)))
        killer.start()
        started = time.monotonic()
        with pytest.raises(errors.ConnectionLostError) as caught:
            queue.wait_result("r", "k", timeout=20)
        killer.join()
        assert time.monotonic() - started < 10
        assert caught.value.took_effect in (False, None) and "\n" not in str(caught.value)
        assert queue.result("r", "k").state == "ready"  # the next call reconnects
    finally:
        client.close()
