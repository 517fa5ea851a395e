"""Settings, dead letters, history and workers (docs/contract.md, Queues, History and dead letters,
Results, Workers): set_max_payload, set_max_reservation, set_notify_window, reset_setting,
set_result_retention, purge_history, redrive, replay, worker_register / heartbeat / deregister
and release_dead_workers."""

from __future__ import annotations

import datetime as dt

import pytest
from hypothesis import strategies as st
from hypothesis.stateful import rule

from pyqueue_sql.errors import InvalidArgumentError, InvalidPayloadError

from .base import Msg, keys, kinds, sql, ticks
from .coverage import covers


class AdminRules:
    @rule(cap=st.sampled_from((None, 300)), key=keys, kind=kinds)
    @covers("queue_set_max_payload", "queue_reset_setting")
    def max_payload(self, cap, key, kind):
        """A payload longer than max_payload is refused (invalid_payload), nothing written."""
        q = self.q("admin")
        if cap is None:
            q.reset_setting("max_payload")
        else:
            q.set_max_payload(cap)
        assert q.settings().max_payload == (cap or 1048576)
        pid = next(self.pids)
        payload = {"n": pid, "pad": "x" * 400}
        try:
            inserted = self.q("P").push(key, kind, payload)
        except Exception as e:  # noqa: BLE001 - checked against the model
            assert cap is not None and isinstance(e, InvalidPayloadError), e
            return
        assert cap is None, "a payload above max_payload was pushed"
        assert inserted == ((key, kind) not in self.msgs)
        if inserted:
            self.add(Msg(key, kind, pid, 0, 0, self.t, None, None, False, self.t))

    @rule(n=st.integers(1, 2))
    @covers("queue_set_max_reservation", "queue_reset_setting")
    def max_reservation(self, n):
        """A reserve asking for a timeout above max_reservation is refused and hands out nothing;
        reset, the cap is 12 hours again."""
        q = self.q("admin")
        q.set_max_reservation(ticks(2))
        try:
            if self.paused:
                return
            before = self.all_rows((self.main,))
            with pytest.raises(InvalidArgumentError, match="max_reservation"):
                self.q("A").reserve(n, worker="A", timeout=ticks(2.5))
            assert self.all_rows((self.main,)) == before
        finally:
            q.reset_setting("max_reservation")
        assert q.settings().max_reservation == dt.timedelta(hours=12) or q.settings().max_reservation == 43200

    @rule(window=st.sampled_from((None, 0.2, 1.0)))
    @covers("queue_set_notify_window")
    def notify_window(self, window):
        q = self.q("admin")
        q.set_notify_window(None if window is None else dt.timedelta(seconds=window))
        got = q.settings().notify_window
        # unset: the default window (PostgreSQL 5 ms; MySQL/MariaDB 50 ms, shown and not read there)
        want = (0.005 if self.dialect == "postgresql" else 0.05) if window is None else window
        seconds = got.total_seconds() if isinstance(got, dt.timedelta) else float(got)
        assert abs(seconds - want) < 1e-6, (got, want)

    @rule(on=st.booleans(), reset=st.booleans())
    @covers("queue_set_result_retention", "queue_reset_setting")
    def result_retention(self, on, reset):
        """Off (or reset to its default, off) is refused while messages of the queue have parents
        or children."""
        q = self.q("admin")
        if on:
            q.set_result_retention(dt.timedelta(seconds=2.5 * 1200))
            self.retention = True
            return
        try:
            q.reset_setting("result_retention") if reset else q.set_result_retention(None)
        except Exception as e:  # noqa: BLE001
            assert (self.dep_children or self.dep_parents) and isinstance(e, InvalidArgumentError), e
            return
        assert not (self.dep_children or self.dep_parents), "retention turned off under dependencies"
        self.retention = False

    @rule()
    @covers("queue_purge_history")
    def purge_history(self):
        """Deletes the outcomes older than the retention (2.5 ticks; all when it is off)."""
        n = self.q("admin").purge_history(10_000)
        gone = [kk for kk, r in self.results.items() if not self.retention or self.t - r[3] > 2.5]
        assert n >= len(gone), (n, gone)
        for kk in gone:
            del self.results[kk]

    @rule(state=st.sampled_from([None, "succeeded", "failed", "cancelled"]))
    @covers("queue_purge_results")
    def purge_results(self, state):
        """Deletes the queue's stored outcomes (of one state, or all) that finished before now,
        whatever the retention."""
        gone = [kk for kk, r in self.results.items() if state is None or r[0] == state]
        n = self.q("admin").purge_results(state)
        assert n == len(gone), ("purge_results", state, n, gone)
        for kk in gone:
            del self.results[kk]

    @rule(n=st.integers(1, 3))
    @covers("queue_redrive")
    def redrive(self, n):
        """Up to n dead letters back into main (FIFO; one whose key is live in main stays), attempts 0,
        ready now; a child waiting on it follows it (FIXED_REDRIVE_DEPENDENCY). Priority first, then
        dead-letter order: those of one step are a tie (any of them may go first, see dlq_step), so
        which of a tie moved is read from main."""
        self.redrive_into_main(n)

    @rule()
    @covers("queue_replay")
    def replay(self):
        """main keeps no history: nothing to replay."""
        assert self.q("admin").replay() == 0

    @rule(beat=st.booleans(), release=st.booleans())
    @covers(
        "queue_worker_register",
        "queue_worker_heartbeat",
        "queue_worker_deregister",
        "queue_release_dead_workers",
    )
    def workers(self, beat, release):
        """A registered worker's live reservations are ready again when it is found dead (attempts kept,
        tokens void); a deregistered one is gone."""
        db = self.conns["admin"]
        reg = db.register_worker("model-w", queues=[self.main])
        if beat:
            assert db.heartbeat_worker(reg)
        if not release:
            assert db.deregister_worker(reg)
            assert not db.deregister_worker(reg)
            return
        # a worker that beat just now is not dead, whatever the others
        assert db.release_dead_workers(dt.timedelta(days=1)) == 0
        assert db.heartbeat_worker(reg), "a live worker was released"
        # its last heartbeat two days ago (only this worker: other tests' workers stay alive)
        back = "- interval '2 days'" if self.dialect == "postgresql" else "- INTERVAL 2 DAY"
        sql(
            db,
            f"UPDATE pyqueue_worker SET heartbeat_at = heartbeat_at {back} WHERE worker_id = %s",
            (reg.worker_id,),
        )
        assert db.release_dead_workers(dt.timedelta(days=1)) == 0  # it held nothing
        assert not db.heartbeat_worker(reg), "a released worker still beats"
