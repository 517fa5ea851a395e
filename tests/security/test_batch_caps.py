"""The rows one batch call takes: at most 10,000 (docs/contract.md, "Batch size"), on every
routine taking a batch or a list, both dialects, refused with one line naming the cap and changing
nothing. Each is called as a caller of the routine meets it: a role holding only the capability
that calls it (producer, consumer), one call for the whole batch (the client's chunking raised
above the cap for the test: a plain SQL caller sends any size). The client's own batch calls chunk
below the cap (sansio.CHUNK_SIZE), so push_many and commit_many of more than the cap go through."""

from __future__ import annotations

import pytest

from pyqueue_sql import InvalidArgumentError, sansio
from tests.security.test_privileges import Accounts

CAP = 10_000
REFUSED = f"a batch takes at most {CAP} messages, this one has {CAP + 1}"


@pytest.fixture
def accounts(dsn):
    made = Accounts(dsn)
    yield made
    made.close()


@pytest.fixture
def one_call(monkeypatch):
    """Every batch in one routine call, whatever its size."""
    monkeypatch.setattr(sansio, "CHUNK_SIZE", 2 * CAP)


def test_every_batch_push_refuses_more_than_the_cap_and_takes_the_cap(accounts, make_queue, db, one_call):
    queue = make_queue()
    grouped = make_queue()
    topic = f"caps.{queue.name}"
    db.bind(topic, queue)
    producer = accounts.client(accounts.with_capabilities("bp", "producer"))
    over = [(f"k{i}", "job", {"i": i}) for i in range(CAP + 1)]
    calls = {
        "queue_push_batch": lambda: producer.queue(queue.name).push_many(over),
        "queue_push_batch_with_headers": lambda: producer.queue(queue.name).push_many(
            [(k, kd, p, None, None, None, {"h": "1"}) for k, kd, p in over]
        ),
        "queue_push_batch_grouped": lambda: producer.queue(grouped.name).push_many(
            [(k, kd, p, None, None, "g") for k, kd, p in over]
        ),
        "queue_push_batch_grouped_with_headers": lambda: producer.queue(grouped.name).push_many(
            [(k, kd, p, None, None, "g", {"h": "1"}) for k, kd, p in over]
        ),
        "queue_publish_batch": lambda: producer.publish_many([(topic, k, kd, p) for k, kd, p in over]),
        "queue_publish_batch_with_headers": lambda: producer.publish_many(
            [(topic, k, kd, p, None, None, {"h": "1"}) for k, kd, p in over]
        ),
    }
    for routine, call in calls.items():
        try:
            call()
        except InvalidArgumentError as exc:
            assert REFUSED in str(exc), (routine, exc)
        else:
            pytest.fail(f"{routine} took {CAP + 1} messages in one call")
    assert (queue.stats().ready, grouped.stats().ready) == (0, 0)  # nothing of a refused batch stays
    assert producer.queue(queue.name).push_many(over[:CAP]) == CAP  # the cap itself is taken


def test_commit_batches_refuse_more_than_the_cap_and_the_client_chunks_below_it(
    accounts, make_queue, monkeypatch
):
    queue = make_queue()
    queue.set_result_retention(3600)
    assert queue.push_many([(f"k{i}", "job", {}) for i in range(CAP + 1)]) == CAP + 1
    consumer = accounts.client(accounts.with_capabilities("bc", "consumer"))
    mine = consumer.queue(queue.name)
    held = mine.reserve(n=CAP + 1, timeout=600)
    assert len(held) == CAP + 1
    monkeypatch.setattr(sansio, "CHUNK_SIZE", 2 * CAP)
    with pytest.raises(InvalidArgumentError, match=REFUSED):
        mine.commit_many(held)
    with pytest.raises(InvalidArgumentError, match=REFUSED):
        mine.commit_result_many([(r, 1) for r in held])
    with pytest.raises(
        InvalidArgumentError, match=f"kinds holds {CAP + 1} kinds; a filter takes at most {CAP}"
    ):
        mine.reserve(kinds=[f"kind-{i}" for i in range(CAP + 1)])
    assert queue.stats().reserved == CAP + 1  # nothing committed
    monkeypatch.undo()  # the client's own chunks: below the cap, in one transaction
    assert sansio.CHUNK_SIZE <= CAP
    assert mine.commit_many(held) == CAP + 1
    assert queue.stats().reserved == 0
