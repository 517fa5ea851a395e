"""The wakeup, history, limit, worker and schedule routines with hostile input from plain SQL.

Each test calls the routines as a psql or mysql session would (the `raw`
fixture), on both dialects, and checks that both refuse the same bad input
with the same `pyqueue:<code>` and write nothing.
"""

from __future__ import annotations

import uuid

import pytest


def refused(raw, sql, params=None) -> str:
    """Runs sql, which must fail with a pyqueue error; returns the message."""
    with pytest.raises(Exception) as info:
        raw(sql, params)
    message = str(info.value)
    assert "pyqueue:" in message, message
    return message


def workers(raw, name):
    return raw("SELECT count(*) FROM pyqueue_worker WHERE worker_name = %s", (name,))[0][0]


# -- worker registry: the queues list holds queue names; ids start at 1 -----

BAD_QUEUES = [
    ("empty", [""], '[""]'),
    ("space-ended", ["emails "], '["emails "]'),
    ("too long", ["x" * 129], '["' + "x" * 129 + '"]'),
    ("null element", [None], "[null]"),
]


@pytest.mark.parametrize("pg,my", [(p, m) for _, p, m in BAD_QUEUES], ids=[i for i, _, _ in BAD_QUEUES])
def test_worker_register_refuses_queues_that_are_not_names(raw, dialect, pg, my):
    name = f"review-{dialect}-{len(pg[0] or '')}-{my[:3]}"
    if dialect == "postgresql":
        msg = refused(raw, "SELECT queue_worker_register(%s, NULL, NULL, %s::text[])", (name, pg))
    else:
        msg = refused(raw, "CALL queue_worker_register(%s, NULL, NULL, %s)", (name, my))
    assert "pyqueue:invalid_argument: queues must be NULL or" in msg
    assert workers(raw, name) == 0


@pytest.mark.only_dialect("mysql")  # a PostgreSQL text[] cannot hold a number or an object
@pytest.mark.parametrize("bad", ["[1]", '[["q"]]', '[{"a": 1}]'])
def test_mysql_worker_register_refuses_non_string_queue_names(raw, dialect, bad):
    msg = refused(raw, "CALL queue_worker_register('review-json', NULL, NULL, %s)", (bad,))
    assert "pyqueue:invalid_argument: queues must be NULL or a JSON array of names" in msg
    assert workers(raw, "review-json") == 0


def test_worker_register_accepts_the_longest_queue_name(raw, dialect):
    longest = "x" * 128
    if dialect == "postgresql":
        wid = raw(
            "SELECT worker_id FROM queue_worker_register('review-long', NULL, NULL, ARRAY['q', %s])",
            (longest,),
        )[0][0]
    else:
        wid = raw("CALL queue_worker_register('review-long', NULL, NULL, %s)", (f'["q", "{longest}"]',))[0][0]
    assert wid >= 1
    assert workers(raw, "review-long") == 1
    raw("DELETE FROM pyqueue_worker WHERE worker_id = %s", (wid,))


@pytest.mark.parametrize("routine", ["queue_worker_heartbeat", "queue_worker_deregister"])
@pytest.mark.parametrize("bad_id", [0, -1])
def test_worker_id_below_one_is_refused_on_both_dialects(raw, dialect, routine, bad_id):
    verb = "SELECT" if dialect == "postgresql" else "CALL"
    msg = refused(raw, f"{verb} {routine}(%s, %s)", (bad_id, str(uuid.uuid4())))
    assert "pyqueue:invalid_argument: worker_id must be a whole number from 1" in msg


@pytest.mark.parametrize("routine", ["queue_worker_heartbeat", "queue_worker_deregister"])
def test_unregistered_worker_id_answers_false_on_both_dialects(raw, dialect, routine):
    verb = "SELECT" if dialect == "postgresql" else "CALL"
    assert not raw(f"{verb} {routine}(%s, %s)", (2**62, str(uuid.uuid4())))[0][0]


@pytest.mark.parametrize("routine", ["queue_worker_heartbeat", "queue_worker_deregister"])
@pytest.mark.parametrize("secret", [None, "", "not-a-secret", "x" * 37])
def test_a_missing_or_malformed_worker_secret_is_refused_or_false(raw, dialect, routine, secret):
    """NULL is refused (invalid_argument); a secret that is not the worker's answers false or is
    refused as malformed (PostgreSQL's uuid parameter refuses text that is not a uuid before the
    call); the registration is never touched."""
    verb = "SELECT" if dialect == "postgresql" else "CALL"
    name = f"rs-{uuid.uuid4().hex[:6]}"
    if dialect == "postgresql":
        [(wid,)] = raw("SELECT worker_id FROM queue_worker_register(%s, NULL, NULL, NULL)", (name,))
    else:
        [(wid, _)] = raw("CALL queue_worker_register(%s, NULL, NULL, NULL)", (name,))
    try:
        if secret is None:
            assert "pyqueue:invalid_argument" in refused(raw, f"{verb} {routine}(%s, %s)", (wid, secret))
        else:
            try:
                answer = raw(f"{verb} {routine}(%s, %s)", (wid, secret))[0][0]
            except Exception as exc:  # noqa: BLE001 - a refusal, or PostgreSQL: not a uuid
                assert "pyqueue:invalid_argument" in str(exc) or (
                    dialect == "postgresql" and "uuid" in str(exc)
                ), str(exc)
            else:
                assert not answer
        assert raw("SELECT count(*) FROM pyqueue_worker WHERE worker_id = %s", (wid,))[0][0] == 1
    finally:
        raw("DELETE FROM pyqueue_worker WHERE worker_id = %s", (wid,))


