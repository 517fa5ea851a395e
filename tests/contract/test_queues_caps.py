"""Per-queue caps and reserved names, on every dialect: the reservation timeout a consumer may
ask for (max_reservation, on every reserve path and queue_extend), the size of a payload a
producer may write (max_payload, on every path that writes one), schedule occurrence keys
refused to producers, topic patterns with more than 3 '#', and integer arguments out of range
refused with the same words on both dialects."""

from __future__ import annotations

import datetime as dt
import time
import uuid

import pytest

from pyqueue_sql import InvalidArgumentError, InvalidPayloadError

H = dt.timedelta(hours=1)
OCCURRENCE = "report@2030-01-01T00:00:00Z"


# -- max_reservation ------------------------------------------------------------------


def test_a_new_queue_has_the_default_caps(queue):
    s = queue.settings()
    assert (s.max_reservation, s.max_payload) == (12 * H, 1048576)


def test_every_reserve_path_refuses_a_timeout_above_max_reservation(queue):
    queue.push("a", "k", {})
    with pytest.raises(InvalidArgumentError, match="max_reservation"):
        queue.reserve(timeout=12 * H + dt.timedelta(seconds=1))
    with pytest.raises(InvalidArgumentError, match="max_reservation"):
        queue.commit_reserve(None, timeout=100 * 365 * 24 * H)
    (r,) = queue.reserve(timeout=12 * H)  # at the cap: taken
    with pytest.raises(InvalidArgumentError, match="max_reservation"):
        queue.extend(r, timeout=13 * H)
    queue.push("b", "k", {})
    with pytest.raises(InvalidArgumentError, match="max_reservation"):
        queue.commit_reserve(r, timeout=13 * H)
    assert queue.message("a", "k").state == "reserved"  # the refused call committed nothing
    assert queue.message("b", "k").state == "ready"
    assert queue.extend(r, timeout=H) is not None


def test_set_max_reservation_moves_the_cap(queue):
    queue.set_max_reservation(60)
    assert queue.settings().max_reservation == dt.timedelta(seconds=60)
    queue.push("a", "k", {})
    with pytest.raises(InvalidArgumentError, match="max_reservation"):
        queue.reserve(timeout=61)
    (r,) = queue.reserve(timeout=60)
    queue.set_max_reservation(48 * H)  # an admin may raise it
    assert queue.extend(r, timeout=47 * H) is not None
    queue.set_max_reservation(None)
    assert queue.settings().max_reservation == 12 * H
    queue.set_max_reservation(13 * H)
    queue.reset_setting("max_reservation")
    assert queue.settings().max_reservation == 12 * H


def test_max_reservation_and_the_visibility_timeout_keep_their_order(make_queue):
    with pytest.raises(InvalidArgumentError, match="max_reservation"):
        make_queue(visibility_timeout=13 * H)
    q = make_queue(visibility_timeout=120)
    for bad in (0, -1, 119):
        with pytest.raises(InvalidArgumentError, match="max_reservation"):
            q.set_max_reservation(bad)
    q.set_max_reservation(120)
    with pytest.raises(InvalidArgumentError, match="max_reservation"):
        q.create(visibility_timeout=121)
    s = q.settings()
    assert (s.visibility_timeout, s.max_reservation) == (dt.timedelta(seconds=120), dt.timedelta(seconds=120))


def test_reset_max_reservation_below_a_long_visibility_timeout_is_refused(make_queue):
    q = make_queue()
    q.set_max_reservation(24 * H)
    q.create(visibility_timeout=20 * H)
    with pytest.raises(InvalidArgumentError, match="max_reservation"):
        q.reset_setting("max_reservation")
    q.set_max_reservation(20 * H)
    assert q.settings().max_reservation == 20 * H
    q.create(visibility_timeout=5)
    q.set_max_reservation(10)
    with pytest.raises(InvalidArgumentError, match="visibility_timeout"):
        q.reset_setting("visibility_timeout")  # the default 30 s would be above the cap of 10 s
    s = q.settings()
    assert (s.visibility_timeout, s.max_reservation) == (dt.timedelta(seconds=5), dt.timedelta(seconds=10))


# -- max_payload ----------------------------------------------------------------------


def text_of(n: int) -> str:
    """A JSON string payload whose JSON text is exactly n bytes (the quotes count)."""
    return "x" * (n - 2)


