"""Sessions for the tests of what the routines' locks are for (test_checks_locks.py,
test_checks_tokens.py): several real connections in autocommit mode calling the routines in plain
SQL, one holding a transaction open while another calls a routine that must not wait for it (a
lock wait timeout shows it waited) or must wait for it (seen waiting from a third session)."""

from __future__ import annotations

import datetime as dt
import json
import threading
import time
import uuid

import pytest

from tests import plainsql

LOCK_TIMEOUT = 5  # seconds: a call that must not wait fails after this long if it waits


class Session(plainsql.Session):
    """plainsql.Session with the calls these tests make, the same on both dialects."""

    def __init__(self, dsn: str) -> None:
        super().__init__(dsn)
        self.backend = self.sql("SELECT pg_backend_pid()" if self.pg else "SELECT CONNECTION_ID()")[0][0]
        self.sql(plainsql.MARK_ALWAYS[self.dialect])  # these tests show the mark at work: after any read

    def lock_timeout(self, seconds: float = LOCK_TIMEOUT) -> None:
        """A lock wait in this session fails after `seconds` (PostgreSQL 55P03, MySQL/MariaDB 1205)."""
        if self.pg:
            self.sql(f"SET lock_timeout = '{int(seconds * 1000)}ms'")
        else:
            self.sql(f"SET SESSION innodb_lock_wait_timeout = {max(1, int(seconds))}")

    def rollback(self) -> None:
        self.sql("ROLLBACK")

    # -- the routines
    def create(self, queue: str, visibility: float | None = None, max_attempts: int | None = None,
               dlq: str | None = None, history: float | None = None) -> None:  # fmt: skip
        vis = None if visibility is None else self.dur(visibility)
        kept = None if history is None else self.dur(history)
        self.call("queue_create", queue, vis, max_attempts, dlq, kept)

    def at(self, when: dt.datetime | None):
        """An aware time as each driver takes it: aware for PostgreSQL's timestamptz, naive UTC for a
        MySQL/MariaDB DATETIME."""
        if when is None or self.pg:
            return when
        return when.astimezone(dt.timezone.utc).replace(tzinfo=None)

    def push(self, queue: str, key: str, kind: str = "k", payload=None, run_at=None, priority=None) -> bool:
        return bool(self.one("queue_push", queue, key, kind, json.dumps(payload or {}), self.at(run_at), priority,
                             casts=("", "", "", "::jsonb", "::timestamptz", "::integer")))  # fmt: skip

    def push_grouped(self, queue: str, group: str, key: str, kind: str = "k", run_at=None) -> bool:
        return bool(self.one("queue_push_grouped", queue, group, key, kind, "{}", self.at(run_at), None,
                             casts=("", "", "", "", "::jsonb", "::timestamptz", "::integer")))  # fmt: skip

    def reserve(self, queue: str, n: int = 1, timeout: float | None = 600, worker: str = "w") -> list[tuple]:
        """[(key, kind, token)]"""
        t = None if timeout is None else self.dur(timeout)
        if self.pg:
            rows = self.sql(
                "SELECT p_key, p_kind, token::text FROM queue_reserve(%s, %s, %s::interval, %s::integer)",
                queue, worker, t, n,
            )  # fmt: skip
        else:
            rows = [
                r[:2] + (r[3],)
                for r in self.sql("CALL queue_reserve(%s, %s, %s, %s, NULL)", queue, worker, t, n)
            ]
        return [(str(k), str(kd), str(tok)) for k, kd, tok in rows]

    def pop(self, queue: str, n: int = 1) -> list[str]:
        return [str(r[0]) for r in self.call("queue_pop", queue, n)]

    def keys(self, queue: str) -> dict[str, str]:
        """{p_key: state} of the queue's live messages (queue_messages)."""
        if self.pg:
            rows = self.sql("SELECT p_key, state FROM queue_messages(%s)", queue)
        else:
            rows = [
                r[:1] + r[2:3]
                for r in self.sql("CALL queue_messages(%s, NULL, NULL, NULL, NULL, NULL)", queue)
            ]
        return {str(r[0]): str(r[1]) for r in rows}

    # -- watching another session
    def waits(self, backend: int) -> bool:
        """Whether session `backend` waits for a lock now."""
        if self.pg:
            rows = self.sql("SELECT wait_event_type FROM pg_stat_activity WHERE pid = %s", backend)
            return bool(rows) and rows[0][0] == "Lock"
        # Not INNODB_TRX: the server refreshes that table only when nobody read it for 0.1 s, so
        # the lock tests of other processes polling it can keep it stale for as long as they run.
        # The monitor's transaction list is made at each read.
        ((*_, status),) = self.sql("SHOW ENGINE INNODB STATUS")
        mine = f" thread id {backend},"  # "MariaDB thread id" or "MySQL thread id"
        return any(mine in trx and "LOCK WAIT" in trx for trx in status.split("---TRANSACTION")[1:])


@pytest.fixture
def sessions(dsn):
    """sessions(n): n new Sessions on the test's database, closed after the test."""
    opened: list[Session] = []

    def make(n: int) -> list[Session]:
        new = [Session(dsn) for _ in range(n)]
        opened.extend(new)
        return new

    yield make
    for s in opened:
        s.close()


def unique(prefix: str) -> str:
    return f"{prefix}.{uuid.uuid4().hex[:10]}"


class Call:
    """A call made in a thread of its own: .result or .error once done."""

    def __init__(self, target, *args) -> None:
        self.result = None
        self.error: BaseException | None = None
        self.thread = threading.Thread(target=self._run, args=(target, *args), daemon=True)
        self.thread.start()

    def _run(self, target, *args) -> None:
        try:
            self.result = target(*args)
        except BaseException as exc:  # noqa: BLE001 - the test reads it
            self.error = exc

    def done(self) -> bool:
        return not self.thread.is_alive()

    def join(self, seconds: float = 60):
        self.thread.join(seconds)
        assert not self.thread.is_alive(), "the call never returned"
        if self.error is not None:
            raise self.error
        return self.result


def call_that_waits(watcher: Session, session: Session, target, *args, seconds: float = 60) -> Call:
    """Starts target(*args) (a call on `session`) and returns once `watcher` sees the session wait
    for a lock; fails when the call returns first (it did not wait) or after `seconds`."""
    call = Call(target, *args)
    stop = time.monotonic() + seconds
    while not watcher.waits(session.backend):
        if call.done():
            raise AssertionError(
                f"the call returned without waiting for a lock: {call.error or call.result!r}"
            )
        assert time.monotonic() < stop, "the call never waited for a lock"
        time.sleep(0.02 if watcher.pg else 0.1)
    return call
