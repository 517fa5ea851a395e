"""Results, cancellation and progress (docs/contract.md, "Results, cancellation and progress"), on
every dialect, as plain SQL: queue_set_result_retention, queue_commit_result(_batch), queue_result,
queue_result_wait, queue_result_channel, queue_cancel, queue_renew, queue_cancel_held,
queue_set_progress, and what the other routines record on a queue that keeps results (commit,
pop, the fast paths, fail, give up, move, remove) and what queue_purge_history deletes."""

from __future__ import annotations

import dataclasses
import datetime as dt
import json
import re
import threading
import time
import uuid

import pytest

from pyqueue_sql import dialects
from tests import plainsql

DAY = 86400


class Sql(plainsql.Sql):
    """The routines as plain SQL (tests/plainsql.py), with the calls of results, cancellation and
    progress."""

    def set_retention(self, queue: str, seconds: float | None) -> None:
        self("queue_set_result_retention", queue, None if seconds is None else self.dur(seconds))

    def commit_result(self, queue: str, r, result) -> bool:
        return bool(self.one("queue_commit_result", queue, r.key, r.kind, r.token, self.json_in(result)))

    def result(self, queue: str, key: str, kind: str) -> dict:
        (row,) = self("queue_result", queue, key, kind)
        return self._result(row)

    def result_wait(self, queue: str, key: str, kind: str, timeout) -> dict:
        (row,) = self("queue_result_wait", queue, key, kind, None if timeout is None else self.dur(timeout))
        return self._result(row)

    def _result(self, row: tuple) -> dict:
        state, result, last_error, attempts, progress, finished_at, cancel_requested = row
        return {
            "state": state,
            "result": self.json_out(result),
            "last_error": last_error,
            "attempts": attempts,
            "progress": self.json_out(progress),
            "finished": finished_at is not None,
            "cancel_requested": bool(cancel_requested),
        }

    def renew(self, queue: str, r, timeout=None) -> tuple:
        (row,) = self(
            "queue_renew", queue, r.key, r.kind, r.token, None if timeout is None else self.dur(timeout)
        )
        token, requested = row
        return (None if token is None else str(token), bool(requested))

    def cancel(self, queue: str, key: str, kind: str) -> str:
        return self.one("queue_cancel", queue, key, kind)

    def cancel_held(self, queue: str, r, token=None) -> bool:
        return bool(self.one("queue_cancel_held", queue, r.key, r.kind, token or r.token))

    def set_progress(self, queue: str, r, progress, token=None) -> bool:
        return bool(
            self.one("queue_set_progress", queue, r.key, r.kind, token or r.token, self.json_in(progress))
        )

    def commit_result_batch(self, queue: str, keys, kinds, tokens, results) -> int:
        return self.one(
            "queue_commit_result_batch",
            queue,
            self.array(keys),
            self.array(kinds),
            self.array(tokens),
            self.json_array(results),
            casts=(None, "::text[]", "::text[]", "::text[]", "::jsonb[]"),
        )

    def settings_result_retention(self, queue: str):
        (row,) = self("queue_settings", queue)
        value = row[9]  # result_retention, the tenth column (by position from the front)
        if value is None:
            return None
        return value.total_seconds() if isinstance(value, dt.timedelta) else float(value)

    def message_extras(self, queue: str, key: str, kind: str) -> tuple:
        """queue_message's columns 12 and 13: progress and cancel_requested (read by position from the
        front: later columns may follow them)."""
        (row,) = self("queue_message", queue, key, kind)
        return (self.json_out(row[11]), bool(row[12]))

    def age_results(self, queue: str, seconds: int) -> None:
        """Moves the queue's result rows back in time (as if they had finished seconds earlier)."""
        if self.pg:
            self.raw(
                "UPDATE pyqueue_result SET finished_at = finished_at - %s WHERE queue_name = %s",
                (dt.timedelta(seconds=seconds), queue),
            )
        else:
            self.raw(
                "UPDATE pyqueue_result SET finished_at = finished_at - INTERVAL %s SECOND WHERE queue_name = %s",
                (seconds, queue),
            )


@pytest.fixture
def sql(raw, dialect):
    """The plain-SQL fixture of tests/conftest.py, with this file's helpers."""
    return Sql(raw, dialect)


@pytest.fixture
def rq(make_queue, sql):
    """A queue that keeps results for a day."""
    q = make_queue(max_attempts=3)
    sql.set_retention(q.name, DAY)
    return q


def _raises(match: str):
    return pytest.raises(Exception, match=match)


# -- queue_set_result_retention -------------------------------------------------------


def test_result_retention_is_set_shown_by_settings_and_reset(queue, sql):
    assert sql.settings_result_retention(queue.name) is None
    sql.set_retention(queue.name, 3600)
    assert sql.settings_result_retention(queue.name) == 3600
    sql.set_retention(queue.name, 3650 * DAY)
    assert sql.settings_result_retention(queue.name) == 3650 * DAY
    sql("queue_reset_setting", queue.name, "result_retention")
    assert sql.settings_result_retention(queue.name) is None
    sql.set_retention(queue.name, 60)
    sql.set_retention(queue.name, None)  # NULL turns recording off
    assert sql.settings_result_retention(queue.name) is None


def test_result_retention_refuses_bad_values_and_an_unknown_queue(queue, sql):
    for seconds, match in [(0, "greater than zero"), (-5, "negative"), (3650 * DAY + 1, "3650 days")]:
        with _raises(match):
            sql.set_retention(queue.name, seconds)
    with _raises("does not exist"):
        sql.set_retention(f"missing.{uuid.uuid4().hex[:8]}", 60)
    with _raises("must not be NULL or empty"):
        sql.set_retention("", 60)
    assert sql.settings_result_retention(queue.name) is None


# -- queue_commit_result / queue_result -----------------------------------------------


