"""What the routines' row locks are for, each shown with real connections: a reserver never waits
for a row another transaction holds (SKIP LOCKED: the call returns at once, with what nobody
holds; it would fail with a lock wait timeout if it waited), and where the contract has a call
wait for another's transaction, it does (seen waiting from a third session), with the outcome
that waiting gives. Each test kills mutants of bench/mutants.jsonl that drop a SKIP LOCKED or a
lock (docs/reliability.md, "The whole contract's model and its mutants")."""

from __future__ import annotations

import datetime as dt
import json

import pytest

from .lock_sessions import Session, call_that_waits, unique


@pytest.fixture
def sessions(dsn):
    opened: list[Session] = []

    def make(n: int) -> list[Session]:
        new = [Session(dsn) for _ in range(n)]
        opened.extend(new)
        return new

    yield make
    for s in opened:
        s.close()


def now() -> dt.datetime:
    return dt.datetime.now(dt.timezone.utc).replace(tzinfo=None)


# ---- reservers skip what another transaction holds ----------------------------------------------


@pytest.mark.parametrize("priority", [0, 1])
def test_a_reserve_skips_the_messages_a_transaction_holds(sessions, priority):
    """A consumer's reserve inside its own transaction holds its messages until it ends; another
    consumer's reserve takes the next ones at once (priority 0 only, and a queue with priorities
    above it, which MySQL/MariaDB reserve by another way)."""
    holder, other = sessions(2)
    q = unique("skip")
    holder.create(q)
    for i in range(4):
        holder.push(q, f"m{i}", priority=priority)
    other.lock_timeout()
    holder.begin()
    assert [r[0] for r in holder.reserve(q, 2)] == ["m0", "m1"]
    assert [r[0] for r in other.reserve(q, 2)] == ["m2", "m3"]
    holder.rollback()


def test_a_reserve_past_many_priorities_with_nothing_ready_skips_what_a_transaction_holds(sessions):
    """Past eight priorities with nothing ready (their messages are delayed) a reserve reads the
    ready rows of the lower ones in one sorted read; it skips a row another transaction holds
    there too."""
    holder, other = sessions(2)
    q = unique("skipdeep")
    holder.create(q)
    later = now() + dt.timedelta(hours=1)
    for p in range(10, 1, -1):
        holder.push(q, f"later{p}", run_at=later, priority=p)
    holder.push(q, "a", priority=1)
    holder.push(q, "b", priority=1)
    other.lock_timeout()
    holder.begin()
    assert [r[0] for r in holder.reserve(q)] == ["a"]
    assert [r[0] for r in other.reserve(q)] == ["b"]
    holder.rollback()


@pytest.mark.parametrize("history", [False, True])
def test_a_redrive_skips_the_dead_letters_a_transaction_holds(sessions, history):
    """A consumer of the dead-letter queue holds one dead letter in its transaction; a redrive
    moves the next one at once (from a queue that keeps history too, which archives each move)."""
    holder, other = sessions(2)
    dead, to = unique("dead"), unique("to")
    holder.create(dead, history=86400 if history else None)
    holder.create(to)
    holder.push(dead, "d0")
    holder.push(dead, "d1")
    other.lock_timeout()
    holder.begin()
    assert [r[0] for r in holder.reserve(dead)] == ["d0"]
    assert other.one("queue_redrive", dead, to, 1) == 1
    assert other.keys(to) == {"d1": "ready"}
    holder.rollback()


def test_a_reserve_of_a_rate_limited_kind_skips_the_unit_a_transaction_is_taking(sessions):
    """Two units of a rate per hour: a reserve inside a transaction takes one (its slot locked
    until it ends); another consumer's reserve takes the other at once."""
    holder, other = sessions(2)
    q = unique("skiprate")
    holder.create(q)
    holder.call("queue_set_rate", q, "k", 2, holder.dur(3600))
    holder.push(q, "m0")
    holder.push(q, "m1")
    other.lock_timeout()
    holder.begin()
    assert [r[0] for r in holder.reserve(q)] == ["m0"]
    assert [r[0] for r in other.reserve(q)] == ["m1"]
    holder.rollback()


def test_a_push_into_a_full_group_waits_for_no_head_a_transaction_is_reserving(sessions):
    """A group of limit 1 whose head, never delivered, is being reserved by an open transaction:
    a push with an earlier run time into that group would take the head's place, but the head is
    locked, so the push leaves it (it is being delivered) and returns at once, its message
    blocked behind it."""
    holder, other = sessions(2)
    q = unique("skipgroup")
    holder.create(q)
    holder.call("queue_set_group_limit", q, "g", 1)
    holder.push_grouped(q, "g", "head", run_at=now() - dt.timedelta(minutes=1))
    other.lock_timeout()
    holder.begin()
    assert [r[0] for r in holder.reserve(q)] == ["head"]
    assert other.push_grouped(q, "g", "earlier", run_at=now() - dt.timedelta(hours=1))
    holder.sql("COMMIT")
    assert holder.keys(q) == {"head": "reserved", "earlier": "delayed"}


