"""Waiting for results with the asyncio client: many tasks waiting on one AsyncDatabase each get
their own result (on PostgreSQL they share the connection's LISTEN), as they finish."""

from __future__ import annotations

import asyncio
import datetime as dt
import time
import uuid

from pyqueue_sql import aio


def test_many_waiters_on_one_connection_each_get_their_own_result(dsn):
    async def main():
        db = await aio.connect(dsn)
        other = await aio.connect(dsn)
        try:
            q = await db.queue(f"t.{uuid.uuid4().hex[:12]}").create()
            await q.set_result_retention(dt.timedelta(hours=1))
            keys = [f"k{i}" for i in range(8)]
            for k in keys:
                await q.push(k, "job", {"k": k})
            held = await other.queue(q.name).reserve(n=8)
            waits = [asyncio.create_task(q.wait_result(k, "job", timeout=15)) for k in keys]
            await asyncio.sleep(0.3)  # every task waits
            assert not any(w.done() for w in waits)
            finished = {}
            for r in reversed(held):  # in another order than the waits
                assert await other.queue(q.name).commit_result(r, r.key.upper())
                finished[r.key] = time.monotonic()
                await asyncio.sleep(0.05)
            got = await asyncio.gather(*waits)
            assert [(g.key, g.state, g.result) for g in got] == [(k, "succeeded", k.upper()) for k in keys]
            # meanwhile, the connection served other calls
            assert (await q.stats()).ready == 0
        finally:
            await db.close()
            await other.close()

    asyncio.run(main())


def test_a_wait_that_times_out_leaves_the_others_waiting(dsn):
    async def main():
        db = await aio.connect(dsn)
        other = await aio.connect(dsn)
        try:
            q = await db.queue(f"t.{uuid.uuid4().hex[:12]}").create()
            await q.set_result_retention(3600)
            await q.push("short", "job", {})
            await q.push("long", "job", {})
            long_wait = asyncio.create_task(q.wait_result("long", "job", timeout=10))
            short = await q.wait_result("short", "job", timeout=0.3)
            assert short.state == "ready" and not long_wait.done()
            held = {r.key: r for r in await other.queue(q.name).reserve(n=2)}
            assert await other.queue(q.name).commit_result(held["long"], {"ok": True})
            got = await asyncio.wait_for(long_wait, 5)
            assert (got.state, got.result) == ("succeeded", {"ok": True})
        finally:
            await db.close()
            await other.close()

    asyncio.run(main())


def test_a_waiting_task_gets_the_result_right_after_the_commit(dsn, dialect):
    async def main():
        db = await aio.connect(dsn)
        other = await aio.connect(dsn)
        try:
            q = await db.queue(f"t.{uuid.uuid4().hex[:12]}").create()
            await q.set_result_retention(3600)
            latencies = []
            for i in range(5):
                await q.push(f"k{i}", "job", {})
                [r] = await other.queue(q.name).reserve()
                # PostgreSQL: reads between notifications 30 s apart, so that a result read within
                # the bound below was announced by its notification (a missed one would be read at
                # the 10 s timeout); a bound in milliseconds would time the machine's load instead
                waiting = asyncio.create_task(q.wait_result(f"k{i}", "job", timeout=10, poll=30.0))
                await asyncio.sleep(0.2)  # it waits (the reader is in its slice)
                committed = time.monotonic()
                assert await other.queue(q.name).commit_result(r, i)
                assert (await waiting).result == i
                latencies.append((time.monotonic() - committed) * 1000)
            return sorted(latencies)
        finally:
            await db.close()
            await other.close()

    latencies = asyncio.run(main())
    print(
        f"\n{dialect}: AsyncQueue.wait_result returned {latencies[0]:.1f}-{latencies[-1]:.1f} ms after the commit"
    )
    assert latencies[-1] < 1500, latencies
