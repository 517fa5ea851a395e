"""Prometheus metrics of a Worker (``pyqueue-sql worker --metrics-port N``; needs prometheus-client,
the ``metrics`` extra).

The metrics observe the worker from outside: a logging.Handler on its logger reads the structured
records it writes (``extra={"event": ...}``: commit, fail and give_up with their outcome, cancel,
lost, reconnect, each with queue, kind and the handler's duration ``ms``), and the in-flight gauge reads
``Worker.status()`` at each scrape. Everything lives on a CollectorRegistry of its own (never the
global one), so several workers (or tests) in one process do not collide.

Commits are logged at DEBUG. To see them without changing what the worker prints, the handler taps
the worker's logger at DEBUG and passes on to the loggers above it only the records at the level
they would have received anyway.

    metrics = WorkerMetrics(worker)
    metrics.serve(9108)          # http://127.0.0.1:9108/metrics
    worker.run()
    metrics.close()
"""

from __future__ import annotations

import logging
import threading
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Histogram, start_http_server
from prometheus_client.core import GaugeMetricFamily

WORKER_LOGGER = "pyqueue_sql.worker"
# Handler durations, in seconds: from a millisecond to ten minutes.
DURATION_BUCKETS = (0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300, 600)


class WorkerMetrics:
    """The metrics of one worker, on a registry of its own (``registry``)."""

    def __init__(self, worker: Any, registry: CollectorRegistry | None = None) -> None:
        self.worker = worker
        self.registry = registry if registry is not None else CollectorRegistry(auto_describe=True)
        labels = ("queue", "kind")
        self.handled = Counter(
            "pyqueue_worker_handled",
            "Messages whose handler finished (returned or raised) and whose outcome was recorded.",
            labels,
            registry=self.registry,
        )
        self.committed = Counter(
            "pyqueue_worker_committed",
            "Messages committed after their handler returned.",
            labels,
            registry=self.registry,
        )
        self.failed = Counter(
            "pyqueue_worker_failed",
            "Messages whose handler raised (recorded with queue_fail).",
            labels,
            registry=self.registry,
        )
        self.retried = Counter(
            "pyqueue_worker_retried",
            "Failed messages given back for another delivery.",
            labels,
            registry=self.registry,
        )
        self.dead_lettered = Counter(
            "pyqueue_worker_dead_lettered",
            "Failed messages on their last allowed delivery, moved to the dead-letter queue.",
            labels,
            registry=self.registry,
        )
        self.dropped = Counter(
            "pyqueue_worker_dropped",
            "Failed messages on their last allowed delivery in a queue without a dead-letter queue.",
            labels,
            registry=self.registry,
        )
        self.given_up = Counter(
            "pyqueue_worker_given_up",
            "Failed messages ended at once, not retried (GiveUp, the retry policy's give_up_on or an "
            "error outside its retry_on, a payload that does not match the task): also counted in "
            "failed and in dead_lettered or dropped.",
            labels,
            registry=self.registry,
        )
        self.cancelled = Counter(
            "pyqueue_worker_cancelled",
            "Messages whose handler stopped for a cancel (recorded cancelled).",
            labels,
            registry=self.registry,
        )
        self.lost = Counter(
            "pyqueue_worker_lost",
            "Messages whose reservation no longer held at commit or fail (expired or released).",
            labels,
            registry=self.registry,
        )
        self.expired = Counter(
            "pyqueue_worker_expired",
            "Messages this worker's reserves ended unrun (cancelled) because their expiry "
            "(pyqueue.expires_at, expires=) had passed.",
            labels,
            registry=self.registry,
        )
        self.duration = Histogram(
            "pyqueue_worker_handler_duration_seconds",
            "How long handlers ran, successes and failures alike.",
            labels,
            buckets=DURATION_BUCKETS,
            registry=self.registry,
        )
        self.reconnects = Counter(
            "pyqueue_worker_reconnects",
            "Database connections lost and opened again, by the worker's connection role.",
            ("role",),
            registry=self.registry,
        )
        self.registry.register(_StatusCollector(worker))
        self.registry.register(_HorizonCollector(worker))
        self._handler = _Tap(self)
        self._server: Any = None
        self._thread: threading.Thread | None = None
        self._handler.install()

    def observe(self, record: logging.LogRecord) -> None:
        """Counts one of the worker's log records (those without an ``event`` are ignored)."""
        event = getattr(record, "event", None)
        if event is None:
            return
        if event == "reconnect":
            self.reconnects.labels(str(getattr(record, "role", "") or "")).inc()
            return
        if event not in ("commit", "fail", "give_up", "cancel", "lost", "interrupted", "expired"):
            return
        queue, kind = str(getattr(record, "queue", "") or ""), str(getattr(record, "kind", "") or "")
        if event == "expired":
            self.expired.labels(queue, kind).inc()
            return
        ms = getattr(record, "ms", None)
        if event == "lost":
            self.lost.labels(queue, kind).inc()
            if ms is None:  # a commit that found its reservation gone: the handler ran, not timed here
                return
        if ms is not None:
            self.duration.labels(queue, kind).observe(float(ms) / 1000.0)
        self.handled.labels(queue, kind).inc()
        if event == "commit":
            self.committed.labels(queue, kind).inc()
            return
        if event == "cancel":
            self.cancelled.labels(queue, kind).inc()
            return
        self.failed.labels(queue, kind).inc()
        if event == "give_up":
            self.given_up.labels(queue, kind).inc()
        outcome = getattr(record, "outcome", None)
        if outcome == "retry":
            self.retried.labels(queue, kind).inc()
        elif outcome == "dead_lettered":
            self.dead_lettered.labels(queue, kind).inc()
        elif outcome == "dropped":
            self.dropped.labels(queue, kind).inc()

    def serve(self, port: int, host: str = "127.0.0.1") -> int:
        """Serves /metrics over HTTP in a daemon thread; returns the port (0 picks a free one)."""
        self._server, self._thread = start_http_server(port, addr=host, registry=self.registry)
        return int(self._server.server_port)

    def close(self) -> None:
        """Stops serving and takes the handler off the worker's logger (its level put back)."""
        self._handler.uninstall()
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None


