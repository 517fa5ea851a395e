"""The payload rule as a property (docs/contract.md, "Payloads"): for any JSON text built from the
edges of what each dialect's JSON takes (integers past int()'s 4,300 digits, exponents past a
float's range, floats, strings with NUL, escaped pairs and lone surrogates, nesting around MariaDB's
limit of 32), a push in plain SQL either is refused (one error, nothing written) exactly where the
model says the server refuses, or the value is read back equal by message() and by one reserve of
every accepted message together."""

from __future__ import annotations

import contextlib
import json
import uuid
from decimal import Decimal

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from .test_payload_edges import _push
from .test_privileges import accounts  # noqa: F401 - the fixture is used by name

# A JSON number's text and the value it stands for (a Decimal where int() or float cannot hold it).
_small_ints = st.integers(-(2**63), 2**63).map(lambda n: (str(n), n))
_long_ints = st.tuples(st.sampled_from(["", "-"]), st.integers(4250, 4600), st.sampled_from("123456789")).map(
    lambda t: (t[0] + t[2] * t[1], Decimal(t[0] + t[2] * t[1]))
)
_floats = st.floats(allow_nan=False, allow_infinity=False).map(lambda f: (repr(f), f))
_past_float = st.tuples(st.integers(1, 9), st.integers(309, 5000), st.sampled_from(["", "-"])).map(
    lambda t: (f"{t[2]}{t[0]}e{t[1]}", Decimal(f"{t[2]}{t[0]}e{t[1]}"))
)
_numbers = st.one_of(_small_ints, _long_ints, _floats, _past_float)
# strings, lone surrogates and NUL included; json.dumps writes them as \\u escapes
_strings = st.text(st.characters(codec=None, exclude_categories=()), max_size=8).map(
    lambda s: (json.dumps(s), s)
)
_scalars = st.one_of(_numbers, _strings, st.sampled_from([("true", True), ("false", False), ("null", None)]))


def _containers(children):
    arrays = st.lists(children, max_size=3).map(
        lambda items: ("[" + ",".join(t for t, _ in items) + "]", [v for _, v in items])
    )
    objects = st.dictionaries(st.text(max_size=4), children, max_size=3).map(
        lambda d: (
            "{" + ",".join(f"{json.dumps(k)}:{t}" for k, (t, _) in d.items()) + "}",
            {k: v for k, (_, v) in d.items()},
        )
    )
    return st.one_of(arrays, objects)


_values = st.recursive(_scalars, _containers, max_leaves=12)
# nesting near MariaDB's limit: a value wrapped in 25 to 40 arrays
_deep = st.tuples(_values, st.integers(25, 40)).map(
    lambda t: ("[" * t[1] + t[0][0] + "]" * t[1], _wrap(t[0][1], t[1]))
)
_payloads = st.one_of(_values, _deep)


def _wrap(value, depth):
    for _ in range(depth):
        value = [value]
    return value


def _depth(value) -> int:
    """How many containers deep a value is (a scalar: 0), walked without recursion."""
    deepest, todo = 0, [(value, 0)]
    while todo:
        item, depth = todo.pop()
        if isinstance(item, (list, dict)):
            depth += 1
            todo.extend((child, depth) for child in (item.values() if isinstance(item, dict) else item))
        deepest = max(deepest, depth)
    return deepest


def _strings_of(value):
    todo = [value]
    while todo:
        item = todo.pop()
        if isinstance(item, str):
            yield item
        elif isinstance(item, dict):
            todo.extend(item)
            todo.extend(item.values())
        elif isinstance(item, list):
            todo.extend(item)


def _exact(value):
    """value with every number as the Decimal its JSON text stands for: a server may write a number
    back in another form (jsonb keeps 1.0412256740512998e+17 as the integer 104122567405129980,
    which a float cannot hold), and what the rule keeps is the number, exactly."""
    if isinstance(value, bool) or value is None or isinstance(value, str):
        return value
    if isinstance(value, float):
        return Decimal(repr(value))
    if isinstance(value, (int, Decimal)):
        return Decimal(value)
    if isinstance(value, dict):
        return {k: _exact(v) for k, v in value.items()}
    return [_exact(v) for v in value]


def _refused_by(dialect: str, value) -> bool:
    """The model: what each server refuses (docs/contract.md, "Payloads")."""
    strings = list(_strings_of(value))
    if any(0xD800 <= ord(c) <= 0xDFFF for s in strings for c in s):
        return True  # a lone surrogate escape: not text on either server
    if dialect == "postgresql":
        return any("\x00" in s for s in strings)  # jsonb cannot hold \u0000
    return _depth(value) >= 32  # JSON_VALID's limit


@pytest.fixture
def queue(db):
    q = db.queue(f"edgep.{uuid.uuid4().hex[:10]}").create(visibility_timeout=60)
    yield q
    with contextlib.suppress(Exception):
        q.drop()


def test_a_push_is_refused_where_the_model_says_or_read_back_equal(
    queue,
    accounts,  # noqa: F811
    dialect,
):
    producer = accounts.raw(accounts.with_capabilities("edgep", "producer"))
    if dialect == "postgresql":
        producer.autocommit = True
    pushed = {}

    @settings(
        max_examples=60,
        deadline=None,
        suppress_health_check=[HealthCheck.too_slow, HealthCheck.large_base_example],
    )
    @given(_payloads)
    def one(payload):
        text, value = payload
        key = f"p{len(pushed)}-{uuid.uuid4().hex[:6]}"
        refused = _push(producer, dialect, queue.name, key, text)
        assert (refused is not None) == _refused_by(dialect, value), (text[:200], refused)
        if refused is None:
            pushed[key] = value
            assert _exact(queue.message(key, "edge").payload) == _exact(value), text[:200]
        else:
            assert queue.message(key, "edge") is None  # nothing written

    one()
    held = queue.reserve(n=len(pushed) + 1, timeout=60)
    assert {r.key: _exact(r.payload) for r in held} == {k: _exact(v) for k, v in pushed.items()}
