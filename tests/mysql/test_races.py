"""MySQL/MariaDB races in autocommit mode, each reproduced with several real
connections: a batch commit that lost its message to another call leaves no
history row behind; queue_wait and queue_next_scheduled_at never wait for the
row locks of a transaction that is pushing; concurrent redrives of a
dead-letter queue that keeps history neither fail with a deadlock nor archive
a message twice. Deterministic where a held row lock can stop a call between
two of its steps; bounded loops otherwise."""

from __future__ import annotations

import json
import threading
import time
import uuid

import pymysql
import pytest

from pyqueue_sql.dialects import mysql_connect_args
from tests.plainsql import call

pytestmark = pytest.mark.only_dialect("mysql")

LOCK_WAIT_TIMEOUT = 1205


def connect(dsn: str) -> pymysql.connections.Connection:
    return pymysql.connect(**mysql_connect_args(dsn))


def unique(prefix: str) -> str:
    return f"{prefix}.{uuid.uuid4().hex[:10]}"


def in_thread(target, *args):
    """Starts target(*args) in a thread; returns (thread, box) where box holds 'result' or 'error'."""
    box: dict = {}

    def run():
        try:
            box["result"] = target(*args)
        except Exception as exc:  # reported by the test through the box
            box["error"] = exc

    thread = threading.Thread(target=run)
    thread.start()
    return thread, box


def wait_until_lock_wait(observer, connection_id: int, seconds: float = 10.0) -> None:
    """Blocks until the session connection_id waits for a row lock (fails after `seconds`)."""
    stop = time.monotonic() + seconds
    while time.monotonic() < stop:
        rows = call(
            observer,
            "SELECT trx_state FROM information_schema.INNODB_TRX WHERE trx_mysql_thread_id = %s",
            connection_id,
        )
        if rows and rows[0][0] == "LOCK WAIT":
            return
        time.sleep(0.01)
    trx = call(
        observer, "SELECT trx_mysql_thread_id, trx_state, trx_query FROM information_schema.INNODB_TRX"
    )
    raise AssertionError(f"session {connection_id} never waited for a lock: {trx}")


def history_rows(sql, queue: str, outcome: str) -> int:
    return call(
        sql, "SELECT COUNT(*) FROM pyqueue_history WHERE queue_name = %s AND outcome = %s", queue, outcome
    )[0][0]


# ---- queue_commit_batch after losing its message ------------------------------------------------


def test_a_batch_commit_that_lost_its_message_leaves_no_history_row(conns):
    """The batch stops between its history copy and its DELETE (the schedule row it must advance
    is locked), queue_remove takes the message meanwhile: the batch commits nothing and no
    'committed' row may remain."""
    main, holder, batcher, remover = conns(), conns(), conns(), conns()
    queue = unique("lost")
    call(main, "CALL queue_create(%s, NULL, NULL, NULL, 3600)", queue)
    call(main, "CALL queue_schedule_every(%s, 'tick', 'k', '{}', 3600)", queue)
    call(
        main,
        # ready_at (its place in reserve order) with it: the occurrence is not held
        "UPDATE pyqueue_message SET scheduled_at = UTC_TIMESTAMP(6) - INTERVAL 1 SECOND,"
        " ready_at = UTC_TIMESTAMP(6) - INTERVAL 1 SECOND WHERE queue_name = %s",
        queue,
    )
    key, kind, _, token = call(main, "CALL queue_reserve(%s, 'w', NULL, 1, NULL)", queue)[0][:4]

    call(holder, "START TRANSACTION")
    call(holder, "SELECT * FROM pyqueue_schedule WHERE queue_name = %s FOR UPDATE", queue)
    call(batcher, "SET SESSION innodb_lock_wait_timeout = 20")
    batch, batch_box = in_thread(
        call,
        batcher,
        "CALL queue_commit_batch(%s, %s, %s, %s)",
        queue,
        json.dumps([key]),
        json.dumps([kind]),
        json.dumps([token]),
    )
    time.sleep(0.5)
    wait_until_lock_wait(main, batcher.thread_id())
    call(remover, "SET SESSION innodb_lock_wait_timeout = 20")
    remove, remove_box = in_thread(call, remover, "CALL queue_remove(%s, %s, %s)", queue, key, kind)
    remove.join(0.5)  # done at once without the fix; waits for the batch's row lock with it
    call(holder, "COMMIT")
    batch.join(30)
    remove.join(30)
    assert "error" not in batch_box and "error" not in remove_box, (batch_box, remove_box)
    committed = batch_box["result"][0][0]
    removed = remove_box["result"][0][0]
    assert committed + removed == 1
    assert history_rows(main, queue, "committed") == committed
    assert (
        call(main, "SELECT COUNT(*) FROM pyqueue_message WHERE queue_name = %s AND p_key = %s", queue, key)[
            0
        ][0]
        == 0
    )


