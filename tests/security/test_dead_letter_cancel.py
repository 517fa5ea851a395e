"""Dead letters are the evidence of failures: no capability's queue_cancel reaches them.

queue_cancel is granted to producer (for the jobs it enqueued) and admin; removing a dead letter
is queue_remove (admin only). These tests connect as a real role / account holding only the
producer capability and call queue_cancel in plain SQL on a message of a dead-letter queue, waiting
and held: the call is refused and the dead letter stays.
"""

from __future__ import annotations

import contextlib
import uuid

import pytest

from .test_privileges import _run, accounts  # noqa: F401 - the fixture is used by name


def _cancel_sql(dialect: str, queue: str, key: str, kind: str) -> str:
    verb = "SELECT" if dialect == "postgresql" else "CALL"
    return f"{verb} queue_cancel('{queue}', '{key}', '{kind}')"


def _refused(dialect: str, conn, sql: str) -> str:
    """The statement fails with the contract's invalid_argument; returns the server's message."""
    try:
        _run(conn, sql)
    except Exception as exc:  # noqa: BLE001 - checked just below
        message = str(exc)
        assert "pyqueue:invalid_argument: a message of a dead-letter queue is not cancelled" in message, (
            message
        )
        if dialect == "postgresql" and not getattr(conn, "autocommit", True):
            conn.rollback()
        return message
    pytest.fail(f"{sql!r} succeeded: a producer cancelled a dead letter")


@pytest.fixture
def dead_letters(db):
    """A queue t1 (max_attempts 1) and its dead-letter queue holding dead letter dl1 (kind k)."""
    suffix = uuid.uuid4().hex[:10]
    dead = db.queue(f"dead.{suffix}").create(visibility_timeout=30)
    source = db.queue(f"t1.{suffix}").create(
        visibility_timeout=30, max_attempts=1, dead_letter_queue=dead.name
    )
    source.push("dl1", "k", {"n": 1})
    source.push("dl2", "k", {"n": 2})
    for r in source.reserve(n=2):
        assert source.fail(r, "boom") == "dead_lettered"
    assert sorted(d.key for d in dead.dead_letters()) == ["dl1", "dl2"]
    yield source, dead
    with contextlib.suppress(Exception):
        source.drop()
        dead.drop()


def test_a_producer_cannot_cancel_a_dead_letter_waiting_or_held(accounts, dead_letters, db, dialect):  # noqa: F811
    source, dead = dead_letters
    producer = accounts.raw(accounts.with_capabilities("prod", "producer"))
    if dialect == "postgresql":
        producer.autocommit = True

    # waiting in the dead-letter queue
    _refused(dialect, producer, _cancel_sql(dialect, dead.name, "dl1", "k"))
    # held by a consumer of the dead-letter queue: not even a cancel request is recorded
    [held] = [r for r in dead.reserve(n=2) if r.key == "dl2"] or [None]
    assert held is not None
    _refused(dialect, producer, _cancel_sql(dialect, dead.name, "dl2", "k"))
    # an unknown key of a dead-letter queue is refused the same way (nothing to learn from the answer)
    _refused(dialect, producer, _cancel_sql(dialect, dead.name, "nope", "k"))

    letters = {d.key: d for d in dead.dead_letters()}
    assert sorted(letters) == ["dl1", "dl2"]
    assert letters["dl1"].last_error == "boom" and letters["dl1"].from_queue == source.name
    renewal = dead.renew(held)
    assert renewal.reservation is not None and renewal.cancel_requested is False
    assert dead.commit(renewal.reservation)  # its holder still ends it as it pleases

    # the same producer still cancels what it enqueues into an ordinary queue
    source.push("mine", "k", {"n": 3})
    assert _run(producer, _cancel_sql(dialect, source.name, "mine", "k")) == [("cancelled",)]
    # and the admin, who also holds queue_cancel, removes a dead letter with queue_remove only
    assert dead.remove("dl1", "k") is True
    assert [d.key for d in dead.dead_letters()] == []


def test_a_producer_cannot_overwrite_a_dead_letter_with_push_replace(accounts, dead_letters, db, dialect):  # noqa: F811
    """queue_push_replace is the producer's other way to change a waiting message: on a dead letter
    it is refused, and the letter keeps its payload, attempts and error."""
    source, dead = dead_letters
    producer = accounts.raw(accounts.with_capabilities("prod", "producer"))
    if dialect == "postgresql":
        producer.autocommit = True
        sql = f"""SELECT queue_push_replace('{dead.name}', 'dl1', 'k', '{{"n": 666}}')"""
    else:
        sql = f"""CALL queue_push_replace('{dead.name}', 'dl1', 'k', '{{"n": 666}}', NULL, NULL)"""
    try:
        _run(producer, sql)
    except Exception as exc:  # noqa: BLE001 - checked just below
        assert "pyqueue:invalid_argument: a dead letter is not replaced" in str(exc), exc
    else:
        pytest.fail("a producer replaced a dead letter")
    letter = {d.key: d for d in dead.dead_letters()}["dl1"]
    assert (letter.payload, letter.last_error, letter.from_queue) == ({"n": 1}, "boom", source.name)
    # a message pushed into any queue by the producer itself is still replaced
    source.push("mine", "k", {"n": 3})
    replaced = _run(producer, sql.replace(dead.name, source.name).replace("'dl1'", "'mine'"))
    assert replaced == [("replaced",)]
