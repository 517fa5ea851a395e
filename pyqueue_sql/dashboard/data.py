"""What the dashboard reads and does, over a small pool of connections (blocking calls: the app
runs them in a thread pool, never on the event loop).

Every read and every action is one routine call, so the account's capabilities decide what the
dashboard may do: which actions it offers is found out by calling each action's routine with an
argument it refuses (a NULL queue): an account that may call it gets the routine's own
``invalid_argument`` refusal, one that may not gets a permission error; nothing changes either way.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import threading
import time
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any

from sqlalchemy.pool import QueuePool

from .. import dialects, errors
from ..client import (
    Database,
    GroupInfo,
    HistoryRow,
    MessageRow,
    QueueSettings,
    QueueStats,
    RateInfo,
    Result,
    ScheduleInfo,
    ThroughputRow,
    WorkerInfo,
)
from ..rows import Horizon

UTC = dt.timezone.utc

# The actions the dashboard offers, by the named statement (routine) each one calls.
ACTIONS = ("pause", "resume", "redrive", "remove", "release", "cancel")
# The capability that grants each action's routine (what a refusal tells the operator to grant).
GRANTED_BY = dict.fromkeys(ACTIONS, "the admin capability") | {"cancel": "the producer or admin capability"}
# How long a worker may go without a heartbeat before it is shown as stale (as `pyqueue-sql workers`).
STALE_AFTER_S = 60.0
# The chart's span and how often the throughput of recent minutes is read again.
THROUGHPUT_WINDOW = dt.timedelta(hours=1)
THROUGHPUT_REFRESH_S = 5.0
# Overview snapshots younger than this are shared between requests (many tabs, one query).
SNAPSHOT_TTL_S = 1.0
OUTCOMES = ("committed", "dead_lettered", "moved", "popped")


class Pool:
    """A few connections to the database (SQLAlchemy's QueuePool over the driver's connect)."""

    def __init__(self, dsn: str, size: int = 4) -> None:
        self.dsn = dsn
        self.dialect = dialects.for_dsn(dsn)
        self._pool = QueuePool(lambda: self.dialect.connect(dsn), pool_size=size, max_overflow=2, timeout=10)

    @contextlib.contextmanager
    def database(self) -> Iterator[Database]:
        fairy = self._pool.connect()
        try:
            # owned: each call runs in a transaction of its own (and is retried on a serialization
            # failure); the connection goes back to the pool, never closed here.
            yield Database(fairy.dbapi_connection, self.dialect, owned=True)
        except self.dialect.connection_errors():
            fairy.invalidate()
            raise
        finally:
            fairy.close()

    def dispose(self) -> None:
        self._pool.dispose()


@dataclass
class QueueRow:
    stats: QueueStats
    settings: QueueSettings | None
    history: bool
    per_minute: list[tuple[dt.datetime, int, int]]  # (minute, committed, dead_lettered), oldest first
    committed_last_minute: int | None
    failure_rate: float | None  # dead_lettered / (committed + dead_lettered) over the window


# How many groups of a queue /metrics reads (queue_groups' largest page).
GROUPS_READ = 1000
# How many groups a queue's page lists (one more is read, to tell whether there are more).
GROUPS_SHOWN = 100


@dataclass
class Overview:
    taken_at: dt.datetime
    queues: list[QueueRow]
    workers: list[WorkerInfo]
    dead_letter_queues: dict[str, list[str]]  # dead-letter queue -> the queues that send to it
    horizon: Horizon | None = None  # what holds back cleanup (queue_horizon; None: not readable)

    @property
    def live_workers(self) -> list[WorkerInfo]:
        """One per worker: the processes of `pyqueue-sql worker --processes N`, registered under one
        name on one host, count as one: live while one of them is (a process that died stays
        registered until it is released)."""
        return [
            g[0] for g in worker_groups(self.workers) if any(w.heartbeat_age_s <= STALE_AFTER_S for w in g)
        ]

    @property
    def stale_workers(self) -> list[WorkerInfo]:
        return [
            g[0] for g in worker_groups(self.workers) if all(w.heartbeat_age_s > STALE_AFTER_S for w in g)
        ]


def worker_groups(workers: list[WorkerInfo]) -> list[list[WorkerInfo]]:
    """The registered workers by (name, host): the processes of one `pyqueue-sql worker --processes N`."""
    groups: dict[tuple[str, str | None], list[WorkerInfo]] = {}
    for w in workers:
        groups.setdefault((w.name, w.host), []).append(w)
    return list(groups.values())


@dataclass
class _Throughput:
    """Per-minute counts of messages that left each queue (from queue_throughput), kept for the
    last hour and refreshed by reading only the last two minutes again; totals per (queue, outcome)
    counted from what was seen, for Prometheus counters."""

    minutes: dict[str, dict[dt.datetime, tuple[int, ...]]] = field(default_factory=dict)
    totals: dict[tuple[str, str], int] = field(default_factory=dict)
    loaded_at: float | None = None
    lock: threading.Lock = field(default_factory=threading.Lock)

    def refresh(self, db: Database, queues: list[str], force: bool = False) -> None:
        """Reads the queues' counts again (each queue alone: one index range each, also on MySQL,
        which plans the every-queue call as a read of each queue's whole history index)."""
        with self.lock:
            now_mono = time.monotonic()
            if not force and self.loaded_at is not None and now_mono - self.loaded_at < THROUGHPUT_REFRESH_S:
                return
            now = dt.datetime.now(UTC)
            if self.loaded_at is None:
                since = now - THROUGHPUT_WINDOW
            else:  # the minutes that can still grow: this one and the one before
                since = now.replace(second=0, microsecond=0) - dt.timedelta(minutes=1)
            rows = [r for queue in queues for r in _throughput_of(db, queue, since)]
            seen: dict[str, dict[dt.datetime, tuple[int, ...]]] = {}
            for r in rows:
                seen.setdefault(r.queue, {})[r.minute] = (r.committed, r.dead_lettered, r.moved, r.popped)
            for queue, minutes in seen.items():
                kept = self.minutes.setdefault(queue, {})
                for minute, counts in minutes.items():
                    before = kept.get(minute, (0, 0, 0, 0))
                    for outcome, old, new in zip(OUTCOMES, before, counts):
                        if new > old:
                            self.totals[(queue, outcome)] = self.totals.get((queue, outcome), 0) + new - old
                    kept[minute] = counts
            horizon = now - THROUGHPUT_WINDOW - dt.timedelta(minutes=1)
            for kept in self.minutes.values():
                for minute in [m for m in kept if m < horizon]:
                    del kept[minute]
            self.loaded_at = now_mono

    def series(self, queue: str, now: dt.datetime) -> list[tuple[dt.datetime, int, int]]:
        """(minute, committed, dead_lettered) for each of the last 60 minutes, oldest first."""
        current = now.replace(second=0, microsecond=0)
        kept = self.minutes.get(queue, {})
        out = []
        for i in range(59, -1, -1):
            minute = current - dt.timedelta(minutes=i)
            counts = kept.get(minute, (0, 0, 0, 0))
            out.append((minute, counts[0], counts[1]))
        return out


