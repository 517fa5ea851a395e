"""/metrics of the dashboard: the queues as the routines show them, read at each scrape.

A collector on a registry of the app's own (never the global one): queue depth by state, the age
of the oldest ready message, dead letters, paused, workers live and stale, and the messages that
left each queue by outcome (counted from pyqueue_history for queues that keep history).
"""

from __future__ import annotations

from typing import Any

from prometheus_client import CollectorRegistry
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.exposition import choose_encoder
from starlette.responses import Response

from .data import OUTCOMES, Dashboard


class DashboardCollector:
    def __init__(self, dashboard: Dashboard) -> None:
        self.dashboard = dashboard
        self.registry = CollectorRegistry(auto_describe=False)
        self.registry.register(self)

    def collect(self) -> Any:
        o = self.dashboard.overview()
        depth = GaugeMetricFamily(
            "pyqueue_queue_messages",
            "Live messages in the queue by state (queue_stats).",
            labels=["queue", "state"],
        )
        oldest = GaugeMetricFamily(
            "pyqueue_queue_oldest_ready_age_seconds",
            "How long the oldest ready message has been waiting (0 when none is ready).",
            labels=["queue"],
        )
        paused = GaugeMetricFamily("pyqueue_queue_paused", "1 when the queue is paused.", labels=["queue"])
        dead = CounterMetricFamily(
            "pyqueue_queue_dead_lettered",
            "Messages that exhausted max_attempts in the queue since it was created (queue_stats dead).",
            labels=["queue"],
        )
        history = GaugeMetricFamily(
            "pyqueue_queue_history_enabled",
            "1 when the queue keeps history (history_retention), which the processed counts need.",
            labels=["queue"],
        )
        for row in o.queues:
            s = row.stats
            for state in ("ready", "delayed", "reserved"):
                depth.add_metric([s.queue, state], getattr(s, state))
            oldest.add_metric([s.queue], s.oldest_ready_age_s or 0.0)
            paused.add_metric([s.queue], 1.0 if s.paused else 0.0)
            dead.add_metric([s.queue], s.dead)
            history.add_metric([s.queue], 1.0 if row.history else 0.0)
        processed = CounterMetricFamily(
            "pyqueue_queue_processed",
            "Messages that left the queue, by outcome, counted from pyqueue_history since the dashboard "
            "started (queues with history_retention only).",
            labels=["queue", "outcome"],
        )
        totals = self.dashboard.throughput_totals()
        for row in o.queues:
            if row.history:
                for outcome in OUTCOMES:
                    processed.add_metric(
                        [row.stats.queue, outcome], totals.get((row.stats.queue, outcome), 0)
                    )
        workers = GaugeMetricFamily(
            "pyqueue_workers", "Registered workers, live or stale (no heartbeat for 60 s).", labels=["state"]
        )
        workers.add_metric(["live"], len(o.live_workers))
        workers.add_metric(["stale"], len(o.stale_workers))
        yield from (depth, oldest, paused, dead, history, processed, workers)


def metrics_response(registry: CollectorRegistry, accept: str | None) -> Response:
    encoder, content_type = choose_encoder(accept or "")
    return Response(encoder(registry), media_type=content_type)
