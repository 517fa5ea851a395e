"""Expiry (docs/contract.md, "Expiry: the header pyqueue.expires_at"), on every dialect, as plain SQL: a
message whose header ``pyqueue.expires_at`` has passed is never handed out by a reserve or a pop; the
routine that meets it ends it as a cancel would (outcome ``cancelled``, last_error ``expired at ...``,
its waiting children cancelled, its group's next message moved up), and fills its place with the next
ready message. The header is checked on every push that writes headers."""

from __future__ import annotations

import datetime as dt
import json
import time

import pytest

from tests.contract.test_produce_headers import Sql

PAST = "2020-01-01T00:00:00.000000Z"
FUTURE = "2999-01-01T00:00:00.000000Z"


def _at(delta: dt.timedelta) -> str:
    """A pyqueue.expires_at value, delta from now."""
    return (dt.datetime.now(dt.timezone.utc) + delta).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


@pytest.fixture
def sql(raw, dialect):
    return Sql(raw, dialect)


def _results(sql, queue):
    sql("queue_set_result_retention", queue, sql.dur(86400), casts=(None, "::interval"))


def _outcome(sql, queue, key, kind="k"):
    (row,) = sql("queue_result", queue, key, kind)
    return row[0], row[2]


def _pop(sql, queue, n):
    return [row[0] for row in sql("queue_pop", queue, n)]


def test_a_message_past_its_expiry_is_not_reserved_but_ended_as_cancelled_with_why(sql):
    q = sql.queue(history=True)
    _results(sql, q)
    sql.push(q, "late", {"pyqueue.expires_at": PAST, "tenant": "a"})
    sql.push(q, "fresh", {"pyqueue.expires_at": FUTURE})
    sql.push(q, "plain", None)
    sql.push(q, "other", {"tenant": "b"})  # headers without an expiry
    assert [key for key, _, _ in sql.reserve(q, 1)] == ["fresh"]  # the expired one's place is filled
    assert _outcome(sql, q, "late") == ("cancelled", f"expired at {PAST}")
    assert sql("queue_message", q, "late", "k") == []
    (outcome,) = sql.raw(
        "SELECT outcome FROM pyqueue_history WHERE queue_name = %s AND p_key = %s", (q, "late")
    )
    assert outcome[0] == "cancelled"
    assert [key for key, _, _ in sql.reserve(q, 5)] == ["plain", "other"]


def test_a_batch_reserve_skips_every_expired_message_and_returns_the_others_in_order(sql):
    q = sql.queue()
    for i in range(6):
        sql.push(q, f"m{i}", {"pyqueue.expires_at": PAST if i % 2 else FUTURE})
    assert [key for key, _, _ in sql.reserve(q, 10)] == ["m0", "m2", "m4"]
    assert sql.reserve(q, 10) == []
    assert sql.listed(q).keys() == {"m0", "m2", "m4"}  # the expired ones are gone, the reserved stay


@pytest.mark.parametrize("n", [1, 2])
def test_a_message_with_headers_is_reserved_until_its_time_has_passed(sql, n):
    q = sql.queue()
    sql.push(q, "soon", {"pyqueue.expires_at": _at(dt.timedelta(seconds=60))})
    sql.push(q, "traced", {"traceparent": "00-x"})  # headers without an expiry: never expires
    sql.push_grouped(q, "g", "grouped", {"tenant": "a"})
    got = [key for key, _, _ in sql.reserve(q, n, timeout=1)]
    got += [key for key, _, _ in sql.reserve(q, 3, timeout=1)]
    assert got == ["soon", "traced", "grouped"]
    assert _pop(sql, sql.queue(), 1) == []


def test_an_expired_message_given_back_by_its_holder_is_not_delivered_again(sql):
    q = sql.queue()
    _results(sql, q)
    sql.push(q, "slow", {"pyqueue.expires_at": _at(dt.timedelta(seconds=1))})
    ((key, token, _),) = sql.reserve(q, 1)
    time.sleep(1.2)
    sql("queue_rollback", q, key, "k", token, None, casts=(None, None, None, None, "::interval"))
    assert sql.reserve(q, 1) == []
    assert _outcome(sql, q, "slow")[0] == "cancelled"


