"""The client's sans-IO logic without a server: each QueueCalls / DatabaseCalls method is a
generator that yields the statements to run (Call) and the policy's steps (Step, OwnTransaction,
Pause); these tests feed it the rows a server would return and check what it asks for and what it
makes of the answers. No database and no stand-in for one: the pure step logic only (what the
server does with the calls is the contract suite's business, tests/contract)."""

from __future__ import annotations

import datetime as dt
from decimal import Decimal

import pytest

from pyqueue_sql import client, dialects, errors
from pyqueue_sql.client import (
    CHUNK_SIZE,
    ONE_TRANSACTION,
    SERIALIZATION_ATTEMPTS,
    Call,
    DatabaseCalls,
    OwnTransaction,
    Pause,
    QueueCalls,
    Reservation,
    Step,
)

NOW = dt.datetime(2026, 11, 25, 6, 0, tzinfo=dt.timezone.utc)


def database(dialect: str = "postgresql", owned: bool = True) -> DatabaseCalls:
    return DatabaseCalls(None, dialects.for_name(dialect), owned=owned)


def queue(dialect: str = "postgresql", name: str = "emails") -> QueueCalls:
    return QueueCalls(database(dialect), name)


class Steps:
    """Runs a sans-IO generator with the replies given in order: the steps it yielded, its result."""

    def __init__(self, generator, *replies) -> None:
        self.steps: list = []
        self.result = None
        replies = list(replies)
        reply, error = None, None
        while True:
            try:
                step = generator.send(reply) if error is None else generator.throw(error)
            except StopIteration as done:
                self.result = done.value
                return
            self.steps.append(step)
            answer = replies.pop(0) if replies else None
            reply, error = (None, answer) if isinstance(answer, BaseException) else (answer, None)


def reservation(key: str = "k", token: str = "t-1") -> Reservation:
    return Reservation("emails", key, "kind", {"n": 1}, token, 0, 1, NOW, NOW)


# -- one call, its arguments encoded, its rows decoded -------------------------------------------


def test_push_sends_one_call_with_its_arguments_encoded_and_reads_the_flag():
    run = Steps(queue().push("user-42", "welcome", {"to": "a@example.com"}, priority=3), [(True,)])
    assert run.steps == [
        Call(
            "push",
            {
                "queue": "emails",
                "key": "user-42",
                "kind": "welcome",
                "payload": '{"to":"a@example.com"}',
                "run_at": None,
                "priority": 3,
            },
        )
    ]
    assert run.result is True
    assert Steps(queue().push(17, "welcome", 1), [(False,)]).steps[0].params["key"] == "17"
    assert Steps(queue().push("k", "welcome", 1), [(False,)]).result is False


def test_push_into_a_group_calls_push_grouped():
    run = Steps(queue().push("k", "kind", None, group="g1"), [(1,)])
    [call] = run.steps
    assert call.statement == "push_grouped" and call.params["group"] == "g1"
    assert run.result is True


def test_durations_are_what_each_dialect_sends():
    pg = Steps(queue("postgresql").create(visibility_timeout=60, max_attempts=5), [])
    my = Steps(queue("mysql").create(visibility_timeout=60, max_attempts=5), [])
    assert pg.steps[0].params["visibility_timeout"] == dt.timedelta(seconds=60)
    assert my.steps[0].params["visibility_timeout"] == Decimal("60.0")
    assert pg.steps[0].params["max_attempts"] == my.steps[0].params["max_attempts"] == 5


def test_stats_rows_become_queue_stats():
    run = Steps(queue().stats(), [("emails", 3, 1, 2, 4, 1.5, False)])
    assert run.steps == [Call("stats", {"queue": "emails"})]
    s = run.result
    assert (s.queue, s.ready, s.delayed, s.reserved, s.dead, s.oldest_ready_age_s, s.paused) == (
        "emails",
        3,
        1,
        2,
        4,
        1.5,
        False,
    )


def test_fail_sends_the_error_as_text_and_reads_the_outcome():
    run = Steps(queue().fail(reservation(), error=ValueError("smtp down"), delay=5), [("retry",)])
    [call] = run.steps
    assert call.statement == "fail"
    assert (call.params["key"], call.params["token"], call.params["error"]) == (
        "k",
        "t-1",
        "ValueError: smtp down",
    )
    assert run.result == "retry"
    assert Steps(queue().fail(reservation()), [(None,)]).result is None  # no longer held


def test_extend_returns_the_reservation_with_its_new_token_or_none():
    held = reservation()
    run = Steps(queue().extend(held, timeout=30), [("t-2",)])
    assert run.result == Reservation("emails", "k", "kind", {"n": 1}, "t-2", 0, 1, NOW, NOW)
    assert Steps(queue().extend(held), [(None,)]).result is None


