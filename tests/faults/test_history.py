"""The history checker of `python -m bench history` (bench/history.py).

First each guarantee it verifies, broken once in a small hand-written history: the checker must name
it (and a history that keeps them all passes). Then the suite's short variant on both dialects, with
faults (clients SIGKILLed, connections cut, consumers paused past their leases, skewed clocks; no
server restart: the servers are shared): a fixed seed and a random one (printed), no violation, nothing
lost. Last, a scratch database whose queue_push acknowledges without storing: the whole run must
report the lost messages.
"""

from __future__ import annotations

import random

import pytest

from bench import common
from bench import history as h

LEASE = 10.0  # seconds, the leases of the hand-written histories


def op(name, args, ans, t0, t1, proc="c1", seq=None, st="ok"):
    op.seq = getattr(op, "seq", 0) + 1
    return h.Op(proc, seq or op.seq, name, args, st, ans, t0, t1)


def reserve(t0, *rows, T=LEASE, proc="c1"):
    """A reserve answered rows (key, kind, token, attempts) at [t0, t0 + 0.01]."""
    return op("reserve", [len(rows), T], [list(r) for r in rows], t0, t0 + 0.01, proc)


def push(t0, key, kind="free", group=None, ans=True, proc="p1"):
    return op("push", [[key, kind, group]], ans, t0, t0 + 0.01, proc)


def guarantees(ops, live=(), history=()):
    result = h.check(ops, {"live": [list(x) for x in live], "history": [list(x) for x in history]})
    return sorted({v["guarantee"] for v in result["violations"]})


def committed(key, kind="free", at=100.0):
    return (key, kind, "committed", at)


def test_a_history_that_keeps_every_guarantee_passes():
    ops = [
        push(1, "a"),
        push(1.1, "b", "lim"),
        push(1.2, "g1", "grp", "g"),
        push(1.3, "g2", "grp", "g"),
        push(1.4, "d", "dedup"),
        push(1.5, "d", "dedup", ans=False),
        reserve(2, ("a", "free", "t1", 1), ("b", "lim", "t2", 1), ("g1", "grp", "t3", 1), T=0.5),
        op("commit", ["a", "free", "t1"], True, 2.1, 2.2),
        reserve(3, ("b", "lim", "t4", 2)),  # after t2's lease ended
        op("commit", ["b", "lim", "t2"], False, 3.1, 3.2),  # stale: refused
        op("commit", ["b", "lim", "t4"], True, 3.3, 3.4),
        op("commit", ["g1", "grp", "t3"], True, 3.5, 3.6),
        reserve(4, ("g2", "grp", "t5", 1)),
        op("commit", ["g2", "grp", "t5"], True, 4.1, 4.2),
    ]
    history = [committed("a", at=2.15), committed("b", "lim", 3.35), committed("g1", "grp", 3.55)]
    history.append(committed("g2", "grp", 4.15))
    assert guarantees(ops, live=[(h.Q, "d", "dedup")], history=history) == []


def test_lost():
    assert guarantees([push(1, "a")]) == ["nothing lost"]
    assert guarantees([push(1, "a")], history=[committed("a")]) == []
    assert guarantees([push(1, "a", ans=False)]) == ["nothing lost"]  # a fresh key refused
    moved = [("a", "free", "moved", 3.0)]
    assert guarantees([push(1, "a")], history=moved) == ["nothing lost"]  # not in the move's target
    assert guarantees([push(1, "a")], live=[(h.NEXT, "a", "free")], history=moved) == []


def test_two_holders():
    ops = [push(0, "a"), reserve(1, ("a", "free", "t1", 1)), reserve(2, ("a", "free", "t2", 2), proc="c2")]
    assert guarantees(ops, history=[committed("a")]) == ["one holder"]
    # the first lease had ended (committed) before the second began: one holder at a time
    ended = [*ops[:2], op("rollback", ["a", "free", "t1"], True, 1.5, 1.6), ops[2]]
    assert guarantees(ended, history=[committed("a")]) == []


def test_a_stale_token_accepted():
    ops = [
        push(0, "a"),
        reserve(1, ("a", "free", "t1", 1), T=0.3),
        reserve(2, ("a", "free", "t2", 2), proc="c2"),  # after t1 expired: fine
        op("commit", ["a", "free", "t1"], True, 3, 3.1),  # but t1 must no longer work
    ]
    assert guarantees(ops, history=[committed("a")]) == ["one holder"]
    ops[-1] = op("commit", ["a", "free", "t1"], False, 3, 3.1)
    assert guarantees(ops, history=[committed("a")]) == []


def test_an_extend_that_shortens_a_lease_ends_the_longer_one():
    ops = [
        push(0, "a"),
        reserve(1, ("a", "free", "t1", 1), T=10),
        op("extend", ["a", "free", "t1", 0.5], "t1b", 2, 2.01),
        reserve(3, ("a", "free", "t2", 2), proc="c2"),
    ]
    assert guarantees(ops, history=[committed("a")]) == []
    ops[2] = op("extend", ["a", "free", "t1", 5.0], "t1b", 2, 2.01)
    assert guarantees(ops, history=[committed("a")]) == ["one holder"]


