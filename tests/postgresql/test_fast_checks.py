"""PostgreSQL: queue_push, queue_reserve and queue_commit check plainly valid arguments in one
expression and look the queue up in one statement, without the nested calls of the general
checks; whatever is not plainly valid still gets the general checks and the same refusals, an
unknown queue is refused even with well-formed arguments, and the other ways (a transaction
at REPEATABLE READ, a queue that keeps history, a push inside or past the wakeup window) keep
their outcomes."""

from __future__ import annotations

import datetime as dt
import uuid

import psycopg
import pytest

from pyqueue_sql import dialects

pytestmark = pytest.mark.only_dialect("postgresql")

TOKEN = "0f8fad5b-d9cb-469f-a165-70867728950e"


@pytest.fixture
def conn(dsn):
    c = dialects.for_name("postgresql").connect(dsn)
    yield c
    c.close()


def run(conn, statement, *args):
    with conn.cursor() as cur:
        cur.execute(statement, args)
        return cur.fetchall() if cur.description else []


@pytest.fixture
def queue(conn):
    name = f"fast.{uuid.uuid4().hex[:10]}"
    run(conn, "SELECT queue_create(%s)", name)
    yield name
    run(conn, "SELECT queue_drop(%s)", name)


def refusal(conn, statement, *args) -> str:
    with pytest.raises(psycopg.Error) as refused:
        run(conn, statement, *args)
    return refused.value.diag.message_primary.split(":")[1]


def test_well_formed_calls_on_an_unknown_queue_are_refused(conn):
    missing = f"missing.{uuid.uuid4().hex[:10]}"
    assert refusal(conn, "SELECT queue_push(%s, 'k', 'k', '{}')", missing) == "unknown_queue"
    assert refusal(conn, "SELECT queue_commit(%s, 'k', 'k', %s::text)", missing, TOKEN) == "unknown_queue"
    assert refusal(conn, "SELECT queue_commit(%s, 'k', 'k', %s::uuid)", missing, TOKEN) == "unknown_queue"
    assert refusal(conn, "SELECT * FROM queue_reserve(%s, 'w')", missing) == "unknown_queue"
    assert (
        refusal(conn, "SELECT * FROM queue_reserve(%s, 'w', interval '1 minute', 5)", missing)
        == "unknown_queue"
    )


@pytest.mark.parametrize(
    ("name", "key", "kind"),
    [
        ("q ", "k", "k"),
        ("q" * 129, "k", "k"),
        (None, "k", "k"),
        ("", "k", "k"),
        ("QUEUE", "k ", "k"),
        ("QUEUE", "k" * 256, "k"),
        ("QUEUE", "", "k"),
        ("QUEUE", None, "k"),
        ("QUEUE", "k", "k" * 129),
        ("QUEUE", "k", "k "),
        ("QUEUE", "k", None),
    ],
)
def test_a_push_with_a_bad_name_is_refused_and_pushes_nothing(conn, queue, name, key, kind):
    name = queue if name == "QUEUE" else name
    assert refusal(conn, "SELECT queue_push(%s, %s, %s, '{}')", name, key, kind) == "invalid_argument"
    assert run(conn, "SELECT count(*) FROM pyqueue_message WHERE queue_name = %s", queue) == [(0,)]


def test_names_at_their_longest_are_pushed_reserved_and_committed(conn, queue):
    key, kind = "k" * 255, "k" * 128
    assert run(conn, "SELECT queue_push(%s, %s, %s, '{}')", queue, key, kind) == [(True,)]
    [row] = run(conn, "SELECT p_key, p_kind, token FROM queue_reserve(%s, 'w')", queue)
    assert row[:2] == (key, kind)
    assert run(conn, "SELECT queue_commit(%s, %s, %s, %s::uuid)", queue, key, kind, row[2]) == [(True,)]