def test_every_producer_path_refuses_a_payload_above_max_payload(make_queue, db):
    q = make_queue()
    q.set_max_payload(40)
    assert q.settings().max_payload == 40
    topic = f"caps.{uuid.uuid4().hex[:8]}"
    db.bind(topic, q)
    assert q.push("fits", "k", text_of(40))
    attempts = [
        lambda: q.push("a", "k", text_of(41)),
        lambda: q.push("a", "k", text_of(41), group="g"),
        lambda: q.push_replace("a", "k", text_of(41)),
        lambda: q.push_many([("b", "k", "ok"), ("a", "k", text_of(41))]),
        lambda: q.push_many([("b", "k", "ok", None, None, "g"), ("a", "k", text_of(41), None, None, "g")]),
        lambda: db.publish(topic, "a", "k", text_of(41)),
        lambda: db.publish_many([(topic, "b", "k", "ok"), (topic, "a", "k", text_of(41))]),
    ]
    for attempt in attempts:
        with pytest.raises(
            InvalidPayloadError, match="payload is 41 bytes, more than the queue's max_payload of 40"
        ):
            attempt()
    assert [m.key for m in q.messages()] == ["fits"]


def test_a_move_with_a_new_payload_is_held_to_the_target_queues_max_payload(make_queue):
    source, target = make_queue(), make_queue()
    target.set_max_payload(20)
    source.push("a", "k", text_of(100))
    (r,) = source.reserve(timeout=60)
    with pytest.raises(InvalidPayloadError, match="max_payload"):
        source.move(r, target, payload=text_of(21))
    assert source.message("a", "k").state == "reserved"
    assert source.move(r, target, payload=text_of(20))


def test_set_max_payload_bounds_and_reset(queue, sql):
    for bad in (0, -1, 268435457, 10**12):
        with pytest.raises(
            InvalidArgumentError, match="max_payload must be a whole number from 1 to 268435456"
        ):
            queue.set_max_payload(bad)
    for bad in (0, 268435457):  # the routine's own check, for a plain SQL client
        with pytest.raises(Exception, match="max_payload"):
            sql("queue_set_max_payload", queue.name, bad)
    queue.set_max_payload(268435456)
    queue.set_max_payload(None)
    assert queue.settings().max_payload == 1048576
    queue.set_max_payload(5)
    queue.reset_setting("max_payload")
    assert queue.settings().max_payload == 1048576


# -- schedule occurrence keys -----------------------------------------------------------


def test_no_producer_path_takes_an_occurrence_key(queue, db):
    topic = f"caps.{uuid.uuid4().hex[:8]}"
    db.bind(topic, queue)
    attempts = [
        lambda: queue.push(OCCURRENCE, "k", {}),
        lambda: queue.push(OCCURRENCE, "k", {}, group="g"),
        lambda: queue.push_replace(OCCURRENCE, "k", {}),
        lambda: queue.push_many([("plain", "k", {}), (OCCURRENCE, "k", {})]),
        lambda: queue.push_many(
            [("plain", "k", {}, None, None, "g"), (OCCURRENCE, "k", {}, None, None, "g")]
        ),
        lambda: db.publish(topic, OCCURRENCE, "k", {}),
        lambda: db.publish_many([(topic, "plain", "k", {}), (topic, OCCURRENCE, "k", {})]),
    ]
    for attempt in attempts:
        with pytest.raises(InvalidArgumentError, match="reserved for schedules"):
            attempt()
    assert queue.messages() == []
    element_2 = "element 2 of the batch: p_key ending in @<UTC time> is reserved for schedules"
    with pytest.raises(InvalidArgumentError, match=element_2):
        queue.push_many([("plain", "k", {}), (OCCURRENCE, "k", {})])
    with pytest.raises(InvalidArgumentError, match=element_2):
        db.publish_many([(topic, "plain", "k", {}), (topic, OCCURRENCE, "k", {})])
    assert queue.push("report@not-a-time", "k", {})  # only the occurrence form is reserved


def occurrence(key: str, at: dt.datetime) -> str:
    return f"{key}@{at.astimezone(dt.timezone.utc).strftime('%Y-%m-%dT%H:%M:%SZ')}"


