"""A time or duration beyond what Python's datetime can hold is the package's InvalidArgumentError
through the Python API (it was an OverflowError from inside the client), on both dialects, and
nothing is written."""

from __future__ import annotations

import datetime as dt

import pytest

from pyqueue_sql import errors


@pytest.mark.parametrize("run_at", [1e12, -1e12, dt.timedelta(days=999_999_999), float("inf")])
def test_a_push_whose_run_at_is_out_of_range_is_refused_in_one_error(queue, run_at):
    with pytest.raises(errors.InvalidArgumentError, match="run_at"):
        queue.push("k", "kind", {}, run_at=run_at)
    assert queue.stats().ready + queue.stats().delayed == 0
    assert queue.push("k", "kind", {}) is True
