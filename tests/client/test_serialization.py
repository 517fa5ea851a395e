"""Serialization failures and deadlocks: one documented exception (errors.SerializationError),
run again by the client when it owns the call's transaction, raised at once inside the caller's."""

from __future__ import annotations

import random
import threading
import time
import uuid

import pytest

from pyqueue_sql import SerializationError, client, errors


def serializable(db, dialect):
    """Makes SERIALIZABLE the session's default isolation level (every autocommit call too)."""
    cur = db.connection.cursor()
    try:
        if dialect == "postgresql":
            cur.execute("SET SESSION CHARACTERISTICS AS TRANSACTION ISOLATION LEVEL SERIALIZABLE")
        else:
            cur.execute("SET SESSION TRANSACTION ISOLATION LEVEL SERIALIZABLE")
    finally:
        cur.close()


@pytest.mark.slow
def test_serializable_sessions_commit_every_message_once(connect, make_queue, dialect):
    """Eight SERIALIZABLE sessions reserve and commit (one by one, in batches, and with
    commit_reserve) concurrently: no driver error reaches the caller, every message is committed
    exactly once and none is left reserved."""
    queue = make_queue(max_attempts=1000)
    total, threads = 240, 8
    queue.push_many([(f"m{i}", "k", i) for i in range(total)])
    committed: list[str] = []
    escaped: list[str] = []
    failures: list[BaseException] = []
    lock = threading.Lock()
    deadline = time.monotonic() + 60
    databases = []

    def again(call):
        """What the documented caller does with a SerializationError: run the call again."""
        while True:
            try:
                return call()
            except SerializationError as exc:
                with lock:
                    escaped.append(str(exc)[:80])

    def worker(i):
        db = connect()
        serializable(db, dialect)
        databases.append(db)
        q = db.queue(queue.name)
        rng = random.Random(i)
        empty = 0
        previous = None
        try:
            while time.monotonic() < deadline and empty < 3:
                mode = rng.random()
                if mode < 0.3:
                    ok, got = again(lambda: q.commit_reserve(previous, n=rng.randint(1, 3), timeout=120))
                    if previous is not None:
                        assert ok is True
                        with lock:
                            committed.append(previous.key)
                    previous = None
                else:
                    got = again(lambda: q.reserve(n=rng.randint(1, 4), timeout=120))
                if not got:
                    empty += 1
                    time.sleep(0.01)
                    continue
                empty = 0
                if mode < 0.3:
                    previous, got = got[0], got[1:]
                if rng.random() < 0.5:
                    assert again(lambda: q.commit_many(got)) == len(got)
                    with lock:
                        committed.extend(r.key for r in got)
                else:
                    for r in got:
                        assert again(lambda: q.commit(r)) is True
                        with lock:
                            committed.append(r.key)
            if previous is not None:
                assert again(lambda: q.commit(previous)) is True
                with lock:
                    committed.append(previous.key)
        except BaseException as exc:  # noqa: BLE001 - reported below
            failures.append(exc)

    workers = [threading.Thread(target=worker, args=(i,)) for i in range(threads)]
    for t in workers:
        t.start()
    for t in workers:
        t.join()
    retries = sum(db.serialization_retries for db in databases)
    print(dialect, "retried", retries, "escaped", len(escaped))
    assert not failures, repr(failures[0])
    assert sorted(committed) == sorted(f"m{i}" for i in range(total))  # each once
    s = queue.stats()
    assert (s.ready, s.delayed, s.reserved) == (0, 0, 0)


@pytest.mark.slow
def test_a_deadlock_inside_a_transaction_is_raised_at_once(connect, make_queue, dialect):
    """Two transactions pause two queues in opposite orders: the server breaks the deadlock by
    rolling one back; that one gets SerializationError at once (no retry: only its caller can
    run the whole transaction again), the other commits."""
    q1, q2 = make_queue(), make_queue()
    a, b = connect(), connect()
    both_hold = threading.Barrier(2, timeout=30)
    outcome: dict[str, object] = {}

    def run(name, db, first, second):
        try:
            with db.transaction():
                db.queue(first).pause()
                both_hold.wait()
                db.queue(second).pause()
            outcome[name] = "committed"
        except BaseException as exc:  # noqa: BLE001 - examined below
            outcome[name] = exc

    ta = threading.Thread(target=run, args=("a", a, q1.name, q2.name))
    tb = threading.Thread(target=run, args=("b", b, q2.name, q1.name))
    ta.start()
    tb.start()
    ta.join(60)
    tb.join(60)
    results = sorted(outcome.values(), key=lambda v: isinstance(v, BaseException))
    assert results[0] == "committed", outcome
    assert isinstance(results[1], SerializationError), repr(results[1])
    assert "run the whole transaction again" in str(results[1])
    assert a.serialization_retries == b.serialization_retries == 0
    assert q1.stats().paused and q2.stats().paused
    # both connections are usable afterwards
    assert a.queue(q1.name).stats().paused and b.queue(q2.name).stats().paused


