"""The task layer's pure code without a server (pyqueue_sql.tasks, its public names only): the
conversion of arguments to a JSON payload and back by annotation, the keys new_key makes and the
time occurrence_time reads from one, and the middleware chain a task's handler composes. No
connection is opened: the App has no database, and the handler is called with a Job built here."""

from __future__ import annotations

import asyncio
import dataclasses
import datetime as dt
import decimal
import enum
import json
import math
import uuid

import pytest

from pyqueue_sql import App, InvalidPayloadError, Job, QueueError, Reservation
from pyqueue_sql.tasks import PayloadMismatchError, current_job, new_key, occurrence_time

UTC = dt.timezone.utc


class Color(enum.Enum):
    RED = "red"
    BLUE = "blue"


@dataclasses.dataclass(frozen=True)
class Point:
    x: int
    y: float
    label: str | None = None


def make_job(payload, key: str = "k-1", kind: str = "job", initially: dt.datetime | None = None) -> Job:
    at = initially or dt.datetime(2030, 1, 2, 3, 4, 5, tzinfo=UTC)
    return Job(Reservation("q", key, kind, payload, "token", 0, 1, at, at))


def through_json(payload):
    """The payload as a consumer reads it back: the JSON text the message holds, parsed."""
    return json.loads(json.dumps(payload))


# -- conversion by annotation -------------------------------------------------------------------


def test_every_annotated_type_comes_back_as_it_was_passed():
    app = App()

    @app.task
    def job(
        when: dt.datetime,
        day: dt.date,
        clock: dt.time,
        wait: dt.timedelta,
        ident: uuid.UUID,
        amount: decimal.Decimal,
        color: Color,
        pair: tuple[int, str],
        tags: set[str],
        frozen: frozenset[int],
        point: Point,
        points: list[Point],
        by_name: dict[str, dt.date],
        maybe: int | None = None,
    ) -> None: ...

    given = dict(
        when=dt.datetime(2030, 1, 2, 3, 4, 5, 678901, tzinfo=UTC),
        day=dt.date(2030, 1, 2),
        clock=dt.time(23, 59, 58, 1),
        wait=dt.timedelta(hours=1, microseconds=5),
        ident=uuid.UUID("12345678-1234-5678-1234-567812345678"),
        amount=decimal.Decimal("12.3400"),
        color=Color.BLUE,
        pair=(1, "a"),
        tags={"x", "y"},
        frozen=frozenset({3, 1}),
        point=Point(1, 2.5),
        points=[Point(0, 0.0, "origin")],
        by_name={"start": dt.date(2030, 1, 1)},
        maybe=None,
    )
    payload = job.payload(**given)
    assert json.loads(json.dumps(payload)) == payload  # JSON all the way down
    back = job.arguments(through_json(payload))
    assert back == given
    assert {name: type(value) for name, value in back.items()} == {
        name: type(value) for name, value in given.items()
    }
    assert payload["amount"] == "12.3400" and payload["color"] == "blue"  # Decimal as text, Enum's value


def test_a_call_holds_the_same_payload_as_payload():
    app = App()

    @app.task
    def job(when: dt.datetime, n: int = 1) -> None: ...

    at = dt.datetime(2030, 1, 2, tzinfo=UTC)
    assert job.call(at, n=2).payload == job.payload(at, n=2) == job.payload(when=at, n=2)


@pytest.mark.parametrize(
    "value",
    [math.nan, {1, 2}, dt.datetime(2030, 1, 1, tzinfo=UTC), {1: "a"}, object()],
    ids=["nan", "set-unannotated", "datetime-unannotated", "int-keys", "object"],
)
def test_a_value_that_would_not_come_back_is_refused_at_defer_naming_it(value):
    app = App()

    @app.task
    def job(anything) -> None: ...

    with pytest.raises(InvalidPayloadError, match="anything"):
        job.payload(value)


@pytest.mark.parametrize(
    "payload, words",
    [
        ({"n": "1"}, "'n'"),
        ({"n": 1, "extra": 2}, "unknown argument 'extra'"),
        ({}, "no argument 'n'"),
        ([1], "JSON object"),
        ({"n": 1, "when": "not a time"}, "'when'"),
    ],
    ids=["wrong-type", "unknown", "missing", "not-an-object", "bad-datetime"],
)
def test_a_payload_that_does_not_fit_fails_the_job_naming_what(payload, words):
    app = App()

    @app.task
    def job(n: int, when: dt.datetime | None = None) -> None: ...

    with pytest.raises(PayloadMismatchError) as raised:
        job.arguments(payload)
    assert words in str(raised.value)


