"""The processes of one `pyqueue-sql worker --processes N` (one name, one host) are one worker on
the dashboard: counted once in the overview, their rows together on the workers page."""

from __future__ import annotations

import datetime as dt

from pyqueue_sql.client import WorkerInfo
from pyqueue_sql.dashboard.data import Overview

from .conftest import http


def _info(worker_id: int, name: str, age: float) -> WorkerInfo:
    now = dt.datetime.now(dt.timezone.utc)
    return WorkerInfo(worker_id, name, "host-a", 100 + worker_id, ["q"], now, now, age, f"{name}#{worker_id}")


def test_the_overview_counts_the_processes_of_one_worker_once():
    workers = [_info(1, "host-a:10", 1.0), _info(2, "host-a:10", 500.0), _info(3, "host-a:20", 1.0)]
    overview = Overview(dt.datetime.now(dt.timezone.utc), [], workers, {})
    assert [w.name for w in overview.live_workers] == ["host-a:10", "host-a:20"]
    assert overview.stale_workers == []  # one of its processes still heartbeats
    workers.append(_info(4, "host-a:30", 500.0))
    assert [w.name for w in Overview(overview.taken_at, [], workers, {}).stale_workers] == ["host-a:30"]


def test_the_workers_page_marks_each_process_of_a_worker(serve, dsn, db, queue):
    name = f"procs-{queue.name}"
    first = db.register_worker(name=name, queues=[queue.name], host="host-p", pid=1001)
    db.register_worker(name=f"other-{queue.name}", queues=[queue.name], host="host-p", pid=1002)
    second = db.register_worker(name=name, queues=[queue.name], host="host-p", pid=1003)
    status, body, _ = http(serve(dsn).url + "/workers")
    assert status == 200
    assert f"process 1 of 2 of {name}" in body and f"process 2 of 2 of {name}" in body
    assert body.index(first.reserve_as) < body.index(second.reserve_as) < body.index(f"other-{queue.name}")


def test_the_dashboards_workers_page_reads_no_queue_per_registered_name(
    serve, installed_database, monkeypatch
):
    """A worker that registered 1000 names (none of them a queue) costs the workers page no query
    per name: it reads the reserved messages of the queues holding a reservation, here one (a
    database of its own: other tests' queues hold reservations of their own)."""
    import pyqueue_sql
    from pyqueue_sql import client

    dsn = installed_database("workers")
    with pyqueue_sql.connect(dsn) as db:
        queue = db.queue("held").create()
        db.register_worker(name="many-held", queues=[f"nope-{i}" for i in range(999)] + [queue.name])
        queue.push("k", "kind", {})
        queue.reserve(timeout=60)
        read = []
        real = client.Queue.messages

        def counted(self, *args, **kwargs):
            read.append(self.name)
            return real(self, *args, **kwargs)

        monkeypatch.setattr(client.Queue, "messages", counted)
        status, body, _ = http(serve(dsn).url + "/workers")
        assert status == 200 and "many-held" in body
        assert read == [queue.name]


def test_the_schedules_page_marks_a_schedule_whose_next_time_is_past(serve, dsn, db, make_queue, raw):
    """A schedule whose next time went by with no occurrence run (its occurrence lost, or no
    worker running) is marked past due; one whose next time is ahead is not."""
    late, fine = make_queue(), make_queue()
    late.schedule_every("lost", "tick", {}, 3600)
    fine.schedule_every("fine", "tick", {}, 3600)
    raw("DELETE FROM pyqueue_message WHERE queue_name = %s", (late.name,))
    raw(
        "UPDATE pyqueue_schedule SET next_at = %s WHERE queue_name = %s",
        (dt.datetime.now(dt.timezone.utc).replace(tzinfo=None) - dt.timedelta(hours=1), late.name),
    )
    status, body, _ = http(serve(dsn).url + "/schedules")
    assert status == 200
    rows = {name: body[body.index(f">{name}<") :].split("</tr>")[0] for name in (late.name, fine.name)}
    assert "past due" in rows[late.name]
    assert "past due" not in rows[fine.name]
