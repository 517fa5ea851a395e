"""k in flight per FIFO group through the Python client, on both dialects: Queue.set_group_limit
(a named group's k, the queue's default with group None, None removes), GroupInfo's group_limit
and in_flight, the client's refusals of bad arguments (one line, before any call) and the
routine's refusals, and the asyncio client's same method. The exactness under concurrency and the
round robin are the routines' (tests/contract/test_groups_limits.py)."""

from __future__ import annotations

import asyncio
import uuid

import pytest

from pyqueue_sql import aio, errors


def _push(queue, group, n, kind="job"):
    for i in range(n):
        assert queue.push(f"{group}-{i}", kind, {"i": i}, group=group)


def _by_group(queue):
    return {g.group_key: g for g in queue.groups()}


def test_a_group_limit_lets_k_of_the_group_out_in_its_order(queue):
    _push(queue, "g1", 4)
    _push(queue, "g2", 3)
    queue.set_group_limit("g1", 2)
    taken = [r.key for r in queue.reserve(n=10)]
    assert [k for k in taken if k.startswith("g1")] == ["g1-0", "g1-1"]
    assert [k for k in taken if k.startswith("g2")] == ["g2-0"]  # the default: one at a time
    groups = _by_group(queue)
    assert (groups["g1"].group_limit, groups["g1"].in_flight, groups["g1"].messages) == (2, 2, 4)
    assert (groups["g2"].group_limit, groups["g2"].in_flight) == (1, 1)


def test_the_queue_default_applies_to_every_group_without_its_own(queue):
    queue.set_group_limit(None, 3)
    queue.set_group_limit("b", 1)
    _push(queue, "a", 4)
    _push(queue, "b", 4)
    taken = [r.key for r in queue.reserve(n=10)]
    assert [k for k in taken if k.startswith("a")] == ["a-0", "a-1", "a-2"]
    assert [k for k in taken if k.startswith("b")] == ["b-0"]
    groups = _by_group(queue)
    assert (groups["a"].group_limit, groups["b"].group_limit) == (3, 1)


def test_none_removes_a_groups_k_and_the_default_goes_back_to_one(queue):
    queue.set_group_limit(None, 2)
    queue.set_group_limit("a", 3)
    queue.set_group_limit("a", None)
    queue.set_group_limit(None, None)
    queue.set_group_limit(None, None)  # nothing to remove: no error either
    _push(queue, "a", 3)
    assert _by_group(queue)["a"].group_limit == 1
    assert [r.key for r in queue.reserve(n=10)] == ["a-0"]  # one at a time again


def test_a_groups_own_k_wins_over_the_default_until_removed(queue):
    _push(queue, "a", 3)
    queue.set_group_limit(None, 2)
    queue.set_group_limit("a", 3)
    assert _by_group(queue)["a"].group_limit == 3
    queue.set_group_limit("a", None)
    assert _by_group(queue)["a"].group_limit == 2


@pytest.mark.parametrize(
    ("args", "text"),
    [
        (("g", 0), "k must be a whole number from 1 to 10000"),
        (("g", 10001), "k must be a whole number from 1 to 10000"),
        (("g", 1.5), "k must be a whole number, not 1.5"),
        (("g", True), "k must be a whole number, not True"),
        ((7, 2), "group must be a str, not int"),
    ],
)
def test_bad_arguments_are_refused_in_one_line_before_any_call(queue, args, text):
    _push(queue, "g", 2)
    with pytest.raises(errors.InvalidArgumentError) as refused:
        queue.set_group_limit(*args)
    assert text in str(refused.value) and "\n" not in str(refused.value)
    assert _by_group(queue)["g"].group_limit == 1


def test_the_routines_refusals_are_the_projects_exceptions(db, queue):
    with pytest.raises(errors.UnknownQueueError):
        db.queue(f"t.none.{uuid.uuid4().hex[:8]}").set_group_limit("g", 2)
    with pytest.raises(errors.InvalidArgumentError):
        queue.set_group_limit("", 2)


def test_the_asyncio_client_sets_a_group_limit(dsn, queue):
    _push(queue, "g", 3)

    async def scenario():
        async with await aio.connect(dsn) as adb:
            q = adb.queue(queue.name)
            await q.set_group_limit("g", 2)
            with pytest.raises(errors.InvalidArgumentError, match="k must be"):
                await q.set_group_limit("g", 0)
            return await q.groups()

    [g] = asyncio.run(scenario())
    assert (g.group_key, g.group_limit) == ("g", 2)
