"""Schedules (docs/contract.md, Schedules): queue_schedule_every and queue_schedule_cron, each on a
grid of about one model tick chosen per example, queue_unschedule. The pending occurrence is an
ordinary message keyed ``p_key@<its time>``; whatever ends it (commit, the results' commits, pop,
fail or give_up for good, cancel, cancel_held, remove, move, into main too) and a fail that retries
it push the next occurrence (a snooze or a rollback hands the same occurrence back and pushes none), one step later on the real grid (FIXED_SCHEDULE_CHAIN: before that fix, an
occurrence dead-lettered, removed or moved ended the chain); the retried occurrence stays, under
its own key, and its later end pushes nothing.

Occurrence times are real (the schedule's next_at is not moved by the model's clock): occurrence i
falls at next_at0 + i steps; pushed at model time t, it is due at t + (its time - the real time
the grids were chosen at) in ticks (the model's other messages are due at whole and half ticks
however many seconds of real time the example has taken, so the occurrences are reckoned from a
fixed real time too: two occurrences of one time are equal).
The grids are chosen from the real time the example first schedules, so that the first occurrence
falls 0.15 to 0.35 of a tick after now: never near the whole and half ticks at which the model's
other messages fall due, whatever the wall-clock minute (the model is deterministic). cron:
"a/20 * * * *" with a the minute of the hour five minutes on (modulo 20; a 20-minute grid, one
tick); every: 1200 + j seconds, the smallest |j| <= 3 whose first multiple after now falls in that
window (its occurrences drift j seconds a step, a few seconds an example); when none does, the
example's every-schedules are cron ones."""

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
    cron: bool = False  # its definition: the example's cron, else its every (the payload follows the key)
    step: float = TICK_S  # seconds between two occurrences


def occurrence_key(key: str, at: dt.datetime) -> str:
    return f"{key}@{at.astimezone(dt.timezone.utc):%Y-%m-%dT%H:%M:%SZ}"


class ScheduleRules:
    def grids(self) -> tuple[str, int | None, float]:
        """The example's cron expression and every (seconds; None: none fits), chosen once from the
        real time (see the module's text), and that time."""
        if getattr(self, "schedule_grids", None) is None:
            now = time.time()
            cron = f"{(int(now // 60) + 5) % 20}/20 * * * *"
            every = next(
                (e for j in (0, 1, -1, 2, -2, 3, -3)
                 if 0.15 * TICK_S <= ((now // (e := TICK_S + j)) + 1) * e - now <= 0.35 * TICK_S),
                None,
            )  # fmt: skip
            self.schedule_grids = (cron, every, now)
        return self.schedule_grids

    def first_at(self, cron: bool) -> dt.datetime:
        """The first occurrence of the example's cron or every schedule: the next one after now."""
        expr, every, now = self.grids()
        if cron:
            return dt.datetime.fromtimestamp((now // 60 + 5) * 60, dt.timezone.utc)
        return dt.datetime.fromtimestamp((now // every + 1) * every, dt.timezone.utc)

    def occurrence(self, s: Schedule) -> None:
        """Pushes (in the model) the occurrence at s.next_at. Its due time is reckoned from the real
        time the grids were chosen at, not from the moment of the push: two occurrences of the same
        time (two schedules on one grid) are one time in the database, so they are equal in the
        model too (either may come first), where the moments of their pushes would have made the
        later push's occurrence a hair earlier."""
        _, _, anchor = self.grids()
        kk = (occurrence_key(s.key, s.next_at), s.kind)
        due = self.t + (s.next_at.timestamp() - anchor) / TICK_S
        s.pending = kk
        if kk not in self.msgs:
            self.msgs[kk] = Msg(kk[0], kk[1], s.pid, 0, 0, due, None, None, False, due)

    def occurrence_ended(self, kk, outcome: str) -> None:
        for s in self.schedules.values():
            if s.pending == kk:
                s.pending = None
                if outcome in ("succeeded", "cancelled", "retry") or FIXED_SCHEDULE_CHAIN:
                    s.next_at += dt.timedelta(seconds=s.step)
                    self.occurrence(s)

    def occurrence_retried(self, kk) -> None:
        """A fail below max_attempts: the occurrence stays (retried under its own key) and is no
        longer the pending one; the next is pushed now."""
        self.occurrence_ended(kk, "retry")

    @rule(key=st.sampled_from(SCHEDULE_KEYS), kind=st.sampled_from(SCHEDULE_KINDS), cron=st.booleans())
    @covers("queue_schedule_every", "queue_schedule_cron")
    def schedule(self, key, kind, cron):
        """Creates or replaces the schedule: its old pending occurrence goes (unless held), the
        first occurrence is pushed, its time returned. Called again with the same definition while
        its pending occurrence is live, it changes nothing and returns that occurrence's time; with
        the pending occurrence gone, it pushes the next one (a repair)."""
        if not SCHEDULES_IN_SUITE:
            return
        expr, every, _ = self.grids()
        cron = cron or every is None
        q = self.q("admin")
        payload = {"n": -1 - SCHEDULE_KEYS.index(key)}
        if cron:
            at = q.schedule_cron(key, kind, payload, expr)
        else:
            at = q.schedule_every(key, kind, payload, dt.timedelta(seconds=every))
        old = self.schedules.get((key, kind))
        if old is not None and old.cron == cron and old.pending in self.msgs:
            assert abs((at - old.next_at).total_seconds()) < 1, ("schedule again, unchanged", at, old.next_at)
            return
        want = self.first_at(cron)
        assert abs((at - want).total_seconds()) < 1, (at, want)
        if old is not None and old.pending in self.msgs and self.msgs[old.pending].token is None:
            self.leave(old.pending)  # an expired reservation not yet taken over is kept, as a held one
        s = Schedule(key, kind, payload["n"], at, None, cron, TICK_S if cron else every)
        self.schedules[(key, kind)] = s
        self.occurrence(s)

    @rule(key=st.sampled_from(SCHEDULE_KEYS), kind=st.sampled_from(SCHEDULE_KINDS))
    @covers("queue_unschedule")
    def unschedule(self, key, kind):
        """Removes the schedule and its pending occurrence unless that one is held (it then runs
        once more and pushes nothing)."""
        s = self.schedules.pop((key, kind), None)
        assert self.q("admin").unschedule(key, kind) == (s is not None)
        if s is not None and s.pending in self.msgs and self.msgs[s.pending].token is None:
            self.leave(s.pending)

    @rule(
        hows=st.lists(
            st.sampled_from(("commit", "commit", "fail", "give_up", "cancel_held", "pop", "snooze")),
            min_size=1,
            max_size=3,
        )
    )
    @covers("queue_commit", "queue_give_up", "queue_cancel_held", "queue_snooze")
    def run_occurrences(self, hows):
        if not any(m.kind == "s" for m in self.msgs.values()):
            self.schedule("s1", "s", len(hows) == 2)
        for how in hows:
            self.run_occurrence(how)

    @rule()
    @covers("queue_snooze")
    def snooze_occurrence(self):
        """A consumer snoozes a due occurrence: handed back, ready now, its attempt not counted; it
        is still the pending one, so the schedule is unchanged and no next occurrence is pushed."""
        if not any(m.kind == "s" for m in self.msgs.values()):
            self.schedule("s1", "s", False)
        self.run_occurrence("snooze")

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
            elif how == "snooze":  # handed back, the same occurrence again: the schedule unchanged
                assert q.snooze(r)
                m.attempts, m.due, m.token = m.attempts - 1, self.t, None
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
                    self.occurrence_retried(m.kk)

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
SCHEDULES_IN_SUITE = True
