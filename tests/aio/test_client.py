"""The asyncio client (pyqueue_sql.aio): the same interface as the sync client, its own driver
connections, the caller's transaction when wrapped (driver connections, SQLAlchemy AsyncSession /
AsyncConnection), chunked batches, concurrent consumers on several connections.

The behaviour of every method is the contract suite's (tests/contract runs it against this client
too); these tests cover what only the asyncio client has."""

from __future__ import annotations

import asyncio
import inspect
import uuid

import pytest
import sqlalchemy as sa

import pyqueue_sql
from pyqueue_sql import aio, dialects, sansio

from ..client.test_sqlalchemy_wrap import Base, Order, new_id, orders, sqlalchemy_url

ASYNC_DRIVERS = {"postgresql": "postgresql+psycopg", "mysql": "mysql+aiomysql"}


def run(coroutine):
    return asyncio.run(coroutine)


def public_methods(cls) -> dict[str, inspect.Signature]:
    return {
        name: inspect.signature(member)
        for name, member in inspect.getmembers(cls, callable)
        if not name.startswith("_") and name not in ("wrap",)
    }


@pytest.mark.parametrize(
    ("sync_class", "async_class"),
    [(pyqueue_sql.Queue, aio.AsyncQueue), (pyqueue_sql.Database, aio.AsyncDatabase)],
)
def test_the_async_classes_have_every_public_method_with_the_same_signature(sync_class, async_class):
    sync_methods, async_methods = public_methods(sync_class), public_methods(async_class)
    assert sorted(sync_methods) == sorted(async_methods)
    for name, signature in sync_methods.items():
        assert list(signature.parameters) == list(async_methods[name].parameters), name
        if name not in ("queue", "transaction", "close", "call", "call_sets", "drive"):
            assert inspect.iscoroutinefunction(getattr(async_class, name)), name


def test_a_reservation_round_trip_returns_what_the_sync_client_returns(dsn, queue):
    queue.push("a", "job", {"n": 1}, priority=3)

    async def scenario():
        async with await aio.connect(dsn) as db:
            q = db.queue(queue.name)
            [r] = await q.reserve()
            info = await q.message("a", "job")
            return r, info, await q.commit(r), await q.commit(r)

    r, info, first, second = run(scenario())
    assert isinstance(r, pyqueue_sql.Reservation)
    assert (r.key, r.kind, r.payload, r.priority, r.attempts) == ("a", "job", {"n": 1}, 3, 1)
    assert r.created_at.tzinfo is not None and isinstance(r.token, str)
    assert info.state == "reserved"
    assert (first, second) == (True, False)


def test_errors_are_the_sync_clients(dsn, queue):
    async def scenario():
        async with await aio.connect(dsn) as db:
            with pytest.raises(pyqueue_sql.UnknownQueueError):
                await db.queue("no-such-" + uuid.uuid4().hex[:6]).push("a", "k", 1)
            with pytest.raises(pyqueue_sql.InvalidArgumentError):
                await db.queue(queue.name).reserve(n=0)
            with pytest.raises(pyqueue_sql.InvalidPayloadError):
                await db.queue(queue.name).push("a", "k", {1, 2})
            return await db.queue(queue.name).push("a", "k", 1)  # the connection still works

    assert run(scenario()) is True


def test_a_transaction_commits_at_the_end_and_rolls_back_on_error(dsn, queue):
    async def scenario():
        async with await aio.connect(dsn) as db:
            q = db.queue(queue.name)
            async with db.transaction():
                await q.push("kept", "k", 1)
            with pytest.raises(RuntimeError):
                async with db.transaction():
                    await q.push("dropped", "k", 1)
                    raise RuntimeError("abort")
            with pytest.raises(pyqueue_sql.QueueError, match="do not nest"):
                async with db.transaction():
                    async with db.transaction():
                        pass

    run(scenario())
    assert [m.key for m in queue.pop(n=5)] == ["kept"]


def test_a_wrapped_driver_connection_pushes_in_the_callers_transaction(dsn, queue, dialect):
    async def scenario(commit: bool, key: str):
        d = dialects.for_dsn(dsn)
        conn = await d.connect_async(dsn)
        try:
            await d.begin_async(conn)
            db = aio.AsyncDatabase.wrap(conn)
            assert db.dialect.name == dialect
            assert await db.queue(queue.name).push(key, "k", 1)
            assert queue.stats().ready == 0  # another session does not see it yet
            await (d.commit_async(conn) if commit else d.rollback_async(conn))
        finally:
            closed = conn.close()
            if inspect.isawaitable(closed):
                await closed

    run(scenario(False, "rolled-back"))
    run(scenario(True, "committed"))
    assert [m.key for m in queue.pop(n=5)] == ["committed"]


