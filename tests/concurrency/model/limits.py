"""Concurrency limits, rates and k per group (docs/contract.md, Limits, Rates, Groups) on a queue of
their own, ``lim``, whose model is a list in push order: kind ``a`` has a capacity (queue_set_limit),
kind ``b`` a rate of n per day (queue_set_rate: no unit comes back within an example), kind ``c``
is one FIFO group with k heads (queue_set_group_limit, only raised). A reserve of n hands out the
first n messages in push order that the limits admit."""

from __future__ import annotations

from dataclasses import dataclass

from hypothesis import strategies as st
from hypothesis.stateful import invariant, rule

from .base import ticks
from .coverage import covers


@dataclass
class LimMsg:
    key: str
    kind: str
    at: int  # when it became eligible (the model's step counter): the reserve order
    token: str | None = None


class LimitRules:
    def lim_heads(self) -> set[str]:
        group = [m for m in self.lim if m.kind == "c"]
        return {m.key for m in group[: self.lim_k]}

    @rule(kind=st.sampled_from(("a", "b", "c")))
    @covers("queue_push", "queue_push_grouped")
    def lim_push(self, kind):
        key = f"l{next(self.pids)}"
        q = self.q("P", self.lim_name)
        assert q.push(key, kind, {"n": 0}, group="g" if kind == "c" else None)
        self.step += 1
        self.lim.append(LimMsg(key, kind, self.step))

    @rule(n=st.integers(1, 4))
    @covers("queue_reserve")
    def lim_reserve(self, n):
        got = self.q("B", self.lim_name).reserve(n, worker="B", timeout=ticks(1.5))
        held_a = sum(m.kind == "a" and m.token is not None for m in self.lim)
        heads = self.lim_heads()
        want = []
        for m in sorted(self.lim, key=lambda m: m.at):
            if len(want) == n:
                break
            if m.token is not None or (m.kind == "c" and m.key not in heads):
                continue
            if m.kind == "a" and self.lim_cap is not None and held_a >= self.lim_cap:
                continue
            if m.kind == "b" and self.lim_rate is not None and self.lim_rate_used >= self.lim_rate:
                continue
            held_a += m.kind == "a"
            self.lim_rate_used += m.kind == "b" and self.lim_rate is not None  # used from when it is set
            want.append(m.key)
        assert sorted(r.key for r in got) == sorted(want), ("lim reserve", [r.key for r in got], want)
        by_key = {m.key: m for m in self.lim}
        for r in got:
            by_key[r.key].token = str(r.token)
            self.lim_handles.append(r)

    @rule(i=st.integers(0, 100))
    @covers("queue_commit")
    def lim_commit(self, i):
        held = [
            r for r in self.lim_handles if any(m.key == r.key and m.token == str(r.token) for m in self.lim)
        ]
        if not held:
            return
        r = held[i % len(held)]
        heads = self.lim_heads()
        assert self.q("C", self.lim_name).commit(r)
        self.lim = [m for m in self.lim if m.key != r.key]
        self.step += 1
        for m in self.lim:
            if m.kind == "c" and m.key in self.lim_heads() - heads:
                m.at = self.step  # a new head is ready from when it became head

    @rule(cap=st.sampled_from((None, 0, 1, 2)))
    @covers("queue_set_limit")
    def lim_set_limit(self, cap):
        self.q("admin", self.lim_name).set_limit("a", cap)
        self.lim_cap = cap

    @rule(n=st.integers(1, 3))
    @covers("queue_set_rate")
    def lim_set_rate(self, n):
        """Set once (n per day); a later call changes nothing here."""
        if self.lim_rate is None:
            self.q("admin", self.lim_name).set_rate("b", n, ticks(72))  # a day
            self.lim_rate = n

    @rule(n=st.integers(1, 3))
    @covers("queue_set_rate")
    def lim_rate_used_up(self, n):
        """The rate's window holds: with the rate set, rate + 1 messages of kind b pushed and reserved
        one at a time; none past what the rate has left comes out."""
        self.lim_set_rate(n)
        for _ in range(self.lim_rate + 1):
            self.lim_push("b")
        for _ in range(self.lim_rate + 1):
            self.lim_reserve(1)

    @rule()
    @covers("queue_set_group_limit")
    def lim_raise_group_limit(self):
        if self.lim_k >= 3:
            return
        heads = self.lim_heads()
        self.lim_k += 1
        self.q("admin", self.lim_name).set_group_limit("g", self.lim_k)
        self.step += 1
        for m in self.lim:
            if m.kind == "c" and m.key in self.lim_heads() - heads:
                m.at = self.step

    @invariant()
    def lim_equals_model(self):
        rows = self.q("admin", self.lim_name).stats()
        heads = self.lim_heads()
        held = sum(m.token is not None for m in self.lim)
        blocked = sum(m.kind == "c" and m.key not in heads for m in self.lim)
        assert (rows.reserved, rows.ready + rows.delayed) == (held, len(self.lim) - held), (rows, self.lim)
        assert rows.delayed == blocked, (rows, blocked)
