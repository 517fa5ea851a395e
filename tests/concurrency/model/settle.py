"""The settle routines beyond commit/rollback/extend/move/remove (docs/contract.md, Consume, Fast
paths, Results): snooze, fail, give_up, release, commit_batch, commit_reserve, the results'
commits, cancel, cancel_held, renew and set_progress."""

from __future__ import annotations

import re

import pytest
from hypothesis import strategies as st
from hypothesis.stateful import rule

from pyqueue_sql.errors import InvalidArgumentError

from .base import (
    CONNECTIONS,
    MAX_ATTEMPTS,
    Msg,
    consumers,
    handle_index,
    keys,
    kinds,
    leases,
    rollback_delays,
    ticks,
)
from .coverage import covers


def is_occurrence(key: str) -> bool:
    """A schedule's occurrence key (ends in @<UTC time>): queue_cancel refuses it, whoever calls."""
    return re.search(r"@\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ$", key) is not None


class SettleRules:
    @rule(snooze_first=st.booleans(), j=st.integers(0, 3))
    @covers("queue_fail", "queue_snooze")
    def fail_until_dead(self, snooze_first, j):
        """One message of its own kind (x) reserved and failed until it is dead-lettered: the fail
        of its max_attempts-th delivery dead-letters it (a snooze in between uses no attempt)."""
        kk = (f"x{j}", "x")
        if kk in self.msgs or self.paused:
            return
        pid = next(self.pids)
        assert self.q("P").push(*kk, {"n": pid})
        self.add(Msg(*kk, pid, 0, 0, self.t, None, None, False, self.t))
        for step in range(2 * MAX_ATTEMPTS + 1):
            if kk not in self.msgs:
                return
            self.reserve("A", 1, 1.5, ("x",))
            if self.msgs[kk].token is None:
                return
            if snooze_first and step == 0:
                self.snooze("A", 0, 0)
            else:
                self.fail("A", 0, 0, False)
        raise AssertionError(("never dead-lettered", self.msgs.get(kk)))

    @rule(conn=consumers, i=handle_index, delay=rollback_delays)
    @covers("queue_snooze")
    def snooze(self, conn, i, delay):
        """Gives the message back without using up an attempt: attempts one less, never dead-lettered."""
        if not self.handles:
            return
        r = self.pick(i)
        m = self.holds(r)
        assert self.q(conn).snooze(r, delay=ticks(delay) if delay else None) == (m is not None), ("snooze", r)
        if m is not None:
            m.attempts, m.due, m.token = m.attempts - 1, self.t + delay, None

    @rule(conn=consumers, i=handle_index, ask_cancel=st.booleans(), new_payload=st.booleans())
    @covers("queue_move", "queue_cancel")
    def move_into_its_own_queue(self, conn, i, ask_cancel, new_payload):
        """A move of a held message of main into main: ready now, its attempts, progress, group
        (a head stays head), headers and a cancel request made while it was held kept, no result
        recorded, its children still waiting; a schedule's pending occurrence makes way for the
        next one (docs/contract/06_settle.md, queue_move)."""
        if not self.handles:
            return
        r = self.pick(i)
        m = self.holds(r)
        # an admin's cancel of a message whose lease is live: only requested (an expired lease's
        # message nobody holds would be cancelled outright; an occurrence is refused)
        if m is not None and ask_cancel and not is_occurrence(m.kk[0]) and self.state(m) == "reserved":
            assert self.q("admin").cancel(*m.kk) == "requested"
            self.cancel_requested.add(m.kk)
        pid = next(self.pids) if new_payload else None
        q = self.q(conn)
        moved = q.move(r, self.main, {"n": pid}) if new_payload else q.move(r, self.main)
        assert moved == (m is not None), ("move into its own queue", r, m)
        if m is None:
            return
        if pid is not None:
            if m.pid in self.expiry:  # the headers go with it
                self.expiry[pid] = self.expiry[m.pid]
            m.pid = pid
        m.due, m.init, m.token = self.t, self.t, None
        self.occurrence_ended(m.kk, "moved")

    @rule(conn=consumers, i=handle_index, delay=rollback_delays, give_up=st.booleans())
    @covers("queue_fail", "queue_give_up")
    def fail(self, conn, i, delay, give_up):
        """fail: 'retry', or 'dead_lettered' after max_attempts; give_up: 'dead_lettered' now."""
        if not self.handles:
            return
        r = self.pick(i)
        m = self.holds(r)
        q = self.q(conn)
        got = (
            q.give_up(r, "gave up") if give_up else q.fail(r, "failed", delay=ticks(delay) if delay else None)
        )
        if m is None:
            assert got is None, ("fail of a reservation that no longer holds", got)
        elif give_up or m.attempts >= MAX_ATTEMPTS:
            assert got == "dead_lettered", got
            self.dead_letter(m.kk)
        else:
            assert got == "retry", got
            m.due, m.token = self.t + delay, None
            self.occurrence_retried(m.kk)

    @rule(worker=st.sampled_from((None, "nobody")))
    @covers("queue_release")
    def release(self, worker):
        """Every live reservation (of the worker: none reserves as "nobody") is ready now, its
        token void, attempts kept."""
        held = [m for m in self.msgs.values() if self.state(m) == "reserved" and worker is None]
        assert self.q("admin").release(worker) == len(held)
        for m in held:
            m.due, m.token = self.t, None

    @rule(conn=consumers, ii=st.lists(handle_index, min_size=1, max_size=3), results=st.booleans())
    @covers("queue_commit_batch", "queue_commit_result_batch")
    def commit_many(self, conn, ii, results):
        if not self.handles:
            return
        batch = {}
        for i in ii:
            r = self.pick(i)
            batch.setdefault((r.key, r.kind), r)
        held = [self.holds(r) for r in batch.values()]
        q = self.q(conn)
        if results and not self.retention:
            with pytest.raises(InvalidArgumentError):
                q.commit_result_many([(r, None) for r in batch.values()])
            return
        if results:
            got = q.commit_result_many([(r, {"r": n}) for n, r in enumerate(batch.values())])
        else:
            got = q.commit_many(list(batch.values()))
        assert got == sum(m is not None for m in held), ("commit batch", got, held)
        for n, m in enumerate(held):
            if m is not None:
                self.finish(m.kk, "succeeded", {"r": n} if results else None)

    @rule(conn=consumers, i=handle_index, result=st.sampled_from((None, 1, "x", {"a": [1]})))
    @covers("queue_commit_result")
    def commit_result(self, conn, i, result):
        if not self.handles:
            return
        r = self.pick(i)
        m = self.holds(r)
        if not self.retention:
            with pytest.raises(InvalidArgumentError):
                self.q(conn).commit_result(r, result)
            return
        assert self.q(conn).commit_result(r, result) == (m is not None)
        if m is not None:
            self.finish(m.kk, "succeeded", result)

    @rule(conn=consumers, i=handle_index)
    @covers("queue_cancel_held")
    def cancel_held(self, conn, i):
        if not self.handles:
            return
        r = self.pick(i)
        m = self.holds(r)
        assert self.q(conn).cancel_held(r) == (m is not None)
        if m is not None:
            self.finish(m.kk, "cancelled")

    @rule(conn=st.sampled_from(CONNECTIONS), key=keys, kind=kinds, j=st.integers(0, 50))
    @covers("queue_cancel")
    def cancel(self, conn, key, kind, j):
        """cancelled (nobody holds it: removed), requested (a live reservation holds it), unknown;
        a schedule's occurrence is refused, whoever calls, and left as it is (only an admin's
        queue_remove or its holder ends one before it runs)."""
        live = sorted(self.msgs)
        kk = live[j % len(live)] if live and j % 2 else (key, kind)
        if is_occurrence(kk[0]):
            with pytest.raises(InvalidArgumentError, match="schedule's occurrence"):
                self.q(conn).cancel(*kk)
            return
        got = self.q(conn).cancel(*kk)
        m = self.msgs.get(kk)
        if m is None:
            assert got == "unknown", got
        elif self.state(m) == "reserved":
            assert got == "requested", got
            self.cancel_requested.add(kk)
        else:
            assert got == "cancelled", (got, m)
            self.finish(kk, "cancelled")

    @rule(conn=consumers, i=handle_index, lease=leases)
    @covers("queue_renew")
    def renew(self, conn, i, lease):
        if not self.handles:
            return
        r = self.pick(i)
        m = self.holds(r)
        got = self.q(conn).renew(r, timeout=ticks(lease))
        if m is None:
            assert got.reservation is None and not got.cancel_requested, got
            return
        assert got.reservation is not None and str(got.reservation.token) != m.token
        assert got.cancel_requested == (m.kk in self.cancel_requested), (got, m)
        m.lease(self.t + lease, str(got.reservation.token))
        self.handles.append(got.reservation)

    @rule(conn=consumers, i=handle_index, p=st.integers(0, 9))
    @covers("queue_set_progress")
    def set_progress(self, conn, i, p):
        if not self.handles:
            return
        r = self.pick(i)
        m = self.holds(r)
        assert self.q(conn).set_progress(r, {"p": p}) == (m is not None)
        if m is not None:
            self.progress[m.kk] = {"p": p}

    @rule(conn=consumers, i=handle_index, n=st.integers(1, 3), lease=leases)
    @covers("queue_commit_reserve")
    def commit_reserve(self, conn, i, n, lease):
        """Commits a reservation (or none) and reserves the next n in the same call: the commit first
        where the dialect puts it first (see commit_comes_first), so that what it makes ready (a
        waiting child, a group's next message) is the reserve's to take; else after the reserve."""
        r = self.pick(i) if self.handles and i % 4 else None
        m = self.holds(r) if r is not None else None
        if self.paused:
            return
        self.promoted = set()
        first = m is not None and self.commit_comes_first(conn, m, n)
        committed, got = self.q(conn).commit_reserve(r, n, worker=conn, timeout=ticks(lease))
        assert committed == (None if r is None else m is not None), ("commit_reserve", committed, m)
        if first:
            self.finish(m.kk, "succeeded")
        ready = self.ready()
        self.check_reserve(ready, got, n, lease)
        if m is not None and not first:
            self.finish(m.kk, "succeeded")

    def commit_comes_first(self, conn, m, n) -> bool:
        """Whether queue_commit_reserve commits the held message m before its reserve of n
        (docs/contract/09_fast_paths.md): always on PostgreSQL; on MySQL/MariaDB for a grouped
        message, for an expired reservation, and on MariaDB in autocommit mode for one message
        (n = 1) from a queue without limits where no message lies above priority 0 (the short
        way, in the call's own transaction); otherwise MySQL reserves first and commits after."""
        if self.dialect == "postgresql" or m.group is not None or m.due <= self.t:
            return True
        connection = self.conns[conn].connection
        own = bool(connection.get_autocommit()) and "MariaDB" in str(connection.get_server_info())
        return own and n == 1 and not any(x.priority > 0 for x in self.msgs.values())
