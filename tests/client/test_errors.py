"""Bad input: every routine refuses it with a clear error and writes nothing."""

from __future__ import annotations

import datetime as dt

import pytest

from pyqueue_sql import InvalidArgumentError, InvalidPayloadError, SchemaNotInstalledError, UnknownQueueError


def _total(queue):
    s = queue.stats()
    return s.ready + s.delayed + s.reserved


@pytest.fixture
def held(queue):
    """A queue with one ready message and one reservation."""
    queue.push("ready", "k", 1)
    queue.push("held", "k", 1)
    queue.reserve(n=1)  # 'ready' is older: it is the one reserved
    return queue


UNKNOWN = [
    ("push", lambda q: q.push("k", "kind", 1)),
    ("push_many", lambda q: q.push_many([("k", "kind", 1)])),
    ("pop", lambda q: q.pop()),
    ("reserve", lambda q: q.reserve()),
    ("remove", lambda q: q.remove("k", "kind")),
    ("pause", lambda q: q.pause()),
    ("resume", lambda q: q.resume()),
    ("stats", lambda q: q.stats()),
    ("drop", lambda q: q.drop()),
]


@pytest.mark.parametrize("name,call", UNKNOWN, ids=[n for n, _ in UNKNOWN])
def test_every_call_on_an_unknown_queue_raises_unknown_queue_error(db, name, call):
    with pytest.raises(UnknownQueueError, match="does not exist"):
        call(db.queue("no-such-queue"))


@pytest.mark.parametrize(
    "key,kind",
    [
        (None, "k"),
        ("", "k"),
        ("m", None),
        ("m", ""),
        ("x" * 256, "k"),
        ("m", "y" * 129),
    ],
)
def test_push_refuses_bad_key_or_kind(queue, key, kind):
    with pytest.raises(InvalidArgumentError):
        queue.push(key, kind, {"a": 1})
    assert _total(queue) == 0


def test_longest_allowed_key_and_kind_are_accepted(queue):
    assert queue.push("x" * 255, "y" * 128, 1)
    assert queue.reserve()[0].key == "x" * 255


def test_create_refuses_bad_settings(db):
    q = db.queue("t.bad-settings")
    for settings in (
        {"visibility_timeout": -1},
        {"visibility_timeout": 0},
        {"max_attempts": 0},
        {"max_attempts": -5},
        {"history_retention": -1},
    ):
        with pytest.raises(InvalidArgumentError):
            q.create(**settings)
    with pytest.raises(InvalidArgumentError):
        db.queue("").create()
    with pytest.raises(InvalidArgumentError):
        db.queue("q" * 129).create()
    with pytest.raises(UnknownQueueError):
        q.stats()  # nothing was created


def test_queue_name_too_long_is_an_argument_error_everywhere(db):
    q = db.queue("q" * 129)
    for call in (lambda: q.push("k", "kind", 1), lambda: q.reserve(), lambda: q.stats(), lambda: q.pop()):
        with pytest.raises(InvalidArgumentError, match="longer than"):
            call()


def test_durations_over_100_years_are_refused(held):
    [r] = held.reserve()
    century = dt.timedelta(days=36600)
    with pytest.raises(InvalidArgumentError, match="100 years"):
        held.reserve(timeout=century)
    with pytest.raises(InvalidArgumentError, match="100 years"):
        held.rollback(r, delay=century)
    with pytest.raises(InvalidArgumentError, match="100 years"):
        held.create(visibility_timeout=century)
    assert held.commit(r) is True


def test_n_null_means_one(held):
    assert len(held.reserve(n=None)) == 1
    held.push("more", "k", 1)
    assert len(held.pop(n=None)) == 1


def test_n_below_one_is_refused(held):
    for n in (0, -1):
        with pytest.raises(InvalidArgumentError):
            held.reserve(n=n)
        with pytest.raises(InvalidArgumentError):
            held.pop(n=n)
    assert _total(held) == 2 and held.stats().reserved == 1