class _StatusCollector:
    """In-flight handlers and capacity, read from Worker.status() at each scrape."""

    def __init__(self, worker: Any) -> None:
        self.worker = worker

    def describe(self) -> list[Any]:
        return []

    def collect(self) -> Any:
        status = self.worker.status()
        in_flight = GaugeMetricFamily("pyqueue_worker_in_flight", "Handlers running now.")
        in_flight.add_metric([], len(status.running))
        capacity = GaugeMetricFamily("pyqueue_worker_concurrency", "Handler threads of the worker.")
        capacity.add_metric([], status.concurrency)
        stuck = GaugeMetricFamily(
            "pyqueue_worker_stuck_threads",
            "Plain handlers' threads still running past their timeout (a blocking call), set aside.",
        )
        stuck.add_metric([], self.worker.stuck_threads())
        yield in_flight
        yield capacity
        yield stuck


class _HorizonCollector:
    """What holds back the database's cleanup (queue_horizon), read at each scrape on a connection
    of its own, opened for it and closed after: nothing per job. A scrape that cannot read it
    (the database unreachable, an account without the monitor capability) leaves the gauges out."""

    def __init__(self, worker: Any) -> None:
        self.worker = worker

    def describe(self) -> list[Any]:
        return []

    def collect(self) -> Any:
        from .client import connect

        try:
            with connect(self.worker.dsn) as db:
                horizon = db.horizon()
        except Exception:  # noqa: BLE001 - a scrape must not fail for it
            logging.getLogger(WORKER_LOGGER).debug("metrics: queue_horizon unreadable", exc_info=True)
            return
        age = GaugeMetricFamily(
            "pyqueue_db_oldest_transaction_age_seconds",
            "How long the oldest transaction holding back cleanup (PostgreSQL vacuum, InnoDB purge) of the "
            "queue's database has been open; 0 when none.",
        )
        age.add_metric([], horizon.oldest_age_s or 0.0)
        backlog = GaugeMetricFamily(
            "pyqueue_db_cleanup_backlog",
            "PostgreSQL: transactions since the oldest snapshot that holds back vacuum; MySQL/MariaDB: InnoDB's "
            "history list length.",
        )
        backlog.add_metric([], horizon.backlog)
        yield age
        yield backlog


class _Tap(logging.Handler):
    """Sits on the worker's logger at DEBUG and does its propagation itself: every record is
    counted, and the handlers of the logger and of the loggers above it get a record only when
    it reaches the level the worker's logger had before (its own, or the effective one above)."""

    def __init__(self, metrics: WorkerMetrics) -> None:
        super().__init__(logging.DEBUG)
        self.metrics = metrics
        self.logger = logging.getLogger(WORKER_LOGGER)
        self._saved: tuple[int, bool, list[logging.Handler]] | None = None

    def install(self) -> None:
        lg = self.logger
        self._saved = (lg.level, lg.propagate, [h for h in lg.handlers if h is not self])
        for h in self._saved[2]:
            lg.removeHandler(h)
        lg.addHandler(self)
        lg.setLevel(logging.DEBUG)
        lg.propagate = False

    def uninstall(self) -> None:
        if self._saved is None:
            return
        level, propagate, handlers = self._saved
        lg = self.logger
        lg.removeHandler(self)
        for h in handlers:
            lg.addHandler(h)
        lg.setLevel(level)
        lg.propagate = propagate
        self._saved = None

    def _gate(self) -> int:
        assert self._saved is not None
        level = self._saved[0]
        if level != logging.NOTSET:
            return level
        parent = self.logger.parent
        return parent.getEffectiveLevel() if parent is not None else logging.WARNING

    def emit(self, record: logging.LogRecord) -> None:
        try:
            self.metrics.observe(record)
        except Exception:  # metrics must never break the worker
            self.handleError(record)
        saved = self._saved
        if saved is None or record.levelno < self._gate():
            return
        handlers = list(saved[2])
        if saved[1]:
            node = self.logger.parent
            while node is not None:
                handlers.extend(node.handlers)
                if not node.propagate:
                    break
                node = node.parent
        for h in handlers:
            if record.levelno >= h.level:
                h.handle(record)
