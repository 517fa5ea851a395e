"""queue_stats's bound (docs/contract/03_queues.md, queue_stats): a count of 10,000 or less is
exact, a larger one says "more than 10,000" (an estimate, never below 10,001), on every dialect
and client."""

from __future__ import annotations

import datetime as dt

import pytest

EXACT = 10_000


@pytest.mark.slow
def test_counts_are_exact_up_to_the_bound_and_above_it_beyond(make_queue):
    q = make_queue()
    try:
        q.push_many([(f"r{i}", "k", 1) for i in range(EXACT + 1)])
        q.push("later", "k", 1, run_at=dt.timedelta(hours=1))
        assert len(q.reserve(n=1)) == 1
        s = q.stats()
        assert (s.ready, s.delayed, s.reserved) == (EXACT, 1, 1)
        assert s.oldest_ready_age_s is not None and s.oldest_ready_age_s >= 0
        q.push("one-more", "k", 1)
        s = q.stats()
        assert s.ready > EXACT
        assert (s.delayed, s.reserved) == (1, 1)
    finally:
        q.drop()
