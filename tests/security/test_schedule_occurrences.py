"""A schedule's chain is an admin's: no routine a producer holds reaches an occurrence.

An occurrence's end (commit, remove, a cancel) pushes the schedule's next occurrence, so a
producer that could end the pending one could push the chain ahead at will (48 cancels of
"hourly-billing@<next>" moved the next run two days away). These tests connect as a real role /
account holding only the producer capability: queue_cancel of an occurrence, waiting or held, is
refused with one error line and changes nothing, and every push routine refuses an occurrence key
as the message's key (the plain pushes are in tests/contract/test_queues_caps.py).
"""

from __future__ import annotations

import contextlib
import datetime as dt
import time
import uuid

import pytest

from pyqueue_sql import InvalidArgumentError

from .test_privileges import _run, accounts  # noqa: F401 - the fixture is used by name

UTC = dt.timezone.utc
REFUSED = (
    "pyqueue:invalid_argument: p_key ending in @<UTC time> is a schedule's occurrence: it is not cancelled"
)


def _occurrence(key: str, at: dt.datetime) -> str:
    return f"{key}@{at.astimezone(UTC).strftime('%Y-%m-%dT%H:%M:%SZ')}"


def _cancel(dialect: str, conn, queue: str, key: str, kind: str) -> None:
    """queue_cancel in plain SQL, as psql or mysql would send it: it must be refused."""
    verb = "SELECT" if dialect == "postgresql" else "CALL"
    try:
        _run(conn, f"{verb} queue_cancel('{queue}', '{key}', '{kind}')")
    except Exception as exc:  # noqa: BLE001 - checked just below
        assert REFUSED in str(exc), exc
        assert len(str(exc).strip().splitlines()) <= 3, exc  # one error (psycopg adds its context lines)
        return
    pytest.fail(f"a producer cancelled the occurrence {key!r}")


@pytest.fixture
def billing(db):
    suffix = uuid.uuid4().hex[:10]
    q = db.queue(f"billing.{suffix}").create(visibility_timeout=30)
    q.set_result_retention(3600)
    yield q
    with contextlib.suppress(Exception):
        q.drop()


def test_a_producer_cannot_cancel_a_schedules_occurrence_waiting_or_held(accounts, billing, raw, dialect):  # noqa: F811
    producer = accounts.raw(accounts.with_capabilities("prod", "producer"))
    if dialect == "postgresql":
        producer.autocommit = True
    first = billing.schedule_every("hourly-billing", "bill", {"run": "billing"}, 3600)
    pending = _occurrence("hourly-billing", first)
    for _ in range(48):
        _cancel(dialect, producer, billing.name, pending, "bill")
    [schedule] = billing.schedules()
    assert schedule.next_at == first, "the chain moved"
    assert [m.key for m in billing.messages()] == [pending]
    assert billing.result(pending, "bill").state == "delayed"

    # held by the consumer that runs it: no cancel request is recorded either
    soon = billing.schedule_every("tick", "t", {}, 1)
    time.sleep(max(0.0, (soon - dt.datetime.now(UTC)).total_seconds()) + 0.05)
    [held] = billing.reserve(timeout=60)
    assert held.key == _occurrence("tick", soon)
    _cancel(dialect, producer, billing.name, held.key, "t")
    renewal = billing.renew(held)
    assert renewal.reservation is not None and renewal.cancel_requested is False
    assert billing.commit(renewal.reservation)

    # the producer still cancels what it pushes itself
    billing.push("invoice-7", "bill", {})
    verb = "SELECT" if dialect == "postgresql" else "CALL"
    assert _run(producer, f"{verb} queue_cancel('{billing.name}', 'invoice-7', 'bill')") == [("cancelled",)]


def test_no_producer_push_takes_an_occurrence_key(accounts, billing, db):  # noqa: F811
    """The pushes with headers and the pushes that wait for parents refuse an occurrence as the
    message's key (and push_after an occurrence as a parent), each with one error, nothing written."""
    client = accounts.client(accounts.with_capabilities("prod", "producer"))
    q = client.queue(billing.name)
    topic = f"bill.{uuid.uuid4().hex[:8]}"
    db.bind(topic, billing)
    first = billing.schedule_every("hourly-billing", "bill", {}, 3600)
    pending = _occurrence("hourly-billing", first)
    ahead = _occurrence("hourly-billing", first + dt.timedelta(hours=1))
    billing.push("parent", "bill", {})
    parent = (billing.name, "parent", "bill")
    far = dt.datetime(9999, 1, 1, tzinfo=UTC)
    h = {"h": 1}
    attempts = {
        "push_with_headers": lambda: q.push(ahead, "bill", {}, run_at=far, headers=h),
        "push_grouped_with_headers": lambda: q.push(ahead, "bill", {}, group="g", headers=h),
        "push_batch_with_headers": lambda: q.push_many([(ahead, "bill", {}, far, None, None, h)]),
        "push_batch_grouped_with_headers": lambda: q.push_many([(ahead, "bill", {}, far, None, "g", h)]),
        "publish_with_headers": lambda: client.publish(topic, ahead, "bill", {}, headers=h),
        "publish_batch_with_headers": lambda: client.publish_many(
            [(topic, ahead, "bill", {}, None, None, h)]
        ),
        "push_after": lambda: q.push_after(ahead, "bill", {}, [parent]),
        "push_after_on": lambda: q.push_after(ahead, "bill", {}, [parent], run_on="always"),
        "push_after_on_with_headers": lambda: q.push_after(
            ahead, "bill", {}, [parent], run_at=far, headers=h
        ),
        "push_after_batch": lambda: q.push_after_many(
            [{"key": ahead, "kind": "bill", "payload": {}, "parents": [parent]}]
        ),
        "push_after naming the occurrence as a parent": lambda: q.push_after(
            "child", "bill", {}, [(billing.name, pending, "bill")]
        ),
    }
    for what, attempt in attempts.items():
        with pytest.raises(
            InvalidArgumentError, match="reserved for schedules|is a schedule's occurrence"
        ) as caught:
            attempt()
        assert "\n" not in str(caught.value).strip(), (what, caught.value)
    assert sorted(m.key for m in billing.messages()) == sorted([pending, "parent"])
    assert [s.next_at for s in billing.schedules()] == [first]
