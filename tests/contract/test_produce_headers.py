"""Message headers (docs/contract.md, "Headers"), on every dialect, as plain SQL: the *_with_headers
pushes (queue_push, queue_push_batch, queue_push_grouped, queue_push_batch_grouped, queue_publish,
queue_publish_batch), their validation, and that the headers are kept through retries, moves, dead
letters, history, replay and redrive, and returned as the trailing column `headers` of queue_reserve,
queue_commit_reserve, queue_pop, queue_message, queue_messages and queue_dead_letters.

Batches: PostgreSQL takes a headers array beside the other arrays (NULL = none for every element);
MySQL/MariaDB take one JSON array of messages, each with an optional member "headers", and the
headers argument NULL."""

from __future__ import annotations

import json
import uuid

import pytest

from tests import plainsql

MAX = 8192
HELD_IV = (None, None, None, None, "::interval")  # (queue, key, kind, token, interval)
MOVE = (None, None, None, None, None, "::jsonb")  # queue_move's payload
TRACE = {"traceparent": "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01", "tenant": "acme"}


class Sql(plainsql.Sql):
    """The routines as plain SQL (tests/plainsql.py), with the pushes and reads of headers."""

    # -- queues ------------------------------------------------------------------------------
    def queue(self, *, max_attempts=None, dead_letter_queue=None, history=False, vis=None) -> str:
        name = f"h.{uuid.uuid4().hex[:12]}"
        self(
            "queue_create",
            name,
            None if vis is None else self.dur(vis),
            max_attempts,
            dead_letter_queue,
            self.dur(86400) if history else None,
        )
        return name

    # -- pushes ----------------------------------------------------------------------------------
    def push(self, queue, key, headers, kind="k", payload=None, run_at=None, priority=None) -> bool:
        return bool(
            self.one(
                "queue_push_with_headers",
                queue,
                key,
                kind,
                json.dumps(payload if payload is not None else {"n": key}),
                run_at,
                priority,
                self.text(headers),
                casts=(None, None, None, "::jsonb", "::timestamptz", "::integer", "::jsonb"),
            )
        )

    def push_grouped(self, queue, group, key, headers, kind="k") -> bool:
        return bool(
            self.one(
                "queue_push_grouped_with_headers",
                queue,
                group,
                key,
                kind,
                "{}",
                None,
                None,
                self.text(headers),
                casts=(None, None, None, None, "::jsonb", "::timestamptz", "::integer", "::jsonb"),
            )
        )

    def publish(self, topic, key, headers, kind="k") -> int:
        return self.one(
            "queue_publish_with_headers",
            topic,
            key,
            kind,
            "{}",
            None,
            None,
            self.text(headers),
            casts=(None, None, None, "::jsonb", "::timestamptz", "::integer", "::jsonb"),
        )

    def _batch(self, routine: str, first: tuple, items: list[tuple], member: str | None, headers_arg):
        """items: (member value or None, key, headers) each; member: 'group', 'topic' or None.
        headers_arg: PostgreSQL's headers array as given ('each': one per item from items)."""
        if self.pg:
            arrays = []
            if member is not None:
                arrays.append([m for m, _, _ in items])
            keys = [k for _, k, _ in items]
            arrays += [keys, ["k"] * len(items), ["{}"] * len(items), None, None]
            if headers_arg == "each":
                headers_arg = [self.text(h) for _, _, h in items]
            casts = (
                (() if routine.startswith("queue_publish") else (None,))
                + (("::text[]",) if member is not None else ())
                + ("::text[]", "::text[]", "::jsonb[]", "::timestamptz[]", "::integer[]", "::jsonb[]")
            )
            return self.one(routine, *first, *arrays, headers_arg, casts=casts)
        messages = []
        for m, k, h in items:
            message = {"p_key": k, "p_kind": "k", "payload": {}}
            if member is not None:
                message[member] = m
            if h is not None:
                message["headers"] = json.loads(h) if isinstance(h, str) else h
            messages.append(message)
        nulls = [None] * (5 if member is not None or routine.startswith("queue_publish") else 4)
        if routine.startswith("queue_publish"):
            return self.one(
                routine, json.dumps(messages), *nulls, None if headers_arg == "each" else headers_arg
            )
        return self.one(
            routine, *first, json.dumps(messages), *nulls, None if headers_arg == "each" else headers_arg
        )

    def push_batch(self, queue, items, headers_arg="each") -> int:
        return self._batch(
            "queue_push_batch_with_headers", (queue,), [(None, k, h) for k, h in items], None, headers_arg
        )

    def push_batch_grouped(self, queue, items, headers_arg="each") -> int:
        return self._batch("queue_push_batch_grouped_with_headers", (queue,), items, "group", headers_arg)

    def publish_batch(self, items, headers_arg="each") -> int:
        return self._batch("queue_publish_batch_with_headers", (), items, "topic", headers_arg)

    # -- reads -------------------------------------------------------------------------------------
    def headers(self, queue, key, kind="k"):
        """queue_message's trailing headers of the live message (KeyError when there is none)."""
        rows = self("queue_message", queue, key, kind)
        if not rows:
            raise KeyError(key)
        return self.json_out(rows[0][-1])

    def listed(self, queue) -> dict:
        """key -> headers, from queue_messages."""
        return {
            row[0]: self.json_out(row[-1])
            for row in self("queue_messages", queue, None, None, None, None, None)
        }

    def reserve(self, queue, n=1, timeout=60) -> list[tuple]:
        """(key, token, headers) of each row queue_reserve returns."""
        rows = self("queue_reserve", queue, "w", self.dur(timeout), n, None, casts=(None, None, "::interval"))
        return [(row[0], str(row[3]), self.json_out(row[-1])) for row in rows]

    def reserve_one(self, queue, timeout=60) -> tuple:
        (got,) = self.reserve(queue, 1, timeout)
        return got

    def keys_with_headers(self, queue) -> list:
        """The keys of the queue's live messages whose headers column is not SQL NULL."""
        rows = self.raw(
            "SELECT p_key FROM pyqueue_message WHERE queue_name = %s AND headers IS NOT NULL ORDER BY p_key",
            (queue,),
        )
        return [r[0] for r in rows]

    def history_headers(self, queue, key) -> list:
        rows = self.raw(
            "SELECT headers FROM pyqueue_history WHERE queue_name = %s AND p_key = %s ORDER BY id",
            (queue, key),
        )
        return [self.json_out(r[0]) for r in rows]