def test_commit_result_stores_the_result_with_the_commit(rq, sql):
    rq.push("a", "k", {"n": 1})
    (r,) = rq.reserve(timeout=60)
    assert sql.commit_result(rq.name, r, {"sum": 3, "items": ["x", "é"]})
    assert rq.message("a", "k") is None
    got = sql.result(rq.name, "a", "k")
    assert got == {
        "state": "succeeded",
        "result": {"sum": 3, "items": ["x", "é"]},
        "last_error": None,
        "attempts": 1,
        "progress": None,
        "finished": True,
        "cancel_requested": False,
    }


def test_a_json_null_result_is_stored_as_no_result(rq, sql):
    rq.push_many([("a", "k", {}), ("b", "k", {})])
    ra, rb = sorted(rq.reserve(2, timeout=60), key=lambda r: r.key)
    assert sql.commit_result(rq.name, ra, None)
    assert bool(sql.one("queue_commit_result", rq.name, "b", "k", rb.token, "null"))
    for key in ("a", "b"):
        got = sql.result(rq.name, key, "k")
        assert (got["state"], got["result"]) == ("succeeded", None)


def test_commit_result_with_a_token_that_no_longer_holds_writes_nothing(rq, sql):
    rq.push("a", "k", {})
    (r,) = rq.reserve(timeout=60)
    assert rq.rollback(r)
    assert sql.commit_result(rq.name, r, {"late": True}) is False
    assert sql.result(rq.name, "a", "k")["state"] == "ready"
    (again,) = rq.reserve(timeout=60)
    assert sql.commit_result(rq.name, r, {"late": True}) is False
    assert sql.result(rq.name, "a", "k")["state"] == "reserved"
    assert sql.commit_result(rq.name, again, 7)
    assert sql.result(rq.name, "a", "k")["result"] == 7


def test_commit_result_on_a_queue_that_keeps_no_results_is_refused_and_changes_nothing(queue, sql):
    queue.push("a", "k", {})
    (r,) = queue.reserve(timeout=60)
    with _raises("keeps no results"):
        sql.commit_result(queue.name, r, {"x": 1})
    assert queue.message("a", "k").state == "reserved"
    assert queue.commit(r)


def test_a_result_above_max_payload_is_refused_and_changes_nothing(rq, sql):
    rq.set_max_payload(40)
    rq.push("a", "k", {})
    (r,) = rq.reserve(timeout=60)
    with _raises("result is 41 bytes, more than the queue's max_payload of 40"):
        sql.commit_result(rq.name, r, "x" * 39)  # 41 bytes of JSON text with its quotes
    assert rq.message("a", "k").state == "reserved"
    assert sql.commit_result(rq.name, r, "x" * 38)
    assert sql.result(rq.name, "a", "k")["result"] == "x" * 38


def test_commit_result_refuses_bad_arguments(rq, sql):
    rq.push("a", "k", {})
    (r,) = rq.reserve(timeout=60)
    with _raises("token is malformed"):
        sql.one("queue_commit_result", rq.name, "a", "k", "not a token", "1")
    with _raises("does not exist"):
        sql.commit_result(f"missing.{uuid.uuid4().hex[:8]}", r, 1)
    with _raises("p_key"):
        sql.one("queue_commit_result", rq.name, "", "k", r.token, "1")
    assert rq.message("a", "k").state == "reserved"


def test_result_states_of_live_messages(rq, sql):
    assert sql.result(rq.name, "nobody", "k") == {
        "state": "unknown",
        "result": None,
        "last_error": None,
        "attempts": None,
        "progress": None,
        "finished": False,
        "cancel_requested": False,
    }
    rq.push("ready", "k", {})
    rq.push("later", "k", {}, run_at=dt.datetime.now(dt.timezone.utc) + dt.timedelta(hours=1))
    rq.push("head", "k", {}, group="g")
    rq.push("behind", "k", {}, group="g")
    assert sql.result(rq.name, "ready", "k")["state"] == "ready"
    assert sql.result(rq.name, "later", "k")["state"] == "delayed"
    assert sql.result(rq.name, "behind", "k")["state"] == "blocked"
    held = {r.key: r for r in rq.reserve(5, timeout=60)}
    assert set(held) == {"ready", "head"}
    got = sql.result(rq.name, "head", "k")
    assert (got["state"], got["attempts"], got["finished"], got["result"]) == ("reserved", 1, False, None)
    assert rq.fail(held["ready"], "boom") == "retry"
    got = sql.result(rq.name, "ready", "k")
    assert (got["state"], got["attempts"], got["last_error"]) == ("ready", 1, "boom")
    with _raises("does not exist"):
        sql.result(f"missing.{uuid.uuid4().hex[:8]}", "a", "k")
    with _raises("p_kind"):
        sql.result(rq.name, "a", "")


def test_a_live_message_wins_over_the_stored_result_and_replaces_it_when_it_finishes(rq, sql):
    rq.push("a", "k", {"run": 1})
    (r,) = rq.reserve(timeout=60)
    assert sql.commit_result(rq.name, r, "first")
    rq.push("a", "k", {"run": 2})
    got = sql.result(rq.name, "a", "k")
    assert (got["state"], got["result"], got["finished"]) == ("ready", None, False)
    (r,) = rq.reserve(timeout=60)
    assert sql.commit_result(rq.name, r, "second")
    assert sql.result(rq.name, "a", "k")["result"] == "second"


def test_every_commit_path_records_succeeded(rq, sql):
    rq.push_many([(f"m{i}", "k", {}) for i in range(5)])
    got = {r.key: r for r in rq.reserve(3, timeout=60)}
    assert rq.commit(got["m0"])
    assert rq.commit_many([got["m1"]]) == 1
    rows = rq.commit_reserve(got["m2"], n=1)
    (popped,) = rq.pop()
    for key in ("m0", "m1", "m2", popped.key):
        got = sql.result(rq.name, key, "k")
        assert (key, got["state"], got["result"], got["finished"]) == (key, "succeeded", None, True)
    assert rows  # the next reservation came with the commit


