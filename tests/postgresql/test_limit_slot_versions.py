"""A limited reserve at READ COMMITTED takes a slot only as its statement read it (PostgreSQL).

The reserve finds and locks a kind's free slots in one statement (pyqueue__limit_free_slots). A slot
that another reserver took and committed after that statement began is locked in its new version and
checked again, but the holder check in that statement still sees the messages as they were when it
began: the new holder's reservation is not there, and the slot looks free. Taking it would put one
reservation more than the capacity in flight. The statement keeps only a slot version its own
snapshot sees, so such a slot counts as busy.

The window between the statement's start and its lock of the slot is made long on purpose: a lock
on the message table's primary key index requested by a third session (ALTER INDEX ... SET
TABLESPACE, which waits for the other reserver's open transaction) holds the reserve's statement up
where it opens that index, after its snapshot was taken and before it reads the slots.
"""

from __future__ import annotations

import threading
import time

import pytest

from pyqueue_sql import dialects

pytestmark = [pytest.mark.only_dialect("postgresql"), pytest.mark.sync_client_only]

RESERVE = "SELECT p_key FROM queue_reserve(%s, %s, interval '60 seconds', %s)"


def _run(conn, sql, params=None):
    with conn.cursor() as cur:
        cur.execute(sql, params)
        return cur.fetchall() if cur.description else []


def _waits_on_the_key_index(watcher, pid: int) -> bool:
    """Whether backend pid waits for a lock on pyqueue_message_pkey."""
    return bool(
        _run(
            watcher,
            "SELECT 1 FROM pg_locks WHERE pid = %s AND NOT granted AND locktype = 'relation'"
            " AND relation = 'pyqueue_message_pkey'::regclass",
            (pid,),
        )
    )


def _until(what, check, thread: threading.Thread | None = None, seconds: float = 30.0) -> None:
    deadline = time.monotonic() + seconds
    while not check():
        assert thread is None or thread.is_alive(), f"{what}: the thread ended"
        assert time.monotonic() < deadline, f"{what}: not within {seconds} s"
        time.sleep(0.01)


def test_a_slot_taken_while_a_reserve_reads_the_slots_counts_as_busy(dsn, make_queue):
    queue = make_queue(max_attempts=100)
    queue.set_limit("lim", 1)
    queue.push_many([("m0", "lim", 0), ("m1", "lim", 1), ("m2", "lim", 2)])
    warm = make_queue()
    warm.set_limit("lim", 1)
    warm.push("w0", "lim", 0)
    pg = dialects.for_name("postgresql")
    opened = []

    def connect(autocommit=True):
        conn = pg.connect(dsn, autocommit=autocommit)
        opened.append(conn)
        return conn

    try:
        watcher, reserver = connect(), connect()
        taker, locker = connect(autocommit=False), connect(autocommit=False)
        [r0] = queue.reserve(timeout=60)
        assert r0.key == "m0" and queue.commit(r0)  # slot 1 names a holder that has ended: free
        # the reserver's statements planned (generic plans, kept by the session): its next reserve
        # takes the index's lock when its statement starts, not while a plan is made
        assert [k for (k,) in _run(reserver, RESERVE, (warm.name, "r", 1))] == ["w0"]
        [(pid,)] = _run(reserver, "SELECT pg_backend_pid()")
        [(locker_pid,)] = _run(locker, "SELECT pg_backend_pid()")
        # another reserver takes slot 1 for m1, in a transaction still open
        assert [k for (k,) in _run(taker, RESERVE, (queue.name, "t", 1))] == ["m1"]
        # the index's lock, requested behind that transaction: the reserve's statement queues behind it
        alter = threading.Thread(
            target=_run, args=(locker, "ALTER INDEX pyqueue_message_pkey SET TABLESPACE pg_default")
        )
        alter.start()
        _until("the index's lock requested", lambda: _waits_on_the_key_index(watcher, locker_pid), alter)
        got = {}
        reserve = threading.Thread(
            target=lambda: got.setdefault(
                "keys", [k for (k,) in _run(reserver, RESERVE, (queue.name, "r", 1))]
            )
        )
        reserve.start()
        # held up opening the index, past its lock of m2 (the transaction has its id): in the slots' statement
        _until(
            "the reserve held up in the slots' statement",
            lambda: (
                _waits_on_the_key_index(watcher, pid)
                and _run(
                    watcher, "SELECT backend_xid IS NOT NULL FROM pg_stat_activity WHERE pid = %s", (pid,)
                )[0][0]
            ),
            reserve,
        )
        taker.commit()  # slot 1 is m1's now, in a version written after the statement began
        alter.join(30)
        locker.rollback()
        reserve.join(30)
        assert not reserve.is_alive()
        assert got["keys"] == []  # slot 1 busy: nothing of the kind handed out
        [(live,)] = _run(
            watcher,
            "SELECT count(*) FROM pyqueue_message WHERE queue_name = %s AND p_kind = 'lim'"
            " AND reserve_token IS NOT NULL AND scheduled_at > clock_timestamp()",
            (queue.name,),
        )
        assert live == 1
    finally:
        for conn in opened:
            try:
                conn.rollback()
            finally:
                conn.close()