def test_a_producer_cannot_replace_preempt_or_create_an_occurrence(queue, dsn):
    """As a role holding only the producer capability: the pending occurrence and the next ones
    are out of its reach, and the schedule goes on running."""
    from tests.security.test_privileges import Accounts

    accounts = Accounts(dsn)
    try:
        q = accounts.client(accounts.with_capabilities("producer", "producer")).queue(queue.name)
        first = queue.schedule_every("report", "tick", {"n": 1}, 1)
        pending, ahead = occurrence("report", first), occurrence("report", first + dt.timedelta(seconds=1))
        far = dt.datetime(9999, 1, 1, tzinfo=dt.timezone.utc)
        for attempt in (
            lambda: q.push_replace(pending, "tick", {"hijacked": True}, run_at=far),
            lambda: q.push(ahead, "tick", {"hijacked": True}, run_at=far),
            lambda: q.push_many([(ahead, "tick", {"hijacked": True}, far)]),
            lambda: q.push(ahead, "tick", {"hijacked": True}, run_at=far, group="g"),
        ):
            with pytest.raises(InvalidArgumentError, match="reserved for schedules"):
                attempt()
        info = queue.message(pending, "tick")
        assert (info.payload, info.scheduled_at) == ({"n": 1}, first)
        assert queue.message(ahead, "tick") is None
        time.sleep(max(0.0, (first - dt.datetime.now(dt.timezone.utc)).total_seconds()) + 0.05)
        (r,) = queue.reserve(timeout=60)
        assert r.key == pending and queue.commit(r)
        (sched,) = queue.schedules()
        nxt = queue.message(occurrence("report", sched.next_at), "tick")
        assert nxt is not None and nxt.payload == {"n": 1}
    finally:
        accounts.close()


# -- topic patterns -------------------------------------------------------------------------


def test_a_pattern_with_more_than_three_hashes_is_refused(queue, db):
    with pytest.raises(InvalidArgumentError, match="more than 3 # wildcards"):
        db.bind("a.#.b.#.c.#.d.#", queue)
    assert db.bind("a.#.b.#.c.#", queue)
    assert [b.pattern for b in db.bindings(queue)] == ["a.#.b.#.c.#"]


# -- integer arguments out of range -----------------------------------------------------------


def test_a_priority_out_of_range_gets_the_same_words_on_both_dialects(queue, db):
    message = "priority must be a whole number from -2147483648 to 2147483647"
    for bad in (99999999999, 2147483648, -2147483649):
        with pytest.raises(InvalidArgumentError, match=message):
            queue.push("a", "k", {}, priority=bad)
        with pytest.raises(InvalidArgumentError, match=message):
            queue.push_many([("a", "k", {}, None, bad)])
        with pytest.raises(InvalidArgumentError, match=message):
            queue.push_replace("a", "k", {}, priority=bad)
        with pytest.raises(InvalidArgumentError, match=message):
            db.publish("t", "a", "k", {}, priority=bad)
    assert queue.push("a", "k", {}, priority=2147483647)
    assert queue.messages()[0].priority == 2147483647


# -- queue_ingest rows ------------------------------------------------------------------------


def test_queue_ingest_rows_are_held_to_max_payload_and_occurrence_keys(queue, raw, dialect):
    """PostgreSQL refuses the INSERT naming the first bad row (nothing enqueued); MySQL/MariaDB's
    queue_ingest_flush counts such rows rejected, with the reason, and enqueues the others."""
    queue.set_max_payload(20)
    insert = "INSERT INTO queue_ingest (queue_name, p_key, p_kind, payload) VALUES (%s, %s, 'k', %s)"
    if dialect == "postgresql":
        with pytest.raises(
            Exception, match="invalid_payload: queue_ingest row with p_key 'big': payload is 23 bytes"
        ):
            raw(
                insert + ", (%s, 'big', 'k', %s)",
                (queue.name, "ok", '"fits"', queue.name, '"' + "x" * 21 + '"'),
            )
        with pytest.raises(Exception, match="invalid_argument: .*reserved for schedules"):
            raw(insert, (queue.name, OCCURRENCE, '"fits"'))
        assert queue.messages() == []
        raw(insert, (queue.name, "ok", '"fits"'))
        assert [m.key for m in queue.messages()] == ["ok"]
        return
    for key, payload in (("ok", '"fits"'), ("big", '"' + "x" * 21 + '"'), (OCCURRENCE, '"fits"')):
        raw(insert, (queue.name, key, payload))
    [(enqueued, duplicates, rejected)] = raw("CALL queue_ingest_flush(%s)", (queue.name,))
    assert (int(enqueued), int(duplicates), int(rejected)) == (1, 0, 2)
    reasons = dict(
        raw("SELECT p_key, reason FROM pyqueue_ingest_reject WHERE queue_name = %s", (queue.name,))
    )
    assert "max_payload" in reasons["big"] and "reserved for schedules" in reasons[OCCURRENCE]
    assert [m.key for m in queue.messages()] == ["ok"]
