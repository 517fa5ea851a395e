"""Dependencies (docs/contract.md, Dependencies): queue_push_after with parents in main or in its
dead-letter queue; the child waits (the blocked sentinel, no group) until every parent succeeded
(commit, the results' commits, pop, move), and is cancelled, transitively, when one fails, is
cancelled or removed; queue_push_after_on's failure callbacks and always children as the contract's
"Kinds of dependency" says. A dead-lettered parent that is redriven takes its children along
(FIXED_REDRIVE_DEPENDENCY); a parent's commit racing a push_after under REPEATABLE READ never
strands the child (FIXED_REPEATABLE_READ), and push_after holds at most a key-share lock on the
queue row (FIXED_QUEUE_ROW_LOCK)."""

from __future__ import annotations

import json
import time

from hypothesis import strategies as st
from hypothesis.stateful import rule

from pyqueue_sql.errors import InvalidArgumentError

from .base import Msg, kinds, priorities, sql, ticks
from .coverage import covers

CHILD_KEYS = ("c0", "c1", "c2")


class DependencyRules:
    def parent_ref(self, where: str, kk) -> dict:
        return {"queue": self.main if where == "main" else self.dlq_name, "p_key": kk[0], "p_kind": kk[1]}

    def parent_state(self, where: str, kk) -> str:
        """live, succeeded, failed/cancelled (a stored outcome) or unknown."""
        if where == "main":
            if kk in self.msgs:
                return "live"
            return self.results.get(kk, ("unknown",))[0]
        return "live" if kk in self.dlq else self.dlq_results.get(kk, "unknown")

    @rule(
        key=st.sampled_from(CHILD_KEYS),
        kind=kinds,
        picks=st.lists(st.integers(0, 50), min_size=1, max_size=3),
        run_on=st.sampled_from((None, "success", "failure", "always")),
        via=st.sampled_from(("sql", "headers", "batch")),
        run_at=st.sampled_from((None, None, 0.5, 1.5)),
        priority=priorities,
    )
    @covers(
        "queue_push_after",
        "queue_push_after_on",
        "queue_push_after_on_with_headers",
        "queue_push_after_batch",
    )
    def push_after(self, key, kind, picks, run_on, via="sql", run_at=None, priority=0):
        """queue_push_after (run_on None) or queue_push_after_on (plain SQL), its _with_headers
        sibling or queue_push_after_batch (via): the child waits for its live parents.
        success: refused when a parent failed, was cancelled or is unknown; ready when every one
        succeeded. failure (a failure callback): refused when every parent succeeded already; ready at
        once when one failed or was cancelled already. always: ready when no parent is live.
        _with_headers: a run_at (ticks on) and a priority; the child is due at the later of its
        run_at and the end that lets it run."""
        # a schedule's occurrence is never a parent, in main or dead-lettered in dlq: refused, see
        # push_after_names_an_occurrence (its key carries the real clock's time, so drawing one here
        # also made the outcome of an example differ between hypothesis' replays of it)
        candidates = sorted(("main", kk) for kk in set(self.msgs) | set(self.results) if "@" not in kk[0])
        if FIXED_REDRIVE_DEPENDENCY:
            candidates += sorted(
                ("dlq", kk) for kk in set(self.dlq) | set(self.dlq_results) if "@" not in kk[0]
            )
        if not candidates or not self.retention:
            return
        parents = list(dict.fromkeys(candidates[p % len(candidates)] for p in picks))
        if (key, kind) in {kk for _, kk in parents}:
            return
        pid = next(self.pids)
        states = [self.parent_state(w, kk) for w, kk in parents]
        refs = [self.parent_ref(w, kk) for w, kk in parents]
        how = run_on or "success"
        if via != "headers" or run_on is None:
            run_at, priority = None, 0
        # a live child key: false (dedup, before the parents are read), whatever the parents
        live_key = (key, kind) in self.msgs
        ended_badly = any(s in ("failed", "cancelled") for s in states)
        if how == "success":
            refused = any(s not in ("live", "succeeded") for s in states)
        else:
            refused = "unknown" in states or (how == "failure" and all(s == "succeeded" for s in states))
        refused = refused and not live_key
        try:
            if run_on is None:
                got = self.q("P").push_after(key, kind, {"n": pid}, refs)
            elif via == "headers":  # queue_push_after_on_with_headers
                got = self.q("P").push_after(
                    key, kind, {"n": pid}, refs, run_on=run_on, priority=priority,
                    run_at=ticks(run_at) if run_at else None,
                )  # fmt: skip
            elif via == "batch":  # queue_push_after_batch of one message
                one = {"key": key, "kind": kind, "payload": {"n": pid}, "parents": refs, "run_on": run_on}
                got = bool(self.q("P").push_after_many([one]))
            else:
                got = self.push_after_on(key, kind, {"n": pid}, refs, run_on)
        except Exception as e:  # noqa: BLE001 - checked against the model
            assert refused, ("push_after refused", run_on, e, states, live_key)
            assert isinstance(e, InvalidArgumentError) or "pyqueue:invalid_argument" in str(e), e
            return
        assert not refused, ("push_after accepted", run_on, parents, states)
        assert got == ((key, kind) not in self.msgs), "push_after dedup"
        if not got:
            return
        live = {(w, kk) for (w, kk), s in zip(parents, states) if s == "live"}
        if how == "failure" and ended_badly:
            live = set()  # a parent failed already: the callback is ready at once
        due = self.t + (run_at or 0)
        m = Msg(key, kind, pid, priority, 0, due, None, None, bool(live), due)
        self.msgs[m.kk] = m
        if live:
            self.waiting[m.kk] = live
            if how != "success":
                self.run_on[m.kk] = how
        self.dep_children.add(m.kk)
        self.dep_parents |= {kk for w, kk in live if w == "main"}

    def push_after_on(self, key, kind, payload, refs, run_on) -> bool:
        """queue_push_after_on in plain SQL, as a psql or mysql session calls it."""
        args = (self.main, key, kind, json.dumps(payload), json.dumps(refs), run_on)
        if self.dialect == "postgresql":
            statement = "SELECT queue_push_after_on(%s, %s, %s, %s::jsonb, %s::jsonb, %s)"
        else:
            statement = "CALL queue_push_after_on(%s, %s, %s, %s, %s, %s)"
        return bool(sql(self.conns["P"], statement, args)[0][0])

    def parent_left(self, where: str, kk, outcome: str) -> None:
        """A parent left its queue (succeeded or moved on: it succeeded; else it failed). success:
        the child is ready when that was its last parent, cancelled when it failed. failure: ready
        (once) when it failed, cancelled when every parent succeeded. always: ready after the last."""
        for child, parents in list(self.waiting.items()):
            # a child made ready or cancelled meanwhile, by a nested call (a sibling this end
            # cancelled was its other parent), is not waiting any more
            if child not in self.waiting or (where, kk) not in parents or child not in self.msgs:
                continue
            how = self.run_on.get(child, "success")
            good = outcome in ("succeeded", "moved")
            parents.discard((where, kk))
            if (how == "success" and not good) or (how == "failure" and good and not parents):
                self.finish(child, "cancelled")
            elif not parents or (how == "failure" and not good):
                del self.waiting[child]
                c = self.msgs[child]
                c.blocked, c.due = False, max(self.t, c.init)  # init: its run_at
                self.promoted.add(child)

    def until_lock_wait(self, th, backend: int, limit: float = 0.3) -> None:
        """Returns once the thread is done or its connection (``backend``: its server-side id) is
        seen waiting for a lock, or after ``limit`` seconds (MySQL/MariaDB's INNODB_TRX may show
        a wait late)."""
        statement = (
            "SELECT wait_event_type = 'Lock' FROM pg_stat_activity WHERE pid = %s"
            if self.dialect == "postgresql"
            else "SELECT trx_state = 'LOCK WAIT' FROM information_schema.INNODB_TRX WHERE trx_mysql_thread_id = %s"
        )
        end = time.monotonic() + limit
        while th.is_alive() and time.monotonic() < end:
            if any(waiting for (waiting,) in sql(self.conns["admin"], statement, (backend,))):
                return
            th.join(0.005)

    def parent_redriven(self, kk) -> None:
        for parents in self.waiting.values():
            if ("dlq", kk) in parents:
                parents.discard(("dlq", kk))
                parents.add(("main", kk))

    @rule(key=st.sampled_from(CHILD_KEYS), kind=kinds, j=st.integers(0, 50))
    @covers("queue_push_after")
    def push_after_races_a_commit_under_repeatable_read(self, key, kind, j):
        """P pushes a child of a reserved parent in a transaction left open; A commits the parent
        in a REPEATABLE READ transaction whose snapshot was taken before P commits (its commit
        waits for P's lock on the parent, or not): once both have committed the child is ready,
        never left waiting for a parent that is gone. While P's transaction is open, admin changes
        the queue's settings: push_after holds no lock on the queue row that blocks that."""
        held = sorted(kk for kk, m in self.msgs.items() if self.state(m) == "reserved" and "@" not in kk[0])
        if not held and FIXED_REPEATABLE_READ:
            self.reserve("A", 1, 2.5)  # a parent to race for
            held = sorted(
                kk for kk, m in self.msgs.items() if self.state(m) == "reserved" and "@" not in kk[0]
            )
        if not FIXED_REPEATABLE_READ or not held or not self.retention or (key, kind) in self.msgs:
            return
        parent = held[j % len(held)]
        token = self.msgs[parent].token
        r = next(r for r in reversed(self.handles) if (r.key, r.kind) == parent and str(r.token) == token)
        p, a = self.conns["P"], self.conns["A"]
        pg = self.dialect == "postgresql"
        begin_rr = (
            ["BEGIN ISOLATION LEVEL REPEATABLE READ"]
            if pg
            else [
                "SET TRANSACTION ISOLATION LEVEL REPEATABLE READ",
                "START TRANSACTION WITH CONSISTENT SNAPSHOT",
            ]
        )
        sql(p, "BEGIN" if pg else "START TRANSACTION", ())
        pid = next(self.pids)
        assert self.q("P").push_after(key, kind, {"n": pid}, [self.parent_ref("main", parent)])
        lock_ok = True
        if pg and FIXED_QUEUE_ROW_LOCK:
            admin = self.conns["admin"]
            sql(admin, "SET lock_timeout = '3s'", ())
            try:
                admin.queue(self.main).set_notify_window(None)
                admin.queue(self.main).set_result_retention(ticks(2.5))  # the queue row itself
            except Exception:  # noqa: BLE001 - reported once P's transaction is over
                lock_ok = False
            finally:
                sql(admin, "SET lock_timeout = 0", ())
        for statement in begin_rr:
            sql(a, statement, ())
        sql(a, "SELECT count(*) FROM pyqueue_message WHERE queue_name = %s", (self.main,))  # the snapshot
        out: dict = {}

        def commit_parent():
            try:
                out["ok"] = self.q("A").commit(r)
                sql(a, "COMMIT", ())
            except Exception as e:  # noqa: BLE001 - a serialization failure: the commit did not happen
                out["error"] = e
                sql(a, "ROLLBACK", ())

        import threading

        a_id = sql(a, "SELECT pg_backend_pid()" if pg else "SELECT CONNECTION_ID()", ())[0][0]
        th = threading.Thread(target=commit_parent)
        th.start()
        self.until_lock_wait(th, a_id)  # A waits for P's lock on the parent, or is done
        sql(p, "COMMIT", ())
        th.join()
        assert lock_ok, "queue_push_after holds a lock on the queue row that blocks a settings change"
        child = Msg(key, kind, pid, 0, 0, self.t, None, None, True, self.t)
        self.msgs[child.kk] = child
        self.waiting[child.kk] = {("main", parent)}
        self.dep_children.add(child.kk)
        self.dep_parents.add(parent)
        if out.get("ok"):
            self.finish(parent, "succeeded")

    @rule(key=st.sampled_from(CHILD_KEYS), kind=kinds, j=st.integers(0, 50))
    @covers("queue_push_after", "queue_redrive", "queue_remove")
    def redrive_a_parent(self, key, kind, j):
        """A child of a dead letter follows it when it is redriven: push_after names a dead letter
        of dlq, every dead letter is redriven into main, and the parent's removal there cancels
        the child (FIXED_REDRIVE_DEPENDENCY: before, the child was left waiting for ever)."""
        dead = sorted(kk for kk in self.dlq if "@" not in kk[0] and kk not in self.msgs)
        if not FIXED_REDRIVE_DEPENDENCY or not dead or not self.retention or (key, kind) in self.msgs:
            return
        parent = dead[j % len(dead)]
        pid = next(self.pids)
        assert self.q("P").push_after(key, kind, {"n": pid}, [self.parent_ref("dlq", parent)])
        self.msgs[(key, kind)] = Msg(key, kind, pid, 0, 0, self.t, None, None, True, self.t)
        self.waiting[(key, kind)] = {("dlq", parent)}
        self.dep_children.add((key, kind))
        self.redrive(len(self.dlq))
        assert parent in self.msgs
        assert self.q("admin").remove(*parent)
        self.finish(parent, "removed")


# Fixes that land on main separately: each switch, False until its fix is on main, keeps the
# model off the defect (the rule is skipped, or the model states the behaviour as it is); True
# makes the model expect the fixed behaviour, and find the defect where it is still there.
FIXED_REDRIVE_DEPENDENCY = True  # push_after names dead letters: their children follow a redrive
FIXED_REPEATABLE_READ = True  # push_after_races_a_commit_under_repeatable_read runs
FIXED_QUEUE_ROW_LOCK = True  # ... and checks that push_after blocks no change of the queue row
