"""MySQL/MariaDB: a setting that writes rows referencing its queue (queue_set_rate,
queue_set_limit, queue_set_group_limit) racing a queue_drop answers the contract's
pyqueue:unknown_queue, never the foreign key's raw error (1452). Deterministic with two real
connections: the drop holds its transaction open while the setting waits for the queue row,
then commits."""

from __future__ import annotations

import threading
import time
import uuid

import pytest

from tests.plainsql import call

pytestmark = pytest.mark.only_dialect("mysql")

SETTINGS = {
    "rate": "CALL queue_set_rate(%s, NULL, 5, 1)",
    "kind_rate": "CALL queue_set_rate(%s, 'k', 5, 1)",
    "limit": "CALL queue_set_limit(%s, 'k', 3)",
    "group_limit": "CALL queue_set_group_limit(%s, NULL, 2)",
    "named_group_limit": "CALL queue_set_group_limit(%s, 'g', 2)",
}


def wait_until_blocked(observer, connection_id: int, seconds: float = 20.0) -> None:
    """Blocks until the session connection_id has run one statement for half a second (a lock
    wait: a const-table read of the queue row waits in state 'Statistics', before INNODB_TRX
    lists it); fails after `seconds`."""
    stop = time.monotonic() + seconds
    while time.monotonic() < stop:
        rows = call(
            observer,
            "SELECT COMMAND, TIME_MS FROM information_schema.PROCESSLIST WHERE ID = %s",
            connection_id,
        )
        if rows and rows[0][0] == "Query" and rows[0][1] > 500:
            return
        time.sleep(0.01)
    raise AssertionError(f"session {connection_id} never waited for a lock")


@pytest.mark.parametrize("statement", list(SETTINGS.values()), ids=list(SETTINGS))
def test_a_setting_racing_a_drop_answers_unknown_queue(conns, statement):
    main, dropper, setter = conns(), conns(), conns()
    queue = f"setrace.{uuid.uuid4().hex[:10]}"
    call(main, "CALL queue_create(%s, NULL, NULL, NULL, NULL)", queue)
    call(dropper, "START TRANSACTION")
    call(dropper, "CALL queue_drop(%s)", queue)
    call(setter, "SET SESSION innodb_lock_wait_timeout = 30")
    setter_id = call(setter, "SELECT CONNECTION_ID()")[0][0]
    box: dict = {}

    def run():
        try:
            box["result"] = call(setter, statement, queue)
        except Exception as exc:  # reported by the test through the box
            box["error"] = exc

    thread = threading.Thread(target=run)
    thread.start()
    try:
        wait_until_blocked(main, setter_id)
    finally:
        call(dropper, "COMMIT")
        thread.join(30)
    assert not thread.is_alive()
    assert "error" in box, box
    assert "pyqueue:unknown_queue" in str(box["error"]), box["error"]
    for table in ("pyqueue_rate", "pyqueue_limit", "pyqueue_group_limit"):
        assert call(main, f"SELECT COUNT(*) FROM {table} WHERE queue_name = %s", queue)[0][0] == 0
