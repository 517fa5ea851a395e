"""queue_give_up (a consumer ends a message now, whatever attempts it has left: dead-lettered with
its error, or dropped when its queue has no dead-letter queue), on every dialect, through the
client and as plain SQL."""

from __future__ import annotations

import dataclasses
import datetime as dt
import uuid

import pytest

from pyqueue_sql import App, GiveUp, InvalidArgumentError, UnknownQueueError


def test_give_up_dead_letters_on_the_first_delivery_with_its_error(make_queue):
    dead = make_queue()
    q = make_queue(max_attempts=5, dead_letter_queue=dead.name, history_retention=dt.timedelta(days=1))
    q.push("a", "k", {"n": 1}, priority=3)
    (r,) = q.reserve(timeout=60, worker="w-1")
    assert q.give_up(r, ValueError("no such account")) == "dead_lettered"
    assert q.message("a", "k") is None
    (letter,) = dead.dead_letters()
    assert (letter.key, letter.from_queue, letter.attempts, letter.last_error) == (
        "a",
        q.name,
        1,
        "ValueError: no such account",
    )
    info = dead.message("a", "k")
    assert (info.state, info.attempts, info.dead_from, info.payload, info.priority) == (
        "ready",
        0,
        q.name,
        {"n": 1},
        3,
    )
    assert q.stats().dead == 1
    [row] = q.message_history("a", "k")
    assert (row.outcome, row.to_queue, row.attempts, row.last_error) == (
        "dead_lettered",
        dead.name,
        1,
        "ValueError: no such account",
    )


def test_give_up_replaces_an_earlier_error_and_none_clears_it(make_queue):
    dead = make_queue()
    q = make_queue(max_attempts=5, dead_letter_queue=dead.name)
    q.push("a", "k", {})
    q.push("b", "k", {})
    for r in q.reserve(2, timeout=60):
        assert q.fail(r, "transient") == "retry"
    got = {r.key: r for r in q.reserve(2, timeout=60)}
    assert q.give_up(got["a"], "permanent") == "dead_lettered"
    assert q.give_up(got["b"]) == "dead_lettered"
    letters = {d.key: (d.attempts, d.last_error) for d in dead.dead_letters()}
    assert letters == {"a": (2, "permanent"), "b": (2, None)}


def test_give_up_cuts_the_error_as_fail_does(make_queue):
    dead = make_queue()
    q = make_queue(dead_letter_queue=dead.name)
    q.push("a", "k", {})
    (r,) = q.reserve(timeout=60)
    assert q.give_up(r, "é" * 2500) == "dead_lettered"
    assert dead.message("a", "k").last_error == "é" * 2000


def test_give_up_drops_when_the_queue_has_no_dead_letter_queue(make_queue):
    q = make_queue(max_attempts=5)
    q.push("a", "k", {})
    (r,) = q.reserve(timeout=60)
    assert q.give_up(r, "gone") == "dropped"
    assert q.message("a", "k") is None
    assert q.stats().dead == 1


def test_give_up_with_a_token_that_no_longer_holds_changes_nothing(make_queue):
    dead = make_queue()
    q = make_queue(dead_letter_queue=dead.name)
    q.push("a", "k", {})
    (r,) = q.reserve(timeout=60)
    assert q.rollback(r)
    assert q.give_up(r, "late") is None
    (again,) = q.reserve(timeout=60)
    assert q.give_up(r, "late") is None
    info = q.message("a", "k")
    assert (info.state, info.attempts, info.last_error) == ("reserved", 2, None)
    assert dead.dead_letters() == []
    assert q.commit(again)


def test_give_up_refuses_bad_arguments_and_an_unknown_queue(queue, db):
    queue.push("a", "k", {})
    (r,) = queue.reserve(timeout=60)
    with pytest.raises(UnknownQueueError):
        db.queue(f"missing.{uuid.uuid4().hex[:8]}").give_up(r, "x")
    with pytest.raises(InvalidArgumentError, match="token"):
        queue.give_up(dataclasses.replace(r, token="not a token"), "x")
    assert queue.message("a", "k").state == "reserved"


def test_a_given_up_group_head_hands_its_place_to_the_next(make_queue):
    dead = make_queue()
    q = make_queue(dead_letter_queue=dead.name)
    q.push("first", "k", {}, group="g")
    q.push("second", "k", {}, group="g")
    (r,) = q.reserve(5, timeout=60)
    assert r.key == "first"
    assert q.give_up(r, "bad") == "dead_lettered"
    (r,) = q.reserve(5, timeout=60)
    assert r.key == "second"
    assert dead.message("first", "k").dead_from == q.name


def test_give_up_from_plain_sql(make_queue, sql):
    dead = make_queue()
    q = make_queue(dead_letter_queue=dead.name)
    q.push("a", "k", {})
    (r,) = q.reserve(timeout=60)
    rows = sql("queue_give_up", q.name, "a", "k", r.token, "from sql")
    assert [tuple(row) for row in rows] == [("dead_lettered",)]
    rows = sql("queue_give_up", q.name, "a", "k", r.token, "again")
    assert [tuple(row) for row in rows] == [(None,)]
    assert dead.message("a", "k").last_error == "from sql"


@pytest.mark.only_dialect("postgresql")
def test_give_up_takes_the_token_as_a_uuid_too(make_queue, raw):
    q = make_queue()
    q.push("a", "k", {})
    (r,) = q.reserve(timeout=60)
    assert raw("SELECT queue_give_up(%s, 'a', 'k', %s::uuid, 'x')", (q.name, r.token)) == [("dropped",)]
    with pytest.raises(Exception, match="token is malformed"):
        raw("SELECT queue_give_up(%s, 'a', 'k', 'not a token')", (q.name,))


# -- the worker's GiveUp --------------------------------------------------------------


@pytest.mark.parametrize("runtime", ["threads", "asyncio"])
def test_a_workers_give_up_before_the_last_delivery_keeps_its_error_in_the_dead_letter(dsn, db, runtime):
    app = App(dsn, queue=f"t.{uuid.uuid4().hex[:12]}")
    try:
        if runtime == "asyncio":

            @app.task(kind="hopeless")
            async def hopeless_async() -> None:
                raise GiveUp("the account is closed")

            task = hopeless_async
        else:

            @app.task(kind="hopeless")
            def hopeless() -> None:
                raise GiveUp("the account is closed")

            task = hopeless
        dead = db.queue(app.default_queue + ".dead").create()
        app.create_queues(max_attempts=5, dead_letter_queue=dead.name)
        task.configure(key="g").defer()
        report = app.run_pending()
        assert [(j.outcome, j.attempts) for j in report.jobs] == [("dead_lettered", 1)]
        (letter,) = dead.dead_letters()
        assert (letter.key, letter.from_queue, letter.attempts, letter.last_error) == (
            "g",
            app.default_queue,
            1,
            "GiveUp: the account is closed",
        )
        assert db.queue(app.default_queue).stats().dead == 1
    finally:
        app.close()
