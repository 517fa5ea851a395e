"""MySQL/MariaDB: a FIFO group's limit k holds when a routine that changes the group runs inside
a caller's REPEATABLE READ transaction whose snapshot is older than the group row it locks. The
group's count of live messages besides the head (pyqueue_group.extra) and the group's live
messages are read as they are now, under the group row's lock, never from that snapshot: a head
leaving, or a grouped push, in such a transaction never starts one message too many.
Deterministic with two real connections: the caller's transaction reads first (its snapshot),
another connection's grouped push then starts a message, and the caller's call comes after."""

from __future__ import annotations

import json
import uuid

import pytest

from tests.plainsql import call

pytestmark = pytest.mark.only_dialect("mysql")

K = 2
BLOCKED = "9999-12-31 23:59:59.999999"


@pytest.fixture
def queue(conns):
    name = f"gsnap.{uuid.uuid4().hex[:10]}"
    conn = conns()
    call(conn, "CALL queue_create(%s, NULL, NULL, NULL, NULL)", name)
    call(conn, "CALL queue_set_group_limit(%s, 'g', %s)", name, K)
    return name


def push(conn, queue, key):
    call(conn, "CALL queue_push_grouped(%s, 'g', %s, 'k', '{}', NULL, NULL)", queue, key)


def push_batch(conn, queue, keys):
    messages = [{"group": "g", "p_key": key, "p_kind": "k", "payload": {}} for key in keys]
    call(
        conn,
        "CALL queue_push_batch_grouped(%s, %s, NULL, NULL, NULL, NULL, NULL)",
        queue,
        json.dumps(messages),
    )


def live(conn, queue) -> list:
    """The group's live messages (head and the others started: ready, delayed or reserved)."""
    return sorted(
        r[0]
        for r in call(
            conn,
            "SELECT p_key FROM pyqueue_message WHERE queue_name = %s AND group_key = 'g' AND scheduled_at < %s",
            queue,
            BLOCKED,
        )
    )


def reserve_head(conn, queue):
    rows = call(conn, "CALL queue_reserve(%s, 'w', 60, 10, NULL)", queue)
    assert [r[0] for r in rows] == ["a"], rows
    return rows[0]


def snapshot(conn, queue) -> None:
    """Opens a REPEATABLE READ transaction and takes its snapshot (a plain read, as an application's
    business transaction reads before it calls the queue)."""
    call(conn, "SET SESSION TRANSACTION ISOLATION LEVEL REPEATABLE READ")
    call(conn, "START TRANSACTION")
    call(conn, "SELECT COUNT(*) FROM pyqueue_group WHERE queue_name = %s", queue)
    call(conn, "SELECT COUNT(*) FROM pyqueue_message WHERE queue_name = %s", queue)


@pytest.mark.parametrize("pusher", ["single", "batch"])
def test_a_head_leaving_in_a_transaction_with_an_older_snapshot_keeps_the_limit(conns, queue, pusher):
    main, caller = conns(), conns()
    push(main, queue, "a")
    head = reserve_head(main, queue)
    snapshot(caller, queue)
    # another connection's grouped push starts "b" beside the head (room for k = 2), committed
    (push if pusher == "single" else lambda c, q, k: push_batch(c, q, [k]))(main, queue, "b")
    assert live(main, queue) == ["a", "b"]
    # the head leaves inside the caller's transaction (its snapshot still has no "b")
    assert call(caller, "CALL queue_commit(%s, %s, %s, %s)", queue, head[0], head[1], head[3]) == [(1,)]
    call(caller, "COMMIT")
    assert live(main, queue) == ["b"]
    assert call(main, "SELECT head_key, extra FROM pyqueue_group WHERE queue_name = %s", queue) == [("b", 0)]
    push(main, queue, "c")
    push_batch(main, queue, ["d", "e"])
    assert live(main, queue) == ["b", "c"]


@pytest.mark.parametrize("pusher", ["single", "batch"])
def test_a_grouped_push_in_a_transaction_with_an_older_snapshot_keeps_the_limit(conns, queue, pusher):
    main, caller = conns(), conns()
    push(main, queue, "a")
    reserve_head(main, queue)
    snapshot(caller, queue)
    push(main, queue, "b")  # starts beside the head: the group is full
    assert live(main, queue) == ["a", "b"]
    # the caller's push (its snapshot still counts the head alone) must leave "c" blocked
    if pusher == "single":
        push(caller, queue, "c")
    else:
        push_batch(caller, queue, ["c"])
    call(caller, "COMMIT")
    assert live(main, queue) == ["a", "b"]
    assert call(main, "SELECT head_key, extra FROM pyqueue_group WHERE queue_name = %s", queue) == [("a", 1)]
