"""queue_move into the message's own queue keeps what the message carries in its queue: the attempt
count, its progress and a cancel request made while it was held (docs/contract/06_settle.md,
queue_move), so a holder cannot shed a cancel by moving the message onto itself; moved into another
queue it arrives with none of them."""

from __future__ import annotations

import pytest


@pytest.mark.parametrize("into", ["its own queue", "another queue"])
def test_a_cancel_requested_while_held_survives_a_move_into_its_own_queue_only(make_queue, into):
    q = make_queue()
    target = q if into == "its own queue" else make_queue()
    own = target is q
    assert q.push("m", "job", {"n": 1})
    (held,) = q.reserve()
    assert q.set_progress(held, {"done": 3})
    assert q.cancel("m", "job") == "requested"
    assert q.move(held, target)
    (again,) = target.reserve()
    assert again.key == "m" and again.attempts == (2 if own else 1)
    renewal = target.renew(again)
    assert renewal.reservation is not None
    assert renewal.cancel_requested is own  # its consumer is still asked to stop
    now = target.result("m", "job")
    assert (now.cancel_requested, now.progress) == ((True, {"done": 3}) if own else (False, None))
    assert target.cancel_held(renewal.reservation)
    assert target.result("m", "job").state in ("cancelled", "unknown")
