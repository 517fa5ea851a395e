"""MySQL/MariaDB: the short ways of queue_commit_batch, queue_reserve and queue_ingest_flush give
what the general ones give. A batch of one kind written plainly (with or without a space after each
comma) commits every message; kinds that differ only in case are two kinds; a bad kind is named by
its element wherever it stands, and nothing is committed. A single reserve sends the claim as the
row now holds it (token, attempts, headers, times). A batch reserve among other consumers takes
each message once. A batch reserve over priorities walks them from the top by the short way, and
past four priorities with nothing ready goes the general way. A flush into a queue without live
messages keeps the first of repeated keys and counts the rest duplicates, and one into a queue with
live messages still skips those."""

from __future__ import annotations

import json
import threading
import uuid

import pymysql
import pytest

from pyqueue_sql.dialects import mysql_connect_args
from tests.plainsql import call

pytestmark = pytest.mark.only_dialect("mysql")

COLUMNS = (
    "p_key, p_kind, payload, reserve_token, priority, attempts, created_at, scheduled_at_initially, headers"
)


@pytest.fixture
def sql(mysql_sql):
    return mysql_sql


@pytest.fixture
def make_queue(sql):
    def make() -> str:
        name = f"short.{uuid.uuid4().hex[:10]}"
        sql("CALL queue_create(%s, NULL, NULL, NULL, NULL)", name)
        return name

    return make


@pytest.fixture
def queue(make_queue):
    return make_queue()


def reserve(sql, queue: str, n: int) -> list[tuple]:
    return sql("CALL queue_reserve(%s, 'w', NULL, %s, NULL)", queue, n)


def live(sql, queue: str) -> int:
    return sql("SELECT COUNT(*) FROM pyqueue_message WHERE queue_name = %s", queue)[0][0]


@pytest.mark.parametrize("separators", [(",", ":"), (", ", ": ")])
def test_a_batch_of_one_kind_commits_every_message_however_it_is_spaced(sql, queue, separators):
    for i in range(5):
        sql("CALL queue_push(%s, %s, 'k', '{}', NULL, NULL)", queue, f"m{i}")
    rows = reserve(sql, queue, 5)
    assert len(rows) == 5

    def arr(values):
        return json.dumps(values, separators=separators)

    committed = sql(
        "CALL queue_commit_batch(%s, %s, %s, %s)",
        queue,
        arr([r[0] for r in rows]),
        arr([r[1] for r in rows]),
        arr([r[3] for r in rows]),
    )
    assert committed == [(5,)]
    assert live(sql, queue) == 0


@pytest.mark.parametrize("separators", [(",", ":"), (", ", ": ")])
def test_kinds_that_differ_only_in_case_are_two_kinds(sql, queue, separators):
    sql("CALL queue_push(%s, 'a', 'k', '{}', NULL, NULL)", queue)
    sql("CALL queue_push(%s, 'b', 'K', '{}', NULL, NULL)", queue)
    rows = sorted(reserve(sql, queue, 2))
    assert [(r[0], r[1]) for r in rows] == [("a", "k"), ("b", "K")]
    committed = sql(
        "CALL queue_commit_batch(%s, %s, %s, %s)",
        queue,
        json.dumps([r[0] for r in rows], separators=separators),
        json.dumps([r[1] for r in rows], separators=separators),
        json.dumps([r[3] for r in rows], separators=separators),
    )
    assert committed == [(2,)]
    assert live(sql, queue) == 0


@pytest.mark.parametrize(
    ("kinds", "element"),
    [(["k ", "k "], 1), (["k", "k "], 2), (["", "k"], 1), (["k", 7], 2), (["k", "k", "k" * 129], 3)],
)
def test_a_bad_kind_is_named_by_its_element_and_nothing_is_committed(sql, queue, kinds, element):
    for i in range(len(kinds)):
        sql("CALL queue_push(%s, %s, 'k', '{}', NULL, NULL)", queue, f"m{i}")
    rows = reserve(sql, queue, len(kinds))
    with pytest.raises(pymysql.MySQLError, match=f"element {element} of the batch"):
        sql(
            "CALL queue_commit_batch(%s, %s, %s, %s)",
            queue,
            json.dumps([r[0] for r in rows]),
            json.dumps(kinds),
            json.dumps([r[3] for r in rows]),
        )
    assert live(sql, queue) == len(kinds)
    assert sql(
        "SELECT COUNT(*) FROM pyqueue_message WHERE queue_name = %s AND reserve_token IS NULL", queue
    ) == [(0,)]


def test_a_single_reserve_sends_the_claim_as_the_row_holds_it(sql, queue):
    sql(
        "CALL queue_push_with_headers(%s, 'h', 'k', '{\"n\": 1}', NULL, NULL, '{\"trace\": \"t-1\"}')",
        queue,
    )
    for attempt in (1, 2):
        [row] = reserve(sql, queue, 1)
        [stored] = sql(f"SELECT {COLUMNS} FROM pyqueue_message WHERE queue_name = %s", queue)
        assert row == stored
        assert row[5] == attempt
        assert json.loads(row[8]) == {"trace": "t-1"}
        assert sql("CALL queue_rollback(%s, 'h', 'k', %s, NULL)", queue, row[3]) == [(1,)]


