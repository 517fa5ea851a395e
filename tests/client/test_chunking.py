"""push_many, commit_many and reserve(n) send more than client.CHUNK_SIZE messages in several calls
of at most CHUNK_SIZE, in one transaction, with the results of one call: counts summed, order kept.
The tests lower CHUNK_SIZE so that a few messages take several chunks."""

from __future__ import annotations

import json

import pytest

import pyqueue_sql
from pyqueue_sql import InvalidArgumentError, client, sansio


class RecordingDatabase(pyqueue_sql.Database):
    """A Database that notes the n of each reserve and the size of each batch it runs on the
    connection (Database._do runs every step; the calls still run on the real server)."""

    def __init__(self, dsn: str) -> None:
        dialect = pyqueue_sql.dialects.for_dsn(dsn)
        super().__init__(dialect.connect(dsn), dialect, owned=True)
        self.sent: list[tuple[str, int]] = []

    def _do(self, step):
        call = step.call if isinstance(step, client.OwnTransaction) else step  # MySQL's reserve, commit_batch
        if isinstance(call, client.Call) and call.statement == "reserve":
            self.sent.append((call.statement, call.params["n"]))
        elif isinstance(call, client.Call) and call.statement in ("push_batch", "commit_batch"):
            self.sent.append((call.statement, _batch_size(call.params)))
        return super()._do(step)


def _batch_size(params) -> int:
    """Messages in a batch call: PostgreSQL arrays, MySQL JSON arrays."""
    array = params.get("messages") or params.get("tokens") or params.get("keys")
    return len(json.loads(array)) if isinstance(array, str) else len(array)


@pytest.fixture
def small_chunks(monkeypatch):
    monkeypatch.setattr(sansio, "CHUNK_SIZE", 3)


@pytest.fixture
def recording(dsn, make_queue):
    db = RecordingDatabase(dsn)
    yield db, db.queue(make_queue(visibility_timeout=600).name)
    db.close()


def test_push_many_over_a_chunk_counts_new_messages_across_chunks(small_chunks, recording):
    db, queue = recording
    assert queue.push_many([(f"k{i}", "job", {"i": i}) for i in range(4)]) == 4
    db.sent.clear()
    # 8 messages: k0..k3 are live already (duplicates in the first two chunks), k9 twice
    batch = [(f"k{i}", "job", {"i": i}) for i in range(7)] + [("k9", "job", 1), ("k9", "job", 2)]
    assert queue.push_many(batch) == 4  # k4, k5, k6, k9 once
    assert db.sent == [("push_batch", 3), ("push_batch", 3), ("push_batch", 3)]
    assert queue.stats().ready == 8


def test_reserve_over_a_chunk_keeps_priority_and_fifo_order(small_chunks, recording):
    db, queue = recording
    queue.push_many([(f"low{i}", "job", i, None, 0) for i in range(4)])
    queue.push_many([(f"high{i}", "job", i, None, 5) for i in range(4)])
    got = queue.reserve(n=7)
    assert [r.key for r in got] == [f"high{i}" for i in range(4)] + ["low0", "low1", "low2"]
    assert [n for what, n in db.sent if what == "reserve"] == [3, 3, 1]
    assert len({r.token for r in got}) == 7
    assert queue.stats().reserved == 7


def test_reserve_over_a_chunk_stops_when_a_chunk_comes_back_short(small_chunks, recording):
    db, queue = recording
    queue.push_many([(f"k{i}", "job", i) for i in range(4)])
    db.sent.clear()
    assert [r.key for r in queue.reserve(n=10)] == ["k0", "k1", "k2", "k3"]
    assert db.sent == [("reserve", 3), ("reserve", 3)]


def test_commit_many_over_a_chunk_sums_what_still_held(small_chunks, recording):
    db, queue = recording
    queue.push_many([(f"k{i}", "job", i) for i in range(7)])
    held = queue.reserve(n=7)
    assert queue.commit(held[4])  # already gone: not counted
    db.sent.clear()
    assert queue.commit_many(held) == 6
    assert db.sent == [("commit_batch", 3), ("commit_batch", 3), ("commit_batch", 1)]
    assert queue.stats().reserved == 0 and queue.stats().ready == 0


def test_a_refused_chunk_rolls_back_the_chunks_before_it(small_chunks, recording):
    """The chunks run in one transaction: an empty key in the third chunk refuses the whole batch,
    nothing of the first two stays."""
    db, queue = recording
    batch = [(f"k{i}", "job", i) for i in range(6)] + [("", "job", 0)]
    with pytest.raises(InvalidArgumentError):
        queue.push_many(batch)
    assert len(db.sent) == 3
    assert queue.stats().ready == 0
    assert queue.push_many(batch[:6]) == 6  # and the connection is usable again


def test_chunks_join_the_callers_transaction(small_chunks, recording):
    db, queue = recording
    with pytest.raises(RuntimeError):
        with db.transaction():
            assert queue.push_many([(f"k{i}", "job", i) for i in range(5)]) == 5
            raise RuntimeError("abort")
    assert queue.stats().ready == 0
    with db.transaction():
        queue.push_many([(f"k{i}", "job", i) for i in range(5)])
    assert queue.stats().ready == 5


def test_an_n_the_routine_refuses_is_sent_as_it_is(small_chunks, recording):
    db, queue = recording
    for bad in (0, -4, 2**31):
        with pytest.raises(InvalidArgumentError):
            queue.reserve(n=bad)
    assert db.sent == [("reserve", 0), ("reserve", -4), ("reserve", 2**31)]