@pytest.mark.parametrize(
    ("key", "kind", "token"),
    [
        ("k ", "k", TOKEN),
        ("k", "", TOKEN),
        ("k" * 256, "k", TOKEN),
        ("k", "k", "not-a-token"),
        ("k", "k", TOKEN + "\n"),
        ("k", "k", None),
        (None, "k", TOKEN),
    ],
)
def test_a_commit_with_bad_arguments_is_refused(conn, queue, key, kind, token):
    assert (
        refusal(conn, "SELECT queue_commit(%s, %s, %s, %s::text)", queue, key, kind, token)
        == "invalid_argument"
    )


@pytest.mark.parametrize(
    ("worker", "timeout", "n", "kinds"),
    [
        ("w", None, 0, None),
        ("w", dt.timedelta(0), 1, None),
        ("w", dt.timedelta(seconds=-1), 1, None),
        ("w", "101 years", 1, None),  # compared as an interval, 101 years is under 100 years of 365.25 days
        ("w", "36526 days", 1, None),
        # a negative part: compared as an interval these are one day, added to a time they go back
        ("w", "-1 year +361 days", 1, None),
        ("w", "1 mon -29 days", 1, None),
        ("w", "1 day -1 second", 1, None),
        ("w" * 256, None, 1, None),
        ("w", None, 1, []),
        ("w", None, 1, [None]),
    ],
)
def test_a_reserve_with_bad_arguments_is_refused_and_takes_nothing(conn, queue, worker, timeout, n, kinds):
    run(conn, "SELECT queue_push(%s, 'm', 'k', '{}')", queue)
    statement = "SELECT * FROM queue_reserve(%s, %s, %s::interval, %s::integer, %s::text[])"
    assert refusal(conn, statement, queue, worker, timeout, n, kinds) == "invalid_argument"
    assert run(
        conn,
        "SELECT count(*) FROM pyqueue_message WHERE reserve_token IS NOT NULL AND queue_name = %s",
        queue,
    ) == [(0,)]


def test_a_reserve_at_the_longest_timeout_takes_a_message(conn, queue):
    run(conn, "SELECT queue_set_max_reservation(%s, interval '36525 days')", queue)
    run(conn, "SELECT queue_push(%s, 'm', 'k', '{}')", queue)
    rows = run(conn, "SELECT p_key FROM queue_reserve(%s, 'w', interval '36525 days', NULL)", queue)
    assert rows == [("m",)]


def test_a_commit_on_a_queue_with_history_archives_the_message(conn):
    name = f"fast.{uuid.uuid4().hex[:10]}"
    run(conn, "SELECT queue_create(%s, NULL, NULL, NULL, interval '1 day')", name)
    run(conn, "SELECT queue_push(%s, 'm', 'k', '{\"n\": 1}')", name)
    [(token,)] = run(conn, "SELECT token FROM queue_reserve(%s, 'w')", name)
    assert run(conn, "SELECT queue_commit(%s, 'm', 'k', %s::text)", name, str(token).upper()) == [(True,)]
    assert run(conn, "SELECT p_key, outcome FROM pyqueue_history WHERE queue_name = %s", name) == [
        ("m", "committed")
    ]
    assert run(conn, "SELECT queue_commit(%s, 'm', 'k', %s::text)", name, str(token)) == [(False,)]
    run(conn, "SELECT queue_drop(%s)", name)


def test_a_push_in_a_repeatable_read_transaction_is_refused_after_a_drop_it_cannot_see(dsn, conn, queue):
    """The short way is for READ COMMITTED only: a snapshot older than a drop still sees the queue,
    and only the row lock of the general way refuses the push."""
    other = dialects.for_name("postgresql").connect(dsn, autocommit=False)
    try:
        with other.cursor() as cur:
            cur.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ")
            cur.execute("SELECT 1 FROM pyqueue_queue WHERE queue_name = %s", (queue,))  # the snapshot
        run(conn, "SELECT queue_drop(%s)", queue)
        with pytest.raises(psycopg.errors.SerializationFailure), other.cursor() as cur:
            # to run later: no wakeup, whose bookkeeping would meet the drop in other ways
            cur.execute(
                "SELECT queue_push(%s, 'm', 'k', '{}', clock_timestamp() + interval '1 hour')", (queue,)
            )
        other.rollback()
    finally:
        other.close()
    run(conn, "SELECT queue_create(%s)", queue)  # for the fixture's drop
    assert run(conn, "SELECT count(*) FROM pyqueue_message WHERE queue_name = %s", queue) == [(0,)]


