"""MySQL/MariaDB, in plain SQL as a mysql client calls them: queue_snooze gives a reservation back
without using up an attempt; a reservation timeout is capped by the queue's max_reservation on
every reserve path and queue_extend; queue_release hands reservations back without deleting
anything; a payload larger than the queue's max_payload is refused on every path that writes one;
keys of a schedule's occurrences are refused on every producer path (a producer account cannot
stop a schedule's chain by pushing the next occurrences ahead); topic patterns are bounded (at
most 3 '#') and a match the server cannot decide is an error, never a miss."""

from __future__ import annotations

import datetime as dt
import json
import time
import uuid

import pymysql
import pytest

from tests.plainsql import call

pytestmark = pytest.mark.only_dialect("mysql")


@pytest.fixture
def sql(mysql_sql):
    return mysql_sql


def make(sql, **settings) -> str:
    name = f"add.{uuid.uuid4().hex[:10]}"
    sql(
        "CALL queue_create(%s, %s, %s, %s, NULL)",
        name,
        settings.get("visibility_timeout"),
        settings.get("max_attempts"),
        settings.get("dead_letter_queue"),
    )
    return name


@pytest.fixture
def queue(sql):
    return make(sql)


@pytest.fixture(autouse=True)
def _unbind_afterwards(sql):
    """The test database is shared by the tests of one process: a broad pattern left bound here
    ('*.#.*.#.*.#.*') would deliver other tests' publications into these queues."""
    yield
    sql("DELETE FROM pyqueue_binding WHERE queue_name LIKE 'add.%'")


def refused(sql, code: str, words: str, statement: str, *args) -> str:
    with pytest.raises(pymysql.MySQLError) as caught:
        sql(statement, *args)
    message = str(caught.value.args[1])
    assert message.startswith(f"pyqueue:{code}:"), message
    assert words in message, message
    return message


def reserve(sql, queue: str, timeout=None, n=1, kinds=None, worker="w") -> list:
    return sql("CALL queue_reserve(%s, %s, %s, %s, %s)", queue, worker, timeout, n, kinds)


def message(sql, queue: str, key: str, kind: str = "k") -> tuple:
    rows = sql(
        "SELECT attempts, reserve_token, reserved_by, scheduled_at <= UTC_TIMESTAMP(6), last_error"
        "  FROM pyqueue_message WHERE queue_name = %s AND p_key = %s AND p_kind = %s",
        queue,
        key,
        kind,
    )
    return rows[0] if rows else None


# -- queue_snooze ---------------------------------------------------------------------------------


def test_snooze_gives_the_message_back_without_using_an_attempt(sql):
    q = make(sql, max_attempts=1)
    sql("CALL queue_push(%s, 'a', 'k', '{}', NULL, NULL)", q)
    for _ in range(3):  # max_attempts 1: a rollback here would drop it, a snooze never does
        (row,) = reserve(sql, q)
        assert row[5] == 1
        assert sql("CALL queue_snooze(%s, 'a', 'k', %s, NULL)", q, row[3]) == [(1,)]
        attempts, token, worker, ready, _ = message(sql, q, "a")
        assert (attempts, token, worker, ready) == (0, None, None, 1)
    # the old token no longer holds
    assert sql("CALL queue_snooze(%s, 'a', 'k', %s, NULL)", q, row[3]) == [(0,)]
    assert sql("CALL queue_commit(%s, 'a', 'k', %s)", q, row[3]) == [(0,)]


def test_snooze_keeps_last_error_and_waits_for_its_delay(sql, queue):
    sql("CALL queue_push(%s, 'a', 'k', '{}', NULL, NULL)", queue)
    (row,) = reserve(sql, queue)
    assert sql("CALL queue_fail(%s, 'a', 'k', %s, NULL, 'first')", queue, row[3]) == [("retry",)]
    (row,) = reserve(sql, queue)
    assert row[5] == 2
    assert sql("CALL queue_snooze(%s, 'a', 'k', %s, 60)", queue, row[3]) == [(1,)]
    attempts, token, _, ready, error = message(sql, queue, "a")
    assert (attempts, token, ready, error) == (1, None, 0, "first")
    assert reserve(sql, queue) == []


