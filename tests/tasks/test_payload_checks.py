"""A task's payload is checked against its function's annotations before the function runs: a
message pushed from SQL whose values do not fit fails at once (no retries: it cannot succeed later)
with an error naming the argument and both types; the task never runs. On both dialects, and the
checks of each JSON-native annotation without a database."""

from __future__ import annotations

import dataclasses
import datetime as dt
import decimal
import enum
import json
import uuid
from typing import Literal, Optional, Union

import pytest

from pyqueue_sql import App, InvalidPayloadError
from pyqueue_sql.tasks import PayloadMismatchError


@pytest.fixture
def app(dsn):
    a = App(dsn, queue=f"c.{uuid.uuid4().hex[:12]}")
    yield a
    a.close()


def _push_from_sql(db, raw, queue, key, kind, payload) -> None:
    text = json.dumps(payload)
    if db.dialect.name == "postgresql":
        raw("SELECT queue_push(%s, %s, %s, %s::jsonb)", (queue, key, kind, text))
    else:
        raw("CALL queue_push(%s, %s, %s, %s, NULL, NULL)", (queue, key, kind, text))
    db.connection.commit()


def test_a_payload_from_sql_that_does_not_fit_fails_at_once_naming_the_argument(app, db, raw):
    ran: list[int] = []

    @app.task
    def add(n: int, tags: list[str] | None = None) -> None:
        ran.append(n)

    app.create_queues(max_attempts=5)
    _push_from_sql(db, raw, app.default_queue, "bad-n", "add", {"n": "abc"})
    _push_from_sql(db, raw, app.default_queue, "bad-tag", "add", {"n": 1, "tags": ["a", 2]})
    _push_from_sql(db, raw, app.default_queue, "good", "add", {"n": 2, "tags": ["a"]})
    report = app.run_pending()
    outcomes = {j.key: (j.outcome, j.attempts, j.error) for j in report.jobs}
    assert ran == [2]  # the function never ran for the others
    assert outcomes["good"][0] == "succeeded"
    # no retry although 4 attempts were left: dropped (no dead-letter queue) after the first
    assert outcomes["bad-n"] == (
        "dropped",
        1,
        "PayloadMismatchError: task 'add': argument 'n' is 'abc' (str), expected int",
    )
    assert outcomes["bad-tag"][:2] == ("dropped", 1)
    assert outcomes["bad-tag"][2].endswith("task 'add': argument 'tags'[1] is 2 (int), expected str")
    assert db.queue(app.default_queue).stats().ready == 0


class Color(enum.Enum):
    RED = "red"


@dataclasses.dataclass(frozen=True)
class Address:
    city: str
    zip: int


def _app_without_database():
    return App("postgresql://unused@127.0.0.1/unused", queue="unused")


def _mismatch(t, payload) -> str:
    with pytest.raises(PayloadMismatchError) as caught:
        t.arguments(payload)
    return str(caught.value)