# -- bad input is refused before anything is sent ---------------------------------------------------


@pytest.mark.parametrize(
    "call",
    [
        lambda q: q.commit("nope"),
        lambda q: q.push("k", 3, {}),
        lambda q: q.push(True, "kind", {}),
        lambda q: q.push("k", "kind", {1, 2}),
        lambda q: q.reserve(n=2.5),
        lambda q: q.push("k", "kind", 1, run_at=dt.datetime(2026, 1, 1)),  # naive
        lambda q: q.replay(start=dt.timedelta(hours=1)),
    ],
)
def test_bad_arguments_raise_before_the_first_call(call):
    steps = call(queue())
    with pytest.raises(errors.InvalidArgumentError):
        next(steps)


# -- batches and reserves of more than CHUNK_SIZE: several calls, one transaction -------------------


def test_push_many_in_chunks_asks_for_one_transaction_and_adds_up_the_counts():
    messages = [(f"k{i}", "kind", i) for i in range(2 * CHUNK_SIZE + 1)]
    run = Steps(queue().push_many(messages), None, [(CHUNK_SIZE,)], [(CHUNK_SIZE - 1,)], [(1,)])
    assert run.steps[0] is ONE_TRANSACTION
    calls = run.steps[1:]
    assert [c.statement for c in calls] == ["push_batch"] * 3
    assert [len(c.params["keys"]) for c in calls] == [CHUNK_SIZE, CHUNK_SIZE, 1]
    assert calls[2].params["keys"] == [f"k{2 * CHUNK_SIZE}"]
    assert run.result == 2 * CHUNK_SIZE


def test_a_small_push_many_is_one_call_and_an_empty_one_none():
    run = Steps(queue().push_many([("a", "kind", 1), ("b", "kind", 2, None, None, "g")]), [(2,)])
    assert [s.statement for s in run.steps] == ["push_batch_grouped"]
    assert run.steps[0].params["groups"] == [None, "g"]
    empty = Steps(queue().push_many([]))
    assert (empty.steps, empty.result) == ([], 0)


@pytest.mark.parametrize("dialect", ["postgresql", "mysql"])
def test_push_many_sends_the_same_batch_whatever_shape_its_messages_take(dialect):
    from pyqueue_sql import NewMessage

    shapes = [
        [("a", "kind", {"n": 1}), (17, "kind", [1.5])],
        [("a", "kind", {"n": 1}, None, None, None), ("17", "kind", [1.5], None)],
        [NewMessage("a", "kind", {"n": 1}), NewMessage(17, "kind", [1.5])],
        [{"key": "a", "kind": "kind", "payload": {"n": 1}}, {"key": 17, "kind": "kind", "payload": [1.5]}],
    ]
    sent = [Steps(queue(dialect).push_many(messages), [(2,)]).steps for messages in shapes]
    assert [[s.statement for s in steps] for steps in sent] == [["push_batch"]] * len(shapes)
    assert all(steps[0].params == sent[0][0].params for steps in sent)


@pytest.mark.parametrize(
    "message",
    [(True, "kind", 1), ("a", 5, 1), ("a", "kind", float("nan")), ("a", "kind", {1, 2}), ("a",)],
    ids=["bool-key", "int-kind", "nan-payload", "set-payload", "too-short"],
)
def test_push_many_refuses_a_bad_tuple_before_any_call(message):
    with pytest.raises((errors.InvalidArgumentError, errors.InvalidPayloadError, TypeError)):
        next(queue().push_many([("ok", "kind", 1), message]))


def test_reserve_in_chunks_stops_at_the_first_short_one():
    row = ("k", "kind", '{"n":1}', "tok", 0, 1, NOW, NOW)
    run = Steps(queue().reserve(n=3 * CHUNK_SIZE), None, [row] * CHUNK_SIZE, [row] * 2)
    assert run.steps[0] is ONE_TRANSACTION
    assert [s.params["n"] for s in run.steps[1:]] == [CHUNK_SIZE, CHUNK_SIZE]  # the third is not asked
    assert len(run.result) == CHUNK_SIZE + 2
    assert client.chunk_sizes(2 * CHUNK_SIZE + 3) == [CHUNK_SIZE, CHUNK_SIZE, 3]


# -- the policy: transactions of the client's own, retries after a serialization failure ------------


def policy(db: DatabaseCalls, method):
    return db._method_steps(method)


def test_a_chunked_method_on_an_owned_database_runs_in_begin_commit():
    db = database()
    messages = [(f"k{i}", "kind", i) for i in range(CHUNK_SIZE + 1)]
    run = Steps(policy(db, QueueCalls(db, "q").push_many(messages)), None, [(CHUNK_SIZE,)], [(1,)], None)
    assert run.steps[0] is Step.BEGIN and run.steps[-1] is Step.COMMIT
    assert [s.statement for s in run.steps[1:-1]] == ["push_batch", "push_batch"]
    assert run.result == CHUNK_SIZE + 1


