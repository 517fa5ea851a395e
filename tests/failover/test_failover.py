"""A primary failover under producers and workers, with nothing acknowledged lost: the primary is
SIGKILLed and its synchronous standby (PostgreSQL) or semi-synchronous replica (MariaDB) promoted
while both push and consume through a multi-host DSN. tests/failover/scenario.py says what is
checked; `python -m bench failover --runs 10` (run from commit 4da0bbf) repeats it."""

from __future__ import annotations

import pytest

from .scenario import run_failover, start_pair

pytestmark = pytest.mark.slow


@pytest.fixture
def pair(dialect):
    """A primary and its standby of the current dialect, owned by this test."""
    from ..conftest import UNDER_CI

    try:
        started = start_pair(dialect)
    except Exception as exc:  # no server binaries, or no system user to run them as
        if UNDER_CI:
            pytest.fail(
                f"CI=true and cannot start a test-owned {dialect} primary and standby: {exc}", pytrace=False
            )
        pytest.skip(f"cannot start a test-owned {dialect} primary and standby: {exc}")
    try:
        yield started
    finally:
        started.destroy()


def test_failover_loses_no_acknowledged_push_or_commit_and_workers_carry_on(pair, tmp_path):
    result = run_failover(pair, tmp_path)
    print(result)
    assert result["violations"] == [], result
    assert result["pushes_acked"] > 0 and result["commits_acked"] > 0
    assert result["in_flight_at_kill"] > 0, "no message was in flight at the kill: the kill hit nothing"