# -- durations: "at most 100 years" means the same on both dialects ---------


def test_older_than_just_over_100_years_is_refused(raw, dialect):
    # PostgreSQL compares intervals with a 360-day year, which let
    # interval '101 years' (= 36 360 days) pass as "under 36 525 days".
    if dialect == "postgresql":
        msg = refused(raw, "SELECT queue_release_dead_workers(interval '101 years')")
        assert raw("SELECT queue_release_dead_workers(interval '100 years')")[0][0] == 0
    else:
        msg = refused(raw, "CALL queue_release_dead_workers(%s)", (101 * 31557600,))
        assert raw("CALL queue_release_dead_workers(%s)", (100 * 31557600,))[0][0] == 0
    assert "pyqueue:invalid_argument: older_than must not exceed 100 years" in msg


def test_schedule_every_just_over_100_years_is_refused(queue, raw, dialect):
    if dialect == "postgresql":
        msg = refused(
            raw, "SELECT queue_schedule_every(%s, 's', 'k', '{}', interval '36526 days')", (queue.name,)
        )
    else:
        msg = refused(raw, "CALL queue_schedule_every(%s, 's', 'k', '{}', %s)", (queue.name, 36526 * 86400))
    assert "pyqueue:invalid_argument: every must not exceed 100 years" in msg
    assert queue.stats().delayed == 0


# -- queue_wait: a poll under 1 ms is refused, not silently raised to 1 ms --


@pytest.mark.parametrize("poll_ms", [0.9, 0.001])
def test_wait_refuses_a_poll_under_one_millisecond(queue, raw, dialect, poll_ms):
    if dialect == "postgresql":
        msg = refused(
            raw,
            "SELECT queue_wait(%s, NULL, interval '0', %s * interval '1 millisecond')",
            (queue.name, poll_ms),
        )
    else:
        msg = refused(raw, "CALL queue_wait(%s, NULL, 0, %s)", (queue.name, poll_ms / 1000))
    assert "pyqueue:invalid_argument: poll must be at least 1 millisecond" in msg


def test_wait_accepts_a_poll_of_one_millisecond(queue, raw, dialect):
    queue.push("k", "kind", 1)
    if dialect == "postgresql":
        ready = raw("SELECT queue_wait(%s, NULL, interval '0', interval '1 millisecond')", (queue.name,))
    else:
        ready = raw("CALL queue_wait(%s, NULL, 0, 0.001)", (queue.name,))
    assert bool(ready[0][0]) is True


# -- kinds filters: a kind over 128 characters is refused on both dialects --
# (MySQL cut it to 128 and reserved the messages of that shorter kind)


@pytest.mark.parametrize("routine", ["reserve", "next_scheduled_at", "wait"])
def test_kinds_filter_refuses_a_kind_over_128_characters(queue, raw, dialect, routine):
    short = "x" * 128
    queue.push("k", short, 1)
    long_kind = short + "y"
    if dialect == "postgresql":
        sql = {
            "reserve": "SELECT * FROM queue_reserve(%s, 'w', NULL, 1, ARRAY[%s])",
            "next_scheduled_at": "SELECT * FROM queue_next_scheduled_at(%s, ARRAY[%s])",
            "wait": "SELECT queue_wait(%s, ARRAY[%s], interval '0')",
        }[routine]
        msg = refused(raw, sql, (queue.name, long_kind))
    else:
        sql = {
            "reserve": "CALL queue_reserve(%s, 'w', NULL, 1, %s)",
            "next_scheduled_at": "CALL queue_next_scheduled_at(%s, %s)",
            "wait": "CALL queue_wait(%s, %s, 0, NULL)",
        }[routine]
        msg = refused(raw, sql, (queue.name, f'["{long_kind}"]'))
    assert "pyqueue:invalid_argument: kinds must not hold a kind longer than 128 characters" in msg
    stats = queue.stats()
    assert (stats.ready, stats.reserved) == (1, 0)  # the 128-character kind was not handed out


def test_kinds_filter_of_exactly_128_characters_still_matches(queue, raw, dialect):
    kind = "é" * 128
    queue.push("k", kind, 1)
    if dialect == "postgresql":
        rows = raw("SELECT p_kind FROM queue_reserve(%s, 'w', NULL, 1, ARRAY[%s])", (queue.name, kind))
    else:
        rows = [(r[1],) for r in raw("CALL queue_reserve(%s, 'w', NULL, 1, %s)", (queue.name, f'["{kind}"]'))]
    assert [r[0] for r in rows] == [kind]
