"""The push shapes beyond queue_push / queue_push_batch (docs/contract.md, Produce, Topics, Ingest):
headers (alone, grouped, in batches), replace, publish to topics (alone and in batches, with
headers) through bindings, and queue_ingest with its flush."""

from __future__ import annotations

from hypothesis import strategies as st
from hypothesis.stateful import rule

import pyqueue_sql

from ... import plainsql
from .base import Msg, expiries, group_index, keys, kinds, priorities, push_delays, sql, ticks
from .coverage import covers

HEADERS = {"trace": "t-1"}


class ProduceRules:
    @rule(key=keys, kind=kinds, delay=push_delays, priority=priorities, g=group_index, expires=expiries)
    @covers("queue_push_with_headers", "queue_push_grouped_with_headers")
    def push_with_headers(self, key, kind, delay, priority, g, expires=None):
        """Headers, perhaps an expiry (docs/contract.md, Expiry): a reserve or pop that meets the
        message past it ends it as cancelled (the model's _reserve_effects and adopt_pops)."""
        pid = next(self.pids)
        group = self.group_of(g)
        inserted = self.q("P").push(
            key, kind, {"n": pid}, run_at=ticks(delay) if delay else None, priority=priority, group=group,
            headers={**HEADERS, **self.expiry_headers(pid, expires)},
        )  # fmt: skip
        assert inserted == ((key, kind) not in self.msgs), "push dedup"
        if inserted:
            self.add(Msg(key, kind, pid, priority, 0, self.t + delay, None, group, False, self.t + delay))

    @rule(
        batch=st.lists(
            st.tuples(keys, kinds, push_delays, priorities, group_index, expiries),
            min_size=1,
            max_size=4,
            unique_by=lambda x: (x[0], x[1]),
        )
    )
    @covers("queue_push_batch_with_headers", "queue_push_batch_grouped_with_headers")
    def push_batch_with_headers(self, batch):
        items, fresh = [], []
        for key, kind, delay, priority, g, expires in batch:
            pid = next(self.pids)
            group = self.group_of(g)
            run_at = ticks(delay) if delay else None
            headers = {**HEADERS, **self.expiry_headers(pid, expires)}
            items.append(pyqueue_sql.NewMessage(key, kind, {"n": pid}, run_at, priority, group, headers))
            if (key, kind) not in self.msgs:
                fresh.append(
                    Msg(key, kind, pid, priority, 0, self.t + delay, None, group, False, self.t + delay)
                )
        assert self.q("P").push_many(items) == len(fresh), "push_batch_with_headers dedup"
        for m in fresh:
            self.add(m)

    @rule(key=keys, kind=kinds, priority=priorities)
    @covers("queue_push_replace")
    def push_replace(self, key, kind, priority):
        """inserted / replaced (a waiting message gets the new payload and priority, attempts 0, no
        reservation, ready now) / reserved (a live reservation holds it: nothing changes)."""
        m = self.msgs.get((key, kind))
        if m is not None and (m.group is not None or m.blocked):
            return  # a group's place and a waiting child's count are left to their own rules
        pid = next(self.pids)
        got = self.q("P").push_replace(key, kind, {"n": pid}, priority=priority)
        if m is None:
            assert got == "inserted", got
            self.add(Msg(key, kind, pid, priority, 0, self.t, None, None, False, self.t))
        elif self.state(m) == "reserved":
            assert got == "reserved", got
        else:
            assert got == "replaced", (got, m)
            if m.pid in self.expiry:  # the live message's headers are kept
                self.expiry[pid] = self.expiry[m.pid]
            m.pid, m.priority, m.attempts, m.token, m.due = pid, priority, 0, None, self.t

    @rule(to_main=st.booleans(), to_next=st.booleans())
    @covers("queue_bind", "queue_unbind")
    def bind(self, to_main, to_next):
        """The topic's bindings: main and/or next bound, the others unbound. main is bound through
        the pattern "<topic>.#" ("#": zero or more words, so the topic itself matches), next through
        the topic itself."""
        db = self.conns["admin"]
        for name, want in ((self.main, to_main), (self.next_name, to_next)):
            had = name in self.bound
            pattern = f"{self.topic}.#" if name == self.main else self.topic
            if want:
                assert db.bind(pattern, name) == (not had)
                self.bound.add(name)
            else:
                assert db.unbind(pattern, name) == had
                self.bound.discard(name)

    @rule(
        key=keys,
        kind=kinds,
        priority=priorities,
        headers=st.booleans(),
        batch=st.booleans(),
        bind=st.booleans(),
    )
    @covers(
        "queue_publish",
        "queue_publish_with_headers",
        "queue_publish_batch",
        "queue_publish_batch_with_headers",
    )
    def publish(self, key, kind, priority, headers, batch, bind=False):
        """Into every bound queue, with dedup per queue: returns how many queues got a new message.
        bind: main is bound first (bind, a rule of its own, may not come before a publish at all
        in an example)."""
        if bind and self.main not in self.bound:
            self.bind(True, self.next_name in self.bound)
        pid = next(self.pids)
        h = HEADERS if headers else None
        db = self.conns["P"]
        if batch:
            got = db.publish_many(
                [pyqueue_sql.Publication(self.topic, key, kind, {"n": pid}, None, priority, h)]
            )
        else:
            got = db.publish(self.topic, key, kind, {"n": pid}, priority=priority, headers=h)
        want = 0
        if self.main in self.bound and (key, kind) not in self.msgs:
            self.add(Msg(key, kind, pid, priority, 0, self.t, None, None, False, self.t))
            want += 1
        if self.next_name in self.bound and (key, kind) not in self.next:
            self.next[(key, kind)] = (pid, priority)
            want += 1
        assert got == want, ("publish", got, want, self.bound)

    @rule(key=keys, kind=kinds)
    @covers("queue_ingest_flush")
    def ingest(self, key, kind):
        """A row INSERTed into queue_ingest is live once the INSERT returns (PostgreSQL) or once
        queue_ingest_flush takes it (MySQL/MariaDB); dedup as queue_push."""
        pid = next(self.pids)
        admin = self.conns["admin"]
        sql(admin, "INSERT INTO queue_ingest (queue_name, p_key, p_kind, payload) VALUES (%s, %s, %s, %s)",
            (self.main, key, kind, '{"n": %d}' % pid))  # fmt: skip
        call = (
            "SELECT * FROM queue_ingest_flush(%s)"
            if self.dialect == "postgresql"
            else "CALL queue_ingest_flush(%s)"
        )
        flushed = plainsql.run(admin.connection, call, (self.main,))
        new = (key, kind) not in self.msgs
        if self.dialect == "mysql":
            assert tuple(int(x) for x in flushed[0][:2]) == (int(new), int(not new)), flushed
        if new:
            self.add(Msg(key, kind, pid, 0, 0, self.t, None, None, False, self.t))
