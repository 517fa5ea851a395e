"""Message headers through the asyncio client: the same methods as the sync client's (written once,
sans-IO), so one round trip of each path on both dialects."""

from __future__ import annotations

import asyncio
import uuid

from pyqueue_sql import NewMessage, Publication, aio


def test_headers_round_trip_through_the_asyncio_client(dsn):
    async def main():
        db = await aio.connect(dsn)
        try:
            q = await db.queue(f"t.{uuid.uuid4().hex[:12]}").create()
            assert await q.push("a", "job", 1, headers={"h": "a"})
            assert await q.push("g", "job", 2, group="grp", headers={"h": "g"})
            assert await q.push_many([NewMessage("b", "job", 3, headers={"h": "b"}), ("c", "job", 4)]) == 2
            topic = f"t{uuid.uuid4().hex[:8]}"
            await db.bind(topic, q)
            assert await db.publish(topic, "p", "job", 5, headers={"h": "p"}) == 1
            assert await db.publish_many([Publication(topic, "p2", "job", 6, headers={"h": "p2"})]) == 1
            await db.unbind(topic, q)
            assert (await q.message("a", "job")).headers == {"h": "a"}
            got = {r.key: r.headers for r in await q.reserve(n=10)}
            assert got == {
                "a": {"h": "a"},
                "g": {"h": "g"},
                "b": {"h": "b"},
                "c": None,
                "p": {"h": "p"},
                "p2": {"h": "p2"},
            }
        finally:
            await db.close()

    asyncio.run(main())
