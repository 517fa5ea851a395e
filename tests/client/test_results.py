"""Results, cancellation and progress through the client (Queue.result, wait_result, cancel,
commit_result, set_progress, renew, cancel_held), on both dialects, against the real routines."""

from __future__ import annotations

import datetime as dt
import threading
import time

import pytest

import pyqueue_sql
from pyqueue_sql import InvalidArgumentError, Result


@pytest.fixture
def results_queue(make_queue):
    q = make_queue(max_attempts=2)
    q.set_result_retention(dt.timedelta(hours=1))
    return q


def test_the_retention_is_a_setting(make_queue):
    q = make_queue()
    assert q.settings().result_retention is None
    q.set_result_retention(3600)
    assert q.settings().result_retention == dt.timedelta(hours=1)
    q.set_result_retention(None)
    assert q.settings().result_retention is None


def test_a_live_message_then_its_committed_result(results_queue):
    q = results_queue
    assert q.result("k", "job") == Result(q.name, "k", "job", "unknown")
    q.push("k", "job", {"n": 1})
    assert q.result("k", "job").state == "ready"
    [r] = q.reserve()
    live = q.result("k", "job")
    assert (live.state, live.attempts, live.finished, live.cancel_requested) == ("reserved", 1, False, False)
    assert q.commit_result(r, {"total": 42, "items": ["a", "b"]})
    done = q.result("k", "job")
    assert done.state == "succeeded" and done.finished
    assert done.result == {"total": 42, "items": ["a", "b"]}
    assert done.attempts == 1 and done.finished_at is not None
    assert not q.commit_result(r, 1)  # the token no longer holds


def test_a_plain_commit_records_success_without_a_value(results_queue):
    q = results_queue
    q.push("k", "job", {})
    [r] = q.reserve()
    assert q.commit(r)
    done = q.result("k", "job")
    assert (done.state, done.result) == ("succeeded", None)


def test_a_queue_without_retention_keeps_no_result(make_queue):
    q = make_queue()
    q.push("k", "job", {})
    [r] = q.reserve()
    with pytest.raises(InvalidArgumentError, match="keeps no results"):
        q.commit_result(r, 1)
    assert q.result("k", "job").state == "reserved"  # nothing changed
    assert q.commit(r)
    assert q.result("k", "job").state == "unknown"


def test_a_failure_on_its_last_attempt_is_failed_with_its_error(results_queue):
    q = results_queue  # max_attempts=2, no dead-letter queue: dropped
    q.push("k", "job", {})
    for attempt in (1, 2):
        [r] = q.reserve()
        q.fail(r, ValueError(f"bad input {attempt}"))
    failed = q.result("k", "job")
    assert (failed.state, failed.last_error, failed.attempts) == ("failed", "ValueError: bad input 2", 2)


def test_cancel_a_waiting_message_and_a_held_one(results_queue):
    q = results_queue
    q.push("waiting", "job", {}, run_at=dt.timedelta(hours=1))
    assert q.cancel("waiting", "job") == "cancelled"
    assert q.result("waiting", "job").state == "cancelled"
    assert q.reserve() == []
    assert q.cancel("waiting", "job") == "unknown"

    q.push("held", "job", {})
    [r] = q.reserve(timeout=30)
    assert q.cancel("held", "job") == "requested"
    assert q.cancel("held", "job") == "requested"  # idempotent
    assert q.result("held", "job").cancel_requested
    renewal = q.renew(r, timeout=30)
    assert renewal.cancel_requested and renewal.reservation is not None
    assert renewal.reservation.token != r.token
    assert not q.cancel_held(r)  # the old token no longer holds
    assert q.cancel_held(renewal.reservation)
    ended = q.result("held", "job")
    assert (ended.state, ended.cancel_requested) == ("cancelled", False)


def test_renew_without_a_cancel_and_with_a_stale_token(results_queue):
    q = results_queue
    q.push("k", "job", {})
    [r] = q.reserve()
    renewal = q.renew(r)
    assert renewal.reservation is not None and not renewal.cancel_requested
    assert q.renew(r) == (None, False)  # the old token
    assert q.commit(renewal.reservation)


def test_progress_is_read_while_it_runs_and_after_it_finished(results_queue):
    q = results_queue
    q.push("k", "job", {})
    [r] = q.reserve()
    assert q.set_progress(r, {"done": 3, "of": 10})
    assert q.result("k", "job").progress == {"done": 3, "of": 10}
    assert q.set_progress(r, 0.5)
    assert q.commit_result(r, "ok")
    done = q.result("k", "job")
    assert (done.state, done.result, done.progress) == ("succeeded", "ok", 0.5)
    assert not q.set_progress(r, 1)


def test_progress_over_64_kib_is_refused(results_queue):
    q = results_queue
    q.push("k", "job", {})
    [r] = q.reserve()
    with pytest.raises(InvalidArgumentError):
        q.set_progress(r, "x" * 70000)


def test_commit_result_many(results_queue):
    q = results_queue
    for i in range(5):
        q.push(f"k{i}", "job", {"i": i})
    held = q.reserve(n=5)
    assert q.commit_result_many([(r, {"i": r.payload["i"] * 10}) for r in held]) == 5
    assert [q.result(f"k{i}", "job").result for i in range(5)] == [{"i": i * 10} for i in range(5)]
    assert q.commit_result_many([]) == 0


def test_wait_result_returns_when_another_connection_commits(results_queue, connect):
    q = results_queue
    q.push("k", "job", {})
    other = connect().queue(q.name)
    [r] = other.reserve()
    committed_at = []

    def commit_later():
        time.sleep(0.3)
        committed_at.append(time.monotonic())
        assert other.commit_result(r, [1, 2, 3])

    t = threading.Thread(target=commit_later)
    t.start()
    got = q.wait_result("k", "job", timeout=10)
    seen = time.monotonic()
    t.join()
    assert (got.state, got.result) == ("succeeded", [1, 2, 3])
    latency_ms = (seen - committed_at[0]) * 1000
    print(f"wait_result latency after the commit: {latency_ms:.1f} ms ({q.db.dialect.name})")
    assert latency_ms < 1500


def test_wait_result_times_out_with_the_live_state(results_queue):
    q = results_queue
    q.push("k", "job", {})
    started = time.monotonic()
    got = q.wait_result("k", "job", timeout=0.5)
    assert got.state == "ready" and 0.4 < time.monotonic() - started < 3
    assert q.wait_result("k", "job", timeout=0).state == "ready"
    assert q.wait_result("nothing", "job", timeout=5).state == "unknown"  # at once


def test_waits_one_after_another_on_one_connection(results_queue, connect):
    """Sequential waits on one Database: each gets its own result (a notification of another
    message's result does not end a wait)."""
    q = results_queue
    for i in range(3):
        q.push(f"k{i}", "job", {})
    other = connect().queue(q.name)
    held = sorted(other.reserve(n=3), key=lambda r: r.key)

    def commit_all():
        for r in reversed(held):
            time.sleep(0.1)
            other.commit_result(r, r.key)

    t = threading.Thread(target=commit_all)
    t.start()
    got = [q.wait_result(f"k{i}", "job", timeout=10).result for i in range(3)]
    t.join()
    assert got == ["k0", "k1", "k2"]


def test_bad_arguments_are_refused(results_queue):
    q = results_queue
    with pytest.raises(InvalidArgumentError):
        q.wait_result("k", "job", timeout=-1)
    with pytest.raises(pyqueue_sql.QueueError):
        q.set_result_retention(-5)
    with pytest.raises(pyqueue_sql.UnknownQueueError):
        q.db.queue("no-such-queue-here").result("k", "job")
