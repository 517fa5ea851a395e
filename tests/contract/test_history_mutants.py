"""A cancelled message is archived as cancelled, whichever way it was cancelled, grouped or not
(the mutants of bench/mutants.jsonl that record a cancel as a success in history); replay's window
includes its start and excludes its end (the mutant that shifts it)."""

from __future__ import annotations

import datetime as dt

import pytest

from .test_history import history


@pytest.mark.parametrize("group", [None, "g"])
@pytest.mark.parametrize("how", ["cancel", "cancel_held"])
def test_a_cancelled_message_is_archived_as_cancelled(raw, make_queue, group, how):
    q = make_queue(history_retention=dt.timedelta(days=7))
    q.set_result_retention(dt.timedelta(days=7))
    assert q.push("x", "job", {"n": 1}, group=group)
    if how == "cancel":
        assert q.cancel("x", "job") == "cancelled"
    else:
        [r] = q.reserve(worker="w-1")
        assert q.cancel_held(r)
    assert [(r["p_key"], r["outcome"]) for r in history(raw, q.name)] == [("x", "cancelled")]
    assert q.result("x", "job").state == "cancelled"


def test_replay_takes_a_message_processed_at_the_windows_start_and_not_one_at_its_end(raw, make_queue):
    q = make_queue(history_retention=dt.timedelta(days=7))
    assert q.push("x", "job", {"n": 1})
    assert [m.key for m in q.pop(1)] == ["x"]
    [row] = history(raw, q.name)
    at = row["processed_at"]
    at = at if at.tzinfo else at.replace(tzinfo=dt.timezone.utc)  # MySQL/MariaDB: a naive UTC time
    second = dt.timedelta(seconds=1)
    assert q.replay(at - second, at) == 0  # [start, end): processed at the end, not in it
    assert q.replay(at, at + second) == 1  # processed at the start: in it
    assert [m.key for m in q.pop(1)] == ["x"]
