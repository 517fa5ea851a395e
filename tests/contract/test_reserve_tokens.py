"""Reservation tokens: random and unguessable on both dialects, and one error for a malformed one.

A token is the proof of holding a reservation: whoever shows it may commit, roll back, extend or
move the message. So every token a routine hands out is a random version 4 UUID (PostgreSQL:
gen_random_uuid; MySQL/MariaDB: RANDOM_BYTES, see pyqueue__random_token in
sql/mysql/routines.sql), never a counter or a clock: the tokens of one batch share no structure
that would let the holder of one guess another. And a token that is not shaped like one is refused
with the same error on both dialects, through SQL and through the client.
"""

from __future__ import annotations

import itertools
import uuid
from dataclasses import replace

import pytest

from pyqueue_sql import errors

MALFORMED = "pyqueue:invalid_argument: token is malformed"


def assert_random_v4(tokens: list[str]) -> None:
    """Each token a version 4 UUID of the RFC 4122 variant, all distinct, and no two alike
    beyond chance: no shared 8-digit head or tail (a shared 24-character prefix and a counter
    for a tail, or a clock-and-node layout, share one or the other), no two close as numbers."""
    parsed = [uuid.UUID(t) for t in tokens]
    assert all(t == str(u) for t, u in zip(tokens, parsed)), tokens  # lower case, canonical
    assert all(u.version == 4 and u.variant == uuid.RFC_4122 for u in parsed), tokens
    assert len(set(tokens)) == len(tokens), tokens
    for a, b in itertools.combinations(parsed, 2):
        assert a.hex[:8] != b.hex[:8] and a.hex[-8:] != b.hex[-8:], (a, b)
        assert abs(a.int - b.int) > 2**64, (a, b)


def test_the_tokens_of_one_batch_reserve_are_random_v4_uuids(queue):
    queue.push_many([(f"m{i}", "k", i) for i in range(40)])
    batch = queue.reserve(n=40)
    assert len(batch) == 40
    assert_random_v4([r.token for r in batch])


def test_tokens_of_single_reserves_extends_and_fast_paths_are_random_v4_uuids(queue):
    queue.push_many([(f"m{i}", "k", i) for i in range(8)])
    singles = [queue.reserve()[0] for _ in range(3)]  # a reserve of one has its own path
    extended = [queue.extend(r, timeout=60) for r in singles]
    assert all(e is not None for e in extended)
    again = [queue.extend(e, timeout=60) for e in extended]
    committed, more = queue.commit_reserve(again[0], n=3)
    assert committed is True and len(more) == 3
    tokens = [r.token for r in singles + extended + again[1:] + more]
    assert_random_v4(tokens)


def test_tokens_of_a_queue_with_limits_are_random_v4_uuids(queue):
    # a queue with concurrency limits reserves one candidate at a time (its own path)
    queue.set_limit("k", 100)
    queue.push_many([(f"m{i}", "k", i) for i in range(6)])
    batch = queue.reserve(n=6)
    assert len(batch) == 6
    extended = queue.extend(batch[0], timeout=60)
    assert extended is not None
    assert_random_v4([r.token for r in batch] + [extended.token])


def test_a_batch_of_tokens_still_commits_rolls_back_and_extends(queue):
    # the tokens are found again by the routines that take them, batch and one by one
    queue.push_many([(f"m{i}", "k", i) for i in range(12)])
    batch = queue.reserve(n=12)
    assert queue.commit_many(batch[:5]) == 5
    assert queue.rollback(batch[5]) is True
    assert queue.commit(batch[6]) is True
    assert queue.extend(batch[7], timeout=60) is not None
    assert queue.commit(batch[7]) is False  # the old token no longer holds after an extend
    assert queue.stats().reserved == 5


# -- one malformed-token error on both dialects -------------------------------------------

SOME_UUID = "0f8fad5b-d9cb-469f-a165-70867728950e"  # fixed: test ids must be the same in every process
BAD_TOKENS = ["nope", "", "0" * 36, "{" + SOME_UUID + "}", SOME_UUID + "\n", "x" * 200]
# shapes PostgreSQL's uuid type reads but the contract refuses: no hyphens, hyphens elsewhere
UUID_SHAPES = [
    SOME_UUID.replace("-", ""),
    "-".join(SOME_UUID.replace("-", "")[i : i + 4] for i in range(0, 32, 4)),
]


def _calls(dialect: str) -> dict[str, str]:
    pg = dialect == "postgresql"
    verb = "SELECT" if pg else "CALL"
    interval = "%s::interval" if pg else "%s"
    return {
        "commit": f"{verb} queue_commit(%s, %s, %s, %s)",
        "rollback": f"{verb} queue_rollback(%s, %s, %s, %s, NULL)",
        "fail": f"{verb} queue_fail(%s, %s, %s, %s, NULL, 'x')",
        "extend": f"{verb} queue_extend(%s, %s, %s, %s, {interval.replace('%s', 'NULL')})",
        "move": f"{verb} queue_move(%s, %s, %s, %s, %s, NULL)",
        "commit_reserve": (
            "SELECT * FROM queue_commit_reserve(%s, %s, %s, %s)"
            if pg
            else "CALL queue_commit_reserve(%s, %s, %s, %s, NULL, NULL, NULL, NULL)"
        ),
    }


