"""A batch job whose payload no client can read (MariaDB's JSON_VALID lets `{"n": 1.}` through,
which is not JSON) fails alone, UnreadablePayloadError without a retry, as a plain handler's job
does; the other jobs reserved with it go to the batch function. A payload read only as a Decimal
(an integer of 4,500 digits) is a payload like another: handed to a batch handler as it is, and
failing alone where a batch task's item type wants an int. The payloads pushed in plain SQL, as a
producer would; a real Worker (add_batch_handler) and App.run_pending (@app.task(batch=N))."""

from __future__ import annotations

import contextlib
import threading
import time
import uuid
from dataclasses import dataclass
from decimal import Decimal

import pyqueue_sql
from pyqueue_sql import App, dialects
from pyqueue_sql.dialects import UnreadableJSON

from ..security.test_payload_edges import HUGE

UNREADABLE = '{"n": 1.}'


def _push(dsn: str, dialect: str, queue: str, kind: str, payloads: dict[str, str]) -> None:
    """Pushes each key's JSON text in plain SQL (queue_push), in this order."""
    conn = dialects.for_dsn(dsn).connect(dsn)
    try:
        cur = conn.cursor()
        for key, text in payloads.items():
            if dialect == "postgresql":
                cur.execute("SELECT queue_push(%s, %s, %s, %s::jsonb)", (queue, key, kind, text))
                cur.fetchall()
            else:
                cur.execute("CALL queue_push(%s, %s, %s, %s, NULL, NULL)", (queue, key, kind, text))
                while cur.nextset():
                    pass
        cur.close()
    finally:
        conn.close()


def _payloads(dialect: str) -> dict[str, str]:
    payloads = {"good1": '{"n": 1}', "huge": f'{{"n": {HUGE}}}', "good2": '{"n": 2}'}
    if dialect == "mysql":  # PostgreSQL's jsonb holds nothing its client cannot read
        payloads = {"bad": UNREADABLE, **payloads}
    return payloads


def test_an_unreadable_job_fails_alone_and_its_batch_runs(dsn, dialect, db):
    suffix = uuid.uuid4().hex[:10]
    dead = db.queue(f"bedge.dead.{suffix}").create()
    q = db.queue(f"bedge.{suffix}").create(max_attempts=3, dead_letter_queue=dead.name)
    payloads = _payloads(dialect)
    _push(dsn, dialect, q.name, "k", payloads)
    worker = pyqueue_sql.Worker(dsn, concurrency=1, register=False, lease=30)
    outcomes: dict[str, tuple[str, str | None]] = {}
    worker.on_outcome.append(lambda job, outcome, error: outcomes.__setitem__(job.key, (outcome, error)))
    batches: list[dict[str, object]] = []
    worker.add_batch_handler(
        q.name, lambda jobs: batches.append({j.key: j.payload for j in jobs}), "k", size=10
    )
    thread = threading.Thread(target=lambda: worker.run(install_signals=False), daemon=True)
    thread.start()
    try:
        deadline = time.monotonic() + 20
        while len(outcomes) < len(payloads) and time.monotonic() < deadline:
            time.sleep(0.02)
    finally:
        worker.stop()
        thread.join(30)
    assert batches == [{"good1": {"n": 1}, "huge": {"n": Decimal(HUGE)}, "good2": {"n": 2}}]
    good = {key: ("succeeded", None) for key in ("good1", "huge", "good2")}
    if dialect == "mysql":
        outcome, error = outcomes.pop("bad")
        assert outcome == "dead_lettered", outcome
        assert error.startswith("UnreadablePayloadError: payload unreadable: not JSON this client reads"), (
            error
        )
        [letter] = dead.dead_letters()
        assert letter.key == "bad" and letter.attempts == 1  # failed at once, not retried
        assert isinstance(letter.payload, UnreadableJSON) and letter.payload.text == UNREADABLE
    assert outcomes == good
    assert q.messages() == []
    with contextlib.suppress(Exception):
        q.drop()
        dead.drop()


@dataclass
class Parcel:
    n: int


def test_a_batch_task_fails_unreadable_and_unfit_items_alone(dsn, dialect):
    app = App(dsn, queue=f"bedge.{uuid.uuid4().hex[:12]}")
    seen: list[list[int]] = []

    @app.task(batch=10)
    def ship(parcels: list[Parcel]) -> None:
        seen.append([p.n for p in parcels])

    try:
        app.create_queues(max_attempts=3)
        _push(dsn, dialect, ship.queue, ship.kind, _payloads(dialect))
        report = app.run_pending()
    finally:
        for q in app.queues():
            app.database().queue(q).drop()
        app.close()
    assert seen == [[1, 2]]
    by_key = {job.key: (job.outcome, job.error) for job in report.jobs}
    assert by_key.pop("good1") == by_key.pop("good2") == ("succeeded", None)
    outcome, error = by_key.pop("huge")  # read exactly, as a Decimal: not the int Parcel.n wants
    assert outcome == "dropped" and error.startswith("PayloadMismatchError: "), error
    assert "Decimal" in error, error
    if dialect == "mysql":
        outcome, error = by_key.pop("bad")
        assert outcome == "dropped", outcome
        assert error.startswith("UnreadablePayloadError: payload unreadable: not JSON this client reads"), (
            error
        )
    assert by_key == {}