def test_negative_durations_are_refused(held):
    [r] = held.reserve()  # 'held'
    with pytest.raises(InvalidArgumentError):
        held.reserve(timeout=-1)
    with pytest.raises(InvalidArgumentError):
        held.rollback(r, delay=-1)
    with pytest.raises(InvalidArgumentError):
        held.extend(r, timeout=-1)
    with pytest.raises(InvalidArgumentError):
        held.push("later", "k", 1, run_at=dt.datetime(2030, 1, 1))  # naive: ambiguous
    # The reservation is untouched by the refused calls.
    assert held.commit(r) is True


def test_fractional_numbers_are_refused_not_rounded(held):
    for call in (
        lambda: held.reserve(n=2.5),
        lambda: held.pop(n=1.5),
        lambda: held.push("p", "k", 1, priority=2.5),
        lambda: held.create(max_attempts=2.5),
    ):
        with pytest.raises(InvalidArgumentError):
            call()
    assert _total(held) == 2 and held.stats().reserved == 1


def test_kinds_must_be_a_non_empty_list(held):
    with pytest.raises(InvalidArgumentError):
        held.reserve(kinds=[])


def test_payload_that_is_not_json_serialisable(queue):
    with pytest.raises(InvalidPayloadError):
        queue.push("m", "k", {"when": object()})
    with pytest.raises(InvalidPayloadError):
        queue.push("m", "k", float("nan"))
    assert _total(queue) == 0


def test_a_batch_with_a_payload_that_is_not_json_serialisable_pushes_nothing(queue):
    for bad in ({"when": object()}, float("nan"), {"n": float("inf")}):
        with pytest.raises(InvalidPayloadError):
            queue.push_many([("a", "k", {"n": 1}), ("b", "k", bad), ("c", "k", {"n": 3})])
    assert _total(queue) == 0


def test_token_routines_refuse_missing_key_or_token(held):
    from dataclasses import replace

    [r] = held.reserve()
    for bad in (replace(r, key=""), replace(r, kind=None), replace(r, token=None)):
        with pytest.raises(InvalidArgumentError):
            held.commit(bad)
        with pytest.raises(InvalidArgumentError):
            held.rollback(bad)
        with pytest.raises(InvalidArgumentError):
            held.extend(bad)
    assert held.commit(r) is True


# -- the same refusals from plain SQL, as psql and mysql users meet them -------------

CALLS = {
    "postgresql": {
        "push": "SELECT queue_push(%s, %s, %s, %s)",
        "push_null_payload": "SELECT queue_push(%s, %s, %s, NULL)",
        "reserve": "SELECT * FROM queue_reserve(%s, 'w', NULL, %s)",
        "reserve_neg": "SELECT * FROM queue_reserve(%s, 'w', interval '-1 second', 1)",
        "batch_mismatch": "SELECT queue_push_batch(%s, ARRAY['a','b'], ARRAY['k'], ARRAY['1','2']::jsonb[])",
    },
    "mysql": {
        "push": "CALL queue_push(%s, %s, %s, %s, NULL, NULL)",
        "push_null_payload": "CALL queue_push(%s, %s, %s, NULL, NULL, NULL)",
        "reserve": "CALL queue_reserve(%s, 'w', NULL, %s, NULL)",
        "reserve_neg": "CALL queue_reserve(%s, 'w', -1, 1, NULL)",
        "batch_mismatch": 'CALL queue_push_batch(%s, \'[{"p_key":"a","p_kind":"k"}]\', NULL, NULL, NULL, NULL)',
    },
}