@pytest.mark.only_dialect("postgresql")
def test_serialization_failure_inside_a_serializable_transaction(connect, make_queue, dialect):
    """A transaction whose snapshot predates another session's reservation of the same message
    fails to reserve it (40001): SerializationError, at once, and nothing of it is kept."""
    queue = make_queue()
    queue.push("m", "k", 1)
    queue.push("n", "k", 1)
    a, b = connect(), connect()
    serializable(a, dialect)
    qa = a.queue(queue.name)
    with pytest.raises(SerializationError):
        with a.transaction():
            assert qa.stats().ready == 2  # takes the snapshot
            qa.push("written-in-the-transaction", "k", 1)
            taken = b.queue(queue.name).reserve(n=2, timeout=60)  # committed at once, after the snapshot
            assert len(taken) == 2
            qa.reserve(n=2)
    assert a.serialization_retries == 0
    s = queue.stats()
    assert (s.ready, s.reserved) == (0, 2)
    assert a.queue(queue.name).message("written-in-the-transaction", "k") is None


def _flaky(db, statement, failures, monkeypatch):
    """Makes the next `failures` runs of a named statement fail as a serialization failure would
    (a statement the dialect runs in a transaction of the client's own fails there)."""
    if statement in db.dialect.own_transaction_statements:
        method = "run_in_own_transaction"
    else:
        method = "run" if db.dialect.name == "postgresql" else "run_sets"  # the one the other calls
    real = getattr(db.dialect, method)
    seen = []

    def run(connection, name, params, *rest):
        if name == statement:
            seen.append(name)
            if len(seen) <= failures:
                raise SerializationError("simulated serialization failure")
        return real(connection, name, params, *rest)

    monkeypatch.setattr(db.dialect, method, run)
    return seen


@pytest.mark.parametrize("statement", ["push", "commit"])
def test_the_client_runs_its_own_call_again(db, queue, monkeypatch, statement):
    if statement == "commit":
        queue.push("m", "k", 1)
        [r] = queue.reserve()
    seen = _flaky(db, statement, 2, monkeypatch)
    if statement == "push":
        assert queue.push("m", "k", 1) is True
    else:
        assert queue.commit(r) is True
    assert len(seen) == 3 and db.serialization_retries == 2


def test_the_client_gives_up_after_a_few_attempts(db, queue, monkeypatch):
    seen = _flaky(db, "push", 100, monkeypatch)
    with pytest.raises(SerializationError):
        queue.push("m", "k", 1)
    assert len(seen) == client.SERIALIZATION_ATTEMPTS
    monkeypatch.undo()
    assert queue.stats().ready == 0


def test_inside_a_transaction_the_client_never_runs_a_call_again(db, queue, monkeypatch):
    seen = _flaky(db, "push", 1, monkeypatch)
    with pytest.raises(SerializationError):
        with db.transaction():
            queue.push("m", "k", 1)
    assert len(seen) == 1 and db.serialization_retries == 0


def test_a_wrapped_connection_is_never_run_again(dsn, dialect, queue, monkeypatch):
    import pyqueue_sql

    if dialect == "postgresql":
        import psycopg

        conn = psycopg.connect(dsn.replace("postgresql+psycopg", "postgresql"), autocommit=True)
    else:
        import pymysql

        from pyqueue_sql.dialects import mysql_connect_args

        conn = pymysql.connect(**mysql_connect_args(dsn))
    try:
        app = pyqueue_sql.Database.wrap(conn)
        seen = _flaky(app, "push", 1, monkeypatch)
        with pytest.raises(SerializationError):
            app.queue(queue.name).push(f"m{uuid.uuid4().hex[:4]}", "k", 1)
        assert len(seen) == 1
    finally:
        conn.close()


def test_driver_errors_map_to_serialization_error(dialect, db):
    """The server's codes themselves: PostgreSQL 40001 / 40P01, MySQL 1213 (not 1205, a lock
    wait timeout, which leaves the transaction open with what it did before)."""
    if dialect == "postgresql":
        from psycopg import errors as pgerrors

        for cls in (pgerrors.SerializationFailure, pgerrors.DeadlockDetected):
            mapped = db.dialect.serialization_error(cls("x"))
            assert isinstance(mapped, errors.SerializationError)
        assert db.dialect.serialization_error(pgerrors.UniqueViolation("x")) is None
    else:
        import pymysql

        mapped = db.dialect.serialization_error(pymysql.err.OperationalError(1213, "x"))
        assert isinstance(mapped, errors.SerializationError)
        assert db.dialect.serialization_error(pymysql.err.OperationalError(1205, "x")) is None
        assert db.dialect.serialization_error(pymysql.err.OperationalError(1062, "dup")) is None
    assert issubclass(SerializationError, errors.QueueError)