def test_snooze_checks_its_arguments_as_rollback(sql, queue):
    token = "0f8fad5b-d9cb-469f-a165-70867728950e"
    refused(sql, "unknown_queue", "does not exist", "CALL queue_snooze('nope.x', 'a', 'k', %s, NULL)", token)
    refused(sql, "invalid_argument", "malformed", "CALL queue_snooze(%s, 'a', 'k', 'x', NULL)", queue)
    refused(sql, "invalid_argument", "negative", "CALL queue_snooze(%s, 'a', 'k', %s, -1)", queue, token)
    assert sql("CALL queue_snooze(%s, 'a', 'k', %s, NULL)", queue, token) == [(0,)]


def test_snooze_frees_a_limited_kinds_slot_and_keeps_a_groups_head(sql, queue):
    sql("CALL queue_set_limit(%s, 'k', 1)", queue)
    sql("CALL queue_push(%s, 'a', 'k', '{}', NULL, NULL)", queue)
    sql("CALL queue_push(%s, 'b', 'k', '{}', NULL, NULL)", queue)
    (row,) = reserve(sql, queue)
    assert reserve(sql, queue) == []  # the one slot is taken
    assert sql("CALL queue_snooze(%s, %s, 'k', %s, 60)", queue, row[0], row[3]) == [(1,)]
    (other,) = reserve(sql, queue)
    assert other[0] != row[0]
    assert sql("CALL queue_limits(%s)", queue)[0][3] == 1

    grouped = make(sql)
    sql("CALL queue_push_grouped(%s, 'g', 'first', 'k', '1', NULL, NULL)", grouped)
    sql("CALL queue_push_grouped(%s, 'g', 'second', 'k', '2', NULL, NULL)", grouped)
    (head,) = reserve(sql, grouped)
    assert head[0] == "first"
    assert sql("CALL queue_snooze(%s, 'first', 'k', %s, NULL)", grouped, head[3]) == [(1,)]
    (again,) = reserve(sql, grouped)
    assert (again[0], again[5]) == ("first", 1)


# -- max_reservation ------------------------------------------------------------------------------


def test_every_reserve_path_and_extend_refuse_a_timeout_above_max_reservation(sql, queue):
    for n in (1, 5):
        refused(
            sql,
            "invalid_argument",
            "max_reservation",
            "CALL queue_reserve(%s, 'w', 43200.5, %s, NULL)",
            queue,
            n,
        )
        refused(
            sql,
            "invalid_argument",
            "max_reservation",
            "CALL queue_commit_reserve(%s, NULL, NULL, NULL, 'w', 3155760000, %s, NULL)",
            queue,
            n,
        )
    refused(
        sql, "invalid_argument", "max_reservation", "CALL queue_reserve(%s, 'w', 100000, 1, '[\"k\"]')", queue
    )
    sql("CALL queue_push(%s, 'a', 'k', '{}', NULL, NULL)", queue)
    (row,) = reserve(sql, queue, timeout=43200)
    refused(
        sql,
        "invalid_argument",
        "max_reservation",
        "CALL queue_extend(%s, 'a', 'k', %s, 43201)",
        queue,
        row[3],
    )
    # a refused commit_reserve changes nothing: the message it names is still held
    refused(
        sql,
        "invalid_argument",
        "max_reservation",
        "CALL queue_commit_reserve(%s, 'a', 'k', %s, 'w', 50000, 1, NULL)",
        queue,
        row[3],
    )
    assert message(sql, queue, "a")[1] == row[3]
    assert sql("CALL queue_extend(%s, 'a', 'k', %s, 43200)", queue, row[3])[0][0] is not None


