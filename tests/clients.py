"""Both clients for the suites that run on every client (tests/contract, and the dialect-internal
tests/postgresql and tests/mysql): every test that takes ``db``/``connect`` (and so ``queue``,
``make_queue``, ``raw``) runs once with the sync client (pyqueue_sql.Database) and once with the
asyncio one (pyqueue_sql.aio.AsyncDatabase), on each dialect. Those folders' conftest.py import the
fixtures below; tests/conftest.py's collection hook drops the variants drops_async_variant names.

For the asyncio client the tests get a blocking adapter: every coroutine method of AsyncDatabase
and AsyncQueue, generated from those classes, runs on an event loop in a background thread, so each
call really goes through the asyncio client and its driver. ``db.connection`` of the adapter is a
separate plain DB-API connection to the same database, for the tests that run raw SQL (``raw``).
A test that needs the client's own session (session settings, a raw statement in the client's
transaction) carries ``@pytest.mark.sync_client_only``. A test that calls the routines with raw SQL
only (the ``raw`` and ``ctx`` fixtures, or ``sql`` built on raw; never the client) runs with the
sync client only.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import inspect
import threading
from collections.abc import Coroutine, Iterator
from typing import Any

import pytest

import pyqueue_sql
from pyqueue_sql import aio, dialects

CLIENTS = ("sync", "async")


# Fixtures that reach the database through the client (raw and ctx only borrow db's connection).
CLIENT_FIXTURES = frozenset({"db", "connect", "queue", "make_queue"})
RAW_SQL_FIXTURES = frozenset({"raw", "ctx"})


def runs_raw_sql_only(item) -> bool:
    """Whether a test calls the routines only with raw SQL (the raw and ctx fixtures), never
    through the client: its asyncio variant would run the very same statements again."""
    if not RAW_SQL_FIXTURES & set(item.fixturenames):
        return False
    if CLIENT_FIXTURES & set(inspect.signature(item.function).parameters):
        return False
    if {"queue", "make_queue"} & set(item.fixturenames):
        return False
    for name, definitions in item._fixtureinfo.name2fixturedefs.items():
        if name in RAW_SQL_FIXTURES | CLIENT_FIXTURES:
            continue
        if any(CLIENT_FIXTURES & set(d.argnames) for d in definitions):
            return False  # a fixture of the module that uses the client
    return True


SYNC_CLIENT_ONLY = (
    "sync_client_only: run this test with the sync client only (it needs the client's own DB-API "
    "session, which the asyncio client's adapter does not share)"
)


def drops_async_variant(item) -> bool:
    """Whether the item is the asyncio-client variant of a test marked sync_client_only or of one
    that runs raw SQL only (tests/conftest.py deselects those)."""
    return (
        getattr(item, "callspec", None) is not None
        and item.callspec.params.get("client") == "async"
        and (item.get_closest_marker("sync_client_only") is not None or runs_raw_sql_only(item))
    )


class LoopThread:
    """An event loop running in a daemon thread; run() blocks until a coroutine is done there."""

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, name="contract-aio-loop", daemon=True)
        self.thread.start()

    def run(self, coroutine: Coroutine[Any, Any, Any]) -> Any:
        return asyncio.run_coroutine_threadsafe(coroutine, self.loop).result()

    def stop(self) -> None:
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join()
        self.loop.close()


class Blocking:
    """A blocking stand-in for an asyncio client object (see blocking_class)."""

    def __init__(self, target: Any, loop: LoopThread, db: Any = None) -> None:
        self._target = target
        self._loop = loop
        self._db = db  # a queue's blocking database

    def __getattr__(self, name: str) -> Any:  # plain attributes: name, dialect, serialization_retries
        return getattr(self._target, name)

    def __repr__(self) -> str:
        return repr(self._target)

    def _result(self, value: Any) -> Any:
        if isinstance(value, aio.AsyncQueue):
            return BlockingQueue(value, self._loop, self._db or self)
        return value


def _unwrap(value: Any) -> Any:
    return value._target if isinstance(value, Blocking) else value


def blocking_class(async_class: type, base: type = Blocking) -> type:
    """A subclass of base with a blocking method for each public coroutine method of async_class
    that base does not define itself: it runs that method on the loop thread (adapter arguments unwrapped, an AsyncQueue result
    wrapped)."""

    def blocking(name: str, coroutine_function: Any) -> Any:
        @functools.wraps(coroutine_function)
        def method(self: Blocking, *args: Any, **kwargs: Any) -> Any:
            call = getattr(self._target, name)(
                *map(_unwrap, args), **{k: _unwrap(v) for k, v in kwargs.items()}
            )
            return self._result(self._loop.run(call))

        return method

    methods = {
        name: blocking(name, function)
        for name, function in inspect.getmembers(async_class, inspect.iscoroutinefunction)
        if not name.startswith("_") and not hasattr(base, name)
    }
    return type(f"Blocking{async_class.__name__}", (base,), methods)


class _QueueExtras(Blocking):
    @property
    def db(self) -> Any:
        return self._db


BlockingQueue = blocking_class(aio.AsyncQueue, _QueueExtras)


class _DatabaseExtras(Blocking):
    """What AsyncDatabase has besides coroutine methods: queue(), transaction(), and a raw connection."""

    def __init__(self, target: aio.AsyncDatabase, loop: LoopThread, dsn: str) -> None:
        super().__init__(target, loop)
        self._dsn = dsn
        self._raw: Any = None

    def queue(self, name: str) -> Any:
        return BlockingQueue(self._target.queue(name), self._loop, self)

    @contextlib.contextmanager
    def transaction(self) -> Iterator[Any]:
        manager = self._target.transaction()
        self._loop.run(manager.__aenter__())
        try:
            yield self
        except BaseException as exc:
            if not self._loop.run(manager.__aexit__(type(exc), exc, exc.__traceback__)):
                raise
        else:
            self._loop.run(manager.__aexit__(None, None, None))

    @property
    def connection(self) -> Any:
        """A plain DB-API connection to the same database (another session), for raw SQL."""
        if self._raw is None:
            self._raw = dialects.for_dsn(self._dsn).connect(self._dsn)
        return self._raw

    def close(self) -> None:
        try:
            self._loop.run(self._target.close())
        finally:
            if self._raw is not None:
                self._raw.close()

    def __enter__(self) -> Any:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


BlockingDatabase = blocking_class(aio.AsyncDatabase, _DatabaseExtras)


@pytest.fixture(scope="session")
def loop_thread():
    runner = LoopThread()
    yield runner
    runner.stop()


@pytest.fixture(params=CLIENTS)
def client(request):
    return request.param


@pytest.fixture
def connect(dsn, client, request):
    """Opens extra connections (closed after the test) of the client under test."""
    opened = []

    def make() -> Any:
        if client == "sync":
            db = pyqueue_sql.connect(dsn)
        else:
            loop = request.getfixturevalue("loop_thread")
            db = BlockingDatabase(loop.run(aio.connect(dsn)), loop, dsn)
        opened.append(db)
        return db

    yield make
    for db in opened:
        with contextlib.suppress(Exception):
            db.close()