def test_pop_ends_expired_messages_as_cancelled_and_pops_the_others(sql):
    q = sql.queue()
    _results(sql, q)
    sql.push(q, "a", {"pyqueue.expires_at": PAST})
    sql.push(q, "b", None)
    sql.push(q, "c", {"pyqueue.expires_at": FUTURE})
    assert _pop(sql, q, 3) == ["b", "c"]
    assert _outcome(sql, q, "a") == ("cancelled", f"expired at {PAST}")


def test_the_children_of_an_expired_parent_are_cancelled(sql):
    q = sql.queue()
    _results(sql, q)
    sql.push(q, "parent", {"pyqueue.expires_at": PAST})
    parents = json.dumps([{"queue": q, "p_key": "parent", "p_kind": "k"}])
    sql("queue_push_after", q, "child", "k", "{}", parents, casts=(None, None, None, "::jsonb", "::jsonb"))
    assert sql.reserve(q, 5) == []
    assert _outcome(sql, q, "parent")[0] == "cancelled"
    assert _outcome(sql, q, "child")[0] == "cancelled"


def test_an_expired_group_head_hands_its_place_to_the_next_of_its_group(sql):
    q = sql.queue()
    sql.push_grouped(q, "g", "head", {"pyqueue.expires_at": PAST})
    sql.push_grouped(q, "g", "next", None)
    got = [key for key, _, _ in sql.reserve(q, 1)]  # "next" is due from the moment the head ended
    got += [key for key, _, _ in sql.reserve(q, 1)]
    assert got == ["next"]
    assert sql.listed(q).keys() == {"next"}


def test_an_expired_message_at_its_last_delivery_is_cancelled_not_dead_lettered(sql):
    dlq = sql.queue()
    q = sql.queue(max_attempts=1, dead_letter_queue=dlq, vis=1)
    _results(sql, q)
    sql.push(q, "x", {"pyqueue.expires_at": _at(dt.timedelta(seconds=1))})
    assert len(sql.reserve(q, 1, timeout=1)) == 1
    time.sleep(1.2)  # its reservation and its expiry have passed
    assert sql.reserve(q, 1) == []
    assert _outcome(sql, q, "x")[0] == "cancelled"
    assert sql.listed(dlq) == {}


@pytest.mark.parametrize(
    "bad",
    [
        5,
        "2026-01-01T00:00:00Z",
        "2026-01-01 00:00:00.000000Z",
        "2026-01-01T00:00:00.000000+00:00",
        "2026-02-30T00:00:00.000000Z",
        "2026-01-01T24:00:00.000000Z",
        "2026-01-01T00:00:60.000000Z",
        "tomorrow",
    ],
)
def test_an_expiry_that_is_not_a_utc_time_in_the_one_format_is_refused_and_nothing_is_written(sql, bad):
    q = sql.queue()
    with pytest.raises(
        Exception, match=r"pyqueue\.expires_at must be a UTC time YYYY-MM-DDTHH:MM:SS\.ffffffZ"
    ):
        sql.push(q, "a", {"pyqueue.expires_at": bad})
    with pytest.raises(Exception, match=r"element 2 of the batch: pyqueue\.expires_at must be"):
        sql.push_batch(q, [("a", {"pyqueue.expires_at": FUTURE}), ("b", {"pyqueue.expires_at": bad})])
    assert sql.listed(q) == {}


def test_a_json_null_expiry_is_none(sql):
    q = sql.queue()
    sql.push(q, "a", {"pyqueue.expires_at": None})
    assert [key for key, _, _ in sql.reserve(q, 1)] == ["a"]


def test_a_batch_push_carries_each_messages_expiry(sql):
    q = sql.queue()
    assert (
        sql.push_batch(q, [("a", {"pyqueue.expires_at": PAST}), ("b", {"pyqueue.expires_at": FUTURE})]) == 2
    )
    assert [key for key, _, _ in sql.reserve(q, 5)] == ["b"]


def test_commit_reserve_hands_out_the_next_unexpired_message(sql):
    q = sql.queue()
    sql.push(q, "first", None)
    sql.push(q, "late", {"pyqueue.expires_at": PAST})
    sql.push(q, "then", None)
    ((key, token, _),) = sql.reserve(q, 1)
    rows = sql(
        "queue_commit_reserve",
        q,
        key,
        "k",
        token,
        "w",
        sql.dur(60),
        1,
        None,
        casts=(None, None, None, None, None, "::interval", "::integer", "::text[]"),
    )
    assert [row[1] if sql.pg else row[0] for row in rows] == ["then"]  # PostgreSQL: led by committed


