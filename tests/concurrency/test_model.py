"""Model-based concurrency tests: hypothesis stateful testing.

A ``RuleBasedStateMachine`` drives random interleavings of push, push_batch,
pop, reserve (with and without a kinds filter; or three connections at the
same moment in threads behind a ``threading.Barrier``, one of them perhaps
popping), commit, rollback (with and without delay), extend, move, remove,
pause/resume, clock advances, and a race of an expired reservation's holder
(commit / extend / move) against a reserver, against three queues of one
example (``main``, its dead-letter queue ``dlq`` and the move target
``next``), from five real connections (a producer ``P``, consumers ``A``,
``B``, ``C`` and ``admin``). A Python model holds the contract's semantics
(docs/contract.md) and after every step the database must equal it:

* the live messages of each queue, key by key: payload (a unique number per
  push, so a lost, resurrected or duplicated message shows), priority,
  attempts, reservation token and state (ready / delayed / reserved);
* ``queue_stats``: ready, delayed, reserved, dead, paused;
* every reserve and pop hands out only what the model says is ready, in
  reserve order (highest priority first, then oldest ``scheduled_at``; on
  MySQL/MariaDB oldest ``ready_at``: when it became due, which a claim and an
  extend leave alone, so a message whose lease expired keeps the place it had
  before it was claimed; ties of the model's clock may come in any order), so
  a message whose reservation still holds is never handed out again, and a
  popped message never comes back (its payload number is remembered);
* MySQL/MariaDB: every row keeps ``ready_at <= scheduled_at``, the two equal
  while no reservation token is on it, and a held row's ``ready_at`` lies
  where the model's ready time has it;
* concurrent reservers get disjoint sets whose union is what was ready (or as
  many as they asked for);
* a token that no longer holds (committed, moved, removed, rolled back,
  extended, or taken over after its expiry) makes commit / rollback / move
  false and extend NULL; one that expired but was not taken over still works;
* after an expiry the message is delivered again with a new token and one
  more attempt; once ``max_attempts`` deliveries are used it is dead-lettered
  instead (by the next reserve, or by its rollback);
* at the end of each example everything left is drained and must be exactly
  the payloads the model holds: nothing lost.

Clock-driven expiries without sleeping: reservations and delays are long
(1.5 or 2.5 model ticks of ``TICK_S`` = 1000 s), so real time never expires
anything during an example. The rule ``advance_clock`` simulates time
passing: it shifts the time columns (``scheduled_at``, which is also the
reservation lock and expiry, MySQL's ``ready_at``, ``scheduled_at_initially``, ``created_at``) of
this example's rows backwards by whole ticks in the database, and the model
advances its own clock by the same amount. Every due time the model computes
is a whole tick plus a half (a delay or lease of k + 0.5 ticks from a whole
tick) or exactly "now" (no delay), so the few seconds of real time an example
takes can never move a message across a boundary: expiry is deterministic,
and so are the delayed pushes that become ready when the clock advances.
The shift is uniform, so the reserve order among the rows is kept.

ContractMachine (test_the_whole_contract_matches_the_model) adds a rule for every other routine
that changes state, by topic in tests/concurrency/model/, and checks pyqueue_result, progress and
cancel requests too; docs/reliability.md says what it covers, its switches for fixes landing
separately, and the mutants that `python -m bench mutants` runs against it.

The test was seen to fail: with the model believing that an expired
reservation stays held (not redelivered; both dialects), and with ``queue_commit`` replaced
in the PostgreSQL test database by a version that ignores the token, it fails
(wrong hand-outs and stats; a stale commit accepted, a message lost at the drain). On MariaDB,
with every claim of 05_reserve.sql (or queue_extend) also setting ready_at to the lease's end, it
fails: a held row's ready_at not where the model has it, ready_at past scheduled_at after a claim
given back, and with ready_at_keeps_its_place off, exhausted messages left by a walk out of order.
"""

from __future__ import annotations

import datetime as dt
import itertools
import json
import threading
import time
import uuid
from dataclasses import replace

import pytest
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, rule, run_state_machine_as_test

import pyqueue_sql
from tests.plainsql import MARK_ALWAYS, MARK_DEFAULT, MARK_DROPPED, MARK_KEPT

from .model.admin import AdminRules
from .model.base import (
    CONNECTIONS,
    CONSUMERS,
    CONTRACT_EXAMPLES,
    CONTRACT_SETTINGS,
    EXPIRES_FORMAT,
    MAX_ATTEMPTS,
    READY_SQL,
    ROWS_SQL,
    SETTINGS,
    TICK_S,
    Msg,
    check_walk,
    consumers,
    group_index,
    handle_index,
    keys,
    kinds,
    leases,
    priorities,
    push_delays,
    rollback_delays,
    run_at_once,
    shift,
    sql,
    ticks,
)
from .model.coverage import covers
from .model.deps import DependencyRules
from .model.limits import LimitRules
from .model.produce import ProduceRules
from .model.schedules import ScheduleRules
from .model.settle import SettleRules

pytestmark = pytest.mark.slow