@pytest.fixture
def sql(raw, dialect):
    """The plain-SQL fixture of tests/conftest.py, with this file's helpers."""
    return Sql(raw, dialect)


def _raises(match: str):
    return pytest.raises(Exception, match=match)


def _sized(n: int) -> str:
    """A JSON object whose text, written as both dialects show it ('{"a": "..."}'), is n bytes."""
    return '{"a": "' + "x" * (n - 9) + '"}'


# -- writing: queue_push_with_headers ---------------------------------------------------------------


def test_push_with_headers_stores_them_and_every_read_of_the_message_returns_them(sql):
    q = sql.queue()
    assert sql.push(q, "a", TRACE)
    assert sql.push(q, "b", None)
    assert sql("queue_push", q, "c", "k", "{}", None, None, casts=(None, None, None, "::jsonb"))
    assert sql.headers(q, "a") == TRACE
    assert sql.headers(q, "b") is None
    assert sql.headers(q, "c") is None  # a push without headers has none
    assert sql.listed(q) == {"a": TRACE, "b": None, "c": None}


def test_reserve_returns_headers_as_its_trailing_column(sql):
    q = sql.queue()
    sql.push(q, "a", TRACE)
    sql.push(q, "b", None)
    got = {key: headers for key, _, headers in sql.reserve(q, 5)}
    assert got == {"a": TRACE, "b": None}


def test_a_json_null_is_no_headers(sql):
    q = sql.queue()
    assert sql.push(q, "a", "null")
    assert sql.push_grouped(q, "g", "b", "null")
    assert sql.headers(q, "a") is None
    assert sql.keys_with_headers(q) == []  # stored as SQL NULL


