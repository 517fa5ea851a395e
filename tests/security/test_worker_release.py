"""A consumer cannot take a live worker's messages through queue_release_dead_workers.

queue_release_dead_workers is the consumer's (a worker started with --release-dead-after calls it
every heartbeat). It counts a worker dead after a silence of older_than; a worker heartbeats every
10 s (lease/3 at the default lease), so a shorter older_than is refused: with 1 ms, 50 ms after the
victim's heartbeat, the victim was removed, its message reserved again by the caller and the
victim's commit answered false. Two real connections, each an account holding only the consumer
capability: the victim, a registered worker holding a message, and the attacker in plain SQL.
"""

from __future__ import annotations

import contextlib
import time
import uuid

import pytest

from tests.plainsql import Session

from .test_privileges import accounts  # noqa: F401 - the fixture is used by name

REFUSED = "pyqueue:invalid_argument: older_than must be at least 30 seconds"


def test_a_consumer_cannot_release_a_live_workers_message(accounts, db, dialect):  # noqa: F811
    q = db.queue(f"rel.{uuid.uuid4().hex[:10]}").create(visibility_timeout=600)
    try:
        q.push("job", "k", {})
        victim = accounts.client(accounts.with_capabilities("victim", "consumer"))
        registration = victim.register_worker("victim")
        [held] = victim.queue(q.name).reserve(worker=registration.reserve_as, timeout=600)
        assert victim.heartbeat_worker(registration)
        time.sleep(0.05)

        attacker = Session(accounts.dsn_for(accounts.with_capabilities("attacker", "consumer")))
        for older_than in (0.001, 1, 29.999):
            with pytest.raises(Exception, match=REFUSED) as caught:
                attacker.call("queue_release_dead_workers", attacker.dur(older_than))
            assert REFUSED in str(caught.value).splitlines()[0]
        assert attacker.call("queue_reserve", q.name, "attacker", attacker.dur(60), 10, None) == []
        assert int(attacker.one("queue_release_dead_workers", attacker.dur(30))) == 0  # alive: not released
        assert registration.worker_id in {w.worker_id for w in db.workers()}
        assert victim.queue(q.name).commit(held), "the victim's reservation was taken"
        assert victim.deregister_worker(registration)
        attacker.close()
    finally:
        with contextlib.suppress(Exception):
            q.drop()