@pytest.mark.only_dialect("mysql")
def test_a_pop_of_a_group_head_waits_for_no_push_into_its_group(sessions):
    """A producer's transaction pushed into a group (it holds the group's row until it ends): a
    MySQL/MariaDB pop returns at once, leaving the group's head for later (it cannot hand the
    head's place on now) or taking it. (A PostgreSQL pop of a head waits for the group's row, as
    its queue_pop says: "then the group's row is locked too".)"""
    holder, other = sessions(2)
    q = unique("popgroup")
    holder.create(q)
    holder.push_grouped(q, "g", "head")
    other.lock_timeout()
    holder.begin()
    assert holder.push_grouped(q, "g", "next")
    popped = other.pop(q)
    holder.sql("COMMIT")
    assert popped in ([], ["head"])


@pytest.mark.only_dialect("mysql")  # a PostgreSQL pop of a head waits for the group's row (its queue_pop)
def test_a_pop_of_a_group_head_waits_for_no_other_pop_of_that_group(sessions):
    """A group of limit 2, both heads ready: a consumer pops one inside its transaction (its place
    is handed on under the group's row, held until the transaction ends); another consumer's pop
    returns at once, with the other head or nothing."""
    holder, other = sessions(2)
    q = unique("popgroup2")
    holder.create(q)
    holder.call("queue_set_group_limit", q, "g", 2)
    holder.push_grouped(q, "g", "h1")
    holder.push_grouped(q, "g", "h2")
    holder.push_grouped(q, "g", "h3")
    other.lock_timeout()
    holder.begin()
    assert holder.pop(q) == ["h1"]
    assert other.pop(q) in ([], ["h2"])
    holder.sql("COMMIT")


@pytest.mark.only_dialect("mysql")  # a PostgreSQL pop of a head waits for the group's row (its queue_pop)
def test_a_pop_of_a_second_head_waits_for_no_push_into_its_group(sessions):
    """A group of limit 2, both heads ready; a producer's transaction pushes a third message
    into it (the group's row held until it ends): a pop returns at once, with the second head
    or nothing."""
    holder, other = sessions(2)
    q = unique("popgroup3")
    holder.create(q)
    holder.call("queue_set_group_limit", q, "g", 2)
    holder.push_grouped(q, "g", "h1")
    holder.push_grouped(q, "g", "h2")
    other.lock_timeout()
    holder.begin()
    assert holder.push_grouped(q, "g", "h3")
    assert other.pop(q) in ([], ["h2"])
    holder.sql("COMMIT")


# ---- calls that wait for another transaction, and what that waiting gives -----------------------


def test_a_visibility_timeout_set_while_max_reservation_is_lowered_is_refused_as_invalid(
    sessions, dialect, request
):
    """queue_create with a visibility_timeout checks it against the queue's max_reservation under
    the queue row's lock: while another transaction lowers max_reservation below it, the call
    waits for that transaction and then refuses it as the contract says (invalid_argument), not
    by the table's CHECK constraint that an unlocked read would run into. MySQL/MariaDB read
    max_reservation unlocked: the race ends in the constraint's error (4025)."""
    if dialect == "mysql":
        request.applymarker(
            pytest.mark.xfail(strict=True, reason="MySQL/MariaDB queue_create reads max_reservation unlocked")
        )
    holder, other, watcher = sessions(3)
    q = unique("maxres")
    holder.create(q)
    holder.begin()
    holder.call("queue_set_max_reservation", q, holder.dur(60))
    call = call_that_waits(watcher, other, other.create, q, 600)
    holder.sql("COMMIT")
    with pytest.raises(Exception, match="pyqueue:invalid_argument: visibility_timeout"):
        call.join()
    ((vis, most),) = [(r[1], r[7]) for r in holder.call("queue_settings", q)]  # (visibility, max_reservation)
    assert (vis, most) == (holder.dur(30), holder.dur(60))


def test_schedules_replaced_at_once_leave_one_pending_occurrence(sessions, dialect, request):
    """Two sessions replace one schedule at once: the second waits for the first (the schedule
    row's lock), then replaces what the first wrote, its pending occurrence included: one
    occurrence stays, of the schedule that won. MySQL/MariaDB read the schedule without a lock
    (each statement locks for itself): the second removes the occurrence it read before the
    first committed, and the first's stays beside its own."""
    if dialect == "mysql":
        request.applymarker(
            pytest.mark.xfail(
                strict=True, reason="MySQL/MariaDB pyqueue__schedule reads the replaced schedule unlocked"
            )
        )
    holder, other, watcher = sessions(3)
    q = unique("sched")
    holder.create(q)

    def every(s: Session, payload: dict, seconds: int):
        return s.call("queue_schedule_every", q, "tick", "k", json.dumps(payload), s.dur(seconds),
                      casts=("", "", "", "::jsonb", ""))  # fmt: skip

    every(holder, {"v": 1}, 3600)
    holder.begin()
    every(holder, {"v": 2}, 3599)
    call = call_that_waits(watcher, other, every, other, {"v": 3}, 3601)
    holder.sql("COMMIT")
    call.join()
    pending = [k for k in holder.keys(q) if k.startswith("tick@")]
    assert len(pending) == 1, pending
    ((payload,),) = [(r[3],) for r in holder.call("queue_schedules", q)]
    assert holder.json_out(payload) == {"v": 3}