def test_max_reservation_is_set_reset_and_bounded_by_the_visibility_timeout(sql):
    q = make(sql, visibility_timeout=60)
    assert sql("CALL queue_settings(%s)", q)[0][7:9] == (43200, 1048576)
    sql("CALL queue_set_max_reservation(%s, 90)", q)
    assert sql("CALL queue_settings(%s)", q)[0][7] == 90
    refused(sql, "invalid_argument", "max_reservation", "CALL queue_reserve(%s, 'w', 91, 1, NULL)", q)
    assert reserve(sql, q, timeout=90) == []
    refused(sql, "invalid_argument", "visibility_timeout", "CALL queue_set_max_reservation(%s, 59)", q)
    refused(sql, "invalid_argument", "greater than zero", "CALL queue_set_max_reservation(%s, 0)", q)
    refused(sql, "invalid_argument", "max_reservation", "CALL queue_create(%s, 91, NULL, NULL, NULL)", q)
    sql("CALL queue_reset_setting(%s, 'max_reservation')", q)
    assert sql("CALL queue_settings(%s)", q)[0][7] == 43200
    sql("CALL queue_set_max_reservation(%s, 90)", q)
    sql("CALL queue_set_max_reservation(%s, NULL)", q)
    assert sql("CALL queue_settings(%s)", q)[0][7] == 43200
    refused(
        sql,
        "invalid_argument",
        "max_reservation",
        "CALL queue_create(%s, 43201, NULL, NULL, NULL)",
        make(sql),
    )
    refused(
        sql,
        "invalid_argument",
        "max_reservation",
        "CALL queue_create(%s, 86400, NULL, NULL, NULL)",
        "add.new",
    )
    assert sql("SELECT COUNT(*) FROM pyqueue_queue WHERE queue_name = 'add.new'") == [(0,)]


# -- queue_release --------------------------------------------------------------------------------


def test_release_hands_reservations_back_deleting_nothing(sql, queue):
    for key in "abc":
        sql("CALL queue_push(%s, %s, 'k', '{}', NULL, NULL)", queue, key)
    mine = reserve(sql, queue, timeout=3600, n=2, worker="me")
    theirs = reserve(sql, queue, timeout=3600, worker="them")
    assert sql("CALL queue_release(%s, 'nobody')", queue) == [(0,)]
    assert sql("CALL queue_release(%s, 'me')", queue) == [(2,)]
    for row in mine:
        assert sql("CALL queue_commit(%s, %s, 'k', %s)", queue, row[0], row[3]) == [(0,)]
        assert sql("CALL queue_extend(%s, %s, 'k', %s, NULL)", queue, row[0], row[3]) == [(None,)]
        attempts, token, worker, ready, _ = message(sql, queue, row[0])
        assert (attempts, token, worker, ready) == (1, None, None, 1)
    assert message(sql, queue, theirs[0][0])[1] == theirs[0][3]
    assert sql("CALL queue_release(%s, NULL)", queue) == [(1,)]
    assert sql("SELECT COUNT(*) FROM pyqueue_message WHERE queue_name = %s", queue) == [(3,)]
    again = reserve(sql, queue, n=3)
    assert sorted(r[5] for r in again) == [2, 2, 2]


def test_release_frees_limit_slots_and_checks_its_arguments(sql, queue):
    sql("CALL queue_set_limit(%s, 'k', 1)", queue)
    sql("CALL queue_push(%s, 'a', 'k', '{}', NULL, NULL)", queue)
    sql("CALL queue_push(%s, 'b', 'k', '{}', NULL, NULL)", queue)
    assert len(reserve(sql, queue, timeout=3600)) == 1
    assert reserve(sql, queue) == []
    assert sql("CALL queue_release(%s, NULL)", queue) == [(1,)]
    assert len(reserve(sql, queue)) == 1
    refused(sql, "unknown_queue", "does not exist", "CALL queue_release('nope.x', NULL)")
    refused(sql, "invalid_argument", "worker", "CALL queue_release(%s, '')", queue)
    refused(sql, "invalid_argument", "worker", "CALL queue_release(%s, %s)", queue, "w" * 256)


# -- max_payload ----------------------------------------------------------------------------------


