"""Queue settings: create keeps what it is not given, reset_setting puts one back to its default,
queue_settings shows them, on every dialect, through the client and as plain SQL."""

from __future__ import annotations

import datetime as dt

import pytest

from pyqueue_sql import InvalidArgumentError, QueueSettings, UnknownQueueError

S = dt.timedelta(seconds=1)


def test_a_new_queue_gets_the_defaults(make_queue):
    q = make_queue()
    s = q.settings()
    assert isinstance(s, QueueSettings)
    assert (
        s.queue,
        s.visibility_timeout,
        s.max_attempts,
        s.dead_letter_queue,
        s.history_retention,
        s.paused,
    ) == (q.name, 30 * S, 10, None, None, False)
    assert s.notify_window is None or isinstance(s.notify_window, dt.timedelta)


def test_create_on_an_existing_queue_changes_only_what_it_is_given(make_queue):
    dead = make_queue()
    q = make_queue(
        visibility_timeout=45,
        max_attempts=3,
        dead_letter_queue=dead.name,
        history_retention=dt.timedelta(days=2),
    )
    q.create(max_attempts=5)
    s = q.settings()
    assert (s.visibility_timeout, s.max_attempts, s.dead_letter_queue, s.history_retention) == (
        45 * S,
        5,
        dead.name,
        dt.timedelta(days=2),
    )
    q.create()
    assert q.settings() == s
    q.create(visibility_timeout=dt.timedelta(milliseconds=1500))
    s = q.settings()
    assert (s.visibility_timeout, s.max_attempts, s.dead_letter_queue) == (1.5 * S, 5, dead.name)


def test_create_with_max_attempts_keeps_the_dead_letter_queue_working(make_queue):
    dead = make_queue()
    q = make_queue(dead_letter_queue=dead.name)
    q.create(max_attempts=1)
    q.push("m", "k", 1)
    [r] = q.reserve()
    assert q.rollback(r)
    assert [m.key for m in dead.pop(5)] == ["m"]  # dead-lettered, not dropped


def test_create_keeps_pause_and_notify_window(make_queue):
    q = make_queue()
    q.pause()
    q.set_notify_window(0.2)
    q.create(max_attempts=4)
    s = q.settings()
    assert s.paused is True and s.notify_window == 0.2 * S and s.max_attempts == 4


@pytest.mark.parametrize(
    "setting,default",
    [
        ("visibility_timeout", 30 * S),
        ("max_attempts", 10),
        ("dead_letter_queue", None),
        ("history_retention", None),
    ],
)
def test_reset_setting_puts_one_setting_back_to_its_default(make_queue, setting, default):
    dead = make_queue()
    q = make_queue(
        visibility_timeout=7,
        max_attempts=2,
        dead_letter_queue=dead.name,
        history_retention=dt.timedelta(hours=3),
    )
    before = q.settings()
    q.reset_setting(setting)
    after = q.settings()
    assert getattr(after, setting) == default
    others = [
        f
        for f in ("visibility_timeout", "max_attempts", "dead_letter_queue", "history_retention")
        if f != setting
    ]
    assert [getattr(after, f) for f in others] == [getattr(before, f) for f in others]


def test_reset_dead_letter_queue_lets_the_dead_letter_queue_be_dropped(make_queue):
    dead = make_queue()
    q = make_queue(dead_letter_queue=dead.name)
    with pytest.raises(InvalidArgumentError):
        dead.drop()
    q.reset_setting("dead_letter_queue")
    dead.drop()
    assert q.settings().dead_letter_queue is None


def test_reset_setting_refuses_unknown_settings_and_queues(make_queue, db):
    q = make_queue(max_attempts=3)
    for bad in ("", "paused", "MAX_ATTEMPTS", "max_attempts ", "notify_window", "x" * 200, None):
        with pytest.raises(InvalidArgumentError):
            q.reset_setting(bad)
    assert q.settings().max_attempts == 3
    with pytest.raises(UnknownQueueError):
        db.queue("no-such-queue").reset_setting("max_attempts")
    with pytest.raises(InvalidArgumentError):
        q.reset_setting(5)


def test_settings_of_an_unknown_queue(db):
    with pytest.raises(UnknownQueueError):
        db.queue("no-such-queue").settings()


def test_settings_of_every_queue_ordered_by_name(db, make_queue):
    a, b = make_queue(max_attempts=2), make_queue(visibility_timeout=12)
    everyone = db.settings()
    names = [s.queue for s in everyone]
    assert names == sorted(names)
    by_name = {s.queue: s for s in everyone}
    assert by_name[a.name].max_attempts == 2 and by_name[b.name].visibility_timeout == 12 * S


def test_create_keeps_settings_from_plain_sql(dialect, raw, sql, make_queue):
    dead = make_queue()
    q = make_queue(visibility_timeout=40, max_attempts=3, dead_letter_queue=dead.name, history_retention=60)
    sql("queue_create", q.name, None, 6, None, None)
    s = q.settings()
    assert (s.visibility_timeout, s.max_attempts, s.dead_letter_queue, s.history_retention) == (
        40 * S,
        6,
        dead.name,
        60 * S,
    )
    sql("queue_reset_setting", q.name, "history_retention")
    assert q.settings().history_retention is None
    with pytest.raises(Exception, match="pyqueue:invalid_argument"):
        sql("queue_reset_setting", q.name, "bogus")
    with pytest.raises(Exception, match="pyqueue:unknown_queue"):
        sql("queue_reset_setting", "no-such-queue", "max_attempts")
    if dialect == "postgresql":
        rows = raw("SELECT queue, max_attempts, dead_letter_queue FROM queue_settings(%s)", (q.name,))
    else:
        rows = [r[:1] + r[2:4] for r in raw("CALL queue_settings(%s)", (q.name,))]
    assert [tuple(r) for r in rows] == [(q.name, 6, dead.name)]
    with pytest.raises(Exception, match="pyqueue:unknown_queue"):
        raw(
            "SELECT * FROM queue_settings(%s)" if dialect == "postgresql" else "CALL queue_settings(%s)",
            ("no-such-queue",),
        )