@pytest.mark.parametrize("bad", ["[1, 2]", '"traceparent"', "7", "true", "{not json"])
def test_headers_that_are_not_a_json_object_are_refused_and_nothing_is_written(sql, bad):
    q = sql.queue()
    # text that is not JSON: PostgreSQL refuses it in the argument's cast to jsonb
    match = "headers must be a JSON object" + (
        "|invalid input syntax for type json" if bad == "{not json" else ""
    )
    with _raises(match):
        sql.push(q, "a", bad)
    with _raises(match):
        sql.push_grouped(q, "g", "b", bad)
    assert sql.listed(q) == {}


def test_headers_of_at_most_8192_bytes_are_taken_and_longer_ones_refused(sql):
    q = sql.queue()
    assert sql.push(q, "a", _sized(MAX))
    assert len(json.dumps(sql.headers(q, "a"))) == MAX
    with _raises(f"headers are {MAX + 1} bytes, more than 8192 bytes"):
        sql.push(q, "b", _sized(MAX + 1))
    with _raises("more than 8192 bytes"):
        sql.push_grouped(q, "g", "c", _sized(MAX + 100))
    assert set(sql.listed(q)) == {"a"}


def test_the_other_checks_of_push_still_come_with_headers(sql):
    q = sql.queue()
    with _raises("does not exist"):
        sql.push(f"missing.{uuid.uuid4().hex[:8]}", "a", TRACE)
    with _raises("p_key"):
        sql.push(q, "", TRACE)
    with _raises("reserved for schedules"):
        sql.push(q, "x@2026-01-01T00:00:00Z", TRACE)
    assert sql.listed(q) == {}


def test_a_push_of_a_live_key_changes_nothing_headers_included(sql):
    q = sql.queue()
    assert sql.push(q, "a", TRACE)
    assert not sql.push(q, "a", {"other": 1})
    assert not sql.push(q, "a", None)
    assert sql.headers(q, "a") == TRACE
    assert sql.push(q, "b", None)
    assert not sql.push(q, "b", TRACE)
    assert sql.headers(q, "b") is None


def test_push_replace_keeps_the_live_messages_headers(sql):
    q = sql.queue()
    sql.push(q, "a", TRACE)
    (outcome,) = sql(
        "queue_push_replace", q, "a", "k", '{"v": 2}', None, None, casts=(None, None, None, "::jsonb")
    )[0]
    assert outcome in ("replaced", True, 1)
    assert sql.headers(q, "a") == TRACE


# -- writing: the batch, grouped and topic siblings --------------------------------------------------


def test_push_batch_with_headers_gives_each_message_its_own(sql):
    q = sql.queue()
    items = [("a", TRACE), ("b", None), ("c", {"tenant": "x"}), ("a", {"dup": 1}), ("d", "null")]
    assert sql.push_batch(q, items) == 4
    assert sql.listed(q) == {"a": TRACE, "b": None, "c": {"tenant": "x"}, "d": None}  # JSON null: none
    assert sql.keys_with_headers(q) == ["a", "c"]  # none is SQL NULL, never the JSON null


def test_push_batch_with_headers_null_means_none_for_every_element(sql):
    q = sql.queue()
    assert sql.push_batch(q, [("a", None), ("b", None)], headers_arg=None) == 2
    assert sql.listed(q) == {"a": None, "b": None}


def test_push_batch_with_headers_refuses_a_bad_element_before_writing_anything(sql):
    q = sql.queue()
    with _raises("headers must be a JSON object"):
        sql.push_batch(q, [("a", TRACE), ("b", [1, 2])])
    with _raises("more than 8192 bytes"):
        sql.push_batch(q, [("a", TRACE), ("b", _sized(MAX + 1))])
    assert sql.listed(q) == {}
    if sql.pg:  # PostgreSQL's headers array: as long as the keys
        with _raises("invalid_argument|same length|length"):
            sql.push_batch(q, [("a", TRACE), ("b", None)], headers_arg=[json.dumps(TRACE)])
    else:  # MySQL: the headers are members of the messages, the argument stays NULL
        with _raises("the other 5 NULL"):
            sql.push_batch(q, [("a", None)], headers_arg="[]")
    assert sql.listed(q) == {}