def test_pushes_inside_the_wakeup_window_send_one_wakeup_and_a_push_past_it_sends_another(dsn, conn, queue):
    listener = dialects.for_name("postgresql").connect(dsn)
    try:
        [(channel,)] = run(conn, "SELECT queue_channel(%s)", queue)
        listener.execute(f'LISTEN "{channel}"')
        run(conn, "SELECT queue_set_notify_window(%s, interval '5 seconds')", queue)
        for i in range(5):
            assert run(conn, "SELECT queue_push(%s, %s, 'k', '{}')", queue, f"m{i}") == [(True,)]
        got = list(listener.notifies(timeout=0.5))
        assert [n.payload for n in got] == [queue]
        # the window passed for this session: its last wakeup's time (a session setting) 6 s back
        run(
            conn,
            "SELECT set_config('pyqueue.n' || md5(%s), (extract(epoch FROM clock_timestamp()) - 6)::text, false)",
            queue,
        )
        assert run(conn, "SELECT queue_push(%s, 'late', 'k', '{}')", queue) == [(True,)]
        assert [n.payload for n in listener.notifies(timeout=0.5)] == [queue]
        run(conn, "SELECT queue_set_notify_window(%s, interval '0')", queue)
        for i in range(2):
            run(conn, "SELECT queue_push(%s, %s, 'k', '{}')", queue, f"every{i}")
        assert len(list(listener.notifies(timeout=0.5))) == 2
        # a message pushed to run later wakes nobody
        run(conn, "SELECT queue_push(%s, 'later', 'k', '{}', clock_timestamp() + interval '1 hour')", queue)
        assert list(listener.notifies(timeout=0.3)) == []
    finally:
        listener.close()


@pytest.mark.parametrize("duration", ["-1 year +361 days", "1 mon -29 days", "2 days -1 hour"])
def test_a_duration_with_a_negative_part_is_refused_by_every_routine_that_takes_one(conn, queue, duration):
    """Interval comparison counts a month as 30 days, the calendar does not: '-1 year +361 days'
    compares as a day but puts a lease's end four days back, an expired claim from the start."""
    run(conn, "SELECT queue_push(%s, 'm', 'k', '{}')", queue)
    message = "must not have a negative part"
    for statement, args in [
        ("SELECT queue_create(%s, %s::interval)", (f"fast.{uuid.uuid4().hex[:10]}", duration)),
        ("SELECT * FROM queue_reserve(%s, 'w', %s::interval)", (queue, duration)),
        ("SELECT * FROM queue_reserve(%s, 'w', %s::interval, 5)", (queue, duration)),
        ("SELECT queue_set_notify_window(%s, %s::interval)", (queue, duration)),
    ]:
        with pytest.raises(psycopg.Error) as refused:
            run(conn, statement, *args)
        assert refused.value.diag.sqlstate == "22023"
        assert message in refused.value.diag.message_primary
    [(token,)] = run(conn, "SELECT token FROM queue_reserve(%s, 'w')", queue)
    with pytest.raises(psycopg.Error) as refused:
        run(conn, "SELECT queue_rollback(%s, 'm', 'k', %s::text, %s::interval)", queue, str(token), duration)
    assert message in refused.value.diag.message_primary
    assert run(conn, "SELECT queue_commit(%s, 'm', 'k', %s::text)", queue, str(token)) == [(True,)]


def test_a_duration_of_positive_parts_is_taken(conn, queue):
    run(conn, "SELECT queue_set_max_reservation(%s, interval '1 year')", queue)
    run(conn, "SELECT queue_push(%s, 'm', 'k', '{}')", queue)
    rows = run(conn, "SELECT p_key FROM queue_reserve(%s, 'w', interval '1 mon 2 days 3 hours')", queue)
    assert rows == [("m",)]
    assert run(
        conn,
        "SELECT scheduled_at > now() + interval '1 mon 2 days' FROM pyqueue_message WHERE queue_name = %s",
        queue,
    ) == [(True,)]
