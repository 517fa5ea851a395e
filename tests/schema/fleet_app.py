"""The application of the mixed-fleet test (test_mixed_fleet.py), run by the released version and
by head alike: it imports only the API both have. Copied next to neither package's tests, so
``PYTHONPATH=<release tree>:<this folder>`` imports the release's pyqueue_sql and this module.

    python fleet_app.py setup                 queues, limits, result retention, a schedule
    python fleet_app.py produce SECONDS TAG   pushes a mix of messages for SECONDS
    python fleet_app.py probe RELEASE_FILE    holds a lease until RELEASE_FILE exists, and times
                                              each push, reserve and commit meanwhile
    pyqueue-sql worker fleet_app:worker       handles them (FLEET_NAME names the worker)

Every handling is one JSON line appended to $FLEET_LOG (O_APPEND: whole lines from any process);
a producer appends what it pushed, and every call that failed, to the same file."""

from __future__ import annotations

import datetime as dt
import json
import os
import sys
import time

import pyqueue_sql
from pyqueue_sql.worker import RetryPolicy, Worker

DSN = os.environ["PYQUEUE_DSN"]
QUEUE, DEAD, PROBE = "fleet", "fleet_dead", "fleet_probe"
MAX_ATTEMPTS = 3
FAST = RetryPolicy(base=0.05, factor=1.0, max_delay=0.05, jitter=0.0)


def record(**fields) -> None:
    fields.update(by=os.environ.get("FLEET_NAME", "?"), pid=os.getpid(), at=time.time())
    line = json.dumps(fields) + "\n"
    fd = os.open(os.environ["FLEET_LOG"], os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, line.encode())
    finally:
        os.close(fd)


class Planned(Exception):
    """A failure the test asks for (retried, or dead-lettered)."""


def handle(job):
    if job.kind == "flaky" and job.attempts < MAX_ATTEMPTS:
        record(event="failed", kind=job.kind, key=job.key, attempt=job.attempts)
        raise Planned(f"attempt {job.attempts}")
    if job.kind == "doomed":
        record(event="failed", kind=job.kind, key=job.key, attempt=job.attempts)
        raise Planned("always")
    if job.kind == "limited":
        time.sleep(0.02)
    record(event="handled", kind=job.kind, key=job.key, attempt=job.attempts)
    return {"done": job.key}


worker = Worker(DSN, concurrency=4, name=os.environ.get("FLEET_NAME"), poll_max=0.2, shutdown_timeout=20)
for kind in ("plain", "flaky", "doomed", "grouped", "limited", "parent", "child", "tick"):
    worker.add_handler(QUEUE, handle, kind, retry=FAST, store_result=True)


def setup() -> None:
    with pyqueue_sql.connect(DSN) as db:
        db.queue(DEAD).create()
        db.queue(PROBE).create()
        queue = db.queue(QUEUE).create(max_attempts=MAX_ATTEMPTS, dead_letter_queue=DEAD)
        queue.set_result_retention(dt.timedelta(hours=1))
        queue.set_limit("limited", 2)
        queue.set_group_limit(None, 1)
        queue.schedule_every("tick", "tick", {"every": 1}, dt.timedelta(seconds=1))


def produce(seconds: float, tag: str) -> None:
    """About 40 pushes a second: plain, delayed, flaky, doomed, grouped, limited, and a parent
    with a child pushed after it."""
    end, n = time.monotonic() + seconds, 0
    with pyqueue_sql.connect(DSN) as db:
        queue = db.queue(QUEUE)
        while time.monotonic() < end:
            key = f"{tag}-{n}"
            calls = [
                ("plain", key, lambda k: queue.push(k, "plain", {"n": n})),
                (
                    "plain",
                    key + "-later",
                    lambda k: queue.push(k, "plain", {}, run_at=dt.timedelta(seconds=1)),
                ),
                ("grouped", key, lambda k: queue.push(k, "grouped", {"n": n}, group=f"g{n % 3}")),
                ("limited", key, lambda k: queue.push(k, "limited", {})),
            ]
            if n % 5 == 0:
                calls.append(("flaky", key, lambda k: queue.push(k, "flaky", {})))
            if n % 10 == 0:
                calls.append(("doomed", key, lambda k: queue.push(k, "doomed", {})))
            if n % 4 == 0:
                calls.append(("parent", key, lambda k: queue.push(k, "parent", {})))
                parent = (QUEUE, key, "parent")
                calls.append(("child", key + "-child", lambda k: queue.push_after(k, "child", {}, [parent])))
            for kind, k, call in calls:
                started = time.time()
                try:
                    call(k)
                except Exception as exc:  # every failure is recorded: the test wants none
                    record(event="call_failed", kind=kind, key=k, error=f"{type(exc).__name__}: {exc}")
                    continue
                record(event="pushed", kind=kind, key=k, started=started, took=time.time() - started)
            n += 1
            time.sleep(0.1)


def probe(release: str) -> None:
    """Takes a lease on a message of its own queue and holds it until the file ``release``
    exists, then commits it (recorded: was the lease still held?). Meanwhile, every 50 ms, a push,
    a reserve and a commit on that queue, each recorded with when it started and how long it took."""
    with pyqueue_sql.connect(DSN) as db:
        queue = db.queue(PROBE)
        queue.push("held", "probe", {})
        [held] = queue.reserve(1, timeout=600)
        record(event="lease_taken", key=held.key)
        n = 0
        while not os.path.exists(release):
            for call in ("push", "reserve", "commit"):
                started = time.time()
                try:
                    if call == "push":
                        queue.push(f"p{n}", "probe", {})
                    elif call == "reserve":
                        got = queue.reserve(1, timeout=60)
                    elif got:
                        queue.commit(got[0])
                except Exception as exc:  # every failure is recorded: the test wants none
                    record(
                        event="call_failed",
                        kind="probe",
                        key=f"{call}-{n}",
                        error=f"{type(exc).__name__}: {exc}",
                    )
                    continue
                record(event="probe_call", call=call, started=started, took=time.time() - started)
            n += 1
            time.sleep(0.05)
        record(event="lease_committed", key=held.key, held=bool(queue.commit(held)))


if __name__ == "__main__":
    if sys.argv[1] == "setup":
        setup()
    elif sys.argv[1] == "probe":
        probe(sys.argv[2])
    else:
        produce(float(sys.argv[2]), sys.argv[3])