def test_push_grouped_with_headers_keeps_them_through_the_group(sql):
    q = sql.queue()
    assert sql.push_grouped(q, "g", "a", TRACE)
    assert sql.push_grouped(q, "g", "b", {"n": 2})
    assert not sql.push_grouped(q, "g", "b", {"n": 3})
    (key, token, headers) = sql.reserve_one(q)
    assert (key, headers) == ("a", TRACE)
    assert sql.one("queue_commit", q, key, "k", token)
    assert sql.reserve_one(q)[::2] == ("b", {"n": 2})


def test_push_batch_grouped_with_headers(sql):
    q = sql.queue()
    items = [("g", "a", TRACE), ("g", "b", None), (None, "c", {"t": 1})]
    assert sql.push_batch_grouped(q, items) == 3
    assert sql.listed(q) == {"a": TRACE, "b": None, "c": {"t": 1}}
    with _raises("headers must be a JSON object"):
        sql.push_batch_grouped(q, [("g", "d", "3")])
    assert set(sql.listed(q)) == {"a", "b", "c"}


def test_publish_with_headers_gives_every_copy_the_headers(sql):
    q1, q2 = sql.queue(), sql.queue()
    prefix = f"orders{uuid.uuid4().hex[:8]}"  # its own: the tests share a database
    topic = f"{prefix}.created"
    sql("queue_bind", topic, q1)
    sql("queue_bind", f"{prefix}.#", q2)
    assert sql.publish(topic, "a", TRACE) == 2
    assert sql.headers(q1, "a") == TRACE
    assert sql.headers(q2, "a") == TRACE
    with _raises("headers must be a JSON object"):
        sql.publish(topic, "b", "[]")
    assert set(sql.listed(q1)) == {"a"}


def test_publish_batch_with_headers(sql):
    q = sql.queue()
    topic = f"t{uuid.uuid4().hex[:8]}.x"
    sql("queue_bind", topic, q)
    assert sql.publish_batch([(topic, "a", TRACE), (topic, "b", None)]) == 2
    assert sql.listed(q) == {"a": TRACE, "b": None}
    with _raises("more than 8192 bytes"):
        sql.publish_batch([(topic, "c", _sized(MAX + 1))])
    assert set(sql.listed(q)) == {"a", "b"}


# -- kept: retries, moves, dead letters, history, replay, redrive, schedules ------------------------------


def test_headers_are_kept_through_rollback_fail_snooze_extend_and_renew(sql):
    q = sql.queue(max_attempts=10)
    sql.push(q, "a", TRACE)
    _, token, _ = sql.reserve_one(q)
    assert sql.one("queue_rollback", q, "a", "k", token, None, casts=HELD_IV)
    _, token, headers = sql.reserve_one(q)
    assert headers == TRACE
    sql("queue_fail", q, "a", "k", token, None, "boom", casts=HELD_IV)
    _, token, _ = sql.reserve_one(q)
    sql("queue_snooze", q, "a", "k", token, sql.dur(0), casts=HELD_IV)
    _, token, _ = sql.reserve_one(q)
    token = str(sql.one("queue_extend", q, "a", "k", token, sql.dur(60), casts=HELD_IV))
    (renewed, _) = sql("queue_renew", q, "a", "k", token, sql.dur(60), casts=HELD_IV)[0]
    token = str(renewed)
    assert sql.headers(q, "a") == TRACE
    assert sql.one("queue_rollback", q, "a", "k", token, None, casts=HELD_IV)
    assert sql.reserve_one(q)[2] == TRACE


def test_move_keeps_the_headers_into_another_queue_and_the_same(sql):
    q1, q2 = sql.queue(), sql.queue()
    sql.push(q1, "a", TRACE)
    _, token, _ = sql.reserve_one(q1)
    assert sql.one("queue_move", q1, "a", "k", token, q2, None, casts=MOVE)
    assert sql.headers(q2, "a") == TRACE
    _, token, _ = sql.reserve_one(q2)
    assert sql.one("queue_move", q2, "a", "k", token, q2, '{"new": 1}', casts=MOVE)
    assert sql.headers(q2, "a") == TRACE