def test_a_success_after_a_failed_attempt_clears_its_last_error_on_every_commit_path(rq, sql):
    """The result of a job that succeeded on its second attempt shows no error (the first attempt's
    error is not its outcome), whichever path committed it."""

    def second_attempt(key: str, reserve: bool = True):
        rq.push(key, "k", {})
        [r] = rq.reserve(1, timeout=60)
        assert rq.fail(r, f"first {key}") == "retry"
        assert rq.message(key, "k").last_error == f"first {key}"  # shown while it waits for its retry
        return rq.reserve(1, timeout=60)[0] if reserve else None

    assert rq.commit(second_attempt("commit"))
    assert rq.commit_many([second_attempt("commit_many")]) == 1
    assert rq.commit_reserve(second_attempt("commit_reserve"), n=1) == (True, [])
    assert sql.commit_result(rq.name, second_attempt("commit_result"), {"n": 3})
    assert rq.commit_result_many([(second_attempt("commit_result_many"), 4)]) == 1
    second_attempt("pop", reserve=False)
    assert [p.key for p in rq.pop(2)] == ["pop"]
    for key in ("commit", "commit_many", "commit_reserve", "commit_result", "commit_result_many", "pop"):
        r = sql.result(rq.name, key, "k")
        assert (key, r["state"], r["last_error"]) == (key, "succeeded", None)


def test_failed_records_the_last_error_and_deliveries(make_queue, sql):
    dead = make_queue()
    q = make_queue(max_attempts=2, dead_letter_queue=dead.name)
    sql.set_retention(q.name, DAY)
    q.push_many([("a", "k", {}), ("b", "k", {})])
    for r in q.reserve(2, timeout=60):
        assert q.fail(r, f"first {r.key}") == "retry"
    got = {r.key: r for r in q.reserve(2, timeout=60)}
    assert sql.set_progress(q.name, got["a"], {"step": 2})
    assert q.fail(got["a"], "second a") == "dead_lettered"
    assert q.give_up(got["b"], "hopeless") == "dead_lettered"
    a, b = sql.result(q.name, "a", "k"), sql.result(q.name, "b", "k")
    assert (a["state"], a["last_error"], a["attempts"], a["progress"], a["result"]) == (
        "failed",
        "second a",
        2,
        {"step": 2},
        None,
    )
    assert (b["state"], b["last_error"], b["attempts"]) == ("failed", "hopeless", 2)
    assert sql.result(dead.name, "a", "k")["state"] == "ready"  # the dead letter, live in its own queue


def test_a_last_reservation_that_expired_is_recorded_failed_by_the_next_reserve(make_queue, sql):
    q = make_queue(max_attempts=1)
    sql.set_retention(q.name, DAY)
    q.push("a", "k", {})
    (r,) = q.reserve(timeout=1)
    time.sleep(1.2)
    assert q.reserve(timeout=60) == []  # dropped (no dead-letter queue) instead of delivered again
    got = sql.result(q.name, "a", "k")
    assert (got["state"], got["attempts"], got["last_error"]) == (
        "failed",
        1,
        "reservation expired on its last allowed delivery",
    )


def test_a_queue_without_retention_and_moves_and_removes_record_nothing(rq, queue, sql):
    queue.push("a", "k", {})
    (r,) = queue.reserve(timeout=60)
    assert queue.commit(r)
    assert sql.result(queue.name, "a", "k")["state"] == "unknown"
    rq.push_many([("moved", "k", {}), ("removed", "k", {})])
    held = {r.key: r for r in rq.reserve(2, timeout=60)}
    assert rq.move(held["moved"], queue.name)
    assert rq.remove("removed", "k")
    for key in ("moved", "removed"):
        assert sql.result(rq.name, key, "k")["state"] == "unknown"


def test_recording_turned_off_records_nothing_more(rq, sql):
    rq.push_many([("a", "k", {}), ("b", "k", {})])
    ra, rb = sorted(rq.reserve(2, timeout=60), key=lambda r: r.key)
    assert rq.commit(ra)
    sql.set_retention(rq.name, None)
    assert rq.commit(rb)
    assert sql.result(rq.name, "a", "k")["state"] == "succeeded"  # kept until the next purge
    assert sql.result(rq.name, "b", "k")["state"] == "unknown"


# -- queue_cancel ---------------------------------------------------------------------


def test_cancel_removes_a_message_nobody_holds(make_queue, sql):
    q = make_queue(history_retention=dt.timedelta(days=1))
    sql.set_retention(q.name, DAY)
    q.push("ready", "k", {})
    q.push("later", "k", {}, run_at=dt.timedelta(hours=1))
    for key in ("ready", "later"):
        assert sql.cancel(q.name, key, "k") == "cancelled"
        assert q.message(key, "k") is None
        got = sql.result(q.name, key, "k")
        assert (got["state"], got["attempts"], got["finished"], got["cancel_requested"]) == (
            "cancelled",
            0,
            True,
            False,
        )
        [row] = q.message_history(key, "k")
        assert row.outcome == "cancelled"
    assert sql.cancel(q.name, "ready", "k") == "unknown"
    assert sql.cancel(q.name, "never", "k") == "unknown"


