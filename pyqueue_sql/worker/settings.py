"""A worker's settings: what Worker, AsyncWorker, App.worker and `pyqueue-sql worker` take, with
their defaults, checked in one place (WorkerSettings). What depends on the database (the poll
fallback's default, whether LISTEN is used, commit_reserve's default, listen_dsn's dialect) is
resolved by WorkerBase once it knows the DSN's dialect."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, TypedDict

from .. import errors, statements

if TYPE_CHECKING:
    from ..dialects import Dialect

# Without LISTEN, a worker of one queue long-polls queue_wait: one round trip lasts up to
# LONG_POLL_WAIT seconds, in which the server looks for a ready message every LONG_POLL_CHECK seconds.
LONG_POLL_WAIT = 1.0
LONG_POLL_CHECK = 0.025

# Batched acknowledgement: at most ACK_BATCH successes in one queue_commit_batch, sent at most
# ACK_INTERVAL seconds after the first of them finished (see bench/README.md, "Workers").
ACK_BATCH = 500
ACK_INTERVAL = 0.002

# How long a worker that has never connected keeps trying before it gives up (seconds): long
# enough for a database that starts beside it (a container, a failover), short enough that a
# wrong host name or port is said plainly instead of retried for ever.
START_TIMEOUT = 30.0


def default_prefetch(concurrency: int) -> int:
    """How many messages a worker reserves beyond its free handlers by default (see
    bench/README.md, "Workers")."""
    return 15 * concurrency


@dataclass(frozen=True)
class WorkerSettings:
    """The settings of a worker (the keywords of Worker and AsyncWorker, docs/workers.md), checked
    when made: a value out of its range raises InvalidArgumentError saying which. None, where a
    setting allows it, is its default (poll_fallback: 5 s with LISTEN, else poll_max; prefetch:
    default_prefetch(concurrency); commit_reserve: the dialect's choice, see WorkerBase;
    start_timeout: no limit; release_dead_after: off; max_stuck: concurrency; max_jobs: no limit)."""

    concurrency: int = 4
    name: str | None = None
    lease: float = 30.0
    poll_fallback: float | None = None
    poll_min: float = 0.05
    poll_max: float = 1.0
    linger: float = 0.1
    long_poll_wait: float = LONG_POLL_WAIT
    long_poll_check: float = LONG_POLL_CHECK
    shutdown_timeout: float = 30.0
    listen: bool = True
    listen_dsn: str | None = None
    register: bool = True
    release_dead_after: float | None = None
    commit_reserve: bool | None = None
    prefetch: int | None = None
    ack_batch: int = ACK_BATCH
    ack_interval: float = ACK_INTERVAL
    start_timeout: float | None = START_TIMEOUT
    max_stuck: int | None = None
    max_jobs: int | None = None
    # Seconds a plain (def) handler may go on after its timeout or its cancel (a blocking call)
    # before it is overdue: logged, and with a process supervisor (overdue.ask: `pyqueue-sql worker
    # --processes`) the cancel recorded and the process terminated and replaced.
    kill_grace: float = 5.0

    def __post_init__(self) -> None:
        if self.concurrency < 1:
            raise errors.InvalidArgumentError("concurrency must be at least 1")
        prefetch = self.prefetch
        if prefetch is not None and (
            isinstance(prefetch, bool) or not isinstance(prefetch, int) or prefetch < 0
        ):
            raise errors.InvalidArgumentError("prefetch must be an integer >= 0 (or None: the default)")
        ack_batch = self.ack_batch
        if isinstance(ack_batch, bool) or not isinstance(ack_batch, int) or ack_batch < 1:
            raise errors.InvalidArgumentError("ack_batch must be an integer >= 1")
        if not self.ack_interval >= 0:
            raise errors.InvalidArgumentError("ack_interval must be >= 0 seconds")
        if (
            self.lease <= 0
            or self.poll_min <= 0
            or self.poll_max < self.poll_min
            or self.long_poll_wait <= 0
            or self.long_poll_check <= 0
        ):
            raise errors.InvalidArgumentError(
                "lease, poll_min, long_poll_wait and long_poll_check must be > 0, poll_max >= poll_min"
            )
        start_timeout = self.start_timeout
        if start_timeout is not None and (
            isinstance(start_timeout, bool)
            or not isinstance(start_timeout, (int, float))
            or not start_timeout > 0
        ):
            raise errors.InvalidArgumentError(
                f"start_timeout must be seconds > 0 (or None: no limit), not {start_timeout!r}"
            )
        for name in ("max_stuck", "max_jobs"):
            value = getattr(self, name)
            low = 0 if name == "max_stuck" else 1
            if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value < low):
                raise errors.InvalidArgumentError(
                    f"{name} must be an integer >= {low} (or None), not {value!r}"
                )
        kill_grace = self.kill_grace
        if isinstance(kill_grace, bool) or not isinstance(kill_grace, (int, float)) or not kill_grace > 0:
            raise errors.InvalidArgumentError(f"kill_grace must be seconds > 0, not {kill_grace!r}")
        if self.release_dead_after is not None and self.release_dead_after < max(self.lease, 30):
            raise errors.InvalidArgumentError(
                "release_dead_after must be at least the lease (3 heartbeat intervals of lease/3) and "
                "at least 30 s (queue_release_dead_workers refuses a shorter silence)"
            )
        # seconds as floats (what the logs and the routines' arguments show)
        for name in ("lease", "ack_interval", "start_timeout", "kill_grace"):
            value = getattr(self, name)
            if value is not None:
                object.__setattr__(self, name, float(value))

    def keywords(self) -> dict[str, Any]:
        """The settings as the keywords of Worker, AsyncWorker and App.worker."""
        return {f.name: getattr(self, f.name) for f in dataclasses.fields(self)}


class WorkerOptions(TypedDict, total=False):
    """WorkerSettings' fields as the keywords of Worker and AsyncWorker (``**settings:
    Unpack[WorkerOptions]``), so that a type checker rejects a misspelt or mistyped one (at run
    time WorkerSettings does: a TypeError). Checked against WorkerSettings when this module is
    imported (_check_options): a field added there and not here is an ImportError."""

    concurrency: int
    name: str | None
    lease: float
    poll_fallback: float | None
    poll_min: float
    poll_max: float
    linger: float
    long_poll_wait: float
    long_poll_check: float
    shutdown_timeout: float
    listen: bool
    listen_dsn: str | None
    register: bool
    release_dead_after: float | None
    commit_reserve: bool | None
    prefetch: int | None
    ack_batch: int
    ack_interval: float
    start_timeout: float | None
    max_stuck: int | None
    max_jobs: int | None
    kill_grace: float


def _check_options() -> None:
    """WorkerOptions names each field of WorkerSettings with the same type, and nothing else."""
    fields = {f.name: f.type for f in dataclasses.fields(WorkerSettings)}
    options = {k: getattr(t, "__forward_arg__", t) for k, t in WorkerOptions.__annotations__.items()}
    if fields != options:
        raise ImportError(
            "WorkerOptions (pyqueue_sql/worker/settings.py) differs from WorkerSettings' fields: "
            f"{sorted(set(fields.items()) ^ set(options.items()))}"
        )


_check_options()


def settings_from_options(options: Mapping[str, Any]) -> dict[str, Any]:
    """The worker's settings a command line gave (`pyqueue-sql worker`, Django's pyqueue_worker):
    every WorkerSettings field among `options` (an option is named as its setting), as keywords of
    Worker; an option not given (None) keeps the worker's default. Checked by the worker that
    takes them."""
    return {
        f.name: options[f.name] for f in dataclasses.fields(WorkerSettings) if options.get(f.name) is not None
    }


@dataclass(frozen=True)
class Resolved:
    """The settings that depend on the database, resolved once the DSN's dialect is known (each
    readable as the worker's attribute: worker.use_listen, worker.prefetch...)."""

    name: str  # the worker's name: the given one, else host:pid
    use_listen: bool  # LISTEN for wakeups: asked for, and the dialect has it
    poll_fallback: float  # seconds: the given, else 5 s with LISTEN, else poll_max
    # Where queue_commit_reserve is one transaction of the server's (PostgreSQL). On MySQL/MariaDB
    # it is one transaction of its own too (opened by the procedure on MariaDB, by the client on
    # MySQL 8.0), and under many handlers of one queue it measured well under the throughput of a
    # commit plus the dispatcher's batched reserve (bench/async_worker.py --commit-reserve on and
    # off, at commit c44a52f: 224 against 581 msg/s, 32 handlers of 20 ms, 1,000 messages,
    # 2026-11-24, when the client opened the transaction on MariaDB too); commit_reserve=True asks
    # for it anyway. With max_jobs, never: a commit that reserves the next message would take more
    # than max_jobs.
    commit_reserve: bool
    # Messages reserved beyond the free handlers, so that a handler that finishes finds its next
    # message at hand instead of waiting a reserve's round trip.
    prefetch: int
    # Plain handlers' threads stuck past their time limit (runners.py): one more than max_stuck
    # stops the worker, which exits for its supervisor to start a fresh one.
    max_stuck: int


def resolve(settings: WorkerSettings, dialect: Dialect, default_name: str) -> Resolved:
    """The settings resolved against the database (see Resolved)."""
    if settings.max_jobs is not None:
        commit_reserve = False
    elif settings.commit_reserve is None:
        commit_reserve = statements.COMMIT_RESERVE not in dialect.own_transaction_statements
    else:
        commit_reserve = bool(settings.commit_reserve)
    poll_fallback = settings.poll_fallback
    return Resolved(
        name=settings.name or default_name,
        use_listen=settings.listen and dialect.supports_listen,
        poll_fallback=(5.0 if dialect.supports_listen else float(settings.poll_max))
        if poll_fallback is None
        else float(poll_fallback),
        commit_reserve=commit_reserve,
        prefetch=default_prefetch(settings.concurrency) if settings.prefetch is None else settings.prefetch,
        max_stuck=settings.concurrency if settings.max_stuck is None else settings.max_stuck,
    )
