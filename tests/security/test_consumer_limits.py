"""A worker connected with only the consumer capability reads its queues' concurrency limits
(queue_limits), so it keeps what it holds of a limited kind within the limit as a worker of the
installing account does: without them its reserves under a limit it fills itself find the limit
full and are held back, a round at a time. Real roles (PostgreSQL) and accounts (MySQL/MariaDB)
holding only `consumer`, made with `pyqueue-sql grant --apply` (tests/security/test_privileges.py).

queue_limits with no queue names every queue's limits: a consumer may already reserve from any
queue it names (capabilities are per routine, not per queue), so what it learns beyond that is
which queues have limits, on which kinds, and how many of their slots are in use.
"""

from __future__ import annotations

import os
import subprocess
import sys
import uuid

import pytest

import pyqueue_sql
from pyqueue_sql import migrate
from pyqueue_sql.client import LimitInfo
from pyqueue_sql.errors import PermissionDeniedError

from ..plainsql import run as _run
from ..schema.releases import export, latest, require_history
from ..worker.test_worker_held_back import drain
from .test_privileges import Accounts, _database_of


@pytest.fixture
def accounts(dsn):
    made = Accounts(dsn)
    yield made
    made.close()


def test_a_consumer_reads_the_limits_and_cannot_set_them(accounts, make_queue):
    limited, other = make_queue(), make_queue()
    limited.set_limit("noop", 64)
    other.set_limit("bulk", 2)
    consumer = accounts.client(accounts.with_capabilities("lim", "consumer"))
    q = consumer.queue(limited.name)
    assert q.limits() == [LimitInfo(limited.name, "noop", 64, 0)]
    # with no queue named: every queue's, as a monitor reads them
    mine = {r.queue: r for r in consumer.limits() if r.queue in (limited.name, other.name)}
    assert mine == {
        limited.name: LimitInfo(limited.name, "noop", 64, 0),
        other.name: LimitInfo(other.name, "bulk", 2, 0),
    }
    for attempt in (
        lambda: q.set_limit("noop", 1000),
        lambda: q.set_limit("noop", None),
        lambda: q.set_rate("noop", 1, 1),
        lambda: q.stats(),
    ):
        with pytest.raises(PermissionDeniedError):
            attempt()
    assert limited.limits() == [LimitInfo(limited.name, "noop", 64, 0)]


def test_a_consumer_only_worker_reads_its_limits_and_is_never_held_back(accounts, make_queue, monkeypatch):
    # as tests/worker/test_worker_held_back.py's worker of the installing account: 16 handlers and a
    # prefetch under a limit of 64, each reserve asking for no more than the slots its own holdings
    # leave free. A worker that cannot read the limit asks for more, finds the limit full and starts
    # a held-back state (waiting for its own acknowledgements). Counted: its starts of that state.
    from pyqueue_sql.worker.dispatch import HeldBack

    starts = []
    start = HeldBack.start

    def started(self):
        starts.append(self.on)
        start(self)

    monkeypatch.setattr(HeldBack, "start", started)
    queue = make_queue()
    queue.set_limit("noop", 64)
    name = accounts.with_capabilities("wrk", "consumer")
    _, worker = drain(accounts.dsn_for(name), queue)
    assert worker.state.limits == {queue.name: {"noop": 64}}
    assert starts == [], starts
    assert queue.stats().ready == 0


def _released_cli(tree, dsn: str, *argv: str) -> None:
    """Runs the released version's `pyqueue-sql` (its tree first on sys.path) on dsn."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYQUEUE_", "PYTEST_"))}
    env.update(PYTHONPATH=str(tree), PYQUEUE_DSN=dsn)
    done = subprocess.run(
        [sys.executable, "-m", "pyqueue_sql.cli", *argv],
        env=env,
        cwd=tree,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, (argv, done.stdout, done.stderr)


@pytest.mark.slow
def test_after_an_upgrade_granting_consumer_again_gives_it_the_limits(fresh_database, tmp_path):
    """Upgrading from the newest release: `migrate` keeps the consumer's grants (PostgreSQL: CREATE
    OR REPLACE keeps them; MySQL/MariaDB: given back after the procedures are re-created) and grants
    nothing new, so its workers run on without the limits. `pyqueue-sql grant --consumer --apply`
    run again (the upgrade step the CHANGELOG names) adds queue_limits."""
    release = latest()
    require_history(release.commit)
    tree = export(release.commit, tmp_path / f"release-{release.version}")
    dsn = fresh_database("conslim")
    _released_cli(tree, dsn, "migrate")
    made = Accounts(dsn)
    try:
        name = made.create("upg")
        _released_cli(tree, dsn, "grant", "--role", made.role_arg(name), "--consumer", "--apply")
        migrate.upgrade(dsn)
        with pyqueue_sql.connect(dsn) as owner:
            queue = owner.queue(f"t.{uuid.uuid4().hex[:12]}").create()
            queue.set_limit("noop", 4)
            queue.push("k", "noop", {})
            consumer = made.client(name).queue(queue.name)
            with pytest.raises(PermissionDeniedError):
                consumer.limits()
            [held] = consumer.reserve()  # the released grants still hold
            assert consumer.commit(held)
            made.grant(name, "consumer")
            assert consumer.limits() == [LimitInfo(queue.name, "noop", 4, 0)]
            queue.drop()
    finally:
        made.close()


def _revoke_limits(accounts: Accounts, name: str) -> None:
    if accounts.dialect == "postgresql":
        _run(accounts.admin, f'REVOKE EXECUTE ON FUNCTION queue_limits FROM "{name}"')
    else:
        database = _database_of(accounts.dsn)
        _run(accounts.admin, f"REVOKE EXECUTE ON PROCEDURE `{database}`.`queue_limits` FROM `{name}`@`%`")


def test_a_consumer_worker_without_the_limits_still_drains_under_them(accounts, make_queue):
    """The fallback: a consumer that may not read the limits (granted before queue_limits was part of
    consumer, or with it revoked) has none in state.limits, and the queue still drains: the reserves
    keep every limit themselves."""
    queue = make_queue()
    queue.set_limit("noop", 64)
    name = accounts.with_capabilities("old", "consumer")
    _revoke_limits(accounts, name)
    _, worker = drain(accounts.dsn_for(name), queue)
    assert worker.state.limits == {}
    assert queue.stats().ready == 0