def test_plain_sql_refusals_use_one_message_format(dialect, raw, queue):
    calls = CALLS[dialect]
    cases = [
        (calls["push"], ("no-such-queue", "m", "k", "{}"), "pyqueue:unknown_queue:"),
        (calls["push"], (queue.name, "", "k", "{}"), "pyqueue:invalid_argument:"),
        (calls["push"], (queue.name, None, "k", "{}"), "pyqueue:invalid_argument:"),
        (calls["push_null_payload"], (queue.name, "m", "k"), "pyqueue:invalid_payload:"),
        (calls["reserve"], (queue.name, 0), "pyqueue:invalid_argument:"),
        (calls["reserve_neg"], (queue.name,), "pyqueue:invalid_argument:"),
        (calls["batch_mismatch"], (queue.name,), "pyqueue:invalid_argument:"),
    ]
    if dialect == "mysql":  # PostgreSQL refuses non-JSON already when casting to jsonb
        cases.append((calls["push"], (queue.name, "m", "k", "{not json"), "pyqueue:invalid_payload:"))
    for sql, params, expected in cases:
        with pytest.raises(Exception) as info:
            raw(sql, params)
        assert expected in str(info.value), (sql, params, str(info.value))
    assert _total(queue) == 0


def test_plain_sql_non_json_payload_is_refused(dialect, raw, queue):
    with pytest.raises(Exception) as info:
        raw(CALLS[dialect]["push"], (queue.name, "m", "k", "{not json"))
    assert "json" in str(info.value).lower()
    assert _total(queue) == 0


# -- argument types: refused as arguments, never reported as a missing schema ---------------


@pytest.mark.parametrize(
    "bad", [True, False, 1.0, b"17", ["17"]], ids=["True", "False", "float", "bytes", "list"]
)
def test_keys_that_are_not_str_or_int_are_argument_errors(queue, bad):
    for push in (lambda: queue.push(bad, "k", 1), lambda: queue.push_many([(bad, "k", 1)])):
        with pytest.raises(InvalidArgumentError) as info:
            push()
        assert not isinstance(info.value, SchemaNotInstalledError)
    assert _total(queue) == 0


@pytest.mark.parametrize(
    "call",
    [
        lambda q: q.push("k", 5, 1),
        lambda q: q.remove(True, "k"),
        lambda q: q.message(2.0, "k"),
        lambda q: q.reserve(kinds=["k", 3]),
        lambda q: q.reserve(kinds="k"),
        lambda q: q.reserve(worker=7),
        lambda q: q.set_limit(4, 1),
    ],
    ids=[
        "int-kind",
        "remove-bool-key",
        "message-float-key",
        "int-in-kinds",
        "kinds-str",
        "int-worker",
        "int-limit-kind",
    ],
)
def test_wrong_python_types_are_argument_errors(queue, call):
    with pytest.raises(InvalidArgumentError) as info:
        call(queue)
    assert not isinstance(info.value, SchemaNotInstalledError)
    assert _total(queue) == 0


def test_a_queue_name_that_is_not_a_str_is_an_argument_error(db):
    with pytest.raises(InvalidArgumentError):
        db.queue(17)


def _refused_as_an_argument_error(db, statement: str, params: dict) -> None:
    """PostgreSQL finds no routine for the types (42883): an argument error naming them, in
    autocommit and inside a transaction alike, never a missing schema."""
    with pytest.raises(InvalidArgumentError, match="smallint") as info:
        db.call(statement, **params)
    assert not isinstance(info.value, SchemaNotInstalledError)
    with pytest.raises(InvalidArgumentError, match="smallint"):
        with db.transaction():
            db.call(statement, **params)


def test_a_wrong_argument_type_the_server_refuses_is_not_a_missing_schema(db, queue, dialect):
    """The Python checks bypassed (a named statement run with an int where text goes). MySQL
    converts the int to its text."""
    params = dict(queue=queue.name, key=17, kind="k", payload="1", run_at=None, priority=None)
    if dialect == "mysql":
        assert db.call("push", **params) == [(1,)]
        assert queue.message("17", "k") is not None
        return
    _refused_as_an_argument_error(db, "push", params)
    assert _total(queue) == 0