def test_a_failing_chunk_rolls_the_transaction_back_and_raises():
    db = database()
    messages = [(f"k{i}", "kind", i) for i in range(CHUNK_SIZE + 1)]
    steps = policy(db, QueueCalls(db, "q").push_many(messages))
    assert next(steps) is Step.BEGIN
    assert steps.send(None).statement == "push_batch"
    assert steps.send([(CHUNK_SIZE,)]).statement == "push_batch"
    assert steps.throw(errors.InvalidArgumentError("refused")) is Step.ROLLBACK
    with pytest.raises(errors.InvalidArgumentError, match="refused"):
        steps.send(None)
    assert db._in_transaction is False


def test_a_serialization_failure_is_run_again_after_a_pause():
    db = database()
    failure = errors.SerializationError("deadlock")
    run = Steps(policy(db, QueueCalls(db, "q").push("k", "kind", 1)), failure, None, failure, None, [(True,)])
    kinds = [type(s).__name__ for s in run.steps]
    assert kinds == ["Call", "Pause", "Call", "Pause", "Call"]
    assert all(
        0 <= s.seconds <= client.SERIALIZATION_BACKOFF_MAX_S for s in run.steps if isinstance(s, Pause)
    )
    assert run.result is True and db.serialization_retries == 2


def test_serialization_failures_are_given_up_after_the_last_attempt():
    db = database()
    steps = policy(db, QueueCalls(db, "q").push("k", "kind", 1))
    step = next(steps)
    with pytest.raises(errors.SerializationError):
        for _ in range(SERIALIZATION_ATTEMPTS):
            assert isinstance(step, Call)
            step = steps.throw(errors.SerializationError("deadlock"))
            assert isinstance(step, Pause)
            step = steps.send(None)
    assert db.serialization_retries == SERIALIZATION_ATTEMPTS - 1


@pytest.mark.parametrize("owned", [True, False])
def test_inside_a_transaction_or_on_a_wrapped_connection_a_failure_is_raised_at_once(owned):
    db = database(owned=owned)
    db._in_transaction = owned  # db.transaction() on an owned database; a wrapped one is always the caller's
    steps = policy(db, QueueCalls(db, "q").push("k", "kind", 1))
    assert isinstance(next(steps), Call)
    with pytest.raises(errors.SerializationError):
        steps.throw(errors.SerializationError("deadlock"))
    assert db.serialization_retries == 0


def test_mysql_runs_its_archiving_calls_in_a_transaction_of_their_own():
    db = database("mysql")
    run = Steps(policy(db, QueueCalls(db, "q").commit(reservation())), [(1,)])
    [step] = run.steps
    assert isinstance(step, OwnTransaction) and step.call.statement == "commit"
    assert run.result is True
    # PostgreSQL: a plain call (its function is one statement, atomic in autocommit)
    pg = database("postgresql")
    [plain] = Steps(policy(pg, QueueCalls(pg, "q").commit(reservation())), [(True,)]).steps
    assert isinstance(plain, Call)


def test_mysql_commit_reserve_reads_the_commit_from_the_last_result_set():
    row = ("k2", "kind", '{"n":2}', "t-9", 0, 1, NOW.replace(tzinfo=None), NOW.replace(tzinfo=None))
    run = Steps(queue("mysql").commit_reserve(reservation(), n=1), [[row], [(1,)]])
    [call] = run.steps
    assert call.statement == "commit_reserve" and call.all_sets
    committed, [got] = run.result
    assert committed is True and (got.key, got.token, got.payload) == ("k2", "t-9", {"n": 2})
    assert got.created_at == NOW  # MySQL's UTC wall-clock time, read as an aware UTC datetime


@pytest.mark.parametrize("dialect", ["postgresql", "mysql"])
@pytest.mark.parametrize("headers", [None, {"h": "v"}], ids=["no-headers", "headers"])
def test_a_reserved_row_is_the_reservation_its_init_would_make(dialect, headers):
    # reservations_from_rows fills each Reservation's __dict__ itself: every field, none more
    pg = dialect == "postgresql"
    at = NOW if pg else NOW.replace(tzinfo=None)
    row = ("k", "kind", {"n": 1} if pg else '{"n":1}', "tok", 3, 2, at, at)
    if headers is not None:
        row += (headers if pg else '{"h":"v"}',)
    [got] = Steps(queue(dialect).reserve(n=1), [row]).result
    made = Reservation("emails", "k", "kind", {"n": 1}, "tok", 3, 2, NOW, NOW, headers)
    assert got == made and vars(got) == vars(made)
