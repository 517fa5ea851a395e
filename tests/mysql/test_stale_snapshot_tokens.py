"""MySQL/MariaDB: a holder whose REPEATABLE READ snapshot is older than the takeover of its message
still finds its own token in that snapshot (the routines locate a message with a plain read);
the write that follows checks the token again on the row as it is now, so the old token changes
nothing of the new holder's reservation. Deterministic with real connections: the old holder's
transaction takes its snapshot, its lease ends, another connection reserves the message, and
the old holder calls in its transaction. (It was answered 1, updated, while nothing changed: the
check of an unchanged row read the token from the snapshot.)"""

from __future__ import annotations

import time

import pytest

from tests.contract.lock_sessions import Session, unique

pytestmark = pytest.mark.only_dialect("mysql")


def test_a_progress_set_with_an_old_snapshot_lands_on_no_new_reservation(dsn):
    opened = [Session(dsn) for _ in range(2)]
    old, new = opened
    try:
        q = unique("stalesnap")
        old.create(q)
        old.push(q, "m")
        ((key, kind, token),) = old.reserve(q, timeout=0.2)
        old.sql("SET SESSION TRANSACTION ISOLATION LEVEL REPEATABLE READ")
        old.sql("START TRANSACTION WITH CONSISTENT SNAPSHOT")
        time.sleep(0.4)  # its lease ended
        ((_, _, taken),) = new.reserve(q, timeout=60)
        assert old.call("queue_set_progress", q, key, kind, token, '{"stale": 1}') == [(0,)]
        old.sql("COMMIT")
        [(progress,)] = new.sql(
            "SELECT progress FROM pyqueue_message WHERE queue_name = %s AND p_key = %s", q, key
        )  # fmt: skip
        assert progress is None, "the old holder's progress landed on the new reservation"
        assert new.one("queue_commit", q, key, kind, taken)
    finally:
        for s in opened:
            s.close()