def test_commit_racing_a_batch_commit_of_the_same_token_archives_once(conns):
    """queue_commit and queue_commit_batch on the same reservation, from two connections, many
    times: exactly one of them commits it and exactly one history row is written."""
    main, one, other = conns(), conns(), conns()
    queue = unique("race")
    call(main, "CALL queue_create(%s, NULL, NULL, NULL, 3600)", queue)
    races = 60
    for i in range(races):
        call(main, "CALL queue_push(%s, %s, 'k', '{}', NULL, NULL)", queue, f"m{i}")
    reserved = call(main, "CALL queue_reserve(%s, 'w', NULL, %s, NULL)", queue, races)
    assert len(reserved) == races
    wins = 0
    for key, kind, _, token, *_ in reserved:
        start = threading.Barrier(2)

        def single(key=key, kind=kind, token=token, start=start):
            start.wait()
            return call(one, "CALL queue_commit(%s, %s, %s, %s)", queue, key, kind, token)[0][0]

        def batch(key=key, kind=kind, token=token, start=start):
            start.wait()
            return call(
                other,
                "CALL queue_commit_batch(%s, %s, %s, %s)",
                queue,
                json.dumps([key]),
                json.dumps([kind]),
                json.dumps([token]),
            )[0][0]

        a, a_box = in_thread(single)
        b, b_box = in_thread(batch)
        a.join(30)
        b.join(30)
        assert "error" not in a_box and "error" not in b_box, (a_box, b_box)
        assert a_box["result"] + b_box["result"] == 1
        wins += 1
    assert history_rows(main, queue, "committed") == wins == races


# ---- queue_wait and queue_next_scheduled_at take no locks ----------------------------------------


@pytest.mark.parametrize(
    ("statement", "expected"),
    [
        ("CALL queue_wait(%s, NULL, 0.4, NULL)", [(0,)]),
        ("CALL queue_next_scheduled_at(%s, NULL)", [(None, None)]),
    ],
)
def test_waiting_never_waits_for_a_pushing_transaction(conns, statement, expected):
    pusher, waiter = conns(), conns()
    queue = unique("wait")
    call(waiter, "CALL queue_create(%s, NULL, NULL, NULL, NULL)", queue)
    call(pusher, "START TRANSACTION")
    assert call(pusher, "CALL queue_push(%s, 'm', 'K', '{}', NULL, NULL)", queue) == [(1,)]
    call(waiter, "SET SESSION innodb_lock_wait_timeout = 2")
    try:
        started = time.monotonic()
        assert call(waiter, statement, queue) == expected
        assert time.monotonic() - started < 2
    finally:
        call(pusher, "ROLLBACK")


# ---- concurrent redrives of a dead-letter queue with history -------------------------------------


def test_concurrent_redrives_with_history_move_and_archive_each_message_once(conns):
    main = conns()
    rounds, size = 4, 60
    for _ in range(rounds):
        dead, target = unique("dead"), unique("to")
        call(main, "CALL queue_create(%s, NULL, NULL, NULL, 3600)", dead)
        call(main, "CALL queue_create(%s, NULL, NULL, NULL, NULL)", target)
        batch = [{"p_key": f"m{i}", "p_kind": "k", "payload": {}} for i in range(size)]
        call(main, "CALL queue_push_batch(%s, %s, NULL, NULL, NULL, NULL)", dead, json.dumps(batch))
        redriven: list[int] = []
        errors: list[Exception] = []
        lock = threading.Lock()
        start = threading.Barrier(3)

        def redrive(conn):
            start.wait()
            while True:
                try:
                    got = call(conn, "CALL queue_redrive(%s, %s, 7)", dead, target)[0][0]
                except pymysql.MySQLError as exc:
                    with lock:
                        errors.append(exc)
                    return
                with lock:
                    redriven.append(got)
                if got == 0:
                    return

        threads = [threading.Thread(target=redrive, args=(conns(),)) for _ in range(3)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(60)
        assert errors == []
        assert sum(redriven) == size
        assert call(main, "SELECT COUNT(*) FROM pyqueue_message WHERE queue_name = %s", target)[0][0] == size
        assert history_rows(main, dead, "moved") == size


@pytest.mark.parametrize(
    "statement",
    [
        "CALL queue_reserve(%s, 'w', NULL, 1, NULL)",
        "CALL queue_commit_reserve(%s, NULL, NULL, NULL, 'w', NULL, 1, NULL)",
    ],
)
def test_a_reserve_never_waits_for_a_limit_being_set(conns, statement):
    """Whether the queue has limits is a plain read: a limit set in an open transaction does not
    apply yet, and the reserve does not wait for it."""
    setter, reserver = conns(), conns()
    queue = unique("limit")
    call(reserver, "CALL queue_create(%s, NULL, NULL, NULL, NULL)", queue)
    call(reserver, "CALL queue_push(%s, 'm', 'other', '{}', NULL, NULL)", queue)
    call(setter, "START TRANSACTION")
    call(setter, "CALL queue_set_limit(%s, 'bulk', 1)", queue)
    call(reserver, "SET SESSION innodb_lock_wait_timeout = 2")
    try:
        started = time.monotonic()
        rows = call(reserver, statement, queue)
        assert time.monotonic() - started < 2
        assert [row[0] for row in rows if len(row) > 1] == ["m"]
    finally:
        call(setter, "ROLLBACK")
