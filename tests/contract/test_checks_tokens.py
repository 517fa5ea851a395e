"""A token that no longer holds changes nothing, locks nothing: the routines' token checks shown
with real connections where they are not redundant (a caller's transaction, a snapshot older than
the reservation, a fast path that skips the general one). Each test kills mutants of
bench/mutants.jsonl that drop a token check (docs/reliability.md, "The whole contract's model and
its mutants")."""

from __future__ import annotations

import time
import uuid

import pytest

from ..helpers import RELEASE_AFTER, silence_worker
from .lock_sessions import call_that_waits, unique


def test_commit_reserve_with_a_token_that_does_not_hold_commits_nothing(sessions):
    """queue_commit_reserve on a queue without history or results (its short way: one DELETE):
    a token that is not the reservation's commits nothing; the holder still commits it."""
    (s,) = sessions(1)
    q = unique("cr")
    s.create(q)
    s.push(q, "m")
    ((key, kind, token),) = s.reserve(q)
    rows = s.call("queue_commit_reserve", q, key, kind, str(uuid.uuid4()), "w", None, 1, None)
    if s.pg:
        assert rows == [(False,) + (None,) * 9]  # committed: false, nothing reserved
    assert s.keys(q) == {"m": "reserved"}
    assert s.one("queue_commit", q, key, kind, token)


def test_an_extend_with_a_token_that_does_not_hold_locks_no_slot(sessions):
    """A kind with a concurrency limit: an extend with a token that is not the reservation's
    answers NULL and, inside the caller's transaction, holds no lock: the holder's own extend
    goes through at once (it would time out waiting for a slot the stale call locked)."""
    stale, holder = sessions(2)
    q = unique("extlim")
    holder.create(q)
    holder.call("queue_set_limit", q, "k", 1)
    holder.push(q, "m")
    ((key, kind, token),) = holder.reserve(q)
    holder.lock_timeout()
    stale.begin()
    assert stale.one("queue_extend", q, key, kind, str(uuid.uuid4()), None) is None
    assert holder.one("queue_extend", q, key, kind, token, None) is not None
    stale.rollback()


def test_releasing_dead_workers_with_an_old_snapshot_leaves_a_live_reservation_alone(sessions, dialect):
    """A worker whose heartbeat went stale handed its message back (rollback) and a live consumer
    took it. A queue_release_dead_workers whose snapshot (a REPEATABLE READ transaction of the
    caller, begun before) still shows the stale worker holding it must not release the live
    consumer's reservation: it leaves it alone, or is refused (PostgreSQL: a serialization
    failure, 40001, for the caller to retry)."""
    admin, caller, live = sessions(3)
    q = unique("dead")
    admin.create(q)
    admin.push(q, "m")
    ((worker_id, _secret),) = admin.call("queue_worker_register", "stale", None, None, None)
    silence_worker(admin.conn, admin.dialect, worker_id)  # stale: its heartbeat an hour old
    ((key, kind, stale_token),) = admin.reserve(q, worker=f"stale#{worker_id}")
    if caller.pg:
        caller.sql("BEGIN ISOLATION LEVEL REPEATABLE READ")
        caller.sql("SELECT count(*) FROM pyqueue_message")  # the snapshot
    else:
        caller.sql("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ")
        caller.sql("START TRANSACTION WITH CONSISTENT SNAPSHOT")
    assert admin.one("queue_rollback", q, key, kind, stale_token, None) in (True, 1)
    ((_, _, token),) = live.reserve(q, worker="live")
    try:
        caller.call("queue_release_dead_workers", caller.dur(RELEASE_AFTER))
        caller.sql("COMMIT")
    except Exception as exc:  # noqa: BLE001 - PostgreSQL refuses the stale snapshot's update
        caller.rollback()
        assert dialect == "postgresql" and getattr(exc, "sqlstate", None) == "40001", exc
    assert live.keys(q) == {"m": "reserved"}
    assert live.one("queue_commit", q, key, kind, token)


# every call that ends or moves a held message outside a group: queue_commit_reserve, queue_cancel_held
# (a queue without results) and queue_commit_batch read the token with no lock of their own before the
# schedule advances; queue_commit_result (a queue that keeps results) under the message's lock
SETTLES = ["queue_commit", "queue_move", "queue_commit_reserve", "queue_commit_result", "queue_cancel_held",
           "queue_commit_batch"]  # fmt: skip


@pytest.mark.parametrize("routine", SETTLES)
def test_an_occurrence_taken_over_while_its_old_holder_settles_it_pushes_no_next_one(sessions, routine):
    """A schedule's occurrence whose reservation expired: a reserver takes it over (its transaction
    still open, holding the row) while the old holder commits, moves, cancels or batch-commits it.
    The holder's call waits, then finds its token gone: false (nothing committed), and it pushes no
    next occurrence (the schedule is unchanged, docs/contract/17_schedules.md: a stale call pushes
    nothing; the occurrence is still the pending one). The taker's commit then pushes the next one.
    (MySQL/MariaDB read the message without a lock, pushed the next occurrence and only then found
    the token gone at their write.)"""
    admin, taker, holder = sessions(3)
    q, to = unique("occ"), unique("occto")
    admin.create(q)
    admin.create(to)
    if routine == "queue_commit_result":
        admin.call("queue_set_result_retention", q, admin.dur(3600))
    admin.call("queue_schedule_every", q, "tick", "k", "{}", admin.dur(1), casts=("", "", "", "::jsonb", ""))
    deadline = time.monotonic() + 5
    while not (got := admin.reserve(q, timeout=0.2)):  # the first occurrence, due within a second
        assert time.monotonic() < deadline, "the occurrence never came due"
        time.sleep(0.1)
    ((key, kind, stale),) = got
    time.sleep(0.4)  # its reservation expires
    taker.begin()
    ((key2, _, token),) = taker.reserve(q, timeout=600)
    assert key2 == key
    target, args, casts = holder.one, (q, key, kind, stale), ()
    if routine == "queue_move":
        args += (to, None)
    elif routine == "queue_commit_result":
        args, casts = args + ('{"n": 1}',), ("", "", "", "", "::jsonb")
    elif routine == "queue_commit_reserve":  # it reserves nothing after (the only message is the taker's)
        target, args = holder.call, args + ("w", None, 1, None)
    elif routine == "queue_commit_batch":
        args = (q, holder.array([key]), holder.array([kind]), holder.array([stale]))
    call = call_that_waits(admin, holder, lambda *a: target(*a, casts=casts), routine, *args)
    taker.commit()
    done = call.join()
    if routine == "queue_commit_reserve":  # PostgreSQL: (committed, ...); MySQL/MariaDB: no row reserved
        done = done[0][0] if holder.pg else None
    assert not done
    assert holder.keys(q) == {key: "reserved"}, "the stale call pushed the next occurrence"
    assert holder.keys(to) == {}
    assert holder.one("queue_commit", q, key, kind, token)
    assert [k for k in holder.keys(q) if k.startswith("tick@")] != [], "the chain ended"
