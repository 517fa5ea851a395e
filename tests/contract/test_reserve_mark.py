"""A batch reserve's mark (docs/contract/05_reserve.md): a session's batch reserve (n >= 2) reads
from the first candidate its last one found, not from the queue's start (PostgreSQL: its bound),
over the entries a held snapshot keeps; from the start again when fewer than n turn up there, or
once 20 times the last read from the start has passed after it (at most 60 s). Each test shows one
part of that with real sessions in autocommit mode; the model's rule `reserve_twice_past_the_mark`
(tests/concurrency/test_model.py) and two tests elsewhere (test_reserve.py, test_checks_locks.py:
a message ready before the mark, a message held during the read) do the rest. They kill the
mark's mutants of bench/mutants.jsonl (docs/reliability.md)."""

from __future__ import annotations

import datetime as dt

from tests.plainsql import MARK_AHEAD, MARK_DUE, MARK_PASSED

from .lock_sessions import Session, unique


def _late_push(writer: Session, other: Session, q: str, after: int, priority: int | None = None) -> None:
    """A push ("late", of `priority`) in writer's open transaction, then `after` pushes m0, m1, ...
    by other, each committed at once: late is before them in reserve order (of one priority), and
    invisible until writer commits.
    (The queue's wakeup row is made first: a push inserts it once, and the pushes after would wait
    for the open transaction's insert.)"""
    writer.create(q)
    writer.push(q, "warm")
    assert writer.pop(q) == ["warm"]
    writer.begin()
    writer.push(q, "late", priority=priority)
    for i in range(after):
        other.push(q, f"m{i}")
    other.lock_timeout()


def _marked_past_a_late_push(sessions, name: str, after: int, priority: int | None = None):
    """_late_push, then other's batch reserve of 2 (m0, m1: its mark at m0, past late), then
    writer's commit, the mark kept live (5 s). Returns other and the queue."""
    writer, other = sessions(2)
    q = unique(name)
    _late_push(writer, other, q, after, priority)
    assert [r[0] for r in other.reserve(q, 2)] == ["m0", "m1"]
    writer.commit()
    other.keep_mark(q)
    return other, q


def test_a_batch_reserve_finding_fewer_than_n_past_its_mark_takes_a_push_committed_late(sessions):
    """The session's batch reserve before that commit did not see the late push, and set its mark
    past it (its first candidate, m0). The next batch reserve of the session finds fewer than n
    from the mark (m2, m3), reads from the queue's start (PostgreSQL: from its bound, which stays
    below a transaction open while it would move) and takes the late one first."""
    other, q = _marked_past_a_late_push(sessions, "latemark", 4)
    assert [r[0] for r in other.reserve(q, 5)] == ["late", "m2", "m3"]


def test_a_batch_reserve_reads_from_its_mark_until_its_time_is_up(sessions):
    """While the mark is live and n turn up after it, a message ready before the mark (a push
    committed late) waits: the batch reserve takes m2, m3 after the mark. Once the mark's time is
    up, the next batch reserve reads from the start and takes the late one first."""
    other, q = _marked_past_a_late_push(sessions, "marktime", 6)
    assert [r[0] for r in other.reserve(q, 2)] == ["m2", "m3"], "the reserve did not read from its mark"
    other.sql(MARK_PASSED[other.dialect])
    assert [r[0] for r in other.reserve(q, 2)] == ["late", "m4"]


def test_the_next_read_from_the_start_is_due_within_20_times_the_last_ones_time(sessions):
    """A batch reserve that read from the start sets the time of the next read from the start: at
    most 20 times that read's time after it, which the whole call's time on the server bounds (the
    cap, 60 s, is far above: a call of a few milliseconds)."""
    (s,) = sessions(1)
    q = unique("markdue")
    s.create(q)
    for i in range(4):
        s.push(q, f"m{i}")
    [(before,)] = s.sql("SELECT clock_timestamp()" if s.pg else "SELECT UTC_TIMESTAMP(6)")
    assert [r[0] for r in s.reserve(q, 2)] == ["m0", "m1"]
    [(due, after)] = s.sql(MARK_DUE[s.dialect])
    assert due is not None, "no mark"
    assert before < due <= after + 20 * (after - before), (before, due, after)
    assert after - before < dt.timedelta(seconds=2), ("a slow call: the bound says little", after - before)


def test_a_batch_reserve_of_another_queue_does_not_read_from_the_mark(sessions):
    """The mark is the queue's (and the database's): a batch reserve of another queue by the same
    session reads that queue from its start. Queue b holds b0, b1 pushed before a's messages and
    b2..b5 after: read from a's mark, b's reserve would take b2, b3."""
    (s,) = sessions(1)
    a, b = unique("marka"), unique("markb")
    s.create(a)
    s.create(b)
    s.push(b, "b0")
    s.push(b, "b1")
    for i in range(4):
        s.push(a, f"a{i}")
    for i in range(2, 6):
        s.push(b, f"b{i}")
    assert [r[0] for r in s.reserve(a, 2)] == ["a0", "a1"]
    s.keep_mark(a)
    assert [r[0] for r in s.reserve(b, 2)] == ["b0", "b1"]


def test_a_batch_reserve_reads_a_lower_priority_from_its_start_not_from_a_higher_ones_mark(sessions):
    """A queue with a message of priority 1 (x) between messages of priority 0: the first batch
    reserve takes x and c0 (PostgreSQL: its mark is at x, priority 1); the next one, with the mark
    kept, finds nothing more at priority 1 and reads priority 0 from its start: c1, c2 (from x's
    place it would take c2, c3)."""
    (s,) = sessions(1)
    q = unique("markprio")
    s.create(q)
    s.push(q, "c0")
    s.push(q, "c1")
    s.push(q, "x", priority=1)
    for i in range(2, 6):
        s.push(q, f"c{i}")
    assert [r[0] for r in s.reserve(q, 2)] == ["x", "c0"]
    if s.pg:  # (MySQL/MariaDB: a queue with a message above priority 0 goes the general way, no mark)
        s.keep_mark(q)
    assert [r[0] for r in s.reserve(q, 2)] == ["c1", "c2"]


def test_a_mark_whose_time_is_further_than_60_s_ahead_is_not_read_from(sessions):
    """The session keeps its mark in settings (variables) it can write itself: a time of the next
    read from the start further ahead than the 60 s a read sets at most was not set by a reserve, and
    the mark is not live. Here the session moves it an hour ahead: the next batch reserve reads from
    the start and takes the push committed late first, as once the mark's time is up."""
    other, q = _marked_past_a_late_push(sessions, "markahead", 6)
    other.sql(MARK_AHEAD[other.dialect])
    assert [r[0] for r in other.reserve(q, 2)] == ["late", "m2"]


def test_a_batch_reserve_reads_a_higher_priority_from_its_start_not_from_a_lower_ones_mark(sessions):
    """The mark (at m0, priority 0) is read from only at its own priority. A message of priority 1
    pushed before m0 in a transaction committed after the mark was taken, and h0..h2 of priority 1
    pushed after it: the next batch reserve takes late, h0 (from the mark's place at priority 1 it
    would find h0, h1 and skip late)."""
    other, q = _marked_past_a_late_push(sessions, "markhigher", 6, priority=1)
    for i in range(3):
        other.push(q, f"h{i}", priority=1)
    assert [r[0] for r in other.reserve(q, 2)] == ["late", "h0"]