@pytest.mark.parametrize("outcome", ["commit", "rollback"])
def test_a_push_through_an_async_session_commits_or_rolls_back_with_the_orm_insert(dsn, queue, outcome):
    from sqlalchemy.ext.asyncio import AsyncSession, create_async_engine

    order = new_id()
    sync_engine = sa.create_engine(sqlalchemy_url(dsn, dialects.for_dsn(dsn).sqlalchemy_dialect))
    Base.metadata.create_all(sync_engine)

    async def scenario():
        engine = create_async_engine(sqlalchemy_url(dsn, ASYNC_DRIVERS[dialects.for_dsn(dsn).name]))
        try:
            async with AsyncSession(engine) as session:
                session.add(Order(id=order, item="lamp"))
                await session.flush()
                q = aio.AsyncDatabase.wrap(session).queue(queue.name)
                assert await q.push(f"order-{order}", "receipt", {"order": order})
                assert queue.stats().ready == 0
                await (session.commit() if outcome == "commit" else session.rollback())
        finally:
            await engine.dispose()

    run(scenario())
    assert (order in orders(sync_engine)) is (outcome == "commit")
    assert queue.stats().ready == (1 if outcome == "commit" else 0)
    sync_engine.dispose()


def test_a_push_through_an_async_connection_rolls_back_with_its_insert(dsn, queue):
    from sqlalchemy.ext.asyncio import create_async_engine

    order = new_id()
    sync_engine = sa.create_engine(sqlalchemy_url(dsn, dialects.for_dsn(dsn).sqlalchemy_dialect))
    Base.metadata.create_all(sync_engine)

    async def scenario():
        engine = create_async_engine(sqlalchemy_url(dsn, ASYNC_DRIVERS[dialects.for_dsn(dsn).name]))
        try:
            async with engine.connect() as conn:
                db = aio.AsyncDatabase.wrap(conn)
                await db.queue(queue.name).push("rolled-back", "k", 1)
                await conn.execute(sa.insert(Order).values(id=order, item="cup"))
                await conn.rollback()
                await db.queue(queue.name).push("committed", "k", 1)  # a new transaction begins
                await conn.commit()
        finally:
            await engine.dispose()

    run(scenario())
    assert order not in orders(sync_engine)
    assert [m.key for m in queue.pop(n=5)] == ["committed"]
    sync_engine.dispose()


def test_wrap_refuses_what_is_not_an_async_connection(dsn):
    sync_connection = dialects.for_dsn(dsn).connect(dsn)
    try:
        with pytest.raises(pyqueue_sql.UnsupportedDsnError, match="AsyncConnection"):
            aio.AsyncDatabase.wrap(sync_connection)
    finally:
        sync_connection.close()

    async def sync_wrap_of_an_async_connection():
        conn = await dialects.for_dsn(dsn).connect_async(dsn)
        try:
            with pytest.raises(pyqueue_sql.UnsupportedDsnError):
                pyqueue_sql.Database.wrap(conn)
        finally:
            closed = conn.close()
            if inspect.isawaitable(closed):
                await closed

    run(sync_wrap_of_an_async_connection())


def test_chunked_batches_and_reserve_give_the_results_of_one_call(dsn, make_queue, monkeypatch):
    monkeypatch.setattr(sansio, "CHUNK_SIZE", 4)
    queue = make_queue(visibility_timeout=600)

    async def scenario():
        async with await aio.connect(dsn) as db:
            q = db.queue(queue.name)
            pushed = await q.push_many([(f"k{i:02d}", "job", i) for i in range(10)] + [("k00", "job", 0)])
            held = await q.reserve(n=9)
            committed = await q.commit_many(held)
            return pushed, [r.key for r in held], committed

    pushed, keys, committed = run(scenario())
    assert pushed == 10
    assert keys == [f"k{i:02d}" for i in range(9)]
    assert committed == 9
    assert [m.key for m in queue.pop(n=5)] == ["k09"]


def test_concurrent_consumers_on_several_connections_never_share_a_message(dsn, make_queue):
    queue = make_queue(visibility_timeout=600)
    queue.push_many([(f"m{i}", "k", i) for i in range(60)])

    async def consumer(taken: list[str]):
        async with await aio.connect(dsn) as db:
            q = db.queue(queue.name)
            previous = None
            while True:
                _, got = await q.commit_reserve(previous, n=1)
                if not got:
                    return
                previous = got[0]
                taken.append(previous.key)

    async def scenario():
        lists: list[list[str]] = [[] for _ in range(4)]
        await asyncio.gather(*(consumer(taken) for taken in lists))
        return lists

    lists = run(scenario())
    taken = [key for part in lists for key in part]
    assert sorted(taken) == sorted(f"m{i}" for i in range(60))
    assert queue.stats().ready == 0 and queue.stats().reserved == 0


def test_calls_from_concurrent_tasks_on_one_database_wait_for_each_other(dsn, queue):
    async def scenario():
        async with await aio.connect(dsn) as db:
            q = db.queue(queue.name)
            results = await asyncio.gather(*(q.push(f"k{i}", "k", i) for i in range(20)))
            return results, (await q.stats()).ready

    results, ready = run(scenario())
    assert results == [True] * 20 and ready == 20