def test_every_producer_path_refuses_a_payload_above_max_payload(sql, queue):
    sql("CALL queue_set_max_payload(%s, 20)", queue)
    assert sql("CALL queue_settings(%s)", queue)[0][8] == 20
    big = json.dumps("x" * 30)
    ok = json.dumps("x" * 10)
    statements = [
        ("CALL queue_push(%s, 'a', 'k', %s, NULL, NULL)", (queue, big)),
        ("CALL queue_push_replace(%s, 'a', 'k', %s, NULL, NULL)", (queue, big)),
        ("CALL queue_push_grouped(%s, 'g', 'a', 'k', %s, NULL, NULL)", (queue, big)),
        (
            "CALL queue_push_batch(%s, %s, NULL, NULL, NULL, NULL)",
            (queue, json.dumps([{"p_key": "a", "p_kind": "k", "payload": "x" * 30}])),
        ),
        (
            "CALL queue_push_batch_grouped(%s, %s, NULL, NULL, NULL, NULL, NULL)",
            (queue, json.dumps([{"group": "g", "p_key": "a", "p_kind": "k", "payload": "x" * 30}])),
        ),
    ]
    topic = f"t{uuid.uuid4().hex[:8]}"
    sql("CALL queue_bind(%s, %s)", topic, queue)
    statements += [
        ("CALL queue_publish(%s, 'a', 'k', %s, NULL, NULL)", (topic, big)),
        (
            "CALL queue_publish_batch(%s, NULL, NULL, NULL, NULL, NULL)",
            (json.dumps([{"topic": topic, "p_key": "a", "p_kind": "k", "payload": "x" * 30}]),),
        ),
    ]
    for statement, args in statements:
        message_text = refused(sql, "invalid_payload", "max_payload of 20 bytes", statement, *args)
        assert "bytes" in message_text
    assert sql("SELECT COUNT(*) FROM pyqueue_message WHERE queue_name = %s", queue) == [(0,)]
    assert sql("CALL queue_push(%s, 'a', 'k', %s, NULL, NULL)", queue, ok) == [(1,)]
    # a move with a new payload: measured against the target queue
    (row,) = reserve(sql, queue)
    refused(
        sql,
        "invalid_payload",
        "max_payload",
        "CALL queue_move(%s, 'a', 'k', %s, %s, %s)",
        queue,
        row[3],
        queue,
        big,
    )
    other = make(sql)
    assert sql("CALL queue_move(%s, 'a', 'k', %s, %s, %s)", queue, row[3], other, big) == [(1,)]
    sql("CALL queue_reset_setting(%s, 'max_payload')", queue)
    assert sql("CALL queue_push(%s, 'b', 'k', %s, NULL, NULL)", queue, big) == [(1,)]


def test_max_payload_range_and_default(sql, queue):
    refused(sql, "invalid_argument", "max_payload", "CALL queue_set_max_payload(%s, 0)", queue)
    refused(sql, "invalid_argument", "max_payload", "CALL queue_set_max_payload(%s, 268435457)", queue)
    refused(sql, "invalid_argument", "max_payload", "CALL queue_set_max_payload(%s, 1.5)", queue)
    sql("CALL queue_set_max_payload(%s, 268435456)", queue)
    sql("CALL queue_set_max_payload(%s, NULL)", queue)
    assert sql("CALL queue_settings(%s)", queue)[0][8] == 1048576
    big = json.dumps("x" * 1048576)
    refused(
        sql, "invalid_payload", "1048578 bytes", "CALL queue_push(%s, 'a', 'k', %s, NULL, NULL)", queue, big
    )


def test_ingest_counts_a_payload_above_max_payload_as_rejected(sql, queue):
    sql("CALL queue_set_max_payload(%s, 20)", queue)
    sql(
        "INSERT INTO queue_ingest (queue_name, p_key, p_kind, payload) VALUES (%s, 'big', 'k', %s), "
        "(%s, 'ok', 'k', '1'), (%s, 'x@2030-01-01T00:00:00Z', 'k', '1')",
        queue,
        json.dumps("x" * 30),
        queue,
        queue,
    )
    assert sql("CALL queue_ingest_flush(%s)", queue) == [(1, 0, 2)]
    reasons = dict(sql("SELECT p_key, reason FROM pyqueue_ingest_reject WHERE queue_name = %s", queue))
    assert reasons["big"].startswith("pyqueue:invalid_payload: payload is 32 bytes")
    assert "reserved for schedules" in reasons["x@2030-01-01T00:00:00Z"]


# -- occurrence keys ------------------------------------------------------------------------------


