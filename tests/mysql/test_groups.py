"""MySQL/MariaDB: a message that becomes its group's head when pushed (the group's first message,
or one with an earlier run_at than a head never delivered) is scheduled exactly as a message
without a group: at its run_at, past or future, or at the push when run_at is NULL; single and
batch pushes alike, read from the live table."""

from __future__ import annotations

import datetime as dt
import json
import uuid

import pytest

pytestmark = pytest.mark.only_dialect("mysql")

PAST = dt.datetime(2020, 1, 2, 3, 4, 5, 600000)
EARLIER = dt.datetime(2019, 6, 7, 8, 9, 10, 110000)
FUTURE = dt.datetime(2999, 1, 2, 3, 4, 5, 600000)


@pytest.fixture
def sql(mysql_sql):
    return mysql_sql


@pytest.fixture
def queue(sql):
    name = f"grp.{uuid.uuid4().hex[:10]}"
    sql("CALL queue_create(%s, NULL, NULL, NULL, NULL)", name)
    return name


def scheduled(sql, queue, key):
    return sql("SELECT scheduled_at FROM pyqueue_message WHERE queue_name = %s AND p_key = %s", queue, key)[
        0
    ][0]


def now(sql):
    return sql("SELECT UTC_TIMESTAMP(6)")[0][0]


def push(sql, queue, group, key, run_at):
    sql("CALL queue_push_grouped(%s, %s, %s, 'k', '{}', %s, NULL)", queue, group, key, run_at)


def push_batch(sql, queue, elements):
    messages = [
        {
            "group": group,
            "p_key": key,
            "p_kind": "k",
            "payload": {},
            "run_at": run_at and run_at.isoformat(" "),
        }
        for group, key, run_at in elements
    ]
    sql("CALL queue_push_batch_grouped(%s, %s, NULL, NULL, NULL, NULL, NULL)", queue, json.dumps(messages))


@pytest.mark.parametrize("run_at", [PAST, FUTURE], ids=["past", "future"])
def test_the_first_message_of_a_group_is_due_at_its_run_at(sql, queue, run_at):
    push(sql, queue, "g", "one", run_at)
    push_batch(sql, queue, [("h", "two", run_at)])
    assert scheduled(sql, queue, "one") == run_at
    assert scheduled(sql, queue, "two") == run_at


def test_the_first_message_of_a_group_without_run_at_is_due_at_the_push(sql, queue):
    before = now(sql)
    push(sql, queue, "g", "one", None)
    push_batch(sql, queue, [("h", "two", None)])
    after = now(sql)
    assert before <= scheduled(sql, queue, "one") <= after
    assert before <= scheduled(sql, queue, "two") <= after


def test_an_earlier_run_at_takes_the_place_of_a_head_never_delivered_at_that_run_at(sql, queue):
    push(sql, queue, "g", "late", PAST)
    push(sql, queue, "g", "early", EARLIER)
    push_batch(sql, queue, [("h", "late2", PAST), ("h", "early2", EARLIER)])
    assert scheduled(sql, queue, "early") == EARLIER
    assert scheduled(sql, queue, "early2") == EARLIER
    assert scheduled(sql, queue, "late").year == scheduled(sql, queue, "late2").year == 9999


def test_a_past_run_at_head_goes_before_later_messages_without_a_group(sql, queue):
    sql("CALL queue_push(%s, 'plain', 'k', '{}', NULL, NULL)", queue)
    push(sql, queue, "g", "grouped", PAST)
    got = [row[0] for row in sql("CALL queue_reserve(%s, 'w', NULL, 2, NULL)", queue)]
    assert got == ["grouped", "plain"]