def test_each_json_native_annotation_is_checked_and_a_mismatch_names_the_types():
    app = _app_without_database()

    @app.task
    def f(
        n: int,
        x: float,
        s: str,
        b: bool,
        nothing: None,
        items: list[int],
        scores: dict[str, float],
        maybe: Optional[int],  # noqa: UP045  (the typing form, as older code writes it)
        either: Union[int, str],  # noqa: UP007
        mode: Literal["fast", "slow"],
        pair: tuple[int, str] = (0, ""),
    ) -> None: ...

    good = {
        "n": 1,
        "x": 2,  # JSON has one number type: an int is a float
        "s": "a",
        "b": True,
        "nothing": None,
        "items": [1, 2],
        "scores": {"a": 1.5, "b": 2},
        "maybe": None,
        "either": "z",
        "mode": "slow",
        "pair": [3, "c"],
    }
    args = f.arguments(good)
    assert args["x"] == 2.0 and type(args["x"]) is float and args["scores"] == {"a": 1.5, "b": 2.0}
    assert args["pair"] == (3, "c") and args["either"] == "z" and args["maybe"] is None

    cases = {
        "n": (True, "argument 'n' is True (bool), expected int"),
        "x": ("1.5", "argument 'x' is '1.5' (str), expected float"),
        "s": (5, "argument 's' is 5 (int), expected str"),
        "b": (1, "argument 'b' is 1 (int), expected bool"),
        "nothing": (0, "argument 'nothing' is 0 (int), expected None"),
        "items": ([1, "2"], "argument 'items'[1] is '2' (str), expected int"),
        "scores": ({"a": "x"}, "argument 'scores'['a'] is 'x' (str), expected float"),
        "maybe": (1.5, "argument 'maybe' is 1.5 (float), expected int | None"),
        "either": (None, "argument 'either' is null (None), expected int | str"),
        "mode": ("medium", "argument 'mode' is 'medium' (str), expected Literal['fast', 'slow']"),
        "pair": ([1, 2], "argument 'pair'[1] is 2 (int), expected str"),
    }
    for name, (value, expected) in cases.items():
        assert _mismatch(f, {**good, name: value}) == f"task 'f': {expected}", name
    assert _mismatch(f, {**good, "items": {"a": 1}}).endswith(
        "argument 'items' is {'a': 1} (object), expected list[int]"
    )
    assert _mismatch(f, {**good, "extra": 1}) == "task 'f': the payload has an unknown argument 'extra'"
    missing = dict(good)
    del missing["n"]
    assert _mismatch(f, missing) == "task 'f': the payload has no argument 'n'"
    assert (
        _mismatch(f, [1]) == "task 'f': the payload must be a JSON object of its arguments by name, not array"
    )


def test_types_json_has_none_for_say_what_they_needed_without_a_traceback():
    app = _app_without_database()

    @app.task
    def g(
        amount: decimal.Decimal, when: dt.datetime, color: Color, where: Address, ref: uuid.UUID
    ) -> None: ...

    good = {
        "amount": "1.50",
        "when": "2026-11-27T10:00:00+00:00",
        "color": "red",
        "where": {"city": "Oslo", "zip": 150},
        "ref": str(uuid.UUID(int=7)),
    }
    args = g.arguments(good)
    assert args["amount"] == decimal.Decimal("1.50") and args["color"] is Color.RED
    assert args["where"] == Address("Oslo", 150)
    bad_amount = _mismatch(g, {**good, "amount": "abc"})
    assert bad_amount == "task 'g': argument 'amount' is 'abc' (str), expected Decimal"
    assert "ConversionSyntax" not in bad_amount
    assert _mismatch(g, {**good, "when": "tomorrow"}).startswith(
        "task 'g': argument 'when' is 'tomorrow' (str), expected datetime (Invalid isoformat string"
    )
    assert _mismatch(g, {**good, "color": "blue"}) == (
        "task 'g': argument 'color' is 'blue' (str), expected Color ('blue' is not a valid Color)"
    )
    assert _mismatch(g, {**good, "where": {"city": "Oslo", "zip": "0150"}}) == (
        "task 'g': argument 'where'.zip is '0150' (str), expected int"
    )
    assert "has no field 'street'" in _mismatch(
        g, {**good, "where": {"city": "Oslo", "zip": 1, "street": "x"}}
    )
    assert _mismatch(g, {**good, "ref": 7}) == "task 'g': argument 'ref' is 7 (int), expected UUID"


def test_defer_refuses_a_value_that_does_not_fit_before_anything_is_sent():
    app = _app_without_database()

    @app.task
    def h(n: int, names: list[str] | None = None) -> None: ...

    with pytest.raises(InvalidPayloadError, match=r"argument 'n' is 'abc' \(str\), expected int"):
        h.payload("abc")  # type: ignore[arg-type]
    with pytest.raises(InvalidPayloadError, match=r"argument 'names'\[0\] is 1 \(int\), expected str"):
        h.call(1, [1])  # type: ignore[list-item]
    assert h.payload(1, ["a"]) == {"n": 1, "names": ["a"]}