class QueueMachine(RuleBasedStateMachine):
    """The model. ``conns`` and ``dialect`` are set on a subclass per test.

    No rule has a precondition: which thread wins a race changes the model's
    state, and hypothesis needs the same draws when it replays an example, so
    a rule that does not apply returns at once instead."""

    conns: dict[str, pyqueue_sql.Database] = {}
    dialect = ""
    # the groups a push draws from (None: no group); a subclass with groups tests FIFO groups
    GROUPS: tuple[str | None, ...] = (None,)

    @covers("queue_create")
    def __init__(self) -> None:
        super().__init__()
        tag = uuid.uuid4().hex[:12]
        self.main, self.dlq_name, self.next_name = (
            f"t.model.{tag}",
            f"t.model.{tag}.dlq",
            f"t.model.{tag}.next",
        )
        admin = self.conns["admin"]
        admin.queue(self.dlq_name).create()
        admin.queue(self.next_name).create()
        admin.queue(self.main).create(
            visibility_timeout=ticks(1.5), max_attempts=MAX_ATTEMPTS, dead_letter_queue=self.dlq_name
        )
        self.t = 0.0  # model clock, ticks
        self.msgs: dict[tuple[str, str], Msg] = {}  # main
        self.dlq: dict[tuple[str, str], tuple[int, int]] = {}  # key -> (pid, priority); always ready
        # key -> the step (rule) that dead-lettered it: dead letters of one step may lie in any order in the
        # dead-letter queue (one call dead-letters them at one time, in its walk's order, which ties of the
        # model's clock leave open), those of a later step after them
        self.dlq_step: dict[tuple[str, str], int] = {}
        self.steps = 0
        self.next: dict[tuple[str, str], tuple[int, int]] = {}
        self.dead = 0
        self.paused = False
        self.pids = itertools.count()
        self.popped: set[int] = set()  # payloads popped: never seen again
        self.handles: list = []  # every Reservation handed out (stale ones too)
        self.promoted: set = set()  # messages made head since the rule started
        # pid -> (its expiry in model ticks, its pyqueue.expires_at as pushed, model time of the push);
        # the header goes with the payload's number (a move or dead letter keeps it, a redrive re-arms it)
        self.expiry: dict[int, tuple[float, dt.datetime, float]] = {}
        self.side_stats_seen: dict = {}  # side queue -> (its rows, model time) at its last queue_stats check

    # ---- helpers -------------------------------------------------------------
    def q(self, conn: str, name: str | None = None) -> pyqueue_sql.Queue:
        return self.conns[conn].queue(name or self.main)

    def ready(self) -> list[Msg]:
        """Snapshots of the ready messages (the rules change the live ones)."""
        return [replace(m) for m in self.msgs.values() if not m.blocked and m.due <= self.t]

    def state(self, m: Msg) -> str:
        if m.blocked:
            return "delayed"
        if m.due <= self.t:
            return "ready"
        return "reserved" if m.token is not None else "delayed"

    def rows(self, name: str) -> dict:
        return self.all_rows((name,))[name]

    def all_rows(self, names: tuple[str, ...]) -> dict[str, dict]:
        """The live messages of the named queues, read in one statement: name -> key -> state."""
        found: dict[str, dict] = {name: {} for name in names}
        statement = ROWS_SQL[self.dialect].format(names=", ".join(["%s"] * len(names)))
        for q, k, kd, pid, pr, att, tok, rdy, grp, blk in sql(self.conns["admin"], statement, names):
            found[q][(k, kd)] = (
                int(pid),
                int(pr),
                int(att),
                None if tok is None else str(tok),
                bool(rdy),
                grp,
                bool(blk),
            )
        return found

    def live_keys(self) -> set:
        return set(self.rows(self.main))

    def group_of(self, g: int) -> str | None:
        return self.GROUPS[g % len(self.GROUPS)]

    def add(self, m: Msg) -> None:
        """A new message: its group's head when the group has none, or in place of a head that
        was never delivered and runs later; else blocked behind the head."""
        self.msgs[m.kk] = m
        if m.group is None:
            return
        head = next(
            (x for x in self.msgs.values() if x.group == m.group and not x.blocked and x is not m), None
        )
        if head is None:
            return
        if head.attempts == 0 and head.token is None and m.init < head.init:
            head.blocked = True
        else:
            m.blocked = True

    def leave(self, kk: tuple[str, str]) -> Msg:
        """A message leaves main: when it was its group's head, the blocked message first by
        (run time, push order) becomes head, due at its run time or now, whichever is later."""
        m = self.msgs.pop(kk)
        if m.group is not None and not m.blocked:
            waiting = [x for x in self.msgs.values() if x.group == m.group and x.blocked]
            if waiting:
                nxt = min(waiting, key=lambda x: (x.init, x.pid))
                nxt.blocked, nxt.due = False, max(nxt.init, self.t)
                self.promoted.add(nxt.kk)
        return m

    def finish(self, kk: tuple[str, str], outcome: str, result=None) -> Msg:
        """A message leaves main: ``outcome`` is how (succeeded, failed, cancelled, moved,
        removed). The whole contract's model (ContractMachine) records results, readies or
        cancels waiting children and advances schedules here."""
        return self.leave(kk)

    def dead_letter(self, kk: tuple[str, str]) -> None:
        m = self.finish(kk, "failed")
        self.dead += 1
        self.dlq.pop(kk, None)
        self.dlq[kk] = (m.pid, m.priority)  # a dead letter of the same key is replaced (and goes last)
        self.dlq_step[kk] = self.steps

    # ---- expiry (docs/contract.md, Expiry) ---------------------------------------
    def expiry_headers(self, pid: int, after: float | None) -> dict:
        """The headers of a push whose pyqueue.expires_at falls ``after`` ticks from now (None: no
        expiry), recorded for the message of payload number pid."""
        if after is None:
            return {}
        at = dt.datetime.now(dt.timezone.utc) + ticks(after)
        self.expiry[pid] = (self.t + after, at, self.t)
        return {"pyqueue.expires_at": at.strftime(EXPIRES_FORMAT)}

    def is_expired(self, pid: int) -> bool:
        e = self.expiry.get(pid)
        return e is not None and e[0] <= self.t

    def expires_text(self, pid: int) -> str:
        """Its pyqueue.expires_at as the database holds it now (the clock's shifts moved it)."""
        _, at, t0 = self.expiry[pid]
        return (at - ticks(self.t - t0)).strftime(EXPIRES_FORMAT)

    def expired_among(self, ready: list[Msg]) -> set:
        return {m.kk for m in ready if self.is_expired(m.pid)}

    def expire(self, kk: tuple[str, str]) -> None:
        """A reserve or pop met it past its expiry: ended as an unheld cancel ends it."""
        self.finish(kk, "cancelled")

    def end_expired(self, ready: list[Msg], live: set) -> set:
        """Ends in the model the expired messages the call ended (ready ones, or made head during
        it, that left main); returns them."""
        ended: set = set()
        while True:
            met = sorted(
                kk
                for kk in {m.kk for m in ready} | self.promoted
                if kk in self.msgs
                and kk not in live
                and not self.msgs[kk].blocked
                and self.is_expired(self.msgs[kk].pid)
            )
            if not met:
                return ended
            for kk in met:
                self.expire(kk)
                ended.add(kk)

    def holds(self, r) -> Msg | None:
        m = self.msgs.get((r.key, r.kind))
        return m if m is not None and m.token == str(r.token) else None

    def pick(self, i: int):
        return self.handles[-1 - i % len(self.handles)]

    def check_delivery(self, m: Msg, pid: int, priority: int) -> None:
        assert pid < 0 or pid not in self.popped, ("a popped message came back", pid)
        assert (pid, priority) == (m.pid, m.priority), ("wrong message", m, pid, priority)

    def reserved_now(self, results: list, lease: float) -> None:
        for r in results:
            m = self.msgs[(r.key, r.kind)]
            assert not m.blocked, ("handed out a message blocked behind its group's head", m)
            self.check_delivery(m, r.payload["n"], r.priority)
            assert r.attempts == m.attempts + 1, ("attempts", m, r.attempts)
            assert str(r.token) != m.token, "a redelivery must carry a new token"
            m.attempts = r.attempts
            m.lease(self.t + lease, str(r.token))  # (MySQL/MariaDB: its ready_at, its place, stays)
            self.handles.append(r)

    # ---- producing -----------------------------------------------------------
    @initialize(
        batch=st.lists(
            st.tuples(keys, kinds, push_delays, priorities, group_index),
            min_size=2,
            max_size=6,
            unique_by=lambda x: (x[0], x[1]),
        ),
        n=st.integers(0, 3),
        lease=leases,
    )
    def start(self, batch, n, lease):
        """Every example starts with a few messages, some of them reserved."""
        self.push_batch(batch)
        if n:
            self.reserve("A", n, lease)

    @rule(
        conn=st.sampled_from(("P", "A")),
        key=keys,
        kind=kinds,
        delay=push_delays,
        priority=priorities,
        g=group_index,
    )
    @covers("queue_push", "queue_push_grouped")
    def push(self, conn, key, kind, delay, priority, g=0):
        pid = next(self.pids)
        group = self.group_of(g)
        inserted = self.q(conn).push(
            key, kind, {"n": pid}, run_at=ticks(delay) if delay else None, priority=priority, group=group
        )
        assert inserted == ((key, kind) not in self.msgs), "push dedup"
        if inserted:
            self.add(Msg(key, kind, pid, priority, 0, self.t + delay, None, group, False, self.t + delay))

    @rule(
        conn=st.sampled_from(("P", "B")),
        key=keys,
        kind=kinds,
        delay=push_delays,
        priority=priorities,
        g=group_index,
    )
    def push_again(self, conn, key, kind, delay, priority, g=0):
        """The same as push (pushes are drawn twice as often as other steps)."""
        self.push(conn, key, kind, delay, priority, g)

    @rule(
        batch=st.lists(
            st.tuples(keys, kinds, push_delays, priorities, group_index),
            min_size=1,
            max_size=5,
            unique_by=lambda x: (x[0], x[1]),
        )
    )
    @covers("queue_push_batch", "queue_push_batch_grouped")
    def push_batch(self, batch):
        items, fresh = [], []
        for key, kind, delay, priority, g in batch:
            pid = next(self.pids)
            group = self.group_of(g)
            items.append(
                pyqueue_sql.NewMessage(
                    key, kind, {"n": pid}, ticks(delay) if delay else None, priority, group
                )
            )
            if (key, kind) not in self.msgs:
                fresh.append(
                    Msg(key, kind, pid, priority, 0, self.t + delay, None, group, False, self.t + delay)
                )
        assert self.q("P").push_many(items) == len(fresh), "push_batch dedup"
        for m in fresh:  # in the batch's order: its push order
            self.add(m)

    # ---- consuming -----------------------------------------------------------
    @rule(conn=consumers, n=st.integers(1, 4))
    @covers("queue_pop")
    def pop(self, conn, n):
        self.promoted = set()
        ready = self.ready()
        got = self.q(conn).pop(n)
        if self.paused:
            assert got == [], "a paused queue pops nothing"
            return
        delivered = [(g.key, g.kind) for g in got]
        assert len(set(delivered)) == len(delivered)
        ended = self.adopt_pops(ready, got)
        extra = set(delivered) - {m.kk for m in ready}
        check_walk(
            ready, n - len(extra), set(delivered) - extra, ended & {m.kk for m in ready}, exhaustible=False,
            dead_past_n=bool(extra), expired=self.expired_among(ready), fills=self.dialect != "postgresql",
            by_ready=self.dialect == "mysql",
        )  # fmt: skip

    def adopt_pops(self, ready: list[Msg], got: list) -> set:
        """Removes popped messages from the model, in an order in which each was ready or made
        head by the departure of one before it (a pop may take a group's next message too), and
        the expired ones the pop ended (returned)."""
        allowed = {m.kk for m in ready}
        pending = list(got)
        live = self.live_keys()
        ended: set = set()
        while pending:
            g = next((g for g in pending if (g.key, g.kind) in allowed | self.promoted), None)
            if g is None and not ended:  # perhaps made head when an expired head was ended
                ended = self.end_expired(ready, live) or {None}
                continue
            assert g is not None, ("popped what was not ready", [(p.key, p.kind) for p in pending])
            pending.remove(g)
            m = self.finish((g.key, g.kind), "popped")
            self.check_delivery(m, g.payload["n"], g.priority)
            assert g.attempts == m.attempts
            if m.pid >= 0:  # a schedule's occurrences share their schedule's payload (negative)
                self.popped.add(m.pid)
        return (ended - {None}) | self.end_expired(ready, live)

    def _reserve_effects(
        self,
        ready: list[Msg],
        results: list,
        lease: float,
        pops: list | None = None,
        pop_ready: list | None = None,
    ) -> set:
        """Adopts the dead letters the reserve made (exhausted ready messages that left main), then
        the pops that ran beside it (of pop_ready; they are left out of ``ready``), then the
        reservations."""
        left = self.live_keys()
        # expiry wins over dead-lettering at max_attempts
        exhausted = {m.kk for m in ready if m.attempts >= MAX_ATTEMPTS and not self.is_expired(m.pid)}
        dead = {kk for kk in exhausted if kk not in left}
        for kk in sorted(dead):
            self.dead_letter(kk)
        if pops:
            dead |= self.adopt_pops(pop_ready or [], pops)
        dead |= self.end_expired(ready, left)
        self.reserved_now(results, lease)
        return dead

    @rule(
        conn=consumers,
        n=st.integers(1, 4),
        lease=leases,
        kinds_=st.sampled_from((None, None, ("a",), ("b",), ("b", "a"))),
    )
    @covers("queue_reserve")
    def reserve(self, conn, n, lease, kinds_=None):
        self.promoted = set()
        ready = [m for m in self.ready() if kinds_ is None or m.kind in kinds_]
        got = self.q(conn).reserve(n, worker=conn, timeout=ticks(lease), kinds=kinds_)
        if self.paused:
            assert got == [], "a paused queue reserves nothing"
            return
        self.check_reserve(ready, got, n, lease, kinds_)

    def check_reserve(self, ready: list[Msg], got: list, n: int, lease: float, kinds_=None) -> None:
        """A reserve of n handed out ``got`` from ``ready``: adopts it and checks the walk."""
        delivered = [(r.key, r.kind) for r in got]
        assert len(set(delivered)) == len(delivered)
        dead = self._reserve_effects(ready, got, lease)
        extra = set(delivered) - {m.kk for m in ready}
        assert extra <= self.promoted, ("handed out what was not ready", extra)
        assert kinds_ is None or all(kd in kinds_ for _, kd in extra), ("outside the kinds filter", extra)
        check_walk(
            ready, n - len(extra), set(delivered) - extra, dead & {m.kk for m in ready}, exhaustible=True,
            dead_past_n=bool(extra), expired=self.expired_among(ready), by_ready=self.dialect == "mysql",
        )  # fmt: skip

    @rule(
        conn=consumers,
        n=st.integers(2, 4),
        lease=leases,
        lands=st.sampled_from(
            (None, "held", "held", "pushed", "clock", "released", "redriven", "head", "expiring")
        ),
        key=keys,
        kind=kinds,
        more=st.integers(0, 1),
        first=st.lists(st.tuples(keys, kinds), min_size=1, max_size=6, unique=True),
        fill=st.lists(st.tuples(keys, kinds), max_size=4, unique=True),
    )
    @covers("queue_reserve")
    def reserve_twice_past_the_mark(self, conn, n, lease, lands, key, kind, more, first=(), fill=()):
        """Two batch reserves of one session, the second while the mark the first left is live.
        A batch reserve (MySQL/MariaDB: of priority 0; PostgreSQL: the first priority of its walk
        with a ready message) reads from the first candidate the session's last one found, and from
        the queue's start (PostgreSQL: its bound) when that finds fewer than n, or 20 times the last
        read from the start after it, at most 60 s (docs/contract/05_reserve.md). The rule lets no
        mark from before it count (PostgreSQL: and takes one after any read from the bound, as a held
        horizon makes it do), then keeps the first reserve's alive for the second (the 5 s a
        read from the start that took 0.25 s gives; real reads take far less, and no other rule
        would see one). Between the two, perhaps, a message lands before the mark: ``pushed`` with
        a run_at long past (PostgreSQL: its lowering of the bound, at or before the mark, sends the
        second to the bound anyway), or every message moved back by a ``clock`` advance (the mark
        stays where it was; PostgreSQL: the bound is reset); the second then asks for at least all
        that is ready, so fewer than n is its answer and nothing ready may be left behind.
        ``held``: another session holds the first ready message while the first reserve runs (so
        skips it: its first candidate, read without locks, the mark, stays ready); the second, of
        2, must take it first. Otherwise the second, of n, goes on in reserve order from where the
        first stopped (nothing lies before the mark). Before the first reserve, ``first``, and
        before the second, ``fill``: messages of priority 0 pushed in one batch (``fill`` after
        the mark and after what lands before it: the read from the mark finds them, and a reserve
        that took them alone, from the mark, would leave what landed before it behind).
        The other ways a message lands before the mark, each followed by a ``clock`` advance (they
        stamp it ready now, past the mark, so it lies before the mark once time moves it there, or
        when its transaction commits late): ``released``, one the first reserve took rolled back
        without a delay; ``redriven``, a dead letter redriven into main (one pushed into the
        dead-letter queue first); ``head``, a group's next message made head when its head is
        committed (or removed, when not held; a machine with groups: two messages of one group are
        pushed before the first reserve); ``expiring``, a message whose pyqueue.expires_at passes
        with the advance: the second reserve ends it instead of handing it out. Seen to fail, each
        of the four alone on both dialects, with the read from the start made to happen only when
        nothing at all turns up past the mark (PostgreSQL: pyqueue__ready_tids keeping a live mark
        that found some; MariaDB: ``IF v_from AND v_got = 0``): a ready message skipped, the
        expiring one left unended."""
        db = self.conns[conn]
        if first:  # something ready for the first reserve (and to hold)
            self.push_batch([(k, kd, 0, 0, 0) for k, kd in first])
        grouped = [g for g, name in enumerate(self.GROUPS) if name is not None]
        if lands == "head" and grouped:  # a head and the message blocked behind it
            self.push_batch([(f"{key}.h{i}", kind, 0, 0, grouped[0]) for i in range(2)])
        sql(db, MARK_DROPPED[self.dialect], ())
        sql(db, MARK_ALWAYS[self.dialect], ())  # (PostgreSQL: a mark after any read from the bound)
        held = self.hold_first_ready() if lands == "held" else None
        try:
            self.promoted = set()
            ready = [m for m in self.ready() if m.kk != held]
            got = self.q(conn).reserve(n, worker=conn, timeout=ticks(lease))
        finally:
            if held is not None:
                sql(self.conns["P"], "ROLLBACK", ())
        if self.paused:
            assert got == [], "a paused queue reserves nothing"
            return
        self.check_reserve(ready, got, n, lease)
        sql(db, MARK_KEPT[self.dialect], ())
        try:
            if lands == "pushed":  # before anything the model holds: 1000.5 ticks back
                pid = next(self.pids)
                at = dt.datetime.now(dt.timezone.utc) - ticks(1000.5)
                inserted = self.q("P").push(key, kind, {"n": pid}, run_at=at)
                assert inserted == ((key, kind) not in self.msgs), "push dedup"
                if inserted:
                    self.add(Msg(key, kind, pid, 0, 0, self.t - 1000.5, None, None, False, self.t - 1000.5))
            elif lands == "clock":
                self.shift(1)
            elif lands is not None and lands != "held":
                self.land_before_the_mark(lands, got, key, kind)
                self.shift(1)
            if fill:  # after the mark (and after what lands before it): what the read from it finds
                self.push_batch([(k, kd, 0, 0, 0) for k, kd in fill])
            self.promoted = set()
            ready = self.ready()
            n2 = {None: n, "held": 2}.get(lands, max(2, len(ready) + more))
            got = self.q(conn).reserve(n2, worker=conn, timeout=ticks(lease))
        finally:
            sql(db, MARK_DROPPED[self.dialect], ())
            sql(db, MARK_DEFAULT[self.dialect], ())
        self.check_reserve(ready, got, n2, lease)

    def land_before_the_mark(self, lands: str, got: list, key: str, kind: str) -> None:
        """Between two batch reserves of reserve_twice_past_the_mark: a message made ready (or
        expiring) by a release, a redrive, a group's head leaving, or a push with an expiry."""
        if lands == "released":  # a reservation handed back without a delay: ready now
            held = [r for r in got if self.holds(r) is not None]
            if held:
                m = self.holds(held[0])
                assert self.q("B").rollback(held[0]), "rollback of a held reservation"
                if m.attempts >= MAX_ATTEMPTS:
                    self.dead_letter(m.kk)
                else:
                    m.due, m.token = self.t, None
        elif lands == "redriven":  # a dead letter (this one, unless one is first) back into main, ready now
            pid = next(self.pids)
            kk = (f"{key}.d", kind)
            inserted = self.q("P", self.dlq_name).push(*kk, {"n": pid})
            assert inserted == (kk not in self.dlq), "push dedup (dead-letter queue)"
            if inserted:
                self.dlq[kk], self.dlq_step[kk] = (pid, 0), self.steps
            self.redrive_into_main(1)
        elif lands == "head":  # a group's head leaves: the message blocked behind it is head, ready now
            for h in [m for m in self.msgs.values() if m.group is not None and not m.blocked]:
                if not any(x.group == h.group and x.blocked for x in self.msgs.values()):
                    continue
                r = next((r for r in reversed(self.handles) if self.holds(r) is h), None)
                if r is not None:
                    assert self.q("B").commit(r), "commit of a held head"
                    self.finish(h.kk, "succeeded")
                else:
                    assert self.q("B").remove(*h.kk), "remove of a head"
                    self.finish(h.kk, "removed")
                break
        elif lands == "expiring":  # ready now, past its pyqueue.expires_at after the advance
            pid = next(self.pids)
            kk = (f"{key}.e", kind)
            inserted = self.q("P").push(*kk, {"n": pid}, headers=self.expiry_headers(pid, 0.5))
            assert inserted == (kk not in self.msgs), "push dedup"
            if inserted:
                self.add(Msg(*kk, pid, 0, 0, self.t, None, None, False, self.t))
            else:
                del self.expiry[pid]

    def redrive_into_main(self, n: int) -> None:
        """Up to n dead letters back into main (FIFO; one whose key is live in main stays), attempts 0,
        ready now. Priority first, then dead-letter order: those of one step are a tie (any of them
        may go first, see dlq_step), so which of a tie moved is read from main."""
        order = sorted(
            (kk for kk in self.dlq if kk not in self.msgs),
            key=lambda kk: (-self.dlq[kk][1], self.dlq_step[kk]),
        )
        assert self.q("admin", self.dlq_name).redrive(self.main, n) == min(n, len(order))
        live = self.live_keys()
        moved = [kk for kk in order if kk in live]
        left = min(n, len(order))
        assert len(moved) == left, ("redrive", moved, order, n)
        for _, tie in itertools.groupby(order, key=lambda kk: (-self.dlq[kk][1], self.dlq_step[kk])):
            tie = set(tie)
            assert len(tie & set(moved)) == min(left, len(tie)), ("redrive order", moved, order, n)
            left -= min(left, len(tie))
        for kk in moved:
            pid, priority = self.dlq.pop(kk)
            self.msgs[kk] = Msg(kk[0], kk[1], pid, priority, 0, self.t, None, None, False, self.t)
            self.parent_redriven(kk)

    def parent_redriven(self, kk: tuple[str, str]) -> None:
        """A redriven dead letter's waiting children follow it (the whole contract's model)."""

    def hold_first_ready(self) -> tuple[str, str] | None:
        """P holds main's first ready message in reserve order in an open transaction (as a
        claim in progress would; P rolls back after the reserve): its key, or None when it is
        due for dead-lettering or expired (a reserve would end it) or nothing is ready."""
        now = "clock_timestamp()" if self.dialect == "postgresql" else "UTC_TIMESTAMP(6)"
        order = "scheduled_at" if self.dialect == "postgresql" else "ready_at"
        first = sql(
            self.conns["admin"],
            f"SELECT id, p_key, p_kind FROM pyqueue_message WHERE queue_name = %s AND scheduled_at <= {now}"
            f" ORDER BY priority DESC, {order}, id LIMIT 1",
            (self.main,),
        )
        if not first:
            return None
        kk = (first[0][1], first[0][2])
        m = self.msgs[kk]
        if m.attempts >= MAX_ATTEMPTS or self.is_expired(m.pid):
            return None
        sql(self.conns["P"], "START TRANSACTION", ())
        sql(self.conns["P"], "SELECT id FROM pyqueue_message WHERE id = %s FOR UPDATE", (first[0][0],))
        return kk

    @rule(ns=st.lists(st.integers(1, 4), min_size=3, max_size=3), lease=leases, c_pops=st.booleans())
    def reserve_concurrently(self, ns, lease, c_pops):
        """A, B and C reserve (or C pops) at the same moment: disjoint sets, union = what was ready
        (and, with groups, perhaps the next message of a group whose head one of them popped or
        dead-lettered)."""
        self.promoted = set()
        ready = self.ready()
        results: list = [None] * 3

        def work(i):
            q = self.q(CONSUMERS[i])
            if i == 2 and c_pops:
                results[i] = q.pop(ns[i])
            else:
                results[i] = q.reserve(ns[i], worker=CONSUMERS[i], timeout=ticks(lease))

        run_at_once(*(lambda i=i: work(i) for i in range(3)))
        if self.paused:
            assert results == [[], [], []]
            return
        sets = [{(r.key, r.kind) for r in res} for res in results]
        assert sum(len(s) for s in sets) == sum(len(res) for res in results)
        union = set().union(*sets)
        assert len(union) == sum(len(s) for s in sets), ("two reservers got the same message", sets)
        ok = {m.kk for m in ready if m.attempts < MAX_ATTEMPTS and not self.is_expired(m.pid)}
        popped = results[2] if c_pops else []
        reservations = results[0] + results[1] if c_pops else [r for res in results for r in res]
        # sorted: the handles' order must not depend on which thread won which message
        self._reserve_effects(
            [m for m in ready if not c_pops or m.kk not in sets[2]],
            sorted(reservations, key=lambda r: (r.key, r.kind)),
            lease,
            popped,
            ready,
        )
        ready_kks = {m.kk for m in ready}
        # messages made head during the race (a group's next message, after its head left)
        extra = union - ready_kks
        assert extra <= self.promoted, ("handed out what was not ready", extra, sets)
        if not c_pops:
            assert union - extra <= ok, ("handed out what was not ready", union - extra - ok)
            assert len(union & ok) == min(sum(ns) - len(extra), len(ok)), ("too few handed out", sets, ok, ns)
        else:
            # a pop takes exhausted messages too (it makes no delivery); reservers dead-letter them
            assert (sets[0] | sets[1]) - extra <= ok, ("not ready", sets)
            if sum(ns) >= len(ready) + len(extra):
                assert ok <= union, ("a ready message was left behind", ok - union, sets)

    @rule(conn=consumers, i=handle_index)
    @covers("queue_commit")
    def commit(self, conn, i):
        if not self.handles:
            return
        r = self.pick(i)
        m = self.holds(r)
        assert self.q(conn).commit(r) == (m is not None), ("commit", r, m)
        if m is not None:
            self.finish(m.kk, "succeeded")

    @rule(conn=consumers, i=handle_index, delay=rollback_delays)
    @covers("queue_rollback")
    def rollback(self, conn, i, delay):
        if not self.handles:
            return
        r = self.pick(i)
        m = self.holds(r)
        assert self.q(conn).rollback(r, delay=ticks(delay) if delay else None) == (m is not None), (
            "rollback",
            r,
            m,
        )
        if m is None:
            return
        if m.attempts >= MAX_ATTEMPTS:
            self.dead_letter(m.kk)
        else:
            m.due, m.token = self.t + delay, None

    @rule(conn=consumers, i=handle_index, lease=leases)
    @covers("queue_extend")
    def extend(self, conn, i, lease):
        if not self.handles:
            return
        r = self.pick(i)
        m = self.holds(r)
        new = self.q(conn).extend(r, timeout=ticks(lease))
        assert (new is not None) == (m is not None), ("extend", r, m)
        if m is not None:
            assert str(new.token) != m.token
            m.lease(self.t + lease, str(new.token))
            self.handles.append(new)

    @rule(conn=consumers, i=handle_index, new_payload=st.booleans())
    @covers("queue_move")
    def move(self, conn, i, new_payload):
        if not self.handles:
            return
        r = self.pick(i)
        m = self.holds(r)
        pid = next(self.pids) if new_payload else None
        q = self.q(conn)
        moved = q.move(r, self.next_name, {"n": pid}) if new_payload else q.move(r, self.next_name)
        assert moved == (m is not None), ("move", r, m)
        if m is not None:
            if pid is not None and m.pid in self.expiry:  # the headers go with it
                self.expiry[pid] = self.expiry[m.pid]
            self.finish(m.kk, "moved")
            self.next.setdefault(m.kk, (m.pid if pid is None else pid, m.priority))  # dedup: existing stays

    @rule(conn=st.sampled_from(CONNECTIONS), key=keys, kind=kinds)
    @covers("queue_remove")
    def remove(self, conn, key, kind):
        assert self.q(conn).remove(key, kind) == ((key, kind) in self.msgs)
        if (key, kind) in self.msgs:
            self.finish((key, kind), "removed")

    @rule(pause=st.booleans())
    @covers("queue_pause", "queue_resume")
    def pause_or_resume(self, pause):
        """Paused: no pop, no reserve (of one: the fast path; of several), no next time to wait for,
        and a wait ends without a ready message."""
        if pause:
            self.q("admin").pause()
        else:
            self.q("admin").resume()
        self.paused = pause
        if pause and self.msgs:
            assert self.q("C").pop(1) == [], "a paused queue pops nothing"
            for n in (1, 3):
                assert self.q("C").reserve(n, timeout=ticks(1.5)) == [], "a paused queue reserves nothing"
            statement = (
                "SELECT * FROM queue_next_scheduled_at(%s)"
                if self.dialect == "postgresql"
                else "CALL queue_next_scheduled_at(%s, NULL)"
            )
            assert sql(self.conns["C"], statement, (self.main,)) == [(None, None)], (
                "a paused queue's next time"
            )
            statement = (
                "SELECT queue_wait(%s, NULL, interval '0.05 seconds')"
                if self.dialect == "postgresql"
                else "CALL queue_wait(%s, NULL, 0.05, NULL)"
            )
            assert not sql(self.conns["C"], statement, (self.main,))[0][0], "a paused queue's wait ends ready"

    @rule(n=st.sampled_from((1, 1, 2, 3)))
    def advance_clock(self, n):
        self.shift(n)

    def shift(self, n: int) -> None:
        s = n * TICK_S
        shift(self.conns["admin"], self.dialect, s, (self.main, self.dlq_name, self.next_name))
        self.t += n

    @rule(conn=consumers)
    def expiry_redelivers(self, conn):
        """Lets every reservation expire; one reserve of everything redelivers each
        held message (new token, one more attempt) or dead-letters it; its old
        token then fails."""
        if self.paused or not any(self.state(m) == "reserved" for m in self.msgs.values()):
            return
        held = {m.kk: (m.token, m.attempts) for m in self.msgs.values() if self.state(m) == "reserved"}
        old = [
            r for r in self.handles if (r.key, r.kind) in held and str(r.token) == held[(r.key, r.kind)][0]
        ]
        self.shift(3)  # longer than any lease
        self.promoted = set()
        ready = self.ready()
        ok = [m for m in ready if m.attempts < MAX_ATTEMPTS and not self.is_expired(m.pid)]
        # room for the next message of each group whose head is dead-lettered or expired now
        n = max(len(ok) + sum(m.kk not in {x.kk for x in ok} and m.group is not None for m in ready), 1)
        got = self.q(conn).reserve(n, worker=conn, timeout=ticks(1.5))
        dead = self._reserve_effects(ready, got, 1.5)
        delivered = {(r.key, r.kind) for r in got}
        extra = delivered - {m.kk for m in ready}
        assert extra <= self.promoted, ("handed out what was not ready", extra)
        check_walk(
            ready, n - len(extra), delivered - extra, dead & {m.kk for m in ready}, exhaustible=True,
            dead_past_n=bool(extra), expired=self.expired_among(ready), by_ready=self.dialect == "mysql",
        )  # fmt: skip
        for kk, (_, attempts) in held.items():
            # one past its pyqueue.expires_at is never redelivered: ended when the walk met it (dead), else left as
            # it is (a walk of n that took n others before it in a tie of the model's clock never met it)
            if attempts < MAX_ATTEMPTS and kk not in dead and not self.is_expired(self.msgs[kk].pid):
                assert self.msgs[kk].attempts == attempts + 1, ("expired reservation not redelivered", kk)
        for r in old:
            m = self.msgs.get((r.key, r.kind))
            if m is not None and m.token != str(r.token):  # redelivered: the old token is void
                assert self.q("admin").commit(r) is False, "an expired token committed a redelivered message"
                assert self.q("admin").extend(r) is None, "an expired token extended a redelivered message"
                assert self.q("admin").rollback(r) is False, (
                    "an expired token rolled back a redelivered message"
                )

    @rule(action=st.sampled_from(("commit", "extend", "move")), i=handle_index, lease=leases)
    def race_expired_holder(self, action, i, lease):
        """The holder of an expired reservation commits, extends or moves it at the
        same moment as B reserves everything: exactly one of them gets the message."""
        if self.paused or not any(m.token is not None for m in self.msgs.values()):
            return
        holding = [r for r in self.handles if self.holds(r) is not None]
        r = holding[-1 - i % len(holding)]
        kk = (r.key, r.kind)
        if self.msgs[kk].due > self.t:
            self.shift(3)  # let it expire (nobody took it yet)
        self.promoted = set()
        ready = self.ready()
        ok = {m.kk for m in ready if m.attempts < MAX_ATTEMPTS and not self.is_expired(m.pid)}
        out: dict = {}

        def holder():
            q = self.q("A")
            out["won"] = {
                "commit": lambda: q.commit(r),
                "extend": lambda: q.extend(r, timeout=ticks(lease)),
                "move": lambda: q.move(r, self.next_name),
            }[action]()

        def reserver():
            # room for a group's next message, made head when a head leaves meanwhile
            room = len(ok) + 1 + sum(m.group is not None for m in ready)
            out["got"] = self.q("B").reserve(room, worker="B", timeout=ticks(lease))

        run_at_once(holder, reserver)
        won, got = out["won"], out["got"]
        taken = {(g.key, g.kind) for g in got}
        m = self.msgs[kk]
        if won:
            assert kk not in taken, ("the expired holder and a reserver both got it", action)
            if action == "extend":
                m.lease(self.t + lease, str(won.token))
                self.handles.append(won)
            else:
                self.finish(kk, "succeeded" if action == "commit" else "moved")
                if action == "move":
                    self.next.setdefault(kk, (m.pid, m.priority))
            ready = [x for x in ready if x.kk != kk]
            ok.discard(kk)
        else:
            assert kk in taken or m.attempts >= MAX_ATTEMPTS or self.is_expired(m.pid), (
                "nobody got the message whose reservation expired", action,
            )  # fmt: skip
        self._reserve_effects(ready, sorted(got, key=lambda g: (g.key, g.kind)), lease)
        assert taken - self.promoted == ok, ("the reserver left ready messages behind", taken, ok)

    @rule(which=st.sampled_from(("dlq", "next")))
    def drain_side_queue(self, which):
        name, model = (self.dlq_name, self.dlq) if which == "dlq" else (self.next_name, self.next)
        got = self.q("C", name).pop(100)
        # a moved message past its expiry is ended by the pop (a dead letter never expires)
        want = {kk: v for kk, v in model.items() if which == "dlq" or not self.is_expired(v[0])}
        assert {(g.key, g.kind): (g.payload["n"], g.priority) for g in got} == want
        assert all(g.attempts == 0 for g in got)
        model.clear()

    # ---- invariants after every step -----------------------------------------
    @invariant()
    def database_equals_model(self):
        self.steps += 1  # (after every step: the dead letters' order, see dlq_step)
        every = self.all_rows((self.main, self.dlq_name, self.next_name))
        rows = every[self.main]
        want = {
            kk: (m.pid, m.priority, m.attempts, m.token, self.state(m) == "ready", m.group, m.blocked)
            for kk, m in self.msgs.items()
        }
        assert rows == want, (
            "main differs from the model",
            {
                kk: (rows.get(kk), want.get(kk))
                for kk in set(rows) | set(want)
                if rows.get(kk) != want.get(kk)
            },
            self.t,
        )
        assert not {r[0] for r in rows.values()} & self.popped, "a popped message is back"
        for name, model in ((self.dlq_name, self.dlq), (self.next_name, self.next)):
            side = every[name]
            # dead letters and moved messages carry no group
            assert side == {kk: (pid, pr, 0, None, True, None, False) for kk, (pid, pr) in model.items()}, (
                name,
                side,
                model,
            )
        st_ = self.q("admin").stats()
        states = [self.state(m) for m in self.msgs.values()]
        assert (st_.ready, st_.delayed, st_.reserved, st_.dead, st_.paused) == (
            states.count("ready"),
            states.count("delayed"),
            states.count("reserved"),
            self.dead,
            self.paused,
        ), st_
        for name, model in ((self.dlq_name, self.dlq), (self.next_name, self.next)):
            # queue_stats reads the rows and the clock: with the same rows (checked above) at the
            # same model time as at its last check it says the same (a side queue is checked again
            # only after it changed: most steps leave both as they were)
            seen = (frozenset(every[name].items()), self.t)
            if self.side_stats_seen.get(name) == seen:
                continue
            s = self.q("admin", name).stats()
            assert (s.ready, s.delayed, s.reserved) == (len(model), 0, 0), (name, s)
            self.side_stats_seen[name] = seen

    @invariant()
    def ready_at_keeps_its_place(self):
        """MySQL/MariaDB: every row of the example's queues keeps ready_at <= scheduled_at, the two
        equal while no reservation token is on the row (the sentinel in both for a row blocked behind
        its group's head or waiting for its parents); and a held row of main lies as far past its
        ready_at as the model's lease end past its ready time: a claim or an extend left ready_at
        where it was (within a quarter tick: the seconds an example takes)."""
        if self.dialect != "mysql":
            return
        found = {}
        for q, k, kd, le, eq, s_sent, r_sent, gap, *row in sql(
            self.conns["admin"], READY_SQL, (self.main, self.main + ".%")
        ):
            assert le and eq and s_sent == r_sent, ("ready_at against scheduled_at", q, k, kd, row)
            if q == self.main:
                found[(k, kd)] = float(gap)
        for kk, m in self.msgs.items():
            if m.token is not None and not m.blocked:
                want = (m.due - m.ready) * TICK_S
                assert abs(found[kk] - want) < TICK_S / 4, (
                    "a held message's ready_at is not where the model has it", kk, found[kk], want, m,
                )  # fmt: skip

    def expire_all(self) -> None:
        """Ends in the model every message past its expiry, as the drain's pops will (and what
        follows: a group's next message, children cancelled or made due); blocked ones too: the
        drain reaches every message of a group."""
        while met := sorted(kk for kk, m in self.msgs.items() if self.is_expired(m.pid)):
            for kk in met:
                if kk in self.msgs:
                    self.expire(kk)

    @covers("queue_drop")
    def teardown(self):
        admin = self.conns["admin"]
        try:
            # Nothing lost: after every lease and delay has passed, draining the
            # three queues gives back exactly the payloads the model holds.
            admin.queue(self.main).resume()
            self.shift(10)
            self.expire_all()
            left: set = set()
            # a group's next message after each pop (a PostgreSQL pop that ends an expired head
            # returns without its next one: the loop goes on while anything left is ready; a
            # schedule's next occurrence, pushed ahead by the last pop, is never ready here)
            for _ in range(100):
                got = admin.queue(self.main).pop(1000)
                left |= {g.payload["n"] for g in got}
                if not got and not any(row[4] for row in self.rows(self.main).values()):
                    break
            assert left == {m.pid for m in self.msgs.values()}, ("drained main", left, self.msgs)
            for name, model in ((self.dlq_name, self.dlq), (self.next_name, self.next)):
                assert {g.payload["n"] for g in admin.queue(name).pop(1000)} == {
                    p for p, _ in model.values() if name == self.dlq_name or not self.is_expired(p)
                }
        finally:
            for name in (self.main, self.dlq_name, self.next_name):
                admin.queue(name).drop()