def _horizon_of(db: Database) -> Horizon | None:
    """queue_horizon's row; None where the account may not call it or the schema has none yet."""
    try:
        return db.horizon()
    except errors.QueueError:
        return None


def _throughput_of(db: Database, queue: str, since: dt.datetime) -> list[ThroughputRow]:
    try:
        return db.queue(queue).throughput(since=since)
    except errors.UnknownQueueError:  # dropped meanwhile
        return []


class Dashboard:
    """The dashboard's view of one database: reads, actions and what the account may do."""

    def __init__(self, dsn: str, read_only: bool = False, pool_size: int = 4) -> None:
        self.pool = Pool(dsn, pool_size)
        self.dialect = self.pool.dialect
        self.read_only = read_only
        self._throughput = _Throughput()
        self._allowed: dict[str, bool] | None = None
        self._allowed_at = 0.0
        self._snapshot: Overview | None = None
        self._snapshot_at = 0.0
        self._lock = threading.Lock()

    def close(self) -> None:
        self.pool.dispose()

    # -- what this account may do ------------------------------------------------
    def allowed_actions(self) -> dict[str, bool]:
        """Which actions the account may call (each probed with a NULL queue, which the routine
        refuses before doing anything), looked up again every minute; all False when read-only."""
        if self.read_only:
            return dict.fromkeys(ACTIONS, False)
        if self._allowed is None or time.monotonic() - self._allowed_at > 60:
            allowed = {}
            with self.pool.database() as db:
                for action in ACTIONS:
                    params = {"pause": {"queue": None}, "resume": {"queue": None}}.get(action)
                    if action == "redrive":
                        params = {"queue": None, "to_queue": None, "n": None}
                    elif action in ("remove", "cancel"):
                        params = {"queue": None, "key": None, "kind": None}
                    elif action == "release":
                        params = {"queue": None, "worker": None}
                    try:
                        db.call(action, **params)
                    except (errors.PermissionDeniedError, errors.SchemaNotInstalledError):
                        allowed[action] = False  # not granted, or not in this schema's revision
                    except errors.QueueError:  # its own refusal of the NULL queue: it may call it
                        allowed[action] = True
                    else:  # a routine that took a NULL queue: never offer what we cannot explain
                        allowed[action] = False
            self._allowed, self._allowed_at = allowed, time.monotonic()
        return dict(self._allowed)

    def may(self, action: str) -> bool:
        return self.allowed_actions().get(action, False)

    # -- reads --------------------------------------------------------------------
    def overview(self) -> Overview:
        with self._lock:
            if self._snapshot is not None and time.monotonic() - self._snapshot_at < SNAPSHOT_TTL_S:
                return self._snapshot
        with self.pool.database() as db:
            stats = db.stats()
            settings = {s.queue: s for s in db.settings()}
            workers = db.workers()
            self._throughput.refresh(db, _history_queues(settings.values()))
            horizon = _horizon_of(db)
        now = dt.datetime.now(UTC)
        rows = []
        for s in stats:
            setting = settings.get(s.queue)
            history = setting is not None and _counted(setting)
            series = self._throughput.series(s.queue, now) if history else []
            done = sum(c for _, c, _ in series)
            dead = sum(d for _, _, d in series)
            rows.append(
                QueueRow(
                    stats=s,
                    settings=setting,
                    history=history,
                    per_minute=series,
                    committed_last_minute=series[-2][1] if history else None,
                    failure_rate=(dead / (done + dead)) if history and done + dead else None,
                )
            )
        dlqs: dict[str, list[str]] = {}
        for s in settings.values():
            if s.dead_letter_queue is not None:
                dlqs.setdefault(s.dead_letter_queue, []).append(s.queue)
        snapshot = Overview(now, rows, workers, dlqs, horizon)
        with self._lock:
            self._snapshot, self._snapshot_at = snapshot, time.monotonic()
        return snapshot

    def throughput_totals(self) -> dict[tuple[str, str], int]:
        with self.pool.database() as db:
            self._throughput.refresh(db, _history_queues(db.settings()))
        with self._throughput.lock:
            return dict(self._throughput.totals)

    def queue_page(
        self,
        name: str,
        state: str | None,
        prefix: str | None,
        after: tuple[str, str] | None,
        n: int,
        groups: bool = True,
    ) -> dict[str, Any]:  # render()'s keyword arguments
        """What a queue's page shows; with groups, its first GROUPS_SHOWN FIFO groups by group key
        (queue_groups, one page of GROUPS_SHOWN + 1 rows: "groups_more" says whether there are
        more). Only the queue's page reads groups (the overview and the dead letters do not)."""
        with self.pool.database() as db:
            q = db.queue(name)
            stats = q.stats()
            settings = q.settings()
            messages = q.messages(state=state, key_prefix=prefix, after=after, n=n + 1)
            limits = q.limits()
            rates = q.rates()
            schedules = q.schedules()
            group_rows = q.groups(n=GROUPS_SHOWN + 1) if groups else []
            senders = [s.queue for s in db.settings() if s.dead_letter_queue == name]
        return {
            "stats": stats,
            "settings": settings,
            "messages": messages[:n],
            "more": len(messages) > n,
            "limits": limits,
            "rates": rates,
            "schedules": schedules,
            "groups": group_rows[:GROUPS_SHOWN],
            "groups_more": len(group_rows) > GROUPS_SHOWN,
            "groups_shown": GROUPS_SHOWN,
            "senders": senders,
        }

    def rates(self) -> list[RateInfo]:
        """Every queue's rate limits (queue_rates), for /metrics."""
        with self.pool.database() as db:
            return db.rates()

    def groups(self, queues: list[str]) -> dict[str, list[GroupInfo]]:
        """The FIFO groups of each queue (queue_groups: the first GROUPS_READ by group key), for
        /metrics; a queue without groups maps to []."""
        with self.pool.database() as db:
            return {name: db.queue(name).groups(n=GROUPS_READ) for name in queues}

    def queue_stats(self, name: str) -> QueueStats:
        with self.pool.database() as db:
            return db.queue(name).stats()

    def message(
        self, queue: str, key: str, kind: str, details: bool = True
    ) -> tuple[Any, list[HistoryRow], QueueSettings | None]:  # Any: a MessageInfo or None
        """The live message (None when there is none), and with details its history rows and the
        queue's settings (None when the account may not read them)."""
        with self.pool.database() as db:
            q = db.queue(queue)
            message = q.message(key, kind)
            if not details:
                return message, [], None
            history = q.message_history(key, kind)
            try:
                settings = q.settings()
            except errors.PermissionDeniedError:
                settings = None
            return message, history, settings

    def result(self, queue: str, key: str, kind: str) -> Result | None:
        """What queue_result says of the message (its progress and cancel request while it is
        live, its stored result once it finished), None when the account may not call it."""
        with self.pool.database() as db:
            try:
                return db.queue(queue).result(key, kind)
            except errors.PermissionDeniedError:
                return None

    def workers(self) -> tuple[list[WorkerInfo], dict[str, list[MessageRow]]]:
        """The registered workers and, per reserve_as name, the live reservations it holds (read
        from the reserved messages of the queues the workers serve, at most 1000 per queue). The
        queues read are those that hold a reservation now (one queue_stats), never the names the
        workers registered: a worker's list of names (up to 1000 each, any names) costs no query."""
        with self.pool.database() as db:
            workers = db.workers()
            served = {q for w in workers for q in (w.queues or [])}
            queues = sorted(s.queue for s in db.stats() if s.reserved and (not served or s.queue in served))
            held: dict[str, list[MessageRow]] = {}
            for name in queues:
                try:
                    rows = db.queue(name).messages(state="reserved", n=1000)
                except errors.UnknownQueueError:
                    continue
                for row in rows:
                    held.setdefault(row.reserved_by or "", []).append(row)
        return workers, held

    def schedules(self) -> list[ScheduleInfo]:
        with self.pool.database() as db:
            return db.schedules()

    def results(
        self, queue: str, kind: str | None, state: str | None, n: int, before: dt.datetime | None
    ) -> list[Result]:
        """A page of a queue's finished jobs, newest first (Queue.results, queue_results)."""
        with self.pool.database() as db:
            return db.queue(queue).results(kind=kind, state=state, n=n, before=before)

    def settings(self) -> list[QueueSettings]:
        with self.pool.database() as db:
            return db.settings()

    # -- actions (admin) ---------------------------------------------------------------
    def pause(self, queue: str) -> None:
        with self.pool.database() as db:
            db.queue(queue).pause()

    def resume(self, queue: str) -> None:
        with self.pool.database() as db:
            db.queue(queue).resume()

    def remove(self, queue: str, key: str, kind: str) -> bool:
        with self.pool.database() as db:
            return db.queue(queue).remove(key, kind)

    def cancel(self, queue: str, key: str, kind: str) -> str:
        """queue_cancel: 'cancelled' (it was waiting: removed), 'requested' (held: its consumer is
        asked to stop) or 'unknown' (no live message)."""
        with self.pool.database() as db:
            return db.queue(queue).cancel(key, kind)

    def release(self, queue: str, worker: str | None) -> int:
        """Hands back the queue's reservations (worker's only, when given); how many."""
        with self.pool.database() as db:
            return db.queue(queue).release(worker=worker)

    def redrive(self, dead_queue: str, to_queue: str, n: int | None) -> int:
        """Moves n (None: all that can move) dead letters back to to_queue; how many moved."""
        moved = 0
        with self.pool.database() as db:
            q = db.queue(dead_queue)
            if n is not None:
                return q.redrive(to_queue, n)
            while True:  # in batches: each call is one short transaction
                got = q.redrive(to_queue, 500)
                moved += got
                if got < 500:
                    return moved


def _counted(setting: QueueSettings) -> bool:
    """Whether queue_throughput counts what leaves the queue: from its history, or from the
    results it keeps (an app's queue of a store_result task keeps them by default)."""
    return setting.history_retention is not None or setting.result_retention is not None


def _history_queues(settings: Iterable[QueueSettings]) -> list[str]:
    return sorted(s.queue for s in settings if _counted(s))
