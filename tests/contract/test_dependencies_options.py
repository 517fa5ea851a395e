"""queue_push_after_on_with_headers (docs/contract.md, "queue_push_after_on_with_headers") on every
dialect, as plain SQL: a message that waits for its parents, with a run_at (due at the later of its
run_at and the end of its parents), a priority and headers (an expiry among them); the routines
without them keep their signatures and behaviour."""

from __future__ import annotations

import datetime as dt
import json

import pytest

from tests.contract.test_produce_headers import Sql


@pytest.fixture
def sql(raw, dialect):
    return Sql(raw, dialect)


def _queue(sql) -> str:
    q = sql.queue()
    sql("queue_set_result_retention", q, sql.dur(86400), casts=(None, "::interval"))
    return q


def _when(sql, delta: dt.timedelta):
    """A run_at delta from now: aware on PostgreSQL, naive UTC on MySQL/MariaDB."""
    at = dt.datetime.now(dt.timezone.utc) + delta
    return at if sql.pg else at.replace(tzinfo=None)


def _push_after(sql, q, key, parents, run_at=None, priority=None, headers=None, run_on="success"):
    return sql.one(
        "queue_push_after_on_with_headers",
        q,
        key,
        "k",
        "{}",
        json.dumps([{"queue": q, "p_key": p, "p_kind": "k"} for p in parents]),
        run_on,
        run_at,
        priority,
        sql.text(headers),
        casts=(None, None, None, "::jsonb", "::jsonb", None, "::timestamptz", "::integer", "::jsonb"),
    )


def _row(sql, q, key):
    ((priority, scheduled_at, headers),) = sql.raw(
        "SELECT priority, scheduled_at, headers FROM pyqueue_message WHERE queue_name = %s AND p_key = %s",
        (q, key),
    )
    if not sql.pg:
        scheduled_at = scheduled_at.replace(tzinfo=dt.timezone.utc)
    return priority, scheduled_at, sql.json_out(headers)


def _state(sql, q, key):
    return sql("queue_result", q, key, "k")[0][0]


def _pop(sql, q, n=10):
    return [row[0] for row in sql("queue_pop", q, n)]


def test_a_child_with_a_later_run_at_is_delayed_until_it_once_its_parent_succeeded(sql):
    q = _queue(sql)
    sql.push(q, "parent", None)
    in_an_hour = _when(sql, dt.timedelta(hours=1))
    assert _push_after(sql, q, "child", ["parent"], run_at=in_an_hour, priority=7, headers={"tenant": "a"})
    priority, _, headers = _row(sql, q, "child")
    assert (priority, headers, _state(sql, q, "child")) == (7, {"tenant": "a"}, "waiting")
    assert _pop(sql, q) == ["parent"]
    assert _state(sql, q, "child") == "delayed"  # its parent ended, its run_at has not come
    _, scheduled_at, _ = _row(sql, q, "child")
    assert scheduled_at > dt.datetime.now(dt.timezone.utc) + dt.timedelta(minutes=59)


def test_a_child_whose_run_at_has_passed_is_ready_when_its_parent_succeeds(sql):
    q = _queue(sql)
    sql.push(q, "parent", None)
    assert _push_after(sql, q, "child", ["parent"], run_at=_when(sql, dt.timedelta(hours=-1)), priority=3)
    assert _pop(sql, q, 1) == ["parent"]
    assert _state(sql, q, "child") == "ready"
    assert _pop(sql, q) == ["child"]


def test_parents_that_succeeded_already_leave_the_child_due_at_its_run_at(sql):
    q = _queue(sql)
    sql.push(q, "parent", None)
    assert _pop(sql, q) == ["parent"]
    assert _push_after(sql, q, "later", ["parent"], run_at=_when(sql, dt.timedelta(hours=1)))
    assert _push_after(sql, q, "now", ["parent"], priority=-2)
    assert (_state(sql, q, "later"), _state(sql, q, "now")) == ("delayed", "ready")
    assert _row(sql, q, "now")[0] == -2


def test_the_priority_orders_the_children_once_ready(sql):
    q = _queue(sql)
    sql.push(q, "parent", None)
    _push_after(sql, q, "low", ["parent"], priority=1)
    _push_after(sql, q, "high", ["parent"], priority=9)
    assert _pop(sql, q, 1) == ["parent"]
    assert _pop(sql, q) == ["high", "low"]


def test_an_expiry_header_applies_to_a_child(sql):
    q = _queue(sql)
    sql.push(q, "parent", None)
    _push_after(sql, q, "child", ["parent"], headers={"pyqueue.expires_at": "2020-01-01T00:00:00.000000Z"})
    assert _pop(sql, q, 1) == ["parent"]
    assert _pop(sql, q) == []
    assert _state(sql, q, "child") == "cancelled"