def run_machine(connect, dialect, machine=QueueMachine, settings_=SETTINGS):
    conns = {name: connect() for name in CONNECTIONS}
    bound = type(f"{machine.__name__}_{dialect}", (machine,), {"conns": conns, "dialect": dialect})
    run_state_machine_as_test(bound, settings=settings_)


def test_random_interleavings_match_the_model(connect, dialect):
    run_machine(connect, dialect)


def test_the_whole_contract_matches_the_model(connect, dialect):
    print(f"the whole contract's model: {CONTRACT_EXAMPLES} examples on {dialect} (PYQUEUE_MODEL_EXAMPLES)")
    run_machine(connect, dialect, ContractMachine, CONTRACT_SETTINGS)


def test_the_models_drain_readies_a_callback_of_a_callback_whose_redriven_parent_succeeds(connect, dialect):
    """The whole contract's model, steps fixed: x0 dead-lettered; c0 a failure callback of its
    dead letter, c1 a failure callback of c0; x0 redriven into main (after them in the model's
    table). The drain pops x0: c0 is cancelled (every parent succeeded) and c1, a failure
    callback of a parent cancelled, is readied and drained (a long run, seed 2, found the model
    cancelling c1 as if c0 had succeeded, when it drained c0 before x0)."""
    conns = {name: connect() for name in CONNECTIONS}
    machine = type(f"ContractMachine_{dialect}", (ContractMachine,), {"conns": conns, "dialect": dialect})()
    machine.fail_until_dead(False, 0)
    dead = ("dlq", ("x0", "x"))
    for child, parent in ((("c0", "a"), dead), (("c1", "a"), ("main", ("c0", "a")))):
        candidates = sorted(("main", kk) for kk in set(machine.msgs) | set(machine.results))
        candidates += sorted(("dlq", kk) for kk in set(machine.dlq) | set(machine.dlq_results))
        machine.push_after(*child, [candidates.index(parent)], "failure")
        assert machine.waiting[child] == {parent}
    machine.redrive(1)
    assert list(machine.msgs) == [("c0", "a"), ("c1", "a"), ("x0", "x")]
    machine.teardown()


