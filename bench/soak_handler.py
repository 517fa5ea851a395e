"""The handler the soak's workers run: `pyqueue-sql worker bench.soak_handler:handle`. By kind:
ok, batch, delayed succeed; slow sleeps payload["sleep"] s; flaky fails while attempts <=
payload["fail"]; poison always fails. Every run is logged to $SOAK_RUNLOG_DIR/runs-<pid>.log with
os.write on an O_APPEND descriptor (a SIGKILL loses no line written): "S <key> <kind> <attempts>"
at the start, "E <key> <kind> <attempts> ok|<ExceptionName>" at the end.
"""

from __future__ import annotations

import os
import random
import threading
import time

_fd: int | None = None
_fd_lock = threading.Lock()


class FlakyError(Exception):
    """A transient failure: the message succeeds on a later attempt."""


class PoisonError(Exception):
    """A permanent failure: the message is dead-lettered."""


def _log(line: str) -> None:
    global _fd
    directory = os.environ.get("SOAK_RUNLOG_DIR")
    if directory:
        with _fd_lock:
            if _fd is None:
                path = os.path.join(directory, f"runs-{os.getpid()}.log")
                _fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
        os.write(_fd, (line + "\n").encode())


def handle(job) -> None:
    _log(f"S {job.key} {job.kind} {job.attempts}")
    outcome = "ok"
    try:
        payload = job.payload or {}
        if job.kind == "slow":
            time.sleep(float(payload.get("sleep", 0.5)))
        elif job.kind == "flaky":
            if job.attempts <= int(payload.get("fail", 1)):
                raise FlakyError(f"{job.key}: transient failure on attempt {job.attempts}")
        elif job.kind == "poison":
            raise PoisonError(f"{job.key}: always fails (attempt {job.attempts})")
        time.sleep(random.uniform(0.0, 0.004))
    except Exception as exc:
        outcome = type(exc).__name__
        raise
    finally:
        _log(f"E {job.key} {job.kind} {job.attempts} {outcome}")