def test_cancel_of_a_held_message_only_flags_it_for_its_holder(rq, sql):
    rq.push("a", "k", {})
    (r,) = rq.reserve(timeout=60)
    token, requested = sql.renew(rq.name, r)
    assert requested is False
    r = dataclasses.replace(r, token=token)
    assert sql.cancel(rq.name, "a", "k") == "requested"
    assert sql.cancel(rq.name, "a", "k") == "requested"  # idempotent
    got = sql.result(rq.name, "a", "k")
    assert (got["state"], got["cancel_requested"]) == ("reserved", True)
    assert sql.message_extras(rq.name, "a", "k") == (None, True)
    token, requested = sql.renew(rq.name, r)
    assert requested is True and token is not None and token != r.token
    # the holder may commit anyway: the commit wins, the request goes with the message
    assert bool(sql.one("queue_commit", rq.name, "a", "k", token))
    got = sql.result(rq.name, "a", "k")
    assert (got["state"], got["cancel_requested"]) == ("succeeded", False)


def test_a_cancel_request_outlives_a_rollback_and_the_next_cancel_removes_it(rq, sql):
    rq.push("a", "k", {})
    (r,) = rq.reserve(timeout=60)
    assert sql.cancel(rq.name, "a", "k") == "requested"
    assert rq.rollback(r, delay=3600)
    got = sql.result(rq.name, "a", "k")
    assert (got["state"], got["cancel_requested"]) == ("delayed", True)
    assert sql.cancel(rq.name, "a", "k") == "cancelled"
    assert sql.result(rq.name, "a", "k")["state"] == "cancelled"


def test_cancel_removes_a_message_whose_reservation_expired_and_frees_its_slot(rq, sql):
    rq.set_limit("k", 1)
    rq.push_many([("a", "k", {}), ("b", "k", {})])
    (r,) = rq.reserve(timeout=1)
    time.sleep(1.2)
    assert sql.result(rq.name, r.key, "k")["state"] == "ready"
    assert sql.cancel(rq.name, r.key, "k") == "cancelled"
    got = sql.result(rq.name, r.key, "k")
    assert (got["state"], got["attempts"]) == ("cancelled", 1)
    (other,) = rq.reserve(timeout=60)
    assert other.key != r.key
    assert rq.commit(r) is False  # the old holder's token went with the message


def test_cancel_of_a_group_head_moves_the_group_up_and_of_a_blocked_message_leaves_the_head(rq, sql):
    rq.push("first", "k", {}, group="g")
    rq.push("second", "k", {}, group="g")
    rq.push("third", "k", {}, group="g")
    assert sql.cancel(rq.name, "second", "k") == "cancelled"  # blocked behind the head
    assert sql.result(rq.name, "first", "k")["state"] == "ready"
    assert sql.cancel(rq.name, "first", "k") == "cancelled"
    assert sql.result(rq.name, "third", "k")["state"] == "ready"
    (r,) = rq.reserve(5, timeout=60)
    assert r.key == "third"


def test_an_occurrence_of_a_schedule_is_not_cancelled(rq, sql):
    """Its end would advance the schedule: queue_cancel refuses it, whoever calls, and the
    occurrence and its schedule stay as they are (an admin removes one with queue_remove)."""
    rq.schedule_every("tick", "k", {"n": 1}, dt.timedelta(hours=1))
    (pending,) = [m.key for m in rq.messages()]
    with _raises("is a schedule's occurrence: it is not cancelled"):
        sql.cancel(rq.name, pending, "k")
    assert sql.result(rq.name, pending, "k")["state"] == "delayed"
    assert [m.key for m in rq.messages()] == [pending]


def test_cancel_refuses_bad_arguments_and_an_unknown_queue(rq, sql):
    with _raises("does not exist"):
        sql.cancel(f"missing.{uuid.uuid4().hex[:8]}", "a", "k")
    with _raises("p_key"):
        sql.cancel(rq.name, "", "k")
    with _raises("p_kind"):
        sql.cancel(rq.name, "a", "k" * 129)


def test_cancel_works_on_a_queue_that_keeps_no_results(queue, sql):
    queue.push("a", "k", {})
    assert sql.cancel(queue.name, "a", "k") == "cancelled"
    assert queue.message("a", "k") is None
    assert sql.result(queue.name, "a", "k")["state"] == "unknown"


# -- queue_renew ----------------------------------------------------------------------


def test_renew_extends_the_reservation_with_a_new_token(rq, sql):
    rq.push("a", "k", {})
    (r,) = rq.reserve(timeout=60)
    token, requested = sql.renew(rq.name, r, timeout=600)
    assert token is not None and not requested
    info = rq.message("a", "k")
    assert info.state == "reserved"
    assert info.scheduled_at > dt.datetime.now(dt.timezone.utc) + dt.timedelta(seconds=500)
    assert sql.renew(rq.name, r) == (None, False)  # the old token stopped working
    with _raises("max_reservation"):
        sql("queue_renew", rq.name, "a", "k", token, sql.dur(13 * 3600))
    with _raises("timeout must be greater than zero"):
        sql("queue_renew", rq.name, "a", "k", token, sql.dur(0))
    with _raises("token is malformed"):
        sql("queue_renew", rq.name, "a", "k", "nope", None)
    assert bool(sql.one("queue_commit", rq.name, "a", "k", token))


# -- queue_cancel_held ----------------------------------------------------------------


def test_cancel_held_ends_the_reservation_as_cancelled_with_its_progress(make_queue, sql):
    q = make_queue(history_retention=dt.timedelta(days=1))
    sql.set_retention(q.name, DAY)
    q.push("a", "k", {})
    (r,) = q.reserve(timeout=60)
    assert sql.set_progress(q.name, r, {"done": 40})
    assert sql.cancel_held(q.name, r)
    assert q.message("a", "k") is None
    got = sql.result(q.name, "a", "k")
    assert (got["state"], got["progress"], got["attempts"], got["result"]) == (
        "cancelled",
        {"done": 40},
        1,
        None,
    )
    [row] = q.message_history("a", "k")
    assert row.outcome == "cancelled"
    assert sql.cancel_held(q.name, r) is False