def test_move_of_an_expired_reservation_races_a_reserve(connect, dialect):
    """The holder of an expired reservation moves it while another connection
    reserves the queue: exactly one of them wins each message. On MySQL the
    move is an UPDATE of the row's queue_name, so queue_reserve / queue_pop /
    queue_commit_reserve must not claim a candidate by id alone: a reserve that
    listed the row before the move would re-read it, moved, and reserve it in
    the target queue, while the move returned true (the model found this
    interleaving; the loop below replays it many times)."""
    admin, mover, reserver = connect(), connect(), connect()
    tag = uuid.uuid4().hex[:12]
    src, dst = admin.queue(f"t.race.{tag}").create(), admin.queue(f"t.race.{tag}.to").create()
    try:
        both = 0
        for round_ in range(80):
            src.push_many([(f"m{round_}-{i:02d}", "k", i) for i in range(20)])
            held = src.reserve(20, worker="old", timeout=ticks(1.5))
            assert len(held) == 20
            shift(admin, dialect, 2 * TICK_S, (src.name, src.name, src.name))  # all expire
            barrier = threading.Barrier(2)
            out: dict = {}

            def move_all():
                barrier.wait(timeout=30)
                q = mover.queue(src.name)
                # last first: the row being moved when the reserve starts comes late in its walk
                out["moved"] = {r.key for r in reversed(held) if q.move(r, dst.name)}

            def reserve_all():
                barrier.wait(timeout=30)
                time.sleep(0.0005 * (round_ % 10))  # start at various points of the mover's run
                q, got = reserver.queue(src.name), []
                for _ in range(5):
                    got += q.reserve(20, worker="new", timeout=ticks(1.5))
                out["got"] = {r.key for r in got}

            threads = [threading.Thread(target=move_all), threading.Thread(target=reserve_all)]
            for th in threads:
                th.start()
            for th in threads:
                th.join()
            moved, got = out["moved"], out["got"]
            both += len(moved & got)
            assert not moved & got, ("moved and reserved at once", sorted(moved & got))
            s = dst.stats()
            assert (s.ready, s.reserved) == (len(moved), 0), s
            assert len(moved) + len(got) <= 20
            dst.pop(100)
            src.pop(100)
            for r in src.reserve(100, timeout=ticks(1.5)):
                src.commit(r)
            shift(admin, dialect, 10 * TICK_S, (src.name, src.name, src.name))
            for _m in src.pop(100):
                pass
        assert both == 0
    finally:
        src.drop()
        dst.drop()


