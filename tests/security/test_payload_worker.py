"""A message its task cannot take fails alone in a real `pyqueue-sql worker`: a producer holding
only its capability pushes, in plain SQL, one payload at the edge of what the server accepts (an
integer of 4,500 digits, past Python's int()) among four good ones. The worker reserves the five in
one call; the four good run, the edge one fails alone naming why (its parameter is an int, the value
is read exactly as a Decimal), and the reserve loop reports no error."""

from __future__ import annotations

import contextlib
import time
import uuid
from decimal import Decimal

import pytest

from pyqueue_sql.dialects import UnreadableJSON

from ..worker.test_worker_cli_app import serving, write_module
from .test_payload_edges import HUGE, _push
from .test_privileges import accounts  # noqa: F401 - the fixture is used by name

APP = """
    import os
    from pyqueue_sql import App

    app = App({dsn!r})

    @app.task(queue={queue!r})
    def add(n: int) -> None:
        with open(os.environ["PYQUEUE_TEST_RECORD"], "a") as f:
            f.write(f"add {{n}}\\n")
"""


@pytest.fixture
def queues(db):
    suffix = uuid.uuid4().hex[:10]
    dead = db.queue(f"edgew.dead.{suffix}").create()
    queue = db.queue(f"edgew.{suffix}").create(max_attempts=3, dead_letter_queue=dead.name)
    yield queue, dead
    with contextlib.suppress(Exception):
        queue.drop()
        dead.drop()


@pytest.mark.slow
def test_one_payload_its_task_cannot_take_fails_alone_and_the_others_of_its_batch_run(
    tmp_path,
    accounts,  # noqa: F811
    queues,
    dsn,
    dialect,
):
    queue, dead = queues
    producer = accounts.raw(accounts.with_capabilities("edgew", "producer"))
    if dialect == "postgresql":
        producer.autocommit = True
    assert _push(producer, dialect, queue.name, "bad", f'{{"n": {HUGE}}}', "add") is None
    for i in range(1, 5):
        assert _push(producer, dialect, queue.name, f"good{i}", f'{{"n": {i}}}', "add") is None

    module = write_module(tmp_path, APP.format(dsn=dsn, queue=queue.name))
    with serving(tmp_path, f"{module}:app", "--concurrency", "5") as served:
        assert sorted(served.wait_for_records(4, 30)) == [["add", str(i)] for i in range(1, 5)]
        deadline = time.monotonic() + 20
        while not dead.dead_letters() and time.monotonic() < deadline:
            time.sleep(0.05)
        log = "\n".join(served.lines)
    [letter] = dead.dead_letters()
    assert letter.key == "bad" and letter.attempts == 1  # failed at once, not retried
    assert "expected int" in letter.last_error and "Decimal" in letter.last_error, letter.last_error
    assert letter.payload == {"n": Decimal(HUGE)}
    assert queue.stats().ready == 0 and len(served.records()) == 4
    assert "error in the reserve loop" not in log and "Traceback" not in log, log


@pytest.mark.slow
@pytest.mark.only_dialect("mysql")
def test_one_payload_no_client_can_read_fails_alone_naming_why_and_the_others_run(
    tmp_path,
    accounts,  # noqa: F811
    queues,
    dsn,
):
    """MariaDB's JSON_VALID lets `1.` through, which is not JSON: the worker fails that message
    alone without running its task (UnreadablePayloadError, no retry), the four good ones run."""
    queue, dead = queues
    producer = accounts.raw(accounts.with_capabilities("edgeu", "producer"))
    assert _push(producer, "mysql", queue.name, "bad", '{"n": 1.}', "add") is None
    for i in range(1, 5):
        assert _push(producer, "mysql", queue.name, f"good{i}", f'{{"n": {i}}}', "add") is None

    module = write_module(tmp_path, APP.format(dsn=dsn, queue=queue.name))
    with serving(tmp_path, f"{module}:app", "--concurrency", "5") as served:
        assert sorted(served.wait_for_records(4, 30)) == [["add", str(i)] for i in range(1, 5)]
        deadline = time.monotonic() + 20
        while not dead.dead_letters() and time.monotonic() < deadline:
            time.sleep(0.05)
        log = "\n".join(served.lines)
    [letter] = dead.dead_letters()
    assert letter.key == "bad" and letter.attempts == 1
    assert letter.last_error.startswith(
        "UnreadablePayloadError: payload unreadable: not JSON this client reads: "
    ), letter.last_error
    assert isinstance(letter.payload, UnreadableJSON) and letter.payload.text == '{"n": 1.}'
    assert queue.stats().ready == 0 and len(served.records()) == 4
    assert "error in the reserve loop" not in log, log
