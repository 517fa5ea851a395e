"""commit_result checks the result it stores: refused, and the message still held, when the result
is longer than max_payload or the queue keeps no results (the mutants of bench/mutants.jsonl that
skip that check)."""

from __future__ import annotations

import datetime as dt
import time

import pytest

from pyqueue_sql import InvalidArgumentError, InvalidPayloadError


@pytest.mark.parametrize("why", ["too long", "no results"])
def test_commit_result_refuses_a_result_it_cannot_keep(make_queue, why):
    q = make_queue()
    if why == "too long":
        q.set_result_retention(dt.timedelta(days=7))
        q.set_max_payload(300)
    assert q.push("x", "job", {})
    [r] = q.reserve()
    with pytest.raises((InvalidArgumentError, InvalidPayloadError)):
        q.commit_result(r, {"pad": "x" * 400})
    assert q.stats().reserved == 1
    assert q.commit(r)


def test_result_wait_returns_at_once_for_a_finished_message(make_queue, raw, dialect):
    """queue_result_wait of a message that succeeded already answers at once, not at its timeout."""
    q = make_queue()
    q.set_result_retention(dt.timedelta(days=7))
    assert q.push("x", "job", {})
    assert [m.key for m in q.pop()] == ["x"]
    statement = (
        "SELECT state FROM queue_result_wait(%s, %s, %s, interval '3 seconds')"
        if dialect == "postgresql"
        else "CALL queue_result_wait(%s, %s, %s, 3)"
    )
    start = time.monotonic()
    rows = raw(statement, (q.name, "x", "job"))
    assert rows[0][0] == "succeeded"
    assert time.monotonic() - start < 2.0
