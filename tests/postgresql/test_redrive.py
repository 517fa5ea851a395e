"""queue_redrive when a key goes live in the target queue while the redrive runs (PostgreSQL).

The redrive locks its candidates (those whose key is not live in the target),
copies them by ctid with INSERT ... ON CONFLICT DO NOTHING, then deletes what
it copied. A push of the same key into the target that is still uncommitted
when the candidates are chosen is invisible to that check; the copy then waits
for it and skips the key. That message must stay in the dead queue, uncounted,
while the others move: nothing lost, nothing twice.
"""

from __future__ import annotations

import threading
import time

import pytest

from pyqueue_sql import dialects

pytestmark = pytest.mark.only_dialect("postgresql")


def _one(conn, sql, args=()):
    with conn.cursor() as cur:
        cur.execute(sql, args)
        return cur.fetchall() if cur.description else []


@pytest.fixture
def url(installed_database):
    url = installed_database("redrive")
    return url


def test_a_key_pushed_into_the_target_meanwhile_stays_in_the_dead_queue(url):
    pg = dialects.for_name("postgresql")
    admin, pusher, driver = pg.connect(url), pg.connect(url, autocommit=False), pg.connect(url)
    try:
        for queue in ("dead.q", "to.q"):
            _one(admin, "SELECT queue_create(%s)", (queue,))
        for key in ("a", "b", "c"):
            _one(admin, "SELECT queue_push('dead.q', %s, 'job', '{\"from\": \"dead\"}')", (key,))
        # the push of "b" into the target is still open when the redrive chooses its rows
        _one(pusher, "SELECT queue_push('to.q', 'b', 'job', '{\"from\": \"push\"}')")
        driver_pid = _one(driver, "SELECT pg_backend_pid()")[0][0]
        result = {}
        redrive = threading.Thread(
            target=lambda: result.update(n=_one(driver, "SELECT queue_redrive('dead.q', 'to.q', 10)")[0][0])
        )
        redrive.start()
        deadline = time.monotonic() + 30
        while not _one(
            admin,
            "SELECT 1 FROM pg_stat_activity WHERE pid = %s AND wait_event_type = 'Lock'",
            (driver_pid,),
        ):
            assert time.monotonic() < deadline, "the redrive never waited for the open push"
            time.sleep(0.05)
        pusher.commit()
        redrive.join(30)
        assert not redrive.is_alive()
        assert result["n"] == 2
        rows = _one(admin, "SELECT queue_name, p_key, payload->>'from' FROM pyqueue_message ORDER BY 1, 2")
        assert rows == [
            ("dead.q", "b", "dead"),
            ("to.q", "a", "dead"),
            ("to.q", "b", "push"),
            ("to.q", "c", "dead"),
        ]
    finally:
        for conn in (admin, pusher, driver):
            conn.close()