def test_every_producer_path_refuses_an_occurrence_key(sql, queue):
    key = "job@2030-01-01T00:00:00Z"
    topic = f"t{uuid.uuid4().hex[:8]}"
    sql("CALL queue_bind(%s, %s)", topic, queue)
    element = {"p_key": key, "p_kind": "k", "payload": 1}
    for statement, args in [
        ("CALL queue_push(%s, %s, 'k', '1', NULL, NULL)", (queue, key)),
        ("CALL queue_push_replace(%s, %s, 'k', '1', NULL, NULL)", (queue, key)),
        ("CALL queue_push_grouped(%s, 'g', %s, 'k', '1', NULL, NULL)", (queue, key)),
        ("CALL queue_publish(%s, %s, 'k', '1', NULL, NULL)", (topic, key)),
        ("CALL queue_push_batch(%s, %s, NULL, NULL, NULL, NULL)", (queue, json.dumps([element]))),
        (
            "CALL queue_push_batch_grouped(%s, %s, NULL, NULL, NULL, NULL, NULL)",
            (queue, json.dumps([dict(element, group="g")])),
        ),
        (
            "CALL queue_publish_batch(%s, NULL, NULL, NULL, NULL, NULL)",
            (
                json.dumps(
                    [
                        {"p_key": "fine", "p_kind": "k", "payload": 1, "topic": topic},
                        dict(element, topic=topic),
                    ]
                ),
            ),
        ),
    ]:
        refused(sql, "invalid_argument", "reserved for schedules", statement, *args)
    assert sql("SELECT COUNT(*) FROM pyqueue_message WHERE queue_name = %s", queue) == [(0,)]
    # an escaped '@' in a batch is the same key
    escaped = '[{"p_key": "job\\u00402030-01-01T00:00:00Z", "p_kind": "k", "payload": 1}]'
    refused(
        sql,
        "invalid_argument",
        "reserved for schedules",
        "CALL queue_push_batch(%s, %s, NULL, NULL, NULL, NULL)",
        queue,
        escaped,
    )
    # keys that merely look alike are fine
    assert sql("CALL queue_push(%s, 'job@2030-01-01T00:00:00', 'k', '1', NULL, NULL)", queue) == [(1,)]
    assert sql("CALL queue_push(%s, 'job@2030-01-01 00:00:00Z', 'k', '1', NULL, NULL)", queue) == [(1,)]


def test_a_producer_cannot_stop_a_schedules_chain_by_pushing_its_next_occurrences(dsn, sql, queue):
    """As an account holding only the producer capability: pushing the next occurrence keys ahead
    (far in the future) used to make the commit's push of the next occurrence a duplicate, and the
    chain stopped after one commit."""
    from tests.security.test_privileges import Accounts

    accounts = Accounts(dsn)
    try:
        producer = accounts.raw(accounts.with_capabilities("prod", "producer"))
        (next_at,) = sql("CALL queue_schedule_every(%s, 'tick', 'k', '{}', 1)", queue)[0]
        ahead = [
            {
                "p_key": f"tick@{(next_at + dt.timedelta(seconds=i)).strftime('%Y-%m-%dT%H:%M:%SZ')}",
                "p_kind": "k",
                "payload": {"forged": True},
                "run_at": "9999-01-01 00:00:00",
            }
            for i in range(1, 200)
        ]
        for element in ahead[:3]:
            with pytest.raises(pymysql.MySQLError, match="reserved for schedules"):
                call(
                    producer,
                    "CALL queue_push(%s, %s, 'k', '{}', '9999-01-01 00:00:00', NULL)",
                    queue,
                    element["p_key"],
                )
        with pytest.raises(pymysql.MySQLError, match="reserved for schedules"):
            call(producer, "CALL queue_push_batch(%s, %s, NULL, NULL, NULL, NULL)", queue, json.dumps(ahead))
        with pytest.raises(pymysql.MySQLError, match="reserved for schedules"):
            call(
                producer,
                "CALL queue_push_replace(%s, %s, 'k', '{}', '9999-01-01 00:00:00', NULL)",
                queue,
                ahead[0]["p_key"],
            )
        # the chain goes on: each commit pushes the next occurrence, due when it should be
        for _ in range(2):
            deadline = time.monotonic() + 5
            rows = []
            while not rows and time.monotonic() < deadline:
                rows = reserve(sql, queue)
                time.sleep(0.05)
            (row,) = rows
            assert row[0].startswith("tick@") and json.loads(row[2]) == {}
            assert sql("CALL queue_commit(%s, %s, 'k', %s)", queue, row[0], row[3]) == [(1,)]
            pending = sql("SELECT p_key, scheduled_at FROM pyqueue_message WHERE queue_name = %s", queue)
            assert len(pending) == 1 and pending[0][1] < dt.datetime(9999, 1, 1)
    finally:
        accounts.close()


