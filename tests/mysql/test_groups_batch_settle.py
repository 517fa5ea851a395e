"""MySQL/MariaDB: a batch commit of FIFO group messages settles each of its groups once
(pyqueue__groups_commit_settle) and each group ends as it would one message at a time: the blocked
messages first in group order start up to k live (a group with room for more than 4 too), the
first live one is the head, extra = live - 1, an emptied group's row goes. Its reads of a group's
messages are locking reads: inside a transaction the client opened (as the worker's commit_many
is), whose snapshot predates another connection's commit, the settle sees the group as it is now."""

from __future__ import annotations

import json
import uuid

import pytest

from tests.plainsql import call

pytestmark = pytest.mark.only_dialect("mysql")

BLOCKED = "9999-12-31 23:59:59.999999"


@pytest.fixture
def main(conns):
    return conns()


def new_queue(conn, k: int) -> str:
    name = f"gset.{uuid.uuid4().hex[:10]}"
    call(conn, "CALL queue_create(%s, NULL, NULL, NULL, NULL)", name)
    call(conn, "CALL queue_set_group_limit(%s, NULL, %s)", name, k)
    return name


def push(conn, queue: str, pairs: list[tuple[str, str]]) -> None:
    """(group, key) pairs, pushed in that order (one batch: run times in push order)."""
    messages = [{"group": g, "p_key": key, "p_kind": "k", "payload": {}} for g, key in pairs]
    call(
        conn,
        "CALL queue_push_batch_grouped(%s, %s, NULL, NULL, NULL, NULL, NULL)",
        queue,
        json.dumps(messages),
    )


def reserve(conn, queue: str, n: int) -> list[tuple]:
    return call(conn, "CALL queue_reserve(%s, 'w', 60, %s, NULL)", queue, n)


def commit_batch(conn, queue: str, rows: list[tuple]) -> int:
    keys, kinds, tokens = (json.dumps([r[i] for r in rows]) for i in (0, 1, 3))
    return call(conn, "CALL queue_commit_batch(%s, %s, %s, %s)", queue, keys, kinds, tokens)[0][0]


def live(conn, queue: str) -> dict[str, list[str]]:
    """Each group's live messages (started: ready, delayed or reserved), in group order."""
    out: dict[str, list[str]] = {}
    for g, key in call(
        conn,
        "SELECT group_key, p_key FROM pyqueue_message WHERE queue_name = %s AND scheduled_at < %s"
        " ORDER BY group_key, scheduled_at_initially, id",
        queue,
        BLOCKED,
    ):
        out.setdefault(g, []).append(key)
    return out


def group_rows(conn, queue: str) -> dict[str, tuple]:
    rows = call(conn, "SELECT group_key, head_key, extra FROM pyqueue_group WHERE queue_name = %s", queue)
    return {g: (head, extra) for g, head, extra in rows}


def test_a_batch_commit_settles_each_group_as_one_at_a_time_would(main):
    """One batch over groups in different states, k = 6: a group whose head and two others leave
    starts its next 3 (rounds); one whose six live ones all leave starts its next 6 (room for more
    than 4: a read of its own), one with fewer blocked than room starts what it has, one emptied
    goes, one whose non-head leaves keeps its head and starts the next; heads in group order."""
    queue = new_queue(main, 6)
    push(main, queue, [("a", f"a{j}") for j in range(10)])
    push(main, queue, [("b", f"b{j}") for j in range(14)])
    push(main, queue, [("c", f"c{j}") for j in range(8)])
    push(main, queue, [("d", "d0"), ("d", "d1")])
    push(main, queue, [("e", f"e{j}") for j in range(8)])
    held = {r[0]: r for r in reserve(main, queue, 100)}
    assert sorted(held) == sorted(
        [f"a{j}" for j in range(6)] + [f"b{j}" for j in range(6)] + [f"c{j}" for j in range(6)] + ["d0", "d1"]
        + [f"e{j}" for j in range(6)]
    )  # fmt: skip
    leaving = ["a0", "a1", "a2", *(f"b{j}" for j in range(6)), "c0", "c1", "c2", "c3", "d0", "d1", "e3"]
    assert commit_batch(main, queue, [held[k] for k in leaving]) == len(leaving)
    assert live(main, queue) == {
        "a": ["a3", "a4", "a5", "a6", "a7", "a8"],
        "b": [f"b{j}" for j in range(6, 12)],
        "c": ["c4", "c5", "c6", "c7"],
        "e": ["e0", "e1", "e2", "e4", "e5", "e6"],
    }
    assert group_rows(main, queue) == {"a": ("a3", 5), "b": ("b6", 5), "c": ("c4", 3), "e": ("e0", 5)}


def test_a_batch_commit_in_a_transaction_with_an_older_snapshot_reads_the_groups_as_they_are(conns):
    """k = 2: a and b live, c, d, e blocked. The caller's transaction takes its snapshot; another
    connection's batch commit of b then starts c. The caller's batch commit of the head a must see
    c live (started) and b gone: d starts, c is the head, extra 1 (from the snapshot it would take
    b, gone, for the head and c, live, for the one to start)."""
    main, caller = conns(), conns()
    queue = new_queue(main, 2)
    push(main, queue, [("g", key) for key in "abcde"])
    held = {r[0]: r for r in reserve(main, queue, 10)}
    assert sorted(held) == ["a", "b"]
    call(caller, "SET SESSION TRANSACTION ISOLATION LEVEL REPEATABLE READ")
    call(caller, "START TRANSACTION")
    call(caller, "SELECT COUNT(*) FROM pyqueue_message WHERE queue_name = %s", queue)
    call(caller, "SELECT COUNT(*) FROM pyqueue_group WHERE queue_name = %s", queue)
    assert commit_batch(main, queue, [held["b"]]) == 1
    assert live(main, queue) == {"g": ["a", "c"]}
    assert commit_batch(caller, queue, [held["a"]]) == 1
    call(caller, "COMMIT")
    assert live(main, queue) == {"g": ["c", "d"]}
    assert group_rows(main, queue) == {"g": ("c", 1)}
