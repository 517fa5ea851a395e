"""A producer's open transaction with queue_push_after stops nothing in the parents' queue.

The attacker holds only the producer capability: it pushes a child after a parent of queue x and
leaves its transaction open (a slow Django ``atomic()`` view). Meanwhile, in x, a consumer's
reserve of an expired last delivery, a consumer's fail of a last attempt (both dead-letter, which
writes x's queue row) and an admin's pause must complete at once. Each runs under a lock wait
bound (PostgreSQL ``lock_timeout``, MariaDB ``innodb_lock_wait_timeout``) so that a regression
fails in seconds instead of hanging, and each call's time is asserted under 2 s.
"""

from __future__ import annotations

import json
import threading
import time
import uuid

import pytest

from tests.plainsql import Session

from .test_privileges import accounts  # noqa: F401 - the fixture is used by name


def _bounded(s: Session) -> None:
    """Lock waits of this session end with an error after 3 s (the assertion's bound is 2 s)."""
    if s.dialect == "postgresql":
        s.sql("SET lock_timeout = '3s'")
    else:
        s.sql("SET SESSION innodb_lock_wait_timeout = 3")


def _timed(fn, *args):
    start = time.monotonic()
    result = fn(*args)
    return result, time.monotonic() - start


def test_an_open_push_after_blocks_no_reserve_fail_or_pause_of_the_parents_queue(sql_session, accounts):  # noqa: F811
    admin = sql_session()
    pg = admin.dialect == "postgresql"
    suffix = uuid.uuid4().hex[:8]
    x, y, dead = f"lk.x.{suffix}", f"lk.y.{suffix}", f"lk.dlq.{suffix}"
    for q in (dead, x, y):
        if pg:
            admin.raw("SELECT queue_create(%s, NULL, 1, %s)", (q, dead if q == x else None))
            admin.raw("SELECT queue_set_result_retention(%s, interval '1 day')", (q,))
        else:
            admin.call("queue_create", q, None, 1, dead if q == x else None, None)
            admin.call("queue_set_result_retention", q, 86400)
    for key in ("E", "F"):
        admin.call("queue_push", x, key, "k", "{}", None, None)
    # E: its one delivery expires (reserve it for 50 ms); F: reserved, to be failed on its last attempt
    held = {}
    for key, timeout in (("E", 0.05), ("F", 30)):
        rows = admin.call("queue_reserve", x, "w", admin.dur(timeout), 1, None)
        assert rows and rows[0][0] == key, rows
        held[key] = str(rows[0][3])
    admin.call("queue_push", x, "P", "k", "{}", None, None)
    time.sleep(0.1)

    producer = Session(accounts.dsn_for(accounts.with_capabilities("prod", "producer")))
    producer.begin()
    parents = json.dumps([{"queue": x, "p_key": "P", "p_kind": "k"}])
    assert int(producer.one("queue_push_after", y, "C", "k", "{}", parents)) == 1
    try:
        consumer, boss = sql_session(), sql_session()
        _bounded(consumer)
        _bounded(boss)
        # the expired last delivery of E is dead-lettered by this reserve; P is not handed out
        # while the producer's key-share lock holds its row (a parent's row waits or is seen)
        rows, took = _timed(consumer.call, "queue_reserve", x, "w", None, 5, None)
        assert took < 2, f"reserve took {took:.2f} s"
        assert "E" not in [r[0] for r in rows]
        assert admin.call("queue_message", dead, "E", "k")  # dead-lettered
        outcome, took = _timed(consumer.one, "queue_fail", x, "F", "k", held["F"], None, "boom")
        assert took < 2, f"fail took {took:.2f} s"
        assert outcome == "dead_lettered"
        _, took = _timed(boss.call, "queue_pause", x)
        assert took < 2, f"pause took {took:.2f} s"
        _, took = _timed(boss.call, "queue_resume", x)
        assert took < 2, f"resume took {took:.2f} s"
    finally:
        producer.commit()
        producer.close()
    assert admin.call("queue_result", y, "C", "k")[0][0] == "waiting"


@pytest.mark.parametrize("when", ["push first", "retention first"])
def test_turning_results_off_and_a_push_after_naming_the_queue_never_leave_a_child_stranded(
    sql_session, when
):
    """queue_set_result_retention(NULL) of the parents' queue waits for an open push_after that
    named it and then refuses (the child's rows are there); when it went first, the push is
    refused (its queue keeps no results). Never both: a child waiting in a queue whose commits no
    longer look for children."""
    admin, producer = sql_session(), sql_session()
    pg = admin.dialect == "postgresql"
    suffix = uuid.uuid4().hex[:8]
    x, y = f"rr.x.{suffix}", f"rr.y.{suffix}"
    for q in (x, y):
        if pg:
            admin.raw("SELECT queue_create(%s)", (q,))
            admin.raw("SELECT queue_set_result_retention(%s, interval '1 day')", (q,))
        else:
            admin.call("queue_create", q, None, None, None, None)
            admin.call("queue_set_result_retention", q, 86400)
    admin.call("queue_push", x, "P", "k", "{}", None, None)
    parents = json.dumps([{"queue": x, "p_key": "P", "p_kind": "k"}])
    if when == "retention first":
        admin.call("queue_set_result_retention", x, None)
        with pytest.raises(Exception, match="keeps no results"):
            producer.one("queue_push_after", y, "C", "k", "{}", parents)
        return
    producer.begin()
    assert int(producer.one("queue_push_after", y, "C", "k", "{}", parents)) == 1
    box: dict = {}

    def turn_off() -> None:
        try:
            admin.call("queue_set_result_retention", x, None)
            box["done"] = True
        except Exception as exc:  # noqa: BLE001 - checked below
            box["error"] = exc

    t = threading.Thread(target=turn_off)
    t.start()
    time.sleep(0.3)
    producer.commit()
    t.join(10)
    assert "parents or children" in str(box.get("error")), box
