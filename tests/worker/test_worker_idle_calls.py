"""An idle worker's calls are bounded (docs/workers.md, "What a worker does"): counted over a
window, against what its waits allow, so the machine's speed does not move the bound.

- polling several queues without LISTEN (MySQL/MariaDB, or PostgreSQL with listen=False): one
  queue_next_scheduled_at a queue each poll (at least poll_max apart once idle), no reserve
  until one says a message is ready;
- one queue without LISTEN: one queue_wait long poll each long_poll_wait;
- with LISTEN (PostgreSQL): one round (a reserve and a next scheduled_at a queue) each
  poll_fallback.
A heartbeat each lease/3 comes on top (none in these windows: the lease is long)."""

from __future__ import annotations

import time
import uuid

import pytest

from pyqueue_sql import Worker

from .test_worker import running

WINDOW = 4.0


def idle_calls(worker: Worker, window: float = WINDOW) -> int:
    """The worker's database calls in `window` seconds once it has gone idle."""
    time.sleep(1.5)  # started, registered, past its first rounds
    before = worker.stats.db_calls
    time.sleep(window)
    return worker.stats.db_calls - before


def make_worker(dsn, db, queues: int, **settings) -> Worker:
    worker = Worker(dsn, concurrency=2, lease=120, **settings)
    for _ in range(queues):
        worker.add_handler(db.queue(f"idle.{uuid.uuid4().hex[:8]}").create().name, lambda job: None)
    return worker


def test_an_idle_worker_polling_several_queues_makes_one_call_a_queue_a_poll(dsn, db):
    queues, poll_max = 3, 0.25
    worker = make_worker(dsn, db, queues, listen=False, poll_max=poll_max)
    with running(worker):
        calls = idle_calls(worker)
    polls = WINDOW / poll_max + 1  # each wait lasts poll_max at least once the poll has backed off
    assert calls <= queues * polls + 1, (calls, worker.stats)  # (+1: a heartbeat of its start)


def test_an_idle_worker_of_one_queue_without_listen_makes_one_call_a_long_poll(dsn, db):
    worker = make_worker(dsn, db, 1, listen=False, long_poll_wait=0.5)
    with running(worker):
        calls = idle_calls(worker)
    assert calls <= WINDOW / 0.5 + 2, (calls, worker.stats)


@pytest.mark.only_dialect("postgresql")
def test_an_idle_listening_worker_makes_one_round_a_poll_fallback(dsn, db):
    queues = 3
    worker = make_worker(dsn, db, queues, poll_fallback=1.0)
    with running(worker):
        calls = idle_calls(worker)
    assert calls <= 2 * queues * (WINDOW / 1.0 + 1) + 1, (calls, worker.stats)