def test_a_dead_letter_keeps_the_headers_and_redrive_restores_them(sql):
    dlq = sql.queue()
    q = sql.queue(max_attempts=1, dead_letter_queue=dlq)
    sql.push(q, "a", TRACE)
    sql.push(q, "b", None)
    for key, token, _ in sql.reserve(q, 2):
        sql("queue_fail", q, key, "k", token, None, "boom", casts=HELD_IV)
    letters = {row[2]: sql.json_out(row[-1]) for row in sql("queue_dead_letters", dlq)}
    assert letters == {"a": TRACE, "b": None}
    assert sql.headers(dlq, "a") == TRACE
    assert sql.one("queue_redrive", dlq, q, 10) == 2
    assert sql.listed(q) == {"a": TRACE, "b": None}


def test_give_up_dead_letters_with_the_headers(sql):
    dlq = sql.queue()
    q = sql.queue(max_attempts=5, dead_letter_queue=dlq)
    sql.push(q, "a", TRACE)
    _, token, _ = sql.reserve_one(q)
    sql("queue_give_up", q, "a", "k", token, "no")
    assert sql.headers(dlq, "a") == TRACE


def test_a_newer_dead_letter_of_the_same_key_replaces_the_headers(sql):
    dlq = sql.queue()
    q = sql.queue(max_attempts=1, dead_letter_queue=dlq)
    sql.push(q, "a", TRACE)
    _, token, _ = sql.reserve_one(q)
    sql("queue_fail", q, "a", "k", token, None, "boom", casts=HELD_IV)
    sql.push(q, "a", None)
    _, token, _ = sql.reserve_one(q)
    sql("queue_fail", q, "a", "k", token, None, "boom", casts=HELD_IV)
    assert sql.headers(dlq, "a") is None


def test_history_archives_the_headers_and_replay_restores_them(sql):
    q = sql.queue(history=True)
    sql.push(q, "a", TRACE)
    sql.push(q, "b", None)
    for key, token, _ in sql.reserve(q, 2):
        assert sql.one("queue_commit", q, key, "k", token)
    assert sql.history_headers(q, "a") == [TRACE]
    assert sql.history_headers(q, "b") == [None]
    assert sql.one("queue_replay", q, None, None, casts=(None, "::timestamptz", "::timestamptz")) == 2
    assert sql.listed(q) == {"a": TRACE, "b": None}


def test_pop_returns_the_headers_and_archives_them(sql):
    q = sql.queue(history=True)
    sql.push(q, "a", TRACE)
    sql.push(q, "b", None)
    rows = sql("queue_pop", q, 5)
    assert {row[0]: sql.json_out(row[-1]) for row in rows} == {"a": TRACE, "b": None}
    assert sql.history_headers(q, "a") == [TRACE]


def test_commit_reserve_returns_the_headers_of_the_next_message(sql):
    q = sql.queue()
    sql.push(q, "a", None)
    sql.push(q, "b", TRACE)
    _, token, _ = sql.reserve_one(q)
    rows = sql(
        "queue_commit_reserve",
        q,
        "a",
        "k",
        token,
        "w",
        sql.dur(60),
        1,
        None,
        casts=(None, None, None, None, None, "::interval"),
    )
    (row,) = [r for r in rows if len(r) > 2]
    assert "b" in row[:2]
    assert sql.json_out(row[-1]) == TRACE


def test_moved_and_dead_lettered_history_rows_keep_the_headers(sql):
    dlq = sql.queue()
    q = sql.queue(max_attempts=1, dead_letter_queue=dlq, history=True)
    other = sql.queue()
    sql.push(q, "a", TRACE)
    sql.push(q, "b", TRACE)
    for key, token, _ in sql.reserve(q, 2):
        if key == "a":
            sql("queue_move", q, key, "k", token, other, None, casts=MOVE)
        else:
            sql("queue_fail", q, key, "k", token, None, "x", casts=HELD_IV)
    assert sql.history_headers(q, "a") == [TRACE]
    assert sql.history_headers(q, "b") == [TRACE]


def test_a_schedules_occurrence_has_no_headers(sql):
    q = sql.queue()
    sql(
        "queue_schedule_every",
        q,
        "tick",
        "k",
        "{}",
        sql.dur(3600),
        casts=(None, None, None, "::jsonb", "::interval"),
    )
    listed = sql.listed(q)
    assert listed and set(listed.values()) == {None}
