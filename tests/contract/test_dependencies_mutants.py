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
