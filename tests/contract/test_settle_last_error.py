"""The last error of a message: queue_fail records it, dead letters keep it (with their real origin
and attempt count), history archives it; queue_message / queue_message_history show it."""

from __future__ import annotations

import datetime as dt
import time
import uuid

import pytest

from pyqueue_sql import HistoryRow, InvalidArgumentError, MessageInfo, UnknownQueueError

EXPIRED = "reservation expired on its last allowed delivery"


def fail_sql(dialect):
    return (
        "SELECT queue_fail(%s, %s, %s, %s, NULL, %s)"
        if dialect == "postgresql"
        else "CALL queue_fail(%s, %s, %s, %s, NULL, %s)"
    )


def test_fail_records_the_error_and_gives_the_message_back(queue):
    queue.push("m", "k", {"n": 1})
    [r] = queue.reserve()
    assert queue.fail(r, "boom: the mail server said 550") == "retry"
    info = queue.message("m", "k")
    assert isinstance(info, MessageInfo)
    assert (info.key, info.kind, info.state, info.payload, info.attempts, info.last_error) == (
        "m",
        "k",
        "ready",
        {"n": 1},
        1,
        "boom: the mail server said 550",
    )
    assert queue.fail(r, "again") is None  # the token is spent
    assert queue.message("m", "k").last_error == "boom: the mail server said 550"
    [again] = queue.reserve()
    assert again.attempts == 2


def test_fail_with_an_exception_stores_type_and_message(queue):
    queue.push("m", "k", 1)
    [r] = queue.reserve()
    assert queue.fail(r, ValueError("bad input 42"), delay=60) == "retry"
    info = queue.message("m", "k")
    assert (info.state, info.last_error) == ("delayed", "ValueError: bad input 42")
    queue.remove("m", "k")
    queue.push("m", "k", 1)
    [r] = queue.reserve()
    assert queue.fail(r, KeyError()) == "retry"
    assert queue.message("m", "k").last_error == "KeyError"


def test_fail_refuses_an_error_that_is_not_text(queue):
    queue.push("m", "k", 1)
    [r] = queue.reserve()
    with pytest.raises(InvalidArgumentError):
        queue.fail(r, {"error": 1})
    assert queue.message("m", "k").state == "reserved"


def test_last_error_is_cut_to_2000_characters(dialect, queue, raw):
    queue.push("m", "k", 1)
    [r] = queue.reserve()
    long = "é" + "x" * 4998 + "!"
    assert queue.fail(r, long) == "retry"
    assert queue.message("m", "k").last_error == long[:2000]
    # as plain SQL (no cut in the client): the routine keeps the first 2000 characters
    [r] = queue.reserve()
    raw(fail_sql(dialect), (queue.name, "m", "k", r.token, "😀" * 3000))
    assert queue.message("m", "k").last_error == "😀" * 2000


def test_fail_without_error_text(queue):
    queue.push("m", "k", 1)
    [r] = queue.reserve()
    assert queue.fail(r) == "retry"
    assert queue.message("m", "k").last_error is None


def test_rollback_keeps_the_last_error(queue):
    queue.push("m", "k", 1)
    [r] = queue.reserve()
    queue.fail(r, "first failure")
    [r] = queue.reserve()
    assert queue.rollback(r)
    assert queue.message("m", "k").last_error == "first failure"


def test_fail_outcomes_on_the_last_delivery(make_queue):
    dead = make_queue()
    with_dlq = make_queue(max_attempts=2, dead_letter_queue=dead.name)
    without = make_queue(max_attempts=1)
    with_dlq.push("a", "k", 1)
    without.push("b", "k", 1)
    [r] = with_dlq.reserve()
    assert with_dlq.fail(r, "one") == "retry"
    [r] = with_dlq.reserve()
    assert with_dlq.fail(r, "two") == "dead_lettered"
    assert with_dlq.message("a", "k") is None
    [r] = without.reserve()
    assert without.fail(r, "only") == "dropped"
    assert without.message("b", "k") is None
    assert without.stats().dead == 1


def test_dead_letter_keeps_error_origin_and_real_attempts(make_queue):
    dead = make_queue()
    src = make_queue(max_attempts=3, dead_letter_queue=dead.name)
    other = make_queue(max_attempts=1, dead_letter_queue=dead.name)  # a second queue sharing the DLQ
    src.push("a", "job", {"v": 1})
    for i in range(3):
        [r] = src.reserve()
        src.fail(r, f"failure {i + 1}")
    other.push("b", "job", {"v": 2})
    [r] = other.reserve()
    assert other.fail(r, RuntimeError("other broke")) == "dead_lettered"
    letters = {d.key: d for d in dead.dead_letters()}
    assert (letters["a"].from_queue, letters["a"].attempts, letters["a"].last_error) == (
        src.name,
        3,
        "failure 3",
    )
    assert (letters["b"].from_queue, letters["b"].attempts, letters["b"].last_error) == (
        other.name,
        1,
        "RuntimeError: other broke",
    )
    info = dead.message("a", "job")
    assert (info.dead_from, info.last_error, info.state) == (src.name, "failure 3", "ready")


def test_dead_letter_view_as_plain_sql_shows_last_error_and_origin(make_queue, raw):
    dead = make_queue()
    src = make_queue(max_attempts=1, dead_letter_queue=dead.name)
    make_queue(dead_letter_queue=dead.name)
    src.push("a", "job", 1)
    [r] = src.reserve()
    src.fail(r, "kaput")
    rows = raw(
        "SELECT p_key, from_queue, attempts, last_error FROM pyqueue_dead_letters "
        "WHERE dead_letter_queue = %s",
        (dead.name,),
    )
    assert [tuple(row) for row in rows] == [("a", src.name, 1, "kaput")]