@pytest.mark.only_dialect("postgresql")
def test_a_wrong_argument_type_in_a_statement_with_arrays_is_not_a_missing_schema(db, queue):
    """The same for a statement whose arrays go in the binary format (%(name)b): the server's
    list of the types it saw still lines up with the statement's parameters."""
    params = dict(queue=17, keys=["a"], kinds=["k"], payloads=["1"], run_ats=None, priorities=None)
    _refused_as_an_argument_error(db, "push_batch", params)
    assert _total(queue) == 0


def test_a_missing_schema_is_still_reported_as_such(fresh_database):
    import pyqueue_sql

    empty = pyqueue_sql.connect(fresh_database("noschema"))
    try:
        with pytest.raises(SchemaNotInstalledError):
            empty.queue("q").push("k", "k", 1)
        with pytest.raises(SchemaNotInstalledError):
            with empty.transaction():
                empty.queue("q").push("k", "k", 1)
    finally:
        empty.close()


NOT_RESERVATIONS = ["nope", None, 42, {"key": "k", "kind": "kind", "token": "t"}]
RESERVATION_CALLS = [
    ("commit", lambda q, r: q.commit(r)),
    ("rollback", lambda q, r: q.rollback(r)),
    ("fail", lambda q, r: q.fail(r, error="boom")),
    ("extend", lambda q, r: q.extend(r)),
    ("move", lambda q, r: q.move(r, q.name)),
    ("commit_reserve", lambda q, r: q.commit_reserve(r) if r is not None else q.commit_reserve("nope")),
    ("commit_many", lambda q, r: q.commit_many([r])),
]


@pytest.mark.parametrize("name,call", RESERVATION_CALLS, ids=[n for n, _ in RESERVATION_CALLS])
@pytest.mark.parametrize("value", NOT_RESERVATIONS, ids=["str", "none", "int", "dict"])
def test_a_reservation_call_refuses_what_is_not_a_reservation(held, name, call, value):
    """Queue.commit("nope") and the like: a clear InvalidArgumentError naming what to pass, not an
    AttributeError from inside the client; nothing is changed."""
    with pytest.raises(InvalidArgumentError, match="pass the Reservation that reserve returned"):
        call(held, value)
    s = held.stats()
    assert (s.ready, s.reserved) == (1, 1)


def test_the_asyncio_client_refuses_a_non_reservation_the_same_way(dsn, held):
    import asyncio

    from pyqueue_sql import aio

    async def attempt() -> None:
        db = await aio.connect(dsn)
        try:
            with pytest.raises(InvalidArgumentError, match="pass the Reservation that reserve returned"):
                await db.queue(held.name).commit("nope")
        finally:
            await db.close()

    asyncio.run(attempt())


MALFORMED = [
    ("commit", lambda q, r: q.commit(r)),
    ("rollback", lambda q, r: q.rollback(r)),
    ("fail", lambda q, r: q.fail(r, error="boom")),
    ("extend", lambda q, r: q.extend(r)),
    ("move", lambda q, r: q.move(r, q.name)),
    ("commit_reserve", lambda q, r: q.commit_reserve(r)),
    ("commit_many", lambda q, r: q.commit_many([r])),
]


@pytest.mark.parametrize("name,call", MALFORMED, ids=[n for n, _ in MALFORMED])
def test_a_malformed_token_is_the_same_error_on_both_dialects(queue, name, call):
    """Not PostgreSQL's cast error (invalid input syntax for type uuid) on one dialect and the
    routine's words on the other: InvalidArgumentError saying the token is malformed."""
    import dataclasses

    queue.push("k", "kind", 1)
    [held] = queue.reserve()
    with pytest.raises(InvalidArgumentError, match="token is malformed|malformed token") as refused:
        call(queue, dataclasses.replace(held, token="nope"))
    assert "uuid" not in str(refused.value)
    assert queue.commit(held)  # the real reservation still holds
