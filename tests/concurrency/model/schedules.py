"""Schedules (docs/contract.md, Schedules): queue_schedule_every (every 1200 s, one model tick) and
queue_schedule_cron ("*/20 * * * *", the same grid), queue_unschedule. The pending occurrence is an
ordinary message keyed ``p_key@<its time>``; whatever ends it (commit, the results' commits, pop,
fail or give_up for good, cancel, cancel_held, remove, move) pushes the next occurrence, one tick
later on the real grid (FIXED_SCHEDULE_CHAIN: a fix landing on main; before it, an occurrence
dead-lettered, removed or moved ended the chain).

Occurrence times are real (the schedule's next_at is not moved by the model's clock): occurrence i
of a schedule made at real time s0 falls at next_at0 + i ticks; pushed at model time t, it is due
at t + (its time - now) in ticks. A schedule is made only when next_at0 - now is more than
SAFE_S from the grid's step, so that the seconds an example takes never move an occurrence
across a model tick."""

from __future__ import annotations

import datetime as dt
import time
from dataclasses import dataclass

import pytest
from hypothesis import strategies as st
from hypothesis.stateful import rule

from pyqueue_sql.errors import InvalidArgumentError

from .base import MAX_ATTEMPTS, TICK_S, Msg, ticks
from .coverage import covers

SAFE_S = 150
SCHEDULE_KEYS = ("s0", "s1")
# occurrences of kind "s" can be reserved alone (kinds filter); the others mix with every message
SCHEDULE_KINDS = ("s", "s", "a")


@dataclass
class Schedule:
    key: str
    kind: str
    pid: int  # the payload's number, negative: shared by every occurrence
    next_at: dt.datetime  # the pending occurrence's time (real)
    pending: tuple[str, str] | None  # its (key, kind) in main, None when it was not pushed
    cron: bool = False  # its definition: cron */20, else every TICK_S (the payload follows the key)


def occurrence_key(key: str, at: dt.datetime) -> str:
    return f"{key}@{at.astimezone(dt.timezone.utc):%Y-%m-%dT%H:%M:%SZ}"