def test_redrive_clears_the_origin(make_queue):
    dead = make_queue()
    src = make_queue(max_attempts=1, dead_letter_queue=dead.name)
    src.push("a", "job", 1)
    [r] = src.reserve()
    src.fail(r, "kaput")
    assert dead.redrive(src) == 1
    info = src.message("a", "job")
    assert info.dead_from is None and info.attempts == 0


# n=1 takes the one-message claim, n=5 the claim of a page of candidates.
@pytest.mark.parametrize("n", [1, 5])
def test_expired_last_delivery_is_dead_lettered_with_an_error(make_queue, n):
    dead = make_queue()
    q = make_queue(max_attempts=1, dead_letter_queue=dead.name)
    q.push("crasher", "k", 1)
    q.push("fine", "k", 2, priority=-1)
    [r] = q.reserve(timeout=0.2)
    assert r.key == "crasher"
    time.sleep(0.35)
    assert [x.key for x in q.reserve(n)] == ["fine"]
    [letter] = dead.dead_letters()
    assert (letter.key, letter.from_queue, letter.attempts, letter.last_error) == (
        "crasher",
        q.name,
        1,
        EXPIRED,
    )


@pytest.mark.parametrize("n", [1, 5])
def test_expired_last_delivery_keeps_an_earlier_error(make_queue, n):
    dead = make_queue()
    q = make_queue(max_attempts=2, dead_letter_queue=dead.name)
    q.push("crasher", "k", 1)
    [r] = q.reserve()
    q.fail(r, "first try failed")
    [r] = q.reserve(timeout=0.2)
    time.sleep(0.35)
    assert q.reserve(n) == []
    [letter] = dead.dead_letters()
    assert (letter.attempts, letter.last_error) == (2, "first try failed")


def test_history_rows_carry_the_last_error(make_queue):
    dead = make_queue()
    q = make_queue(max_attempts=2, dead_letter_queue=dead.name, history_retention=dt.timedelta(days=1))
    q.push("ok", "k", 1)
    q.push("bad", "k", 1)
    reserved = {r.key: r for r in q.reserve(n=2, worker="w-9")}
    q.fail(reserved["ok"], "transient")
    q.fail(reserved["bad"], "permanent 1")
    again = {r.key: r for r in q.reserve(n=2, worker="w-9")}
    assert q.commit(again["ok"])
    assert q.fail(again["bad"], "permanent 2") == "dead_lettered"
    [ok_row] = q.message_history("ok", "k")
    assert isinstance(ok_row, HistoryRow)
    assert (ok_row.outcome, ok_row.to_queue, ok_row.attempts, ok_row.reserved_by, ok_row.last_error) == (
        "committed",
        None,
        2,
        "w-9",
        "transient",
    )
    [bad_row] = q.message_history("bad", "k")
    assert (bad_row.outcome, bad_row.to_queue, bad_row.attempts, bad_row.last_error) == (
        "dead_lettered",
        dead.name,
        2,
        "permanent 2",
    )
    assert isinstance(bad_row.processed_at, dt.datetime) and bad_row.processed_at.tzinfo is not None


def test_message_history_is_newest_first_and_survives_a_dropped_queue(make_queue):
    q = make_queue(history_retention=dt.timedelta(days=1))
    for i in range(3):
        q.push("m", "k", i)
        [r] = q.reserve()
        if i == 1:
            q.fail(r, "once")
            [r] = q.reserve()
        assert q.commit(r)
        time.sleep(0.01)
    rows = q.message_history("m", "k")
    assert [r.outcome for r in rows] == ["committed"] * 3
    assert [r.last_error for r in rows] == [None, "once", None]
    assert [r.attempts for r in rows] == [1, 2, 1]
    assert rows == sorted(rows, key=lambda r: r.processed_at, reverse=True)
    assert q.message_history("other", "k") == []
    q.drop()
    assert len(q.message_history("m", "k")) == 3


def test_message_states_and_unknowns(make_queue, db):
    q = make_queue()
    q.push("r", "k", {"a": 1}, priority=4)
    q.push("d", "k", 1, run_at=dt.timedelta(hours=1))
    q.push("h", "k", 1)
    [h] = q.reserve(worker="me", kinds=["k"], n=1)
    assert h.key == "r"  # highest priority first
    got = {key: q.message(key, "k") for key in ("r", "d", "h")}
    assert {k: v.state for k, v in got.items()} == {"r": "reserved", "d": "delayed", "h": "ready"}
    assert (got["r"].reserved_by, got["r"].priority, got["r"].attempts, got["r"].payload) == (
        "me",
        4,
        1,
        {"a": 1},
    )
    assert got["h"].reserved_by is None and got["h"].dead_from is None
    assert got["d"].scheduled_at > got["d"].created_at
    assert q.message("nope", "k") is None
    assert q.message("r", "other-kind") is None
    with pytest.raises(UnknownQueueError):
        db.queue(f"no-such-{uuid.uuid4().hex[:6]}").message("r", "k")


def test_fail_as_plain_sql(dialect, raw, make_queue):
    q = make_queue(max_attempts=1)
    q.push("m", "k", 1)
    [r] = q.reserve()
    [(outcome,)] = raw(fail_sql(dialect), (q.name, "m", "k", r.token, "sql said no"))
    assert outcome == "dropped"
    [(outcome,)] = raw(fail_sql(dialect), (q.name, "m", "k", r.token, "again"))
    assert outcome is None
    with pytest.raises(Exception, match="pyqueue:unknown_queue"):
        raw(fail_sql(dialect), ("no-such-queue", "m", "k", r.token, "x"))
    with pytest.raises(Exception, match="pyqueue:invalid_argument"):
        raw(fail_sql(dialect), (q.name, "m", "k", None, "x"))
