"""A consumer session whose default isolation is REPEATABLE READ (or SERIALIZABLE) ends a parent
while a producer's push_after of a child of it is in flight.

The push key-share locks the parent's row; the consumer's commit waits for it, then deletes the
row. At REPEATABLE READ the consumer's snapshot predates the producer's commit, so a probe of
pyqueue_dependency after the DELETE cannot see the child: the commit returned true and the child
waited for ever. The routines that end a message of a queue that keeps results now refuse to run
at an isolation level other than READ COMMITTED, with one line saying so; the parent stays
reserved, and its commit at READ COMMITTED readies the child.
"""

from __future__ import annotations

import json
import threading
import time
import uuid

import pytest

pytestmark = pytest.mark.only_dialect("postgresql")


@pytest.mark.parametrize("level", ["repeatable read", "serializable"])
def test_a_parents_commit_racing_a_push_after_never_leaves_the_child_waiting(sql_session, level):
    setup, producer, consumer = sql_session(), sql_session(), sql_session()
    consumer.sql(f"SET default_transaction_isolation = '{level}'")
    q = f"iso.{uuid.uuid4().hex[:8]}"
    setup.raw("SELECT queue_create(%s)", (q,))
    setup.raw("SELECT queue_set_result_retention(%s, interval '1 day')", (q,))
    setup.call("queue_push", q, "P", "k", "{}", None, None)
    token = str(setup.call("queue_reserve", q, "w", None, 1, None)[0][3])
    producer.begin()
    parents = json.dumps([{"queue": q, "p_key": "P", "p_kind": "k"}])
    assert producer.one("queue_push_after", q, "C", "k", "{}", parents)
    box: dict = {}

    def commit() -> None:
        try:
            box["result"] = consumer.one("queue_commit", q, "P", "k", token)
        except Exception as exc:  # noqa: BLE001 - checked below
            box["error"] = str(exc)

    t = threading.Thread(target=commit)
    t.start()
    time.sleep(0.5)  # the commit waits for the producer's lock on P (or was refused already)
    producer.commit()
    t.join(10)
    state = setup.call("queue_result", q, "C", "k")[0][0]
    parent = setup.call("queue_result", q, "P", "k")[0][0]
    assert not (parent == "succeeded" and state == "waiting"), box
    assert "error" in box, box
    assert (
        box["error"]
        .splitlines()[0]
        .startswith(
            "pyqueue:invalid_argument: a message of a queue that keeps results is ended at READ COMMITTED only"
        )
    ), box
    assert parent == "reserved" and state == "waiting"
    # the same consumer at READ COMMITTED: the child is ready with the parent's commit
    consumer.sql("SET default_transaction_isolation = 'read committed'")
    assert consumer.one("queue_commit", q, "P", "k", token)
    assert setup.call("queue_result", q, "C", "k")[0][0] == "ready"


def test_turning_results_off_is_refused_at_repeatable_read(sql_session):
    """Its check for children reads a snapshot: one older than a push_after that committed while
    it waited for that push would miss its rows."""
    admin = sql_session()
    q = f"iso.{uuid.uuid4().hex[:8]}"
    admin.raw("SELECT queue_create(%s)", (q,))
    admin.raw("SELECT queue_set_result_retention(%s, interval '1 day')", (q,))
    admin.sql("SET default_transaction_isolation = 'repeatable read'")
    for stop in (
        lambda: admin.call("queue_set_result_retention", q, None),
        lambda: admin.call("queue_reset_setting", q, "result_retention"),
    ):
        with pytest.raises(Exception, match="results are turned off at READ COMMITTED only"):
            stop()
    admin.sql("SET default_transaction_isolation = 'read committed'")
    admin.call("queue_set_result_retention", q, None)