def test_cancel_held_with_a_token_that_no_longer_holds_changes_nothing(rq, sql):
    rq.push("a", "k", {})
    (r,) = rq.reserve(timeout=60)
    assert rq.rollback(r)
    (again,) = rq.reserve(timeout=60)
    assert sql.cancel_held(rq.name, r) is False
    assert sql.result(rq.name, "a", "k")["state"] == "reserved"
    with _raises("token is malformed"):
        sql.cancel_held(rq.name, r, token="xyz")
    assert rq.commit(again)


def test_cancel_held_of_a_group_head_moves_the_group_up(rq, sql):
    rq.push("first", "k", {}, group="g")
    rq.push("second", "k", {}, group="g")
    (r,) = rq.reserve(5, timeout=60)
    assert sql.cancel_held(rq.name, r)
    (r,) = rq.reserve(5, timeout=60)
    assert r.key == "second"


# -- queue_set_progress ---------------------------------------------------------------


def test_progress_is_kept_across_retries_and_shown(rq, sql):
    rq.push("a", "k", {})
    (r,) = rq.reserve(timeout=60)
    assert sql.set_progress(rq.name, r, {"step": 1, "of": 3})
    assert sql.result(rq.name, "a", "k")["progress"] == {"step": 1, "of": 3}
    assert sql.message_extras(rq.name, "a", "k") == ({"step": 1, "of": 3}, False)
    assert rq.fail(r, "oops") == "retry"
    (r,) = rq.reserve(timeout=60)
    assert sql.result(rq.name, "a", "k")["progress"] == {"step": 1, "of": 3}
    assert sql.set_progress(rq.name, r, [2, "x"])
    assert rq.snooze(r)
    (r,) = rq.reserve(timeout=60)
    r = rq.extend(r, timeout=60)
    assert sql.result(rq.name, "a", "k")["progress"] == [2, "x"]
    assert sql.commit_result(rq.name, r, "ok")  # progress kept the token and the lease
    got = sql.result(rq.name, "a", "k")
    assert (got["state"], got["progress"], got["result"]) == ("succeeded", [2, "x"], "ok")
    rq.push("a", "k", {})  # a new push starts without
    assert sql.result(rq.name, "a", "k")["progress"] is None


def test_progress_null_clears_it_and_size_is_bounded(rq, sql):
    rq.push("a", "k", {})
    (r,) = rq.reserve(timeout=60)
    assert sql.set_progress(rq.name, r, 5)
    assert sql.set_progress(rq.name, r, None)
    assert sql.result(rq.name, "a", "k")["progress"] is None
    assert sql.set_progress(rq.name, r, "x" * 65534)  # 65536 bytes with its quotes
    with _raises("progress is 65537 bytes, more than 65536"):
        sql.set_progress(rq.name, r, "x" * 65535)
    assert sql.result(rq.name, "a", "k")["progress"] == "x" * 65534


def test_a_stale_holder_writes_no_progress(rq, sql):
    rq.push("a", "k", {})
    (r,) = rq.reserve(timeout=60)
    assert rq.rollback(r)
    assert sql.set_progress(rq.name, r, {"late": 1}) is False
    (again,) = rq.reserve(timeout=60)
    assert sql.set_progress(rq.name, r, {"late": 1}) is False
    assert sql.result(rq.name, "a", "k")["progress"] is None
    with _raises("does not exist"):
        sql.set_progress(f"missing.{uuid.uuid4().hex[:8]}", again, 1)
    with _raises("token is malformed"):
        sql.set_progress(rq.name, again, 1, token="zz")


# -- PostgreSQL: the uuid signatures --------------------------------------------------


@pytest.mark.only_dialect("postgresql")
def test_the_token_routines_take_the_token_as_a_uuid_too(rq, raw):
    rq.push_many([("a", "k", {}), ("b", "k", {}), ("c", "k", {})])
    held = {r.key: r for r in rq.reserve(3, timeout=60)}
    a, b, c = held["a"], held["b"], held["c"]
    assert raw("SELECT queue_set_progress(%s, 'a', 'k', %s::uuid, '{\"p\": 1}')", (rq.name, a.token)) == [
        (True,)
    ]
    [(token, requested)] = raw("SELECT * FROM queue_renew(%s, 'a', 'k', %s::uuid)", (rq.name, a.token))
    assert token is not None and requested is False
    assert raw("SELECT queue_commit_result(%s, 'a', 'k', %s::uuid, '[1]')", (rq.name, token)) == [(True,)]
    assert raw("SELECT queue_cancel_held(%s, 'b', 'k', %s::uuid)", (rq.name, b.token)) == [(True,)]
    assert raw("SELECT * FROM queue_renew(%s, 'c', 'k', %s::uuid, interval '60 seconds')", (rq.name, c.token))
    assert raw("SELECT state, result, progress FROM queue_result(%s, 'a', 'k')", (rq.name,)) == [
        ("succeeded", [1], {"p": 1})
    ]


# -- queue_commit_result_batch --------------------------------------------------------


def test_commit_result_batch_commits_each_with_its_result(rq, sql):
    rq.push_many([(f"m{i}", "k", {}) for i in range(4)])
    held = sorted(rq.reserve(4, timeout=60), key=lambda r: r.key)
    assert rq.rollback(held[3])  # its token no longer holds: skipped, not counted
    results = [{"i": 0}, None, [2, "é"], "three"]
    n = sql.commit_result_batch(
        rq.name, [r.key for r in held], [r.kind for r in held], [r.token for r in held], results
    )
    assert n == 3
    for r, expected in zip(held[:3], results[:3]):
        got = sql.result(rq.name, r.key, "k")
        assert (got["state"], got["result"]) == ("succeeded", expected)
    assert sql.result(rq.name, "m3", "k")["state"] == "ready"
    assert sql.commit_result_batch(rq.name, [], [], [], []) == 0