def test_a_batch_reserve_among_other_consumers_takes_each_message_once(sql, queue, dsn):
    total = 1200
    for start in range(0, total, 300):
        messages = [{"p_key": f"m{i}", "p_kind": "k", "payload": {}} for i in range(start, start + 300)]
        sql("CALL queue_push_batch(%s, %s, NULL, NULL, NULL, NULL)", queue, json.dumps(messages))
    seen: list[str] = []
    lock = threading.Lock()
    errors: list[BaseException] = []
    go = threading.Barrier(4)

    def consume():
        conn = pymysql.connect(**mysql_connect_args(dsn))
        try:
            go.wait()
            while True:
                rows = call(conn, "CALL queue_reserve(%s, 'w', NULL, 50, NULL)", queue)
                if not rows:
                    return
                with lock:
                    seen.extend(r[0] for r in rows)
        except BaseException as exc:  # noqa: BLE001 - reported below
            errors.append(exc)
        finally:
            conn.close()

    threads = [threading.Thread(target=consume) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    assert not errors
    assert len(seen) == total
    assert len(set(seen)) == total


def flush(sql, queue: str) -> tuple[int, int, int]:
    [counts] = sql("CALL queue_ingest_flush(%s)", queue)
    return counts


def ingest(sql, queue: str, rows: list[tuple[str, str]]) -> None:
    for key, payload in rows:
        sql(
            "INSERT INTO queue_ingest (queue_name, p_key, p_kind, payload) VALUES (%s, %s, 'k', %s)",
            queue,
            key,
            payload,
        )


def test_a_flush_into_a_queue_without_live_messages_keeps_the_first_of_repeated_keys(sql, queue, make_queue):
    other = make_queue()
    sql("CALL queue_push(%s, 'a', 'k', '{}', NULL, NULL)", other)  # another queue's live message
    ingest(sql, queue, [("a", '{"n": 1}'), ("b", '{"n": 2}'), ("a", '{"n": 3}')])
    assert flush(sql, queue) == (2, 1, 0)
    assert sql("SELECT p_key, payload FROM pyqueue_message WHERE queue_name = %s ORDER BY p_key", queue) == [
        ("a", '{"n": 1}'),
        ("b", '{"n": 2}'),
    ]
    assert sql("SELECT COUNT(*) FROM queue_ingest WHERE queue_name = %s", queue) == [(0,)]


def test_a_flush_into_a_queue_with_live_messages_skips_them(sql, queue):
    sql("CALL queue_push(%s, 'a', 'k', '{\"live\": true}', NULL, NULL)", queue)
    ingest(sql, queue, [("a", '{"n": 1}'), ("b", '{"n": 2}')])
    assert flush(sql, queue) == (1, 1, 0)
    assert sql("SELECT p_key, payload FROM pyqueue_message WHERE queue_name = %s ORDER BY p_key", queue) == [
        ("a", '{"live": true}'),
        ("b", '{"n": 2}'),
    ]


def push(sql, queue: str, key: str, priority: int, delay_s: float | None = None) -> None:
    run_at = None if delay_s is None else f"UTC_TIMESTAMP(6) + INTERVAL {int(delay_s * 1e6)} MICROSECOND"
    sql(f"CALL queue_push(%s, %s, 'k', '{{}}', {run_at or 'NULL'}, %s)", queue, key, priority)


def test_a_batch_reserve_over_priorities_walks_them_from_the_top_by_the_short_way(sql, queue, dsn):
    """Priorities 5, 2 and 0 (a delayed message at 7, one of priority 2 held by another transaction):
    batch reserves take them highest priority first, FIFO within one, the held one skipped and the
    delayed one left, by the short way (the session's mark names the first priority it found)."""
    push(sql, queue, "late7", 7, delay_s=3600)
    for p, n in ((0, 3), (2, 3), (5, 2)):
        for i in range(n):
            push(sql, queue, f"p{p}.{i}", p)
    other = pymysql.connect(**mysql_connect_args(dsn))
    try:
        other.begin()
        with other.cursor() as cur:
            cur.execute(
                "SELECT id FROM pyqueue_message WHERE queue_name = %s AND p_key = 'p2.0' FOR UPDATE", (queue,)
            )
        first = [r[0] for r in reserve(sql, queue, 4)]
        assert first == ["p5.0", "p5.1", "p2.1", "p2.2"]
        assert sql("SELECT @pyqueue__ready_priority") == [(5,)]
        other.rollback()
    finally:
        other.close()
    assert [r[0] for r in reserve(sql, queue, 10)] == ["p2.0", "p0.0", "p0.1", "p0.2"]
    assert sql("SELECT @pyqueue__ready_priority") == [(2,)]  # (5: nothing ready there now)
    assert reserve(sql, queue, 10) == []


def test_a_batch_reserve_past_four_priorities_with_nothing_ready_goes_the_general_way(sql, queue):
    """Five priorities above 0 hold delayed messages only: the short way stops after four of them
    (its cost would follow the priorities, not the ready rows) and the general way, which reads the
    due index past four steps, hands out the ready ones (no mark is left)."""
    for p in range(1, 6):
        push(sql, queue, f"late{p}", p, delay_s=3600)
    for i in range(3):
        push(sql, queue, f"m{i}", 0)
    sql("SET @pyqueue__ready_priority = NULL, @pyqueue__ready_queue = NULL")
    assert [r[0] for r in reserve(sql, queue, 10)] == ["m0", "m1", "m2"]
    assert sql("SELECT @pyqueue__ready_priority") == [(None,)]
