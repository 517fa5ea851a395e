"""AsyncDatabase and AsyncQueue: the client of pyqueue_sql.client on an asyncio driver.

Their methods are Database's and Queue's own (pyqueue_sql.client.DatabaseCalls and QueueCalls,
written sans-IO): the same arguments, validation, results and errors; here each routine call is
awaited on psycopg's AsyncConnection (PostgreSQL) or an aiomysql connection (MySQL/MariaDB) through
the dialect's *_async methods. The policy around the calls (serialization failures run again,
transactions of the client's own) is Database's too: DatabaseCalls yields its steps, and
AsyncDatabase awaits each of them.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import inspect
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

from .. import dialects, errors, statements
from ..client import (
    RESULT_POLL,
    RESULT_WAIT_SLICE,
    Call,
    DatabaseCalls,
    OwnTransaction,
    Pause,
    QueueCalls,
    Result,
    SansIO,
    Step,
    is_sqlalchemy,
    result_note_matches,
    runs_sans_io,
    wait_seconds,
)
from ..dialects import Duration, Row, key_value, text_value
from ..statements import Statement

# While tasks wait for results on one connection, the one that reads the notifications holds the
# connection at most this long at a time, so that the others' calls go in between.
RESULT_READ_SLICE = 0.1


def async_method(method: Callable[..., SansIO]) -> Callable[..., Any]:
    """The coroutine method of a sans-IO one: AsyncDatabase.drive awaits its calls."""

    @functools.wraps(method)
    async def run(self: Any, *args: object, **kwargs: object) -> Any:
        return await self._runner.drive(method(self, *args, **kwargs))

    return run


def sqlalchemy_async_source(
    obj: object,
) -> tuple[str, Callable[[], Awaitable[dialects.AsyncConnection]]] | None:
    """For a SQLAlchemy ``AsyncConnection`` or ``AsyncSession``: (its dialect's name, a coroutine
    function that returns the driver connection of its current transaction, beginning one as
    SQLAlchemy's autobegin would when none is open). None for any other object."""
    if not is_sqlalchemy(obj):
        return None
    from sqlalchemy.ext.asyncio import AsyncConnection, AsyncSession

    if isinstance(obj, AsyncSession):

        async def of_session() -> dialects.AsyncConnection:
            connection = await obj.connection()
            return (await connection.get_raw_connection()).driver_connection

        return obj.sync_session.get_bind().dialect.name, of_session
    if isinstance(obj, AsyncConnection):

        async def of_connection() -> dialects.AsyncConnection:
            if not obj.in_transaction():
                await obj.begin()
            return (await obj.get_raw_connection()).driver_connection

        return obj.dialect.name, of_connection
    raise errors.UnsupportedDsnError(
        f"cannot use a SQLAlchemy {type(obj).__name__}: pass an AsyncConnection or an AsyncSession"
    )


@runs_sans_io(async_method)
class AsyncDatabase(DatabaseCalls):
    """A connection of an asyncio driver to a database that has the pyqueue-sql schema installed.

    Every method of Database, as a coroutine; ``async with db.transaction():`` for a transaction.
    One connection runs one call at a time: calls from concurrent tasks wait for each other (use a
    database per task for parallel work)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._lock = asyncio.Lock()
        # wait_result: the futures of the waiting tasks by (channel, key, kind), and the task that
        # reads the notifications for all of them (see _read_result_notes)
        self._result_waiters: dict[tuple[str, str, str], set[asyncio.Future]] = {}
        self._result_reader: asyncio.Task | None = None
        self._background: set[asyncio.Task] = set()  # UNLISTENs under way

    @property
    def connection(self) -> dialects.AsyncConnection:
        """The driver connection (for a wrapped SQLAlchemy object: the one its last call ran on)."""
        return self._connection

    @classmethod
    def wrap(cls, connection: object) -> AsyncDatabase:
        """Uses your connection inside your own transactions: a psycopg 3 ``AsyncConnection``, an
        aiomysql connection, or a SQLAlchemy ``AsyncConnection`` or ``AsyncSession``, so that a push
        commits or rolls back with your ORM writes. Each call runs on the driver connection of the
        SQLAlchemy object's current transaction; commit or roll back through SQLAlchemy (or your
        driver) as usual, the client never does."""
        found = sqlalchemy_async_source(connection)
        if found is not None:
            name, source = found
            return cls(None, dialects.for_name(name), owned=False, source=source)
        return cls(connection, dialects.for_connection(connection, asynchronous=True), owned=False)

    def queue(self, name: str) -> AsyncQueue:
        return AsyncQueue(self, name)

    async def call(self, statement: Statement | str, **params: object) -> list[Row]:
        """Runs a declared statement (pyqueue_sql.statements; a str: the one of that name); its (first) result set."""
        return await self._perform(self._call_steps(Call(statements.named(statement), params)))

    async def call_sets(self, statement: Statement | str, **params: object) -> list[list[Row]]:
        """Runs a declared statement (pyqueue_sql.statements; a str: the one of that name); every result set it returns (MySQL procedures)."""
        return await self._perform(self._call_steps(Call(statements.named(statement), params, all_sets=True)))

    async def drive(self, steps: SansIO) -> Any:
        """Runs a sans-IO method (pyqueue_sql.client.Call): each call it yields awaited, its rows
        sent back; its result."""
        return await self._perform(self._method_steps(steps))

    async def _perform(self, steps: SansIO) -> Any:
        """Database._perform, each step awaited; one method's steps at a time on the connection."""
        async with self._lock:
            return await self._perform_locked(steps)

    async def _perform_locked(self, steps: SansIO) -> Any:
        """_perform for a caller that holds the connection's lock already."""
        reply, error = None, None
        while True:
            try:
                step = steps.send(reply) if error is None else steps.throw(error)
            except StopIteration as done:
                return done.value
            try:
                reply, error = await self._do(step), None
            except BaseException as exc:
                reply, error = None, exc

    async def _do(self, step: Call | OwnTransaction | Step | Pause) -> Any:
        """Database._do, awaited: a lost connection is a ConnectionLostError, and the next call
        opens a new one."""
        if isinstance(step, Pause):
            await asyncio.sleep(step.seconds)
            return None
        if self._skips(step):
            return None
        if self._reopens():
            await self._reopen()
        connection = await self._current()
        try:
            return await self._run_step(step, connection)
        except Exception as exc:
            raise self._lost_or(step, exc, connection)  # noqa: B904 - its cause is set

    async def _reopen(self) -> None:
        with contextlib.suppress(Exception):
            closing = self._connection.close()
            if inspect.isawaitable(closing):
                await closing
        self._reopened(await self.dialect.connect_async(self._dsn))

    async def _run_step(
        self, step: Call | OwnTransaction | Step, connection: dialects.AsyncConnection
    ) -> Any:
        d = self.dialect
        if isinstance(step, Call):
            run = d.run_sets_async if step.all_sets else d.run_async
            return await run(connection, step.statement, step.params)
        if isinstance(step, OwnTransaction):
            call = step.call
            return await d.run_in_own_transaction_async(
                connection, call.statement, call.params, call.all_sets
            )
        if step is Step.BEGIN:
            return await d.begin_async(connection)
        if step is Step.COMMIT:
            return await d.end_transaction_async(connection, commit=True)
        return await d.rollback_async(connection)

    async def _current(self) -> dialects.AsyncConnection:
        if self._source is not None:
            connection = await self._source()
            if not self.dialect.owns_async(connection):
                raise errors.UnsupportedDsnError(
                    f"SQLAlchemy runs {type(connection).__module__}.{type(connection).__name__}: "
                    "pyqueue_sql.aio needs psycopg (postgresql+psycopg) or aiomysql (mysql+aiomysql)"
                )
            self._connection = connection
        return self._connection

    # -- waiting for results (AsyncQueue.wait_result) ------------------------------------
    def _listens_for_results(self) -> bool:
        return self.dialect.supports_listen and self._owned and not self._in_transaction

    async def _listen_results(self, queue: AsyncQueue) -> str:
        channel = self._result_channels.get(queue.name)
        if channel is None:
            channel = self._result_channels[queue.name] = str(await queue.result_channel())
        if not self._result_listens.get(channel):
            async with self._lock:
                await self.dialect.listener.listen_async(self._connection, [channel])
        self._result_listens[channel] = self._result_listens.get(channel, 0) + 1
        return channel

    def _unlisten_results(self, channel: str) -> None:
        """Stops listening once no wait needs the channel (in a task of its own: the waiter that
        leaves does not wait for the reader's slice)."""
        self._result_listens[channel] -= 1
        if self._result_listens[channel] == 0:
            del self._result_listens[channel]
            task = asyncio.create_task(self._unlisten(channel))
            self._background.add(task)
            task.add_done_callback(self._background.discard)

    async def _unlisten(self, channel: str) -> None:
        d = self.dialect
        with contextlib.suppress(Exception):
            async with self._lock:
                if self._result_listens.get(channel):  # a new wait needs it meanwhile
                    return
                async with self._connection.cursor() as cur:
                    await cur.execute(
                        d.admin.compose(d.statement(statements.UNLISTEN), channel=d.admin.identifier(channel))
                    )

    async def _read_result_notes(self) -> None:
        """Reads the result notifications for every waiting task of this connection, a slice at a
        time (the others' calls take the connection in between). For each one that names a
        waited-for message it reads the result at once, still holding the connection, and hands
        it to the tasks that wait for it; ends when no task waits."""
        queues = {channel: queue for queue, channel in self._result_channels.items()}
        try:
            while self._result_waiters:
                async with self._lock:
                    notes = await self.dialect.listener.wait_for_notification_async(
                        self._connection, RESULT_READ_SLICE
                    )
                    for channel, payload in notes:
                        for (ch, key, kind), futures in list(self._result_waiters.items()):
                            if ch != channel or not result_note_matches(payload, key, kind):
                                continue
                            queue = AsyncQueue(self, queues.get(ch) or self._queue_of(ch))
                            try:
                                found: Result | None = await self._perform_locked(
                                    self._method_steps(QueueCalls.result(queue, key, kind))
                                )
                            except Exception:
                                found = None  # the waiter reads it itself
                            for fut in futures:
                                if not fut.done():
                                    fut.set_result(found)
                await asyncio.sleep(0)
        finally:
            self._result_reader = None

    def _queue_of(self, channel: str) -> str:
        return next(q for q, ch in self._result_channels.items() if ch == channel)

    async def _wait_result(
        self, queue: AsyncQueue, key: str | int, kind: str, deadline: float, poll: float
    ) -> Result:
        loop = asyncio.get_running_loop()
        if not self._listens_for_results():
            while True:
                left = deadline - loop.time()
                r = (
                    await queue.result(key, kind)
                    if left <= 0
                    else await queue.result_wait_once(
                        key, kind, max(round(min(left, RESULT_WAIT_SLICE), 6), 0.000001)
                    )
                )
                if r.finished or r.state == "unknown" or deadline - loop.time() <= 0:
                    return r
        ident_key, ident_kind = str(key_value(key)), str(text_value(kind, "kind"))
        channel = await self._listen_results(queue)
        try:
            while True:
                fut = loop.create_future()
                ident = (channel, ident_key, ident_kind)
                self._result_waiters.setdefault(ident, set()).add(fut)
                try:
                    r = await queue.result(key, kind)
                    left = deadline - loop.time()
                    if r.finished or r.state == "unknown" or left <= 0:
                        return r
                    if self._result_reader is None:
                        self._result_reader = asyncio.create_task(self._read_result_notes())
                    await asyncio.wait({fut}, timeout=min(left, poll))
                    found = fut.result() if fut.done() else None
                    if isinstance(found, Result) and (found.finished or found.state == "unknown"):
                        return found  # read by the reader as the notification came
                finally:
                    waiting = self._result_waiters.get(ident)
                    if waiting is not None:
                        waiting.discard(fut)
                        if not waiting:
                            del self._result_waiters[ident]
        finally:
            self._unlisten_results(channel)

    @contextlib.asynccontextmanager
    async def transaction(self) -> AsyncIterator[AsyncDatabase]:
        """``async with db.transaction():`` runs the calls in the block as one transaction (commit
        at the end, rollback on error); see Database.transaction."""
        self._may_begin()
        await self._do(Step.BEGIN)
        self._in_transaction = True
        try:
            yield self
        except BaseException:
            self._in_transaction = False
            await self._do(Step.ROLLBACK)
            raise
        self._in_transaction = False
        await self._do(Step.COMMIT)

    async def close(self) -> None:
        if self._owned:
            closed = self._connection.close()
            if asyncio.iscoroutine(closed):  # psycopg's is a coroutine, aiomysql's is not
                await closed

    async def __aenter__(self) -> AsyncDatabase:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()


@runs_sans_io(async_method)
class AsyncQueue(QueueCalls):
    """One named queue of an AsyncDatabase: every method of Queue, as a coroutine."""

    db: AsyncDatabase

    async def wait_result(
        self, key: str | int, kind: str, timeout: Duration = None, *, poll: float = RESULT_POLL
    ) -> Result:
        """Queue.wait_result, awaited. Tasks that wait on one AsyncDatabase share its LISTEN: one
        reads the notifications for all (a slice at a time, the others' calls in between) and
        wakes the task whose result each announces."""
        deadline = asyncio.get_running_loop().time() + wait_seconds(timeout)
        return await self.db._wait_result(self, key, kind, deadline, poll)


async def connect(dsn: str) -> AsyncDatabase:
    """Opens an asyncio connection; the DSN's scheme picks the dialect (postgresql:// or mysql://)."""
    dialect = dialects.for_dsn(dsn)
    return AsyncDatabase(await dialect.connect_async(dsn), dialect, owned=True, dsn=dsn)