def test_commit_result_batch_refuses_bad_batches_and_changes_nothing(rq, queue, sql):
    rq.set_max_payload(20)
    rq.push_many([("a", "k", {}), ("b", "k", {})])
    a, b = sorted(rq.reserve(2, timeout=60), key=lambda r: r.key)
    keys, kinds, tokens = ["a", "b"], ["k", "k"], [a.token, b.token]
    for args, match in [
        ((keys, kinds, tokens, [1]), "same length"),
        ((keys, ["k"], tokens, [1, 2]), "same length"),
        ((keys, kinds, [a.token, "nope"], [1, 2]), "element 2"),
        ((["a", ""], kinds, tokens, [1, 2]), "element 2"),
        ((keys, kinds, tokens, [1, "x" * 30]), "result is 32 bytes, more than the queue's max_payload of 20"),
    ]:
        with _raises(match):
            sql.commit_result_batch(rq.name, *args)
    with _raises("must not be NULL"):
        sql(
            "queue_commit_result_batch",
            rq.name,
            sql.array(keys),
            sql.array(kinds),
            sql.array(tokens),
            None,
            casts=(None, "::text[]", "::text[]", "::text[]", "::jsonb[]"),
        )
    assert {sql.result(rq.name, k, "k")["state"] for k in keys} == {"reserved"}
    queue.push("c", "k", {})
    (c,) = queue.reserve(timeout=60)
    with _raises("keeps no results"):
        sql.commit_result_batch(queue.name, ["c"], ["k"], [c.token], [1])
    assert queue.message("c", "k").state == "reserved"
    assert sql.commit_result_batch(rq.name, keys, kinds, tokens, [1, None]) == 2


# -- queue_result_wait ----------------------------------------------------------------


def test_result_wait_returns_at_once_for_a_final_or_unknown_state(rq, sql):
    rq.push("a", "k", {})
    (r,) = rq.reserve(timeout=60)
    assert sql.commit_result(rq.name, r, {"ok": True})
    started = time.monotonic()
    assert sql.result_wait(rq.name, "a", "k", 30)["result"] == {"ok": True}
    assert sql.result_wait(rq.name, "nobody", "k", 30)["state"] == "unknown"
    assert time.monotonic() - started < 5


def test_result_wait_returns_the_live_state_at_its_timeout(rq, sql):
    rq.push("a", "k", {})
    started = time.monotonic()
    got = sql.result_wait(rq.name, "a", "k", 0.3)
    assert 0.25 < time.monotonic() - started < 5
    assert (got["state"], got["finished"]) == ("ready", False)


def test_result_wait_sees_a_commit_made_while_it_waits(rq, sql, connect):
    rq.push("a", "k", {})
    (r,) = rq.reserve(timeout=60)
    other = connect().queue(rq.name)

    def commit_later():
        time.sleep(0.5)
        other.commit(r)

    worker = threading.Thread(target=commit_later)
    worker.start()
    started = time.monotonic()
    got = sql.result_wait(rq.name, "a", "k", 20)
    worker.join()
    assert got["state"] == "succeeded"
    assert time.monotonic() - started < 10


def test_result_wait_refuses_bad_timeouts_and_an_unknown_queue(rq, sql):
    for seconds, match in [(0, "greater than zero"), (-1, "negative"), (3601, "1 hour")]:
        with _raises(match):
            sql.result_wait(rq.name, "a", "k", seconds)
    with _raises("does not exist"):
        sql.result_wait(f"missing.{uuid.uuid4().hex[:8]}", "a", "k", 1)
    assert sql.result_wait(rq.name, "a", "k", None)["state"] == "unknown"  # NULL: 1 second


# -- queue_result_channel -------------------------------------------------------------


def test_result_channel_is_fixed_by_the_queue_name(rq, sql):
    first = sql.one("queue_result_channel", rq.name)
    assert sql.one("queue_result_channel", rq.name) == first
    with _raises("does not exist"):
        sql.one("queue_result_channel", f"missing.{uuid.uuid4().hex[:8]}")


@pytest.mark.only_dialect("postgresql")
def test_each_finished_result_is_notified_on_the_result_channel(rq, make_queue, dsn, sql):
    plain = make_queue()
    channel = sql.one("queue_result_channel", rq.name)
    assert channel != sql.one("queue_result_channel", plain.name)
    assert channel != sql.one("queue_channel", rq.name)
    listener = dialects.for_dsn(dsn).connect(dsn)
    try:
        listener.execute(f'LISTEN "{channel}"')
        rq.set_notify_window(dt.timedelta(hours=1))  # results are never throttled like wakeups
        rq.push_many([(f"m{i}", "k", {}) for i in range(4)])
        held = sorted(rq.reserve(3, timeout=60), key=lambda r: r.key)
        assert sql.commit_result(rq.name, held[0], 1)
        assert sql.cancel_held(rq.name, held[1])
        assert rq.give_up(held[2], "no") == "dropped"
        assert sql.cancel(rq.name, "m3", "k") == "cancelled"
        seen = [json.loads(n.payload) for n in listener.notifies(timeout=2, stop_after=4)]
        assert seen == [
            {"key": "m0", "kind": "k", "state": "succeeded"},
            {"key": "m1", "kind": "k", "state": "cancelled"},
            {"key": "m2", "kind": "k", "state": "failed"},
            {"key": "m3", "kind": "k", "state": "cancelled"},
        ]
    finally:
        listener.close()


# -- queue_purge_history --------------------------------------------------------------


