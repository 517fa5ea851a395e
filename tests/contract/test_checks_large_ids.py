"""Ids past 2**31. Message and history ids are 64-bit on both dialects (a PostgreSQL identity, a
MySQL AUTO_INCREMENT), and years of traffic take them past what a 32-bit integer holds. A database
whose ids start there runs the whole life cycle, each routine on its usual way: no routine may hold
an id in a 32-bit variable (MariaDB refuses to store one there: the call fails)."""

from __future__ import annotations

import pytest

import pyqueue_sql
from pyqueue_sql import dialects

START = 3_000_000_000


@pytest.fixture
def db(installed_database, dialect):
    url = installed_database("ids")
    conn = dialects.for_name(dialect).connect(url, autocommit=True)
    try:
        with conn.cursor() as cur:
            for table in ("pyqueue_message", "pyqueue_history"):
                if dialect == "postgresql":
                    cur.execute(f"ALTER TABLE {table} ALTER COLUMN id RESTART WITH {START}")
                else:
                    cur.execute(f"ALTER TABLE {table} AUTO_INCREMENT = {START}")
    finally:
        conn.close()
    with pyqueue_sql.connect(url) as database:
        yield database


@pytest.mark.parametrize("history", [False, True], ids=["plain", "history"])
def test_every_step_of_the_life_cycle_works_with_ids_past_2_31(db, history):
    queue = db.queue("ids").create(history_retention=3600 if history else None)
    keys = [f"m{i}" for i in range(12)]
    assert queue.push_many([(key, "job", {"i": i}) for i, key in enumerate(keys)]) == 12
    assert queue.push("single", "job", {})
    done: list[str] = []

    # one at a time: reserve + commit, then commit_reserve chained, as a worker does
    (first,) = queue.reserve(timeout=60)
    assert queue.commit(first)
    done.append(first.key)
    committed, (held,) = queue.commit_reserve(None, timeout=60)
    assert committed is None
    for _ in range(3):
        committed, (following,) = queue.commit_reserve(held, timeout=60)
        assert committed is True
        done.append(held.key)
        held = following
    assert queue.commit(held)
    done.append(held.key)

    # a delivery given back, ready again at once (behind the others)
    (given_back,) = queue.reserve(timeout=60)
    assert queue.rollback(given_back, delay=0)

    # batches and a pop
    batch = queue.reserve(n=4, timeout=60)
    assert len(batch) == 4
    assert queue.commit_many(batch) == 4
    done += [r.key for r in batch]
    popped = queue.pop(n=10)
    done += [m.key for m in popped]
    assert given_back.key in [m.key for m in popped]

    assert sorted(done) == sorted([*keys, "single"])
    assert queue.stats().ready == 0
    if history:
        assert len(queue.message_history("m0", "job")) == 1
