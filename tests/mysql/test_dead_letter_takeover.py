"""MySQL/MariaDB: a reserve of one message in autocommit mode (pyqueue__claim_one) claims an exhausted
message for dead-lettering in one statement that commits, and dead-letters it in the next ones. A
message taken over between the two (its claim's lease ended, a queue_push_replace reset it) is left
alone: pyqueue__dead_letter reads it by id AND the claim's token, and finds nothing, so no copy of
it goes to the dead-letter queue beside the live message.

Deterministic with real connections: a transaction holds the gap of the due index the claim's new
entry goes into, so the claim waits (seen in the InnoDB monitor) holding the message row; meanwhile
the claim's lease ends, and a queue_push_replace of the message queues behind the claim for its row
(seen waiting). The gap's holder then rolls back: the claim commits, the replace gets the row at
once, and the reserve's next read (end_claim's IF EXISTS: a locking read at REPEATABLE READ) waits
for the replace, so the dead-lettering reads the message as the replace left it."""

from __future__ import annotations

import datetime as dt
import time

import pytest

from tests.contract.lock_sessions import Session, call_that_waits, unique

pytestmark = pytest.mark.only_dialect("mysql")


def test_a_message_taken_over_after_its_dead_letter_claim_is_not_copied_to_the_dead_letter_queue(dsn):
    opened = [Session(dsn) for _ in range(4)]
    s, gap, reserver, replacer = opened
    try:
        q, dlq = unique("dltake"), unique("dltake.dead")
        s.create(dlq)
        s.create(q, max_attempts=1, dlq=dlq)
        s.push(q, "m")
        s.push(q, "z", run_at=dt.datetime.now(dt.timezone.utc) + dt.timedelta(days=1))  # the gap's end
        ((key, kind, _),) = s.reserve(q, timeout=0.2)
        time.sleep(0.4)  # its one attempt's lease ended: the next reserve dead-letters it
        [(z_at,)] = s.sql("SELECT scheduled_at FROM pyqueue_message WHERE queue_name = %s AND p_key = 'z'", q)
        # the gap before z in the due index (where the claim's new entry goes), held by a transaction
        gap.sql("SET SESSION TRANSACTION ISOLATION LEVEL REPEATABLE READ")
        gap.sql("START TRANSACTION")
        gap.sql(
            "SELECT id FROM pyqueue_message FORCE INDEX (pyqueue_message_due_idx)"
            " WHERE queue_name = %s AND scheduled_at = %s FOR UPDATE",
            q, z_at,
        )  # fmt: skip
        reserver.sql("SET SESSION TRANSACTION ISOLATION LEVEL REPEATABLE READ")
        reserve = call_that_waits(s, reserver, reserver.reserve, q, 1, 0.5)
        [(seen,)] = s.sql("SELECT UTC_TIMESTAMP(6)")
        while s.sql("SELECT UTC_TIMESTAMP(6)")[0][0] < seen + dt.timedelta(seconds=0.7):
            time.sleep(0.05)  # the claim's lease (0.5 s from before it waited) has ended
        replace = call_that_waits(
            s, replacer, replacer.call, "queue_push_replace", q, key, kind, '{"v": 2}', None, None
        )
        gap.rollback()
        assert reserve.join() == []  # nothing handed out, nothing dead-lettered
        assert replace.join() == [("replaced",)]
        assert s.keys(q) == {"m": "ready", "z": "delayed"}
        assert s.keys(dlq) == {}, "a copy of the live message went to the dead-letter queue"
        [(dead,)] = s.sql("SELECT dead_count FROM pyqueue_queue WHERE queue_name = %s", q)
        assert dead == 0
    finally:
        for x in opened:
            x.close()