@pytest.mark.parametrize("n", [1, 3])
def test_a_queue_with_a_limit_skips_expired_messages_too(sql, n):
    q = sql.queue()
    sql("queue_set_limit", q, "k", 2)
    sql.push(q, "late", {"pyqueue.expires_at": PAST})
    sql.push(q, "a", None)
    sql.push(q, "b", None)
    assert [key for key, _, _ in sql.reserve(q, n)] == ["a", "b"][:n]
    assert "late" not in sql.listed(q)


def test_a_queue_with_a_rate_pops_past_expired_messages(sql):
    q = sql.queue()
    sql("queue_set_rate", q, "k", 100, sql.dur(1), casts=(None, None, None, "::interval"))
    sql.push(q, "late", {"pyqueue.expires_at": PAST})
    sql.push(q, "a", None)
    assert _pop(sql, q, 2) == ["a"]
    assert sql.listed(q) == {}


def test_a_dead_letter_past_its_expiry_is_still_handed_out_from_its_dead_letter_queue(sql):
    """Dead letters are evidence, never ended but by an admin: the expiry holds in the queue the
    message was pushed to (and again after a redrive), not in its dead-letter queue."""
    dlq = sql.queue()
    q = sql.queue(dead_letter_queue=dlq)
    sql.push(q, "x", {"pyqueue.expires_at": _at(dt.timedelta(seconds=1))})
    ((key, token, _),) = sql.reserve(q, 1)
    sql("queue_give_up", q, key, "k", token, "no", casts=(None, None, None, None, None))
    time.sleep(1.2)
    assert [k for k, _, _ in sql.reserve(dlq, 1)] == ["x"]


@pytest.mark.parametrize("how", ["reserve", "pop"])
def test_an_expired_schedule_occurrence_makes_way_for_the_next(sql, how):
    """Occurrences carry no headers, so none expires by itself; one given an expiry (here by plain
    SQL, as a future way to push occurrences with headers would) is ended as a cancel ends it: the
    schedule goes on, its next occurrence pushed."""
    q = sql.queue()
    sql("queue_schedule_every", q, "tick", "k", "{}", sql.dur(3600),
        casts=(None, None, None, "::jsonb", "::interval"))  # fmt: skip
    (first,) = sql.listed(q)
    past = "clock_timestamp() - interval '1 second'" if sql.pg else "UTC_TIMESTAMP(6) - INTERVAL 1 SECOND"
    ready = "" if sql.pg else f", ready_at = {past}"  # MySQL/MariaDB: its place in reserve order with it
    sql.raw(
        f"UPDATE pyqueue_message SET scheduled_at = {past}{ready}, headers = %s WHERE queue_name = %s",
        (json.dumps({"pyqueue.expires_at": PAST}), q),
    )
    if sql.pg:
        sql.raw(
            "UPDATE pyqueue_ready_from SET ready_from = '-infinity', ready_from_id = NULL WHERE queue_name = %s",
            (q,),
        )
    got = _pop(sql, q, 1) if how == "pop" else sql.reserve(q, 1)
    assert got == []
    (second,) = sql.listed(q)
    assert second != first and second.startswith("tick@"), (first, second)


@pytest.mark.parametrize("n", [1, 2, 3])
def test_a_reserve_whose_first_n_candidates_all_expired_reads_on_for_the_next_ready_ones(sql, n):
    """The first n messages in reserve order are all past their expiry: the reserve ends them and
    reads on (MySQL/MariaDB: another page of candidates at the same priority) until it has n."""
    q = sql.queue()
    for i in range(n):
        sql.push(q, f"late{i}", {"pyqueue.expires_at": PAST})
    for i in range(n + 1):
        sql.push(q, f"ok{i}", None)
    assert [key for key, _, _ in sql.reserve(q, n)] == [f"ok{i}" for i in range(n)]
    assert sql.listed(q).keys() == {f"ok{i}" for i in range(n + 1)}