def test_a_failure_callback_takes_the_options_too(sql):
    q = _queue(sql)
    sql.push(q, "parent", None)
    assert _push_after(sql, q, "errback", ["parent"], run_on="failure", priority=4, headers={"x": 1})
    assert sql("queue_cancel", q, "parent", "k")[0][0] == "cancelled"
    assert _state(sql, q, "errback") == "ready"
    assert _row(sql, q, "errback")[0::2] == (4, {"x": 1})


@pytest.mark.parametrize(
    ("field", "value", "message"),
    [
        ("headers", "[1]", "headers must be a JSON object"),
        ("headers", {"pyqueue.expires_at": 5}, "pyqueue.expires_at must be a UTC time"),
        ("priority", 2**31, "priority|integer out of range"),  # PostgreSQL: the cast to integer
    ],
)
def test_bad_options_are_refused_and_nothing_is_written(sql, field, value, message):
    q = _queue(sql)
    sql.push(q, "parent", None)
    with pytest.raises(Exception, match=message.replace(".", r"\.")):
        _push_after(sql, q, "child", ["parent"], **{field: value})
    assert _state(sql, q, "child") == "unknown"


def test_a_push_of_a_live_key_changes_nothing(sql):
    q = _queue(sql)
    sql.push(q, "parent", None)
    assert _push_after(sql, q, "child", ["parent"], priority=1)
    assert not _push_after(sql, q, "child", ["parent"], priority=5, headers={"x": 1})
    assert _row(sql, q, "child")[0::2] == (1, None)


def _batch(sql, q, messages):
    return sql.one("queue_push_after_batch", q, json.dumps(messages), casts=(None, "::jsonb"))


def _when_text(sql, delta: dt.timedelta) -> str:
    """A batch element's run_at: text with its offset (PostgreSQL), UTC without one (MySQL)."""
    return _when(sql, delta).isoformat(sep=" ")


def _parents(q, *keys):
    return [{"queue": q, "p_key": k, "p_kind": "k"} for k in keys]


def test_a_batch_pushes_every_child_with_its_options_in_one_call(sql):
    q = _queue(sql)
    sql.push(q, "parent", None)
    messages = [
        {"p_key": "a", "p_kind": "k", "payload": {"n": 1}, "parents": _parents(q, "parent"), "priority": 2},
        {
            "p_key": "b",
            "p_kind": "k",
            "payload": {},
            "parents": _parents(q, "parent", "a"),  # an earlier element of the batch
            "run_at": _when_text(sql, dt.timedelta(hours=1)),
            "headers": {"tenant": "acme"},
        },
        {"p_key": "c", "p_kind": "k", "payload": {}, "parents": _parents(q, "parent"), "run_on": "failure"},
    ]
    assert _batch(sql, q, messages) == 3
    assert _batch(sql, q, messages[:1]) == 0  # dedup: a live key is skipped
    assert [_state(sql, q, k) for k in "abc"] == ["waiting"] * 3
    assert _row(sql, q, "a")[0] == 2 and _row(sql, q, "b")[2] == {"tenant": "acme"}
    assert _pop(sql, q, 1) == ["parent"]
    assert _pop(sql, q) == ["a"]  # b waits for a too; c, a failure callback, is cancelled
    assert (_state(sql, q, "b"), _state(sql, q, "c")) == ("delayed", "cancelled")


@pytest.mark.parametrize(
    ("bad", "message"),
    [
        (
            {"p_key": "x", "p_kind": "k", "payload": {}, "parents": [{"queue": "q", "p_key": "p"}]},
            "parents\\[1\\]",
        ),
        (
            {"p_key": 5, "p_kind": "k", "payload": {}, "parents": []},
            "must be an object with the strings p_key",
        ),
        ({"p_key": "x", "p_kind": "k", "payload": {}, "parents": [], "grup": "g"}, "unknown member 'grup'"),
        ({"p_key": "x", "p_kind": "k", "payload": {}, "parents": None}, "parents must be a JSON array"),
    ],
)
def test_a_bad_element_refuses_the_batch_naming_it_and_nothing_is_written(sql, bad, message):
    q = _queue(sql)
    sql.push(q, "parent", None)
    good = {"p_key": "a", "p_kind": "k", "payload": {}, "parents": _parents(q, "parent")}
    with pytest.raises(Exception, match="element 2 of the batch: .*" + message):
        _batch(sql, q, [good, bad])
    assert _state(sql, q, "a") == "unknown"


@pytest.mark.parametrize("messages", [[], "{}", None])
def test_a_batch_that_is_not_an_array_of_1_to_5000_is_refused(sql, messages):
    q = _queue(sql)
    with pytest.raises(Exception, match="messages must"):
        sql.one(
            "queue_push_after_batch",
            q,
            messages if messages is None or isinstance(messages, str) else json.dumps(messages),
            casts=(None, "::jsonb"),
        )