def test_purge_deletes_results_past_their_retention_and_of_queues_that_keep_none(make_queue, sql):
    q = make_queue()
    sql.set_retention(q.name, 3600)
    off = make_queue()
    sql.set_retention(off.name, 3600)
    for queue in (q, off):
        queue.push_many([(f"m{i}", "k", {}) for i in range(3)])
        assert queue.commit_many(queue.reserve(3, timeout=60)) == 3
    sql.age_results(q.name, 7200)
    q.push("fresh", "k", {})
    assert q.commit(q.reserve(timeout=60)[0])
    sql.set_retention(off.name, None)
    assert sql.one("queue_purge_history", q.name, 2) == 2  # history rows and result rows together
    assert sql.one("queue_purge_history", q.name, None) == 1
    assert sql.one("queue_purge_history", q.name, None) == 0
    assert sql.result(q.name, "fresh", "k")["state"] == "succeeded"
    assert {sql.result(q.name, f"m{i}", "k")["state"] for i in range(3)} == {"unknown"}
    assert sql.result(off.name, "m0", "k")["state"] == "succeeded"
    assert sql.one("queue_purge_history", off.name, None) == 3
    assert sql.result(off.name, "m0", "k")["state"] == "unknown"


# -- concurrency ----------------------------------------------------------------------


