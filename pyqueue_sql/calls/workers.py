"""The workers topic's calls: the worker registry (sql/<dialect>/routines/16_workers.sql). Written
sans-IO (pyqueue_sql.sansio); pyqueue_sql.client's QueueCalls and DatabaseCalls are composed of
these groups."""

from __future__ import annotations

import os
import socket
from collections.abc import Sequence

from .. import errors, statements
from ..dialects import Duration, text_value, whole_number
from ..rows import WorkerInfo, WorkerRegistration, named
from ..sansio import sans_io, statement_call
from .base import DatabaseCallsBase, registration_arg


class WorkersDatabaseCalls(DatabaseCallsBase):
    """A database's calls of the workers topic (see DatabaseCalls)."""

    @sans_io
    def register_worker(
        self,
        name: str | None = None,
        queues: Sequence[str] | None = None,
        host: str | None = None,
        pid: int | None = None,
    ) -> WorkerRegistration:
        """Registers a worker (default name host:pid); reserve with its ``reserve_as``."""
        host = socket.gethostname() if host is None else host
        pid = os.getpid() if pid is None else pid
        name = f"{host}:{pid}" if name is None else name
        if isinstance(queues, str):
            raise errors.InvalidArgumentError("queues must be a list of queue names, not a single str")
        [registered] = [
            named(statements.WORKER_REGISTER, row)
            for row in (
                yield statement_call(
                    statements.WORKER_REGISTER,
                    name=text_value(name, "name"),
                    host=text_value(host, "host"),
                    pid=whole_number(pid, "pid"),
                    queues=self.dialect.codec.kinds(queues),
                )
            )
        ]
        worker_id = int(registered.worker_id)
        return WorkerRegistration(worker_id, name, f"{name}#{worker_id}", str(registered.secret))

    @sans_io
    def heartbeat_worker(self, registration: WorkerRegistration) -> bool:
        """False when the worker is no longer registered (released as dead: register again), or when
        the registration's secret is not that worker's."""
        reg = registration_arg(registration)
        return bool(
            (yield statement_call(statements.WORKER_HEARTBEAT, worker_id=reg.worker_id, secret=reg.secret))[
                0
            ][0]
        )

    @sans_io
    def deregister_worker(self, registration: WorkerRegistration) -> bool:
        """Removes the registration; False when it is gone already or the secret is not that worker's."""
        reg = registration_arg(registration)
        return bool(
            (yield statement_call(statements.WORKER_DEREGISTER, worker_id=reg.worker_id, secret=reg.secret))[
                0
            ][0]
        )

    @sans_io
    def release_dead_workers(self, older_than: Duration) -> int:
        """Removes workers silent for longer than older_than (at least 30 s: a worker heartbeats
        every 10 s at the default lease); their reservations become ready. Returns how many."""
        return int(
            (
                yield statement_call(
                    statements.RELEASE_DEAD_WORKERS,
                    older_than=self.dialect.codec.duration(older_than, "older_than"),
                )
            )[0][0]
        )

    @sans_io
    def workers(self) -> list[WorkerInfo]:
        d = self.dialect
        out = []
        for row in (yield statement_call(statements.WORKERS)):
            r = named(statements.WORKERS, row)
            queues = r.queues
            if isinstance(queues, (str, bytes, bytearray)):
                queues = d.codec.read_payload(queues)
            out.append(
                WorkerInfo(
                    int(r.worker_id),
                    r.worker_name,
                    r.host,
                    r.pid,
                    None if queues is None else list(queues),
                    d.codec.read_time(r.started_at),
                    d.codec.read_time(r.heartbeat_at),
                    float(r.heartbeat_age_s),
                    r.reserve_as,
                )
            )
        return out