class ScheduleRules:
    def occurrence(self, s: Schedule) -> None:
        """Pushes (in the model) the occurrence at s.next_at."""
        now = dt.datetime.now(dt.timezone.utc)
        kk = (occurrence_key(s.key, s.next_at), s.kind)
        due = self.t + (s.next_at - now).total_seconds() / TICK_S
        s.pending = kk
        if kk not in self.msgs:
            self.msgs[kk] = Msg(kk[0], kk[1], s.pid, 0, 0, due, None, None, False, due)

    def occurrence_ended(self, kk, outcome: str) -> None:
        for s in self.schedules.values():
            if s.pending == kk:
                s.pending = None
                if outcome in ("succeeded", "cancelled") or FIXED_SCHEDULE_CHAIN:
                    s.next_at += dt.timedelta(seconds=TICK_S)
                    self.occurrence(s)

    @rule(key=st.sampled_from(SCHEDULE_KEYS), kind=st.sampled_from(SCHEDULE_KINDS), cron=st.booleans())
    @covers("queue_schedule_every", "queue_schedule_cron")
    def schedule(self, key, kind, cron):
        """Creates or replaces the schedule: its old pending occurrence goes (unless held), the
        first occurrence is pushed, its time returned. Called again with the same definition while
        its pending occurrence is live, it changes nothing and returns that occurrence's time; with
        the pending occurrence gone, it pushes the next one (a repair)."""
        if not SCHEDULES_IN_SUITE:
            return
        now = time.time()
        left = -now % TICK_S
        if left < SAFE_S or left > TICK_S - SAFE_S:
            return  # too near the grid's step for the model's clock (see the module's text)
        q = self.q("admin")
        payload = {"n": -1 - SCHEDULE_KEYS.index(key)}
        if cron:
            at = q.schedule_cron(key, kind, payload, "*/20 * * * *")
        else:
            at = q.schedule_every(key, kind, payload, dt.timedelta(seconds=TICK_S))
        old = self.schedules.get((key, kind))
        if old is not None and old.cron == cron and old.pending in self.msgs:
            assert abs((at - old.next_at).total_seconds()) < 1, ("schedule again, unchanged", at, old.next_at)
            return
        want = dt.datetime.fromtimestamp(now + left, dt.timezone.utc)
        assert abs((at - want).total_seconds()) < 1, (at, want)
        if old is not None and old.pending in self.msgs and self.state(self.msgs[old.pending]) != "reserved":
            self.leave(old.pending)
        s = Schedule(key, kind, payload["n"], at, None, cron)
        self.schedules[(key, kind)] = s
        self.occurrence(s)

    @rule(key=st.sampled_from(SCHEDULE_KEYS), kind=st.sampled_from(SCHEDULE_KINDS))
    @covers("queue_unschedule")
    def unschedule(self, key, kind):
        """Removes the schedule and its pending occurrence unless that one is held (it then runs
        once more and pushes nothing)."""
        s = self.schedules.pop((key, kind), None)
        assert self.q("admin").unschedule(key, kind) == (s is not None)
        if s is not None and s.pending in self.msgs and self.state(self.msgs[s.pending]) != "reserved":
            self.leave(s.pending)

    @rule(
        hows=st.lists(
            st.sampled_from(("commit", "commit", "fail", "give_up", "cancel_held", "pop")),
            min_size=1,
            max_size=3,
        )
    )
    @covers("queue_commit", "queue_give_up", "queue_cancel_held")
    def run_occurrences(self, hows):
        if not any(m.kind == "s" for m in self.msgs.values()):
            self.schedule("s1", "s", len(hows) == 2)
        for how in hows:
            self.run_occurrence(how)

    def run_occurrence(self, how):
        """The clock moves on until an occurrence of kind s is due; a consumer reserves the kind and
        ends what it got (or pops it): each ending pushes the schedule's next occurrence, a tick
        later (before FIXED_SCHEDULE_CHAIN: only a commit or a cancel)."""
        due = [m.due for m in self.msgs.values() if m.kind == "s" and not m.blocked]
        if self.paused or not due:
            return
        if min(due) > self.t:
            self.shift(int(min(due) - self.t) + 1)
        self.promoted = set()
        ready = [m for m in self.ready() if m.kind == "s"]
        q = self.q("B")
        if how == "pop":
            got = q.pop(len(ready) + 1)
            self.adopt_pops(self.ready(), [g for g in got])
            return
        got = q.reserve(len(ready) + 1, worker="B", timeout=ticks(1.5), kinds=("s",))
        self.check_reserve(ready, got, len(ready) + 1, 1.5, ("s",))
        for r in got:
            m = self.holds(r)
            if how == "commit":
                assert q.commit(r)
                self.finish(m.kk, "succeeded")
            elif how == "cancel_held":
                assert q.cancel_held(r)
                self.finish(m.kk, "cancelled")
            elif how == "give_up":
                assert q.give_up(r, "no") == "dead_lettered"
                self.dead_letter(m.kk)
            else:
                outcome = q.fail(r, "no")
                if m.attempts >= MAX_ATTEMPTS:
                    assert outcome == "dead_lettered"
                    self.dead_letter(m.kk)
                else:
                    assert outcome == "retry"
                    m.due, m.token = self.t, None

    @rule(j=st.integers(0, 50))
    @covers("queue_push_after")
    def push_after_names_an_occurrence(self, j):
        """A schedule's occurrence is never a parent: push_after refuses it, nothing pushed."""
        pending = sorted(s.pending for s in self.schedules.values() if s.pending in self.msgs)
        if not pending or not self.retention:
            return
        kk = pending[j % len(pending)]
        with pytest.raises(InvalidArgumentError, match="occurrence"):
            self.q("P").push_after("c9", "a", {"n": next(self.pids)}, [self.parent_ref("main", kk)])

    @rule(j=st.integers(0, 50))
    @covers("queue_remove")
    def remove_occurrence(self, j):
        """queue_remove of a schedule's pending occurrence (only an admin can)."""
        pending = sorted(s.pending for s in self.schedules.values() if s.pending in self.msgs)
        if not pending:
            return
        kk = pending[j % len(pending)]
        assert self.q("admin").remove(*kk)
        self.finish(kk, "removed")


# False until the fix is on main: the model states the chain as it is there (only a commit or a
# cancel pushes the next; a pop, dead letter, removal or move ends it); True: whatever ends an
# occurrence pushes the next.
FIXED_SCHEDULE_CHAIN = True
# Off: the model's occurrences disagree with the routines' since schedules go on after a failed,
# retried or repeated occurrence (its retry pushes the next occurrence at once; schedule called again
# with the same definition keeps a live one), in ways that depend on the minute the example runs:
# the rules must learn that before they run in the suite (docs/reliability.md).
SCHEDULES_IN_SUITE = False