def _race(*calls):
    """Runs the calls at once, each in its own thread, and returns their results."""
    barrier = threading.Barrier(len(calls))
    out: list = [None] * len(calls)

    def run(i, call):
        barrier.wait()
        try:
            out[i] = call()
        except Exception as exc:  # noqa: BLE001 - returned for the assertion
            out[i] = exc

    threads = [threading.Thread(target=run, args=(i, c)) for i, c in enumerate(calls)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return out


def test_cancel_racing_a_reserve_either_flags_it_or_removes_it_never_both(rq, connect, dialect):
    a, b = Sql(_raw_of(connect()), dialect), connect().queue(rq.name)
    for i in range(15):
        key = f"m{i}"
        rq.push(key, "k", {})
        cancelled, reserved = _race(lambda: a.cancel(rq.name, key, "k"), lambda: b.reserve(timeout=60))
        assert not isinstance(cancelled, Exception) and not isinstance(reserved, Exception), (
            cancelled,
            reserved,
        )
        if cancelled == "cancelled":
            assert reserved == []
            assert a.result(rq.name, key, "k")["state"] == "cancelled"
        else:
            assert cancelled == "requested" and [r.key for r in reserved] == [key]
            got = a.result(rq.name, key, "k")
            assert (got["state"], got["cancel_requested"]) == ("reserved", True)
            assert b.commit(reserved[0])


def test_cancel_racing_a_commit_never_removes_a_held_message(rq, connect, dialect):
    a, b = Sql(_raw_of(connect()), dialect), Sql(_raw_of(connect()), dialect)
    for i in range(15):
        key = f"m{i}"
        rq.push(key, "k", {})
        (r,) = rq.reserve(timeout=60)
        cancelled, committed = _race(
            lambda: a.cancel(rq.name, key, "k"), lambda: b.commit_result(rq.name, r, i)
        )
        assert committed is True and cancelled in ("requested", "unknown"), (cancelled, committed)
        got = a.result(rq.name, key, "k")
        assert (got["state"], got["result"]) == ("succeeded", i)


def test_a_result_is_never_read_torn(rq, connect, dialect):
    reader = Sql(_raw_of(connect()), dialect)
    writer = Sql(_raw_of(connect()), dialect)
    rq.push_many([(f"m{i}", "k", {}) for i in range(20)])
    held = rq.reserve(20, timeout=60)
    done = threading.Event()
    bad: list = []

    def read():
        while not done.is_set():
            for r in held:
                got = reader.result(rq.name, r.key, "k")
                if got["state"] == "succeeded" and got["result"] != {"key": r.key}:
                    bad.append(got)
                if got["state"] not in ("reserved", "succeeded"):
                    bad.append(got)

    thread = threading.Thread(target=read)
    thread.start()
    try:
        for r in held:
            assert writer.commit_result(rq.name, r, {"key": r.key})
    finally:
        done.set()
        thread.join()
    assert bad == []


def _raw_of(db):
    """A raw-SQL runner on a client's own connection (as the raw fixture is on db's)."""
    return lambda statement, params=None: plainsql.run(db.connection, statement, params)


# -- PostgreSQL: the reads go by index ------------------------------------------------


@pytest.mark.only_dialect("postgresql")
def test_result_reads_cancel_and_purge_read_their_indexes(installed_database):
    """On tables never analyzed (the planner has only its guesses), with 20,000 live messages and
    20,000 results in ten queues: queue_result, queue_cancel, queue_set_progress and
    queue_commit_result find their rows by key, and queue_purge_history reads the results of each
    queue through its index (one queue's purge never reads the other queues' names). auto_explain
    shows the statements the routines ran, with their actual rows."""
    from .test_reserve_plans import _analyzed_plans, _run

    dsn = installed_database("results_plans")
    conn = dialects.for_dsn(dsn).connect(dsn)
    try:
        for i in range(10):
            name = f"rp.{i}"
            _run(conn, f"SELECT queue_create('{name}')")
            _run(conn, f"SELECT queue_set_result_retention('{name}', interval '1 day')")
            _run(
                conn,
                f"SELECT queue_push_batch('{name}', array_agg('k' || g), array_agg('kind'::text), array_agg('{{}}'::jsonb))"
                " FROM generate_series(1, 4000) g",
            )
            _run(conn, f"SELECT count(*) FROM queue_pop('{name}', 2000)")
        (row,), _ = _run(conn, "SELECT p_key, token FROM queue_reserve('rp.5', 'w', NULL, 1)")
        held_key, token = row
        calls = [
            "SELECT * FROM queue_result('rp.5', 'k1', 'kind')",  # a stored result
            "SELECT * FROM queue_result('rp.5', 'k3999', 'kind')",  # a live message
            "SELECT * FROM queue_result('rp.5', 'nobody', 'kind')",
            f"SELECT queue_set_progress('rp.5', '{held_key}', 'kind', '{token}', '1')",
            f"SELECT queue_cancel('rp.5', '{held_key}', 'kind')",
            "SELECT queue_cancel('rp.5', 'k3998', 'kind')",
            f"SELECT queue_commit_result('rp.5', '{held_key}', 'kind', '{token}', '2')",
            "SELECT queue_purge_history('rp.5', 10)",
            "SELECT queue_purge_history(NULL, 10)",
        ]
        _run(
            conn, "UPDATE pyqueue_result SET finished_at = finished_at - interval '2 days' WHERE p_key = 'k7'"
        )
        for call in calls:
            _, plans = _analyzed_plans(conn, call)
            assert plans, call
            for plan in plans:
                assert not re.search(r"Seq Scan on pyqueue_(result|message) ", plan), f"{call}:\n{plan}"
                for m in re.finditer(
                    r"on pyqueue_(?:result|message) \w+ .*actual time=\S+ rows=(\d+) loops=(\d+)", plan
                ):
                    assert int(m.group(1)) <= 20, f"{call} read {m.group(1)} rows:\n{plan}"
                for m in re.finditer(r"Rows Removed by Filter: (\d+)", plan):
                    assert int(m.group(1)) <= 20, f"{call} read and dropped {m.group(1)} rows:\n{plan}"
        assert _run(conn, "SELECT state FROM queue_result('rp.3', 'k7', 'kind')")[0] == [("unknown",)]
    finally:
        conn.close()


# -- queue_results ------------------------------------------------------------------------


def test_results_lists_outcomes_newest_first_by_kind_and_state_in_pages(make_queue, sql, dialect):
    q = make_queue(max_attempts=1)
    sql.set_retention(q.name, DAY)
    q.push_many([(f"a{i}", "send", {}) for i in range(3)] + [("b0", "bill", {}), ("c0", "send", {})])
    [a0] = q.reserve(1, timeout=60)
    assert q.commit(a0)  # first
    assert q.fail(q.reserve(1, timeout=60)[0], "boom") == "dropped"  # a1 failed
    assert q.commit_many(q.reserve(2, timeout=60)) == 2  # a2 and b0
    assert sql.cancel(q.name, "c0", "send") == "cancelled"  # last
    q.push("live", "send", {})  # live: not listed

    # a2 and b0 finished at one instant (as the rows of one batch commit may)
    at = {r.key: r.finished_at for r in q.results()}["b0"]
    sql.raw(
        "UPDATE pyqueue_result SET finished_at = %s WHERE queue_name = %s AND p_key = 'a2'",
        (at if dialect == "postgresql" else at.replace(tzinfo=None), q.name),
    )
    every = q.results()
    assert [(r.key, r.state) for r in every] == [
        ("c0", "cancelled"),
        ("a2", "succeeded"),
        ("b0", "succeeded"),
        ("a1", "failed"),
        ("a0", "succeeded"),
    ]
    assert every[3].last_error == "boom" and every[3].attempts == 1 and every[3].kind == "send"
    assert every[1].finished_at == every[2].finished_at  # the batch's one instant
    assert [r.key for r in q.results(kind="send", state="succeeded")] == ["a2", "a0"]
    assert [r.key for r in q.results(state="failed")] == ["a1"]

    # pages: the next one from the last row's finished_at; the batch's two rows are never split
    first = q.results(n=2)
    assert [r.key for r in first] == ["c0", "a2", "b0"]  # the tie comes with the second row
    second = q.results(n=2, before=first[-1].finished_at)
    assert [r.key for r in second] == ["a1", "a0"]
    assert q.results(n=2, before=second[-1].finished_at) == []

    # the same through plain SQL, with the routine's own checks
    rows = sql("queue_results", q.name, "send", "failed", 10, None)
    assert [(r[0], r[1], r[2], r[4], r[5]) for r in rows] == [("a1", "send", "failed", "boom", 1)]
    for args, match in (
        (("send", "done", None, None), "state must be succeeded, failed or cancelled"),
        ((None, None, 0, None), "n must be 1 to 1000"),
        ((None, None, 1001, None), "n must be 1 to 1000"),
        (("", None, None, None), "p_kind"),
    ):
        with _raises(match):
            sql("queue_results", q.name, *args)
    with _raises("does not exist"):
        sql("queue_results", "no.such.queue", None, None, None, None)


# -- queue_purge_results ------------------------------------------------------------------


def test_purge_results_deletes_outcomes_of_a_state_finished_before_a_time_oldest_first(make_queue, sql):
    q = make_queue(max_attempts=1)
    sql.set_retention(q.name, DAY)
    for key in ("ok1", "bad1", "ok2", "bad2"):
        q.push(key, "k", {})
        [r] = q.reserve()
        if key.startswith("bad"):
            assert q.fail(r, "boom") == "dropped"
        else:
            assert q.commit(r)
    q.push("live", "k", {})
    at = {r.key: r.finished_at for r in q.results()}

    assert q.purge_results(state="failed", before=at["bad2"]) == 1  # bad1 only: bad2 is not before itself
    assert [r.key for r in q.results()] == ["bad2", "ok2", "ok1"]
    assert q.purge_results(state="succeeded", n=1) == 1  # the oldest first
    assert [r.key for r in q.results()] == ["bad2", "ok2"]
    assert q.purge_results() == 2
    assert q.results() == [] and q.result("live", "k").state == "ready"
    assert q.purge_results() == 0

    # through plain SQL, with the routine's own checks
    assert sql.one("queue_purge_results", q.name, None, None, 5) == 0
    for args, match in (
        (("done", None, None), "state must be succeeded, failed or cancelled"),
        ((None, None, 0), "n must be 1 to 100000"),
    ):
        with _raises(match):
            sql("queue_purge_results", q.name, *args)
    with _raises("does not exist"):
        sql("queue_purge_results", "no.such.queue", None, None, None)
