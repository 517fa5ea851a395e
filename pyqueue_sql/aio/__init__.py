"""The asyncio client: the same queue as pyqueue_sql.Database / Queue, with coroutine methods.

    from pyqueue_sql import aio

    db = await aio.connect("postgresql://localhost/app")   # or mysql://... (needs the asyncio extra)
    emails = await db.queue("emails").create(visibility_timeout=60)
    await emails.push("user-42", "welcome", {"to": "a@example.com"})
    for msg in await emails.reserve(n=10):
        ...
        await emails.commit(msg)
    async with db.transaction():
        await emails.push_many([...])
    await db.close()

Every method of Queue and Database is here with the same name, arguments, results and errors
(the two clients share that code; only how a routine call runs differs). Drivers: psycopg 3's
AsyncConnection for PostgreSQL, aiomysql for MySQL/MariaDB (the ``asyncio`` extra:
``pip install -e '.[asyncio]'`` from a checkout).

Enqueue in your own transaction with ``AsyncDatabase.wrap(conn)``: a psycopg AsyncConnection, an
aiomysql connection, or a SQLAlchemy AsyncConnection / AsyncSession (its current transaction's
connection is used, and never committed by the client)::

    async with AsyncSession(engine) as session, session.begin():
        session.add(Order(...))
        await AsyncDatabase.wrap(session).queue("emails").push("order-7", "receipt", {...})
"""

from .client import AsyncDatabase, AsyncQueue, connect
from .worker import AsyncJob, AsyncWorker

__all__ = ["AsyncDatabase", "AsyncJob", "AsyncQueue", "AsyncWorker", "connect"]