def test_concurrency_limit():
    rows = [(f"l{i}", "lim", f"t{i}", 1) for i in range(h.CAPACITY + 1)]
    ops = [push(0, r[0], "lim") for r in rows]
    history = [committed(r[0], "lim") for r in rows]
    assert guarantees([*ops, reserve(1, *rows[:-1]), reserve(2, rows[-1], proc="c2")], history=history) == [
        "concurrency limit"
    ]
    # a reader counting more live reservations than the capacity
    assert guarantees([op("live", ["lim", h.CAPACITY], h.CAPACITY + 1, 1, 1.01)]) == ["concurrency limit"]
    assert guarantees([op("live", ["lim", h.CAPACITY], h.CAPACITY, 1, 1.01)]) == []
    # the fourth after one of the three ended
    first_ends = op("commit", ["l0", "lim", "t0"], True, 1.5, 1.6)
    assert guarantees([*ops, reserve(1, *rows[:-1]), first_ends, reserve(2, rows[-1])], history=history) == []


def test_rate():
    rows = [(f"r{i}", "rate", f"t{i}", 1) for i in range(h.RATE_N + 1)]
    ops = [push(0, r[0], "rate") for r in rows]
    grants = [reserve(1 + i * 0.05, r, T=0.01) for i, r in enumerate(rows)]
    history = [committed(r[0], "rate") for r in rows]
    assert guarantees(ops + grants, history=history) == ["rate"]
    grants[-1] = reserve(1 + h.RATE_PER + 0.01, rows[-1], T=0.01)  # the eleventh a window later
    assert guarantees(ops + grants, history=history) == []


def test_fifo_order_and_k():
    ops = [push(1, "g1", "grp", "g"), push(2, "g2", "grp", "g")]
    history = [committed("g1", "grp"), committed("g2", "grp")]
    # g2 delivered while g1, before it in the group, had not left
    assert guarantees([*ops, reserve(3, ("g2", "grp", "t2", 1))], history=history) == ["FIFO groups"]
    # with k = 2 both may run, in order; three may not
    k2 = [op("group_limit", ["g", 2], None, 0, 0.01, "p1"), *ops, push(2.5, "g3", "grp", "g")]
    history.append(committed("g3", "grp"))
    both = reserve(3, ("g1", "grp", "t1", 1), ("g2", "grp", "t2", 1))
    assert guarantees([*k2, both], history=history) == []
    assert guarantees([*k2, both, reserve(3.1, ("g3", "grp", "t3", 1))], history=history) == ["FIFO groups"]


def test_dedup():
    ops = [push(1, "d", "dedup"), push(2, "d", "dedup")]
    assert guarantees(ops, live=[(h.Q, "d", "dedup")]) == ["dedup"]
    refused = [push(1, "d", "dedup"), push(2, "d", "dedup", ans=False)]
    assert guarantees(refused, live=[(h.Q, "d", "dedup")]) == []


def test_dead_letters():
    ops = [push(0, "x", "poison"), reserve(1, ("x", "poison", "t1", h.MAX_ATTEMPTS))]
    ops.append(op("fail", ["x", "poison", "t1"], "dead_lettered", 2, 2.1))
    dead = [("x", "poison", "dead_lettered", 2.05)]
    assert guarantees(ops, history=dead) == ["dead letter"]  # not in the dead-letter queue
    assert guarantees(ops, live=[(h.DEAD, "x", "poison")], history=dead) == []
    # delivered once more than max_attempts allows
    again = [*ops, reserve(3, ("x", "poison", "t2", h.MAX_ATTEMPTS + 1))]
    assert "dead letter" in guarantees(again, live=[(h.DEAD, "x", "poison")], history=dead)
    # its last delivery expired and nothing dead-lettered it
    expired = ops[:2]
    assert guarantees(expired, live=[(h.Q, "x", "poison")]) == ["dead letter"]


def short_args(seed: int, *extra: str):
    return h.parse(
        [
            "--ops",
            "200",
            "--seed",
            str(seed),
            "--faults",
            "--server",
            "shared",
            "--producers",
            "1",
            "--consumers",
            "2",
            *extra,
        ]
    )


@pytest.mark.slow
@pytest.mark.parametrize("seed", [7, None], ids=["fixed-seed", "random-seed"])
def test_short_history_under_faults_keeps_every_guarantee(dsn, dialect, seed):
    seed = random.randrange(2**31) if seed is None else seed
    print(f"seed {seed}")
    result = h.run(dialect, short_args(seed), dsn=dsn)
    assert result["violations"] == [], (seed, result["violations"][:3])
    assert result["lost"] == 0
    assert sum(result["operations"].values()) >= 150, result
    assert result["faults"].get("clients SIGKILLed", 0) + result["faults"].get("connections cut", 0) > 0, (
        result
    )


BROKEN_PUSH = {
    "postgresql": (
        "CREATE OR REPLACE FUNCTION queue_push(in_queue text, in_key text, in_kind text, in_payload jsonb, "
        "in_run_at timestamptz DEFAULT NULL, in_priority integer DEFAULT NULL) RETURNS boolean "
        "LANGUAGE sql AS 'SELECT true'",
    ),
    "mysql": (
        "DROP PROCEDURE queue_push",
        "CREATE PROCEDURE queue_push(IN a LONGTEXT, IN b LONGTEXT, IN c LONGTEXT, IN d LONGTEXT, "
        "IN e DATETIME(6), IN f DECIMAL(65,30)) SELECT 1 AS pushed",
    ),
}


@pytest.mark.slow
def test_a_push_that_acknowledges_without_storing_is_reported_lost(installed_database, dialect):
    result = h.run(
        dialect,
        h.parse(["--ops", "200", "--seed", "3", "--producers", "1", "--consumers", "2"]),
        lambda dsn: common.execute(dialect, dsn, *BROKEN_PUSH[dialect]),
        dsn=installed_database("history"),
    )
    assert result["lost"] > 0, result
    assert {v["guarantee"] for v in result["violations"]} >= {"nothing lost"}