@pytest.mark.parametrize("routine", ["commit", "rollback", "fail", "extend", "move", "commit_reserve"])
def test_a_malformed_token_is_the_same_error_through_sql_on_both_dialects(queue, raw, routine):
    queue.push("m", "k", {"n": 1})
    [held] = queue.reserve()
    sql = _calls(queue.db.dialect.name)[routine]
    for bad in BAD_TOKENS:
        args = (queue.name, "m", "k", bad) + ((queue.name,) if routine == "move" else ())
        with pytest.raises(Exception) as refused:
            raw(sql, args)
        assert MALFORMED in str(refused.value), (routine, bad, refused.value)
        assert "invalid input syntax" not in str(refused.value)
    # a well-formed token that holds nothing is no error, and the reservation is intact
    assert queue.commit(replace(held, token=str(uuid.uuid4()))) is False
    assert queue.commit(replace(held, token=held.token.upper())) is True


@pytest.mark.parametrize("bad", BAD_TOKENS + UUID_SHAPES)
def test_a_malformed_token_in_a_commit_batch_is_the_same_error_on_both_dialects(queue, raw, bad):
    queue.push_many([("a", "k", 1), ("b", "k", 2)])
    a, b = queue.reserve(n=2)
    pg = queue.db.dialect.name == "postgresql"
    if pg:
        sql, args = (
            "SELECT queue_commit_batch(%s, %s, %s, %s)",
            (queue.name, ["a", "b"], ["k", "k"], [a.token.upper(), bad]),
        )
    else:
        import json

        sql = "CALL queue_commit_batch(%s, %s, %s, %s)"
        args = (
            queue.name,
            json.dumps(["a", "b"]),
            json.dumps(["k", "k"]),
            json.dumps([a.token.upper(), bad]),
        )
    with pytest.raises(Exception) as refused:
        raw(sql, args)
    assert "pyqueue:invalid_argument: element 2 of the batch: bad p_key/p_kind or malformed token" in str(
        refused.value
    ), (bad, refused.value)
    assert queue.stats().reserved == 2  # nothing committed
    assert queue.commit_many([a, b]) == 2


@pytest.mark.only_dialect("postgresql")  # uuid-typed arguments exist on PostgreSQL only
def test_uuid_typed_tokens_are_still_accepted_on_postgresql(queue, raw):
    queue.push_many([(f"m{i}", "k", i) for i in range(4)])
    a, b, c, d = queue.reserve(n=4)
    assert raw("SELECT queue_commit(%s, 'm0', 'k', %s::uuid)", (queue.name, a.token)) == [(True,)]
    [(new,)] = raw("SELECT queue_extend(%s, 'm1', 'k', %s::uuid)", (queue.name, b.token))
    assert uuid.UUID(str(new)).version == 4
    assert raw("SELECT queue_rollback(%s, 'm1', 'k', %s::uuid)", (queue.name, str(new))) == [(True,)]
    # queue_commit_batch takes text[] only (an untyped array would be ambiguous beside a uuid[]
    # overload): a uuid[] is passed as uuid[]::text[]
    assert raw(
        "SELECT queue_commit_batch(%s, ARRAY['m2', 'm3'], ARRAY['k', 'k'], %s::uuid[]::text[])",
        (queue.name, [c.token, d.token]),
    ) == [(2,)]
    # a token column of a reserve feeds a commit directly, as in psql
    queue.push("m9", "k", 9)
    assert raw(
        "SELECT queue_commit(%s, r.p_key, r.p_kind, r.token) FROM queue_reserve(%s) AS r",
        (queue.name, queue.name),
    ) == [(True,)]


@pytest.mark.parametrize("method", ["commit", "rollback", "fail", "extend", "move", "commit_reserve"])
def test_a_malformed_token_is_the_same_error_through_the_client_on_both_dialects(queue, method):
    queue.push("m", "k", {"n": 1})
    [held] = queue.reserve()
    bad = replace(held, token="not-a-token")
    call = {
        "commit": lambda: queue.commit(bad),
        "rollback": lambda: queue.rollback(bad),
        "fail": lambda: queue.fail(bad, "x"),
        "extend": lambda: queue.extend(bad),
        "move": lambda: queue.move(bad, queue.name),
        "commit_reserve": lambda: queue.commit_reserve(bad),
    }[method]
    with pytest.raises(errors.InvalidArgumentError) as refused:
        call()
    assert "token is malformed" in str(refused.value), refused.value
    assert queue.commit(held) is True


def test_a_malformed_token_in_commit_many_is_the_same_error_through_the_client(queue):
    queue.push_many([("a", "k", 1), ("b", "k", 2)])
    a, b = queue.reserve(n=2)
    with pytest.raises(errors.InvalidArgumentError) as refused:
        queue.commit_many([a, replace(b, token="nope")])
    assert "element 2 of the batch: bad p_key/p_kind or malformed token" in str(refused.value)
    assert queue.commit_many([a, b]) == 2
