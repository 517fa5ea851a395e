"""Concurrency limits (queue_set_limit) when one reserve takes messages of several kinds at once and
the limit does not bind: each slot of the limited kind goes to a message of that kind, so that the
kind is counted full once its capacity is held, whatever else the same reserve took."""

from __future__ import annotations


def test_a_reserve_of_several_kinds_that_fits_the_limit_gives_its_slots_to_the_limited_kind(queue):
    queue.set_limit("lim", 2)
    queue.push_many(
        [("a1", "lim", 0), ("f1", "free", 1), ("a2", "lim", 2), ("a3", "lim", 3), ("f2", "free", 4)]
    )
    assert [r.key for r in queue.reserve(n=3, timeout=60)] == ["a1", "f1", "a2"]
    # a1 and a2 hold the two slots: the next reserve takes the other kind only
    assert [r.key for r in queue.reserve(n=3, timeout=60)] == ["f2"]
    assert [(lim.kind, lim.capacity, lim.in_use) for lim in queue.limits()] == [("lim", 2, 2)]


def test_two_limited_kinds_in_one_reserve_each_take_their_own_slots(queue):
    queue.set_limit("a", 2)
    queue.set_limit("b", 1)
    queue.push_many([("b1", "b", 0), ("a1", "a", 1), ("a2", "a", 2), ("b2", "b", 3), ("a3", "a", 4)])
    assert [r.key for r in queue.reserve(n=3, timeout=60)] == ["b1", "a1", "a2"]
    assert queue.reserve(n=3, timeout=60) == []  # both kinds full
    assert sorted((lim.kind, lim.in_use) for lim in queue.limits()) == [("a", 2), ("b", 1)]
