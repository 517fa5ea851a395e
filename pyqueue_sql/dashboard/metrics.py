"""/metrics of the dashboard: the queues as the routines show them, read at each scrape.

A collector on a registry of the app's own (never the global one): queue depth by state, the age
of the oldest ready message, dead letters, paused, workers live and stale, the messages that
left each queue by outcome (counted from pyqueue_history for queues that keep history), and each
rate limit's n, window, units used in the window and seconds until its next unit is free
(queue_rates; kind "*" is the rate of a whole queue), and per queue its FIFO groups, their
messages in flight and the groups at their k (queue_groups).
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterator
from typing import TYPE_CHECKING

from prometheus_client import CollectorRegistry
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.exposition import choose_encoder
from starlette.responses import Response

from .data import OUTCOMES, Dashboard

if TYPE_CHECKING:
    from prometheus_client.metrics_core import Metric

    from ..rows import GroupInfo, RateInfo


class DashboardCollector:
    def __init__(self, dashboard: Dashboard) -> None:
        self.dashboard = dashboard
        self.registry = CollectorRegistry(auto_describe=False)
        self.registry.register(self)

    def collect(self) -> Iterator[Metric]:
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
        yield from rate_metrics(self.dashboard.rates(), dt.datetime.now(dt.timezone.utc))
        yield from group_metrics(self.dashboard.groups([row.stats.queue for row in o.queues]))


# The kind label of a queue-wide rate (queue_rates' p_kind NULL), as the CLI shows it.
WHOLE_QUEUE = "*"


def rate_metrics(rates: list[RateInfo], now: dt.datetime) -> tuple[GaugeMetricFamily, ...]:
    """The gauges of the rate limits (RateInfo rows) as of ``now``."""
    labels = ["queue", "kind"]
    limit = GaugeMetricFamily(
        "pyqueue_queue_rate_limit",
        "A rate limit's n: deliveries allowed in any window (queue_set_rate).",
        labels=labels,
    )
    window = GaugeMetricFamily(
        "pyqueue_queue_rate_window_seconds", "A rate limit's window (per).", labels=labels
    )
    used = GaugeMetricFamily(
        "pyqueue_queue_rate_in_window",
        "Units of a rate limit used within the last window (saturated when equal to its n).",
        labels=labels,
    )
    wait = GaugeMetricFamily(
        "pyqueue_queue_rate_next_free_seconds",
        "Seconds until a rate limit's next unit is free (0 when one is free now).",
        labels=labels,
    )
    for r in rates:
        key = [r.queue, WHOLE_QUEUE if r.kind is None else r.kind]
        limit.add_metric(key, r.n)
        window.add_metric(key, r.per.total_seconds())
        used.add_metric(key, r.in_window)
        ahead = 0.0 if r.next_free_at is None else (r.next_free_at - now).total_seconds()
        wait.add_metric(key, max(0.0, ahead))
    return limit, window, used, wait


def group_metrics(groups: dict[str, list[GroupInfo]]) -> tuple[GaugeMetricFamily, ...]:
    """The gauges of the FIFO groups (GroupInfo rows by queue), summed per queue (a label per
    group would make a series per account, order...): the groups with messages, their messages
    in flight, and the groups with as many in flight as their k lets out. Queues without groups,
    or whose queue_groups has no group_limit column yet, are left out."""
    labels = ["queue"]
    count = GaugeMetricFamily(
        "pyqueue_queue_groups", "FIFO groups holding messages (the first 1000 by group key).", labels=labels
    )
    in_flight = GaugeMetricFamily(
        "pyqueue_queue_group_in_flight",
        "Messages of the queue's FIFO groups in flight (live at their group's head), summed over its groups.",
        labels=labels,
    )
    at_limit = GaugeMetricFamily(
        "pyqueue_queue_groups_at_limit",
        "FIFO groups with as many messages in flight as their k (queue_set_group_limit) lets out.",
        labels=labels,
    )
    for queue, rows in groups.items():
        if not rows or rows[0].group_limit is None:
            continue
        count.add_metric([queue], len(rows))
        in_flight.add_metric([queue], sum(g.in_flight or 0 for g in rows))
        at_limit.add_metric([queue], sum(1 for g in rows if (g.in_flight or 0) >= (g.group_limit or 1)))
    return count, in_flight, at_limit


def metrics_response(registry: CollectorRegistry, accept: str | None) -> Response:
    encoder, content_type = choose_encoder(accept or "")
    return Response(encoder(registry), media_type=content_type)
