"""A child cancelled with its parent names why: the parent failed, or was cancelled (the mutants of
bench/mutants.jsonl that word a cancelled parent as a failed one)."""

from __future__ import annotations

import datetime as dt

import pytest


@pytest.mark.parametrize("earlier", [False, True], ids=["first", "key-used-before"])
@pytest.mark.parametrize("how", ["cancelled", "failed"])
def test_a_child_cancelled_with_its_parent_names_how_the_parent_ended(make_queue, how, earlier):
    """The child's key may have a stored outcome already (an earlier message of that key): it is
    replaced by the cancel."""
    q = make_queue(max_attempts=1)
    q.set_result_retention(dt.timedelta(days=7))
    if earlier:
        assert q.push("c", "job", {})
        assert [m.key for m in q.pop()] == ["c"]
        assert q.result("c", "job").state == "succeeded"
    assert q.push("p", "job", {})
    assert q.push_after("c", "job", {}, [(q.name, "p", "job")])
    if how == "cancelled":
        [r] = q.reserve()
        assert q.cancel_held(r)
    else:
        [r] = q.reserve()
        assert q.fail(r, "boom") in ("dropped", "dead_lettered")
    child = q.result("c", "job")
    assert child.state == "cancelled"
    assert child.last_error is not None
    assert ("was cancelled" in child.last_error) == (how == "cancelled"), child.last_error


@pytest.mark.parametrize("reserve", ["reserve", "pop"])
def test_the_children_of_an_expired_parent_are_told_it_was_cancelled(make_queue, reserve):
    """A parent past its pyqueue.expires_at is ended as a cancel would end it (docs/contract.md,
    "Expiry"), by the reserve or pop that meets it: its waiting child is cancelled naming the parent
    as cancelled, as for a cancel, never as failed."""
    q = make_queue()
    q.set_result_retention(dt.timedelta(days=7))
    assert q.push("p", "job", {}, headers={"pyqueue.expires_at": "2020-01-01T00:00:00.000000Z"})
    assert q.push_after("c", "job", {}, [(q.name, "p", "job")])
    assert (q.reserve() if reserve == "reserve" else q.pop()) == []
    assert q.result("p", "job").state == "cancelled"
    child = q.result("c", "job")
    assert child.state == "cancelled"
    assert child.last_error is not None and "was cancelled" in child.last_error, child.last_error
    assert "failed" not in child.last_error, child.last_error