# -- keys ---------------------------------------------------------------------------------------


def test_new_keys_are_unique_uuid7s_in_the_order_made():
    keys = [new_key() for _ in range(20000)]  # more than the 2,048 a millisecond's counter starts below
    assert len(set(keys)) == len(keys)
    assert keys == sorted(keys)
    ids = [uuid.UUID(k) for k in keys[:100]]
    assert all(i.version == 7 and i.variant == uuid.RFC_4122 for i in ids)
    ms = int.from_bytes(ids[0].bytes[:6], "big")
    now = dt.datetime.now(UTC).timestamp() * 1000
    # the first 48 bits are the time in milliseconds: a minute either way, since the keys stay in
    # order when the wall clock steps back (a CI run saw a key 1.9 s ahead of the clock read after it)
    assert abs(ms - now) < 60_000


def test_occurrence_time_reads_the_schedules_key_else_the_first_due_time():
    assert occurrence_time(make_job({}, key="report@2030-01-01T00:00:00Z")) == dt.datetime(
        2030, 1, 1, tzinfo=UTC
    )
    first = dt.datetime(2031, 5, 6, 7, 8, 9, tzinfo=UTC)
    assert occurrence_time(make_job({}, key="plain", initially=first)) == first
    assert occurrence_time(make_job({}, key="a@not-a-time", initially=first)) == first
    naive = dt.datetime(2031, 5, 6, 7, 8, 9)
    assert occurrence_time(make_job({}, key="plain", initially=naive)) == first  # read as UTC


# -- the middleware chain -----------------------------------------------------------------------


def test_plain_middleware_wraps_the_plain_task_first_registered_outermost():
    app = App()
    seen: list[str] = []

    @app.middleware
    def outer(job, call_next):
        seen.append(f"outer in {job.key}")
        result = call_next()
        seen.append("outer out")
        return result + 1

    @app.middleware
    def inner(job, call_next):
        assert current_job() is job
        seen.append("inner in")
        return call_next() * 10

    @app.middleware
    async def not_for_plain_tasks(job, call_next):  # an async middleware wraps async tasks only
        seen.append("async")
        return await call_next()

    @app.task
    def add(a: int, b: int) -> int:
        seen.append(f"task {current_job().kind}")
        return a + b

    assert app.handler(add)(make_job({"a": 1, "b": 2}, kind="add")) == 31
    assert seen == ["outer in k-1", "inner in", "task add", "outer out"]


def test_a_middleware_may_answer_without_calling_the_task_and_its_error_is_the_jobs():
    app = App()
    called: list[int] = []

    @app.middleware
    def gate(job, call_next):
        if job.payload["n"] < 0:
            raise ValueError("refused by the gate")
        if job.payload["n"] == 0:
            return "skipped"
        return call_next()

    @app.task
    def work(n: int) -> str:
        called.append(n)
        return "ran"

    handler = app.handler(work)
    assert handler(make_job({"n": 0})) == "skipped"
    with pytest.raises(ValueError, match="refused by the gate"):
        handler(make_job({"n": -1}))
    assert handler(make_job({"n": 5})) == "ran"
    assert called == [5]
    with pytest.raises(QueueError, match="current_job"):
        current_job()  # only inside a job


def test_async_middleware_wraps_the_async_task_and_plain_middleware_does_not():
    app = App()
    seen: list[str] = []

    @app.middleware
    def plain(job, call_next):  # wraps the plain tasks only
        seen.append("plain")
        return call_next()

    @app.middleware
    async def outer(job, call_next):
        seen.append("outer in")
        result = await call_next()
        seen.append("outer out")
        return [*result, "outer"]

    @app.middleware
    async def inner(job, call_next):
        seen.append(f"inner in {current_job().key}")
        return [*(await call_next()), "inner"]

    @app.task
    async def fetch(url: str) -> list[str]:
        await asyncio.sleep(0)
        seen.append("task")
        return [url]

    assert asyncio.run(app.handler(fetch)(make_job({"url": "u"}))) == ["u", "inner", "outer"]
    assert seen == ["outer in", "inner in k-1", "task", "outer out"]
