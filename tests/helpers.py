"""Small helpers the test files share: waiting on a condition, unique queue names, running the CLI
in-process, a free TCP port, a registered worker made silent."""

from __future__ import annotations

import socket
import time
import uuid


def wait_for(predicate, timeout: float, what: str, poll: float = 0.02) -> None:
    """Calls ``predicate`` every ``poll`` seconds until it returns true; fails after ``timeout``
    seconds, naming ``what`` it waited for."""
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {what}")
        time.sleep(poll)


def queue_name(prefix: str = "t", length: int = 12) -> str:
    """A queue name no other test uses: ``prefix.`` and random hex digits."""
    return f"{prefix}.{uuid.uuid4().hex[:length]}"


def run_cli(capsys, *argv) -> tuple[int, str, str]:
    """Runs ``pyqueue-sql ARGV...`` in this process: its exit code (argparse's own exit on a bad
    command line included), stdout and stderr. Arguments are turned into strings."""
    from pyqueue_sql import cli

    try:
        code = cli.main([str(a) for a in argv])
    except SystemExit as exc:
        code = exc.code
    out, err = capsys.readouterr()
    return code, out, err


def free_port() -> int:
    """A TCP port of 127.0.0.1 that nothing listens on now."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


# queue_release_dead_workers refuses an older_than below 30 s (a worker heartbeats every 10 s): the
# tests make a worker silent for longer by moving its last heartbeat back, instead of waiting.
RELEASE_AFTER = 60


def silence_worker(conn, dialect: str, worker_id: int, seconds: float = 3600) -> None:
    """Moves the last heartbeat of a registered worker back by ``seconds`` (on a DB-API connection
    in autocommit mode, as the installing account), as if it had been silent that long."""
    from tests import plainsql

    statement = (
        "UPDATE pyqueue_worker SET heartbeat_at = heartbeat_at - make_interval(secs => %s) WHERE worker_id = %s"
        if dialect == "postgresql"
        else "UPDATE pyqueue_worker SET heartbeat_at = heartbeat_at - INTERVAL %s SECOND WHERE worker_id = %s"
    )
    plainsql.run(conn, statement, (seconds, worker_id))