# -- topics ---------------------------------------------------------------------------------------


def matches(pattern: str, topic: str) -> bool:
    """The reference: '*' one word, '#' any number of words (AMQP topic exchanges)."""
    words, parts = topic.split("."), pattern.split(".")
    reach = {0}
    for part in parts:
        if part == "#":
            reach = set(range(min(reach), len(words) + 1)) if reach else set()
        else:
            reach = {i + 1 for i in reach if i < len(words) and part in ("*", words[i])}
    return len(words) in reach


def test_bind_refuses_more_than_three_hash_words(sql, queue):
    refused(sql, "invalid_argument", "more than 3 # wildcards", "CALL queue_bind('a.#.#.#.#', %s)", queue)
    refused(
        sql, "invalid_argument", "more than 3 # wildcards", "CALL queue_bind('#.x.#.x.#.x.#.y', %s)", queue
    )
    assert sql("CALL queue_bind('#.x.#.x.#.y', %s)", queue) == [(1,)]


def test_matching_stays_fast_at_the_longest_topic(sql, queue):
    patterns = [
        "#.*.#.*.#.y.*.x",
        "#.x.#.x.#.y",
        "*.#.*.#.*.#.*",
        "#." + ".".join(["x"] * 40) + ".y",
        "#.a.b.a.b.#.a.b.a.c.#.z",
    ]
    for pattern in patterns:
        sql("CALL queue_bind(%s, %s)", pattern, queue)
    topics = [
        "y." + ".".join(["x"] * 126),
        ".".join(["x"] * 126) + ".y",
        ".".join(["a", "b"] * 63),
        ".".join(["x"] * 45) + ".y",
    ]
    # Against the same publishes of short topics, on the same server at the same time (a loaded
    # machine slows both alike): backtracking expressions took seconds at the longest topics.
    started = time.monotonic()
    for i in range(len(topics)):
        sql("CALL queue_publish(%s, %s, 'k', '1', NULL, NULL)", "a.b", f"short{i}")
    short = time.monotonic() - started
    started = time.monotonic()
    delivered = [
        sql("CALL queue_publish(%s, %s, 'k', '1', NULL, NULL)", t, f"m{i}")[0][0]
        for i, t in enumerate(topics)
    ]
    long = time.monotonic() - started
    assert long < 20 * short + 0.5, (long, short)
    assert delivered == [int(any(matches(p, t) for p in patterns)) for t in topics]
    assert delivered == [1, 1, 1, 1]


def test_a_match_the_server_cannot_decide_is_an_error(sql, queue):
    """A binding whose expression backtracks past the engine's limit (written directly: queue_bind
    no longer builds one) makes publish fail (warning 1139 was a silent miss)."""
    regex = "^" + r"(\.[^.]+)*\.x" * 6 + r"\.y\z"
    sql(
        "INSERT INTO pyqueue_binding (pattern, queue_name, pattern_regex, created_at)"
        " VALUES ('undecidable', %s, %s, UTC_TIMESTAMP(6))",
        queue,
        regex,
    )
    topic = "y." + ".".join(["x"] * 126)
    refused(
        sql,
        "invalid_argument",
        "could not decide",
        "CALL queue_publish(%s, 'a', 'k', '1', NULL, NULL)",
        topic,
    )
    refused(
        sql,
        "invalid_argument",
        "could not decide",
        "CALL queue_publish_batch(%s, NULL, NULL, NULL, NULL, NULL)",
        json.dumps([{"topic": topic, "p_key": "a", "p_kind": "k", "payload": 1}]),
    )
    assert sql("SELECT COUNT(*) FROM pyqueue_message WHERE queue_name = %s", queue) == [(0,)]
