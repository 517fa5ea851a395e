"""FIFO group limits on the dashboard's /metrics, read with raw HTTP on both dialects: per queue,
the groups holding messages, their messages in flight and the groups at their k."""

from __future__ import annotations

import pytest
from prometheus_client.parser import text_string_to_metric_families

from .conftest import http

pytestmark = pytest.mark.slow  # a dashboard server per test


def test_metrics_sum_the_groups_of_a_queue(serve, dsn, make_queue):
    grouped, plain = make_queue(), make_queue()
    grouped.set_group_limit(None, 2)
    grouped.set_group_limit("small", 3)
    for i in range(4):
        grouped.push(f"big-{i}", "job", {}, group="big")
    grouped.push("small-0", "job", {}, group="small")
    plain.push("p", "job", {})
    served = serve(dsn)
    status, text, _ = http(served.url + "/metrics")
    assert status == 200
    got = {
        (s.name, s.labels["queue"]): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
        if s.name.startswith("pyqueue_queue_group") and s.labels.get("queue") in (grouped.name, plain.name)
    }
    assert got == {
        ("pyqueue_queue_groups", grouped.name): 2,
        ("pyqueue_queue_group_in_flight", grouped.name): 3,  # big's 2 heads, small's 1
        ("pyqueue_queue_groups_at_limit", grouped.name): 1,  # big: 2 of 2
    }
