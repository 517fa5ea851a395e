"""`pyqueue-sql worker` stopped while a handler blocks, past --shutdown-timeout or by a second
SIGTERM: it exits 1 and hands the running message back before it exits (ready at once, its attempt
not counted), instead of leaving it reserved until its lease ends."""

from __future__ import annotations

import signal
import time
import uuid

import pytest

from .test_worker_cli_app import serving, write_module

MODULE = """
    import os, time
    from pyqueue_sql import App

    app = App({dsn!r})

    @app.task(queue={queue!r})
    def block(n: int) -> None:
        with open(os.environ["PYQUEUE_TEST_RECORD"], "a") as f:
            f.write("started\\n")
        time.sleep(60)
"""


@pytest.fixture
def app_queue(tmp_path, dsn, db):
    queue = f"handback.{uuid.uuid4().hex[:8]}"
    db.queue(queue).create(max_attempts=3)
    yield write_module(tmp_path, MODULE.format(dsn=dsn, queue=queue)), db.queue(queue)
    db.queue(queue).drop()


@pytest.mark.parametrize("runtime", ["threads", "asyncio"])
@pytest.mark.parametrize("how", ["deadline", "second_sigterm"])
def test_a_stopped_worker_hands_its_running_message_back(tmp_path, app_queue, how, runtime):
    name, queue = app_queue
    queue.push("job-1", "block", {"n": 1})
    args = ["--lease", "60", "--shutdown-timeout", "1" if how == "deadline" else "30"]
    if runtime == "asyncio":
        args += ["--concurrency", "2"]
    with serving(tmp_path, f"{name}:app", *args) as served:
        served.wait_for_records(1, 30)
        served.proc.send_signal(signal.SIGTERM)
        if how == "second_sigterm":
            served.wait_for_line("stopping (send it again")
            served.proc.send_signal(signal.SIGTERM)
        code = served.proc.wait(timeout=20)
        stopped = time.monotonic()
    assert code == 1, served.lines
    message = queue.message("job-1", "block")
    # ready again at once (its lease of 60 s not waited out), the attempt not counted
    assert message is not None and message.state == "ready", (message, served.lines)
    assert message.attempts == 0, message
    assert time.monotonic() - stopped < 5
    assert any("handed back" in line for line in served.lines), served.lines