class ContractMachine(
    SettleRules, ProduceRules, DependencyRules, ScheduleRules, AdminRules, LimitRules, QueueMachine
):
    """The whole contract: QueueMachine's rules with FIFO groups, and the rules of every other
    routine that changes state (tests/concurrency/model/, one module per topic). main and its
    dead-letter queue keep results (2.5 ticks), so every way out of main records its outcome, and
    after every step pyqueue_result must equal the model's, with each live message's progress and
    cancel request."""

    GROUPS = (None, None, "g1", "g2")

    def __init__(self) -> None:
        super().__init__()
        admin = self.conns["admin"]
        for name in (self.main, self.dlq_name):
            admin.queue(name).set_result_retention(ticks(2.5))
        self.retention = True
        self.results: dict = {}  # kk -> (state, result, progress, finished at: model ticks)
        self.dlq_results: dict = {}  # kk -> state
        self.progress: dict = {}  # kk -> the live message's progress
        self.cancel_requested: set = set()
        self.waiting: dict = {}  # child kk -> {(where, parent kk)} of the parents it still waits for
        self.run_on: dict = {}  # child kk -> 'failure' or 'always' (queue_push_after_on); else success
        self.schedules: dict = {}
        self.dep_children: set = set()  # live children pushed with parents (their rows in pyqueue_dependency)
        self.dep_parents: set = set()  # live messages of main that were named as a parent
        self.topic = f"t.model.{self.main.rsplit('.', 1)[1]}"
        self.bound: set = set()
        self.lim_name = f"{self.main}.lim"
        admin.queue(self.lim_name).create(visibility_timeout=ticks(1.5))
        self.lim: list = []
        self.lim_handles: list = []
        self.lim_cap = self.lim_rate = None
        self.lim_rate_used = 0
        self.lim_k = 1
        self.step = 0
        self.last_errors: dict = {}  # kk -> the last_error of its outcome when it expired

    def finish(self, kk, outcome, result=None):
        m = super().finish(kk, outcome, result)
        how, outcome = outcome, "succeeded" if outcome == "popped" else outcome
        progress = self.progress.pop(kk, None)
        self.last_errors.pop(kk, None)
        self.cancel_requested.discard(kk)
        self.waiting.pop(kk, None)
        self.run_on.pop(kk, None)
        self.dep_children.discard(kk)
        self.dep_parents.discard(kk)
        if outcome in ("succeeded", "failed", "cancelled") and self.retention:
            self.results[kk] = (outcome, result, progress, self.t)
        self.parent_left("main", kk, outcome)
        self.occurrence_ended(kk, how)
        return m

    def add(self, m: Msg) -> None:
        super().add(m)
        self.progress.pop(m.kk, None)

    def expire(self, kk) -> None:
        text = self.expires_text(self.msgs[kk].pid)
        super().expire(kk)
        if self.retention:
            self.last_errors[kk] = f"expired at {text}"

    def shift(self, n: int) -> None:
        super().shift(n)
        back = (
            f"- make_interval(secs => {n * TICK_S})"
            if self.dialect == "postgresql"
            else f"- INTERVAL {n * TICK_S} SECOND"
        )
        sql(
            self.conns["admin"],
            f"UPDATE pyqueue_result SET finished_at = finished_at {back} WHERE queue_name = %s",
            (self.main,),
        )

    @rule(which=st.sampled_from(("dlq", "next")))
    def drain_side_queue(self, which):
        kks = list(self.dlq if which == "dlq" else ())
        super().drain_side_queue(which)
        for kk in kks:
            self.dlq_results[kk] = "succeeded"
            self.parent_left("dlq", kk, "succeeded")

    @rule()
    @covers("queue_drop", "queue_create")
    def drop_next(self):
        """next dropped with its messages and made again: empty."""
        admin = self.conns["admin"]
        admin.queue(self.next_name).drop()
        admin.queue(self.next_name).create()
        self.next.clear()
        self.bound.discard(self.next_name)

    @invariant()
    def results_equal_model(self):
        found = {
            (k, kd): (state, self.as_json(result), self.as_json(progress))
            for k, kd, state, result, progress in sql(
                self.conns["admin"],
                "SELECT p_key, p_kind, state, result, progress FROM pyqueue_result WHERE queue_name = %s",
                (self.main,),
            )
        }
        want = {kk: (st_, r, p) for kk, (st_, r, p, _) in self.results.items()}
        assert found == want, ("pyqueue_result differs from the model", found, want)
        if self.last_errors:
            errors = {
                (k, kd): e
                for k, kd, e in sql(
                    self.conns["admin"],
                    "SELECT p_key, p_kind, last_error FROM pyqueue_result WHERE queue_name = %s",
                    (self.main,),
                )
            }
            want_errors = {kk: e for kk, e in self.last_errors.items() if kk in self.results}
            assert {kk: errors.get(kk) for kk in want_errors} == want_errors, ("expired: last_error", errors)
        live = {
            (k, kd): (self.as_json(progress), bool(asked))
            for k, kd, progress, asked in sql(
                self.conns["admin"],
                "SELECT p_key, p_kind, progress, cancel_requested_at IS NOT NULL FROM pyqueue_message"
                " WHERE queue_name = %s",
                (self.main,),
            )
        }
        want_live = {kk: (self.progress.get(kk), kk in self.cancel_requested) for kk in self.msgs}
        assert live == want_live, ("progress and cancel requests", live, want_live)

    @invariant()
    def no_history_kept(self):
        """The example's queues keep no history (history_retention NULL): nothing is archived."""
        n = sql(
            self.conns["admin"],
            "SELECT count(*) FROM pyqueue_history WHERE queue_name IN (%s, %s, %s, %s)",
            (self.main, self.dlq_name, self.next_name, self.lim_name),
        )[0][0]
        assert n == 0, ("history kept without a history retention", n)

    def as_json(self, value):
        """A JSON column as Python (PyMySQL returns its text)."""
        return json.loads(value) if self.dialect == "mysql" and isinstance(value, (str, bytes)) else value

    def teardown(self):
        try:
            # the dead letters first: children waiting on them are ready once they are popped; a
            # schedule's occurrence may be due many ticks on (each one run moves its chain a step)
            self.shift(max([10] + [int(m.due - self.t) + 2 for m in self.msgs.values() if not m.blocked]))
            self.drain_side_queue("dlq")
            self.expire_all()
            # the drain pops every parent left: a failure callback whose parents all succeed so is
            # cancelled (with its own waiting children), never drained. Only a message not waiting
            # is popped: a waiting child (one pushed before its parent was redriven into main comes
            # first in self.msgs) ends only through its parents, and a failure callback of one that
            # is cancelled so is readied and drained, not cancelled as if its parent had succeeded
            for _ in range(len(self.waiting) + 1):
                for kk in list(self.msgs):
                    if kk in self.msgs and kk not in self.waiting:
                        self.parent_left("main", kk, "succeeded")
            super().teardown()
        finally:
            admin = self.conns["admin"]
            admin.queue(self.lim_name).drop()
