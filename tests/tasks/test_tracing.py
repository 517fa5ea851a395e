"""OpenTelemetry: a push made while a span is current carries its trace context in the message's
headers, and the worker runs the handler inside a CONSUMER span whose parent is that context; on
both dialects, with the threaded worker, the asyncio worker and a `pyqueue-sql worker` process.
Without opentelemetry installed nothing of it is imported and headers stay the caller's own."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import textwrap
import time
import uuid
from pathlib import Path

import pytest
from opentelemetry import trace
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

import pyqueue_sql
from pyqueue_sql import App, NewMessage, RetryPolicy
from pyqueue_sql.aio.worker import AsyncWorker

ROOT = str(Path(__file__).resolve().parents[2])
EXPORTER = InMemorySpanExporter()


def _reset_global_provider() -> None:
    """Lets the next set_tracer_provider of this process take effect (OpenTelemetry sets the global
    provider only once a process; its own test utilities reset it the same way), so that this
    module and a docs page that configures the SDK can run in one process in either order."""
    from opentelemetry.util._once import Once

    trace._TRACER_PROVIDER_SET_ONCE = Once()
    trace._TRACER_PROVIDER = None


@pytest.fixture(scope="module", autouse=True)
def _provider():
    """The SDK's provider, for this module's tests."""
    _reset_global_provider()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(EXPORTER))
    trace.set_tracer_provider(provider)
    yield
    _reset_global_provider()


@pytest.fixture
def spans():
    EXPORTER.clear()
    return EXPORTER


@pytest.fixture
def app(dsn):
    a = App(dsn, queue=f"t.{uuid.uuid4().hex[:12]}")
    yield a
    a.close()


def _job_span(spans, queue):
    [span] = [s for s in spans.get_finished_spans() if s.name == f"process {queue}"]
    return span


def test_a_span_around_a_defer_is_the_parent_of_the_handlers_span_threaded_worker(app, spans):
    seen = {}

    @app.task
    def send_welcome(to: str) -> None:
        seen["headers"] = pyqueue_sql.current_job().headers
        seen["current"] = trace.get_current_span().get_span_context()

    app.create_queues()
    assert type(app.worker(register=False)) is pyqueue_sql.Worker
    with trace.get_tracer("web").start_as_current_span("POST /signup") as web:
        send_welcome.configure(headers={"tenant": "acme"}).defer("a@example.com")
    assert app.run_pending().succeeded == 1

    job = _job_span(spans, app.default_queue)
    assert job.kind is trace.SpanKind.CONSUMER
    assert job.parent.span_id == web.get_span_context().span_id
    assert job.context.trace_id == web.get_span_context().trace_id
    assert seen["current"].span_id == job.context.span_id  # the handler runs inside it
    assert seen["headers"]["tenant"] == "acme"
    assert seen["headers"]["traceparent"].split("-")[2] == format(web.get_span_context().span_id, "016x")
    attributes = dict(job.attributes)
    assert attributes == {
        "messaging.system": "pyqueue-sql",
        "messaging.destination.name": app.default_queue,
        "messaging.operation.type": "process",
        "messaging.operation.name": "process",
        "messaging.message.id": attributes["messaging.message.id"],
        "messaging.pyqueue_sql.kind": "send_welcome",
        "messaging.pyqueue_sql.attempt": 1,
    }
    assert job.status.status_code is trace.StatusCode.UNSET


def test_the_asyncio_workers_span_has_the_pushers_span_as_parent(app, spans):
    seen = {}

    @app.task
    async def resize(image: str) -> None:
        await asyncio.sleep(0)
        seen["current"] = trace.get_current_span().get_span_context()

    app.create_queues()
    assert type(app.worker(register=False)) is AsyncWorker

    async def main():
        with trace.get_tracer("web").start_as_current_span("POST /upload") as web:
            await resize.defer_async("cat.png")
        report = await app.run_pending_async()
        return web, report

    web, report = asyncio.run(main())
    assert report.succeeded == 1
    job = _job_span(spans, app.default_queue)
    assert job.parent.span_id == web.get_span_context().span_id
    assert job.context.trace_id == web.get_span_context().trace_id
    assert seen["current"].span_id == job.context.span_id


@pytest.mark.parametrize("worker", ["threads", "asyncio"])
def test_a_timed_plain_handler_on_a_thread_of_its_own_runs_inside_the_span(app, spans, worker):
    seen = {}

    @app.task(timeout=30)
    def timed() -> None:
        seen["current"] = trace.get_current_span().get_span_context()

    if worker == "asyncio":

        @app.task
        async def other() -> None:  # an async task: the app's worker is an AsyncWorker
            pass

    app.create_queues()
    assert (type(app.worker(register=False)) is AsyncWorker) == (worker == "asyncio")
    with trace.get_tracer("web").start_as_current_span("request") as web:
        timed.defer()
    if worker == "asyncio":

        async def main():
            report = await app.run_pending_async()
            return report

        report = asyncio.run(main())
    else:
        report = app.run_pending()
    assert report.succeeded == 1
    job = _job_span(spans, app.default_queue)
    assert job.parent.span_id == web.get_span_context().span_id
    assert seen["current"].span_id == job.context.span_id


def test_a_handler_that_raises_ends_its_span_in_error_with_the_exception(app, spans):
    @app.task(retry=RetryPolicy(base=60))
    def flaky() -> None:
        raise ValueError("the mail server said no")

    app.create_queues()
    flaky.defer()
    assert app.run_pending().failed >= 0
    job = _job_span(spans, app.default_queue)
    assert job.status.status_code is trace.StatusCode.ERROR
    assert "ValueError" in job.status.description
    [event] = [e for e in job.events if e.name == "exception"]
    assert event.attributes["exception.message"] == "the mail server said no"


def test_a_message_without_trace_context_gets_a_root_span_and_no_headers(app, spans):
    seen = {}

    @app.task
    def plain() -> None:
        seen["headers"] = pyqueue_sql.current_job().headers

    app.create_queues()
    plain.defer()  # no span current: nothing is added
    assert app.run_pending().succeeded == 1
    assert seen["headers"] is None
    assert _job_span(spans, app.default_queue).parent is None


def test_without_a_tracer_provider_jobs_run_untraced_and_a_provider_set_later_is_used(app):
    """Until the application sets a provider, a job's span would be a no-op one: the worker builds
    none (it cost about a fifth of a no-op job's CPU). A provider set afterwards is used for the
    next job, without a restart."""
    seen = []

    @app.task
    def plain() -> None:
        seen.append(trace.get_current_span().get_span_context())

    app.create_queues()
    _reset_global_provider()
    try:
        plain.configure(headers={"traceparent": "00-" + "1" * 32 + "-" + "2" * 16 + "-01"}).defer()
        assert app.run_pending().succeeded == 1
        assert not seen[0].is_valid  # no span, not even the parent's context

        later = InMemorySpanExporter()
        provider = TracerProvider()
        provider.add_span_processor(SimpleSpanProcessor(later))
        trace.set_tracer_provider(provider)
        plain.defer()
        assert app.run_pending().succeeded == 1
        assert seen[1].is_valid
        [span] = later.get_finished_spans()
        assert span.name == f"process {app.default_queue}"
    finally:
        _reset_global_provider()
        provider = TracerProvider()
        provider.add_span_processor(SimpleSpanProcessor(EXPORTER))
        trace.set_tracer_provider(provider)


def test_the_callers_own_traceparent_wins(db, queue):
    mine = "00-11111111111111111111111111111111-2222222222222222-01"
    with trace.get_tracer("web").start_as_current_span("request"):
        queue.push("a", "job", 1, headers={"traceparent": mine})
        queue.push("b", "job", 1)
    got = {r.key: r.headers for r in queue.reserve(n=2)}
    assert got["a"] == {"traceparent": mine}
    assert got["b"]["traceparent"] != mine and set(got["b"]) >= {"traceparent"}


def test_every_push_path_adds_the_trace_context(db, make_queue):
    q = make_queue()
    topic = f"t{uuid.uuid4().hex[:8]}"
    db.bind(topic, q)
    try:
        with trace.get_tracer("web").start_as_current_span("request") as span:
            q.push("push", "job", 1)
            q.push("grouped", "job", 1, group="g1", headers={"tenant": "acme"})
            q.push_many([("many", "job", 1), NewMessage("many-grouped", "job", 1, group="g2")])
            db.publish(topic, "publish", "job", 1)
            db.publish_many([(topic, "publish-many", "job", 1)])
        q.push("outside", "job", 1)  # no span current: nothing added
    finally:
        db.unbind(topic, q)
    span_id = format(span.get_span_context().span_id, "016x")
    got = {r.key: r.headers for r in q.reserve(n=10)}
    assert got.pop("outside") is None
    assert got.pop("grouped")["tenant"] == "acme"
    assert sorted(got) == ["many", "many-grouped", "publish", "publish-many", "push"]
    assert all(h["traceparent"].split("-")[2] == span_id for h in got.values()), got


def test_a_pyqueue_sql_worker_process_exports_the_child_span(dsn, db, tmp_path, spans):
    q = f"t.{uuid.uuid4().hex[:12]}"
    db.queue(q).create()
    env = {
        **os.environ,
        "PYTHONPATH": ROOT,
        "PYQUEUE_TEST_QUEUE": q,
        "PYQUEUE_TEST_SPANS": str(tmp_path / "spans"),
    }
    with trace.get_tracer("web").start_as_current_span("POST /notify") as web:
        db.queue(q).push("n1", "notify", {"user": "ada"})
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "pyqueue_sql.cli",
            "worker",
            "tests.tasks.traced_app:app",
            "--dsn",
            dsn,
            "--no-status",
        ],
        cwd=ROOT,
        env=env,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    exported: list[dict] = []
    try:
        deadline = time.monotonic() + 30
        path = tmp_path / "spans"
        while time.monotonic() < deadline and not exported:
            if path.exists():
                exported = [json.loads(line) for line in path.read_text().splitlines()]
            time.sleep(0.1)
    finally:
        proc.terminate()
        _, err = proc.communicate(timeout=30)
    [job] = [s for s in exported if s["name"] == f"process {q}"] or [None]
    assert job is not None, err.decode()
    assert job["kind"] == "CONSUMER"
    assert job["parent_span_id"] == format(web.get_span_context().span_id, "016x")
    assert job["trace_id"] == format(web.get_span_context().trace_id, "032x")
    assert job["attributes"]["messaging.message.id"] == "n1"


def test_without_opentelemetry_nothing_of_it_is_imported_and_jobs_run(dsn):
    script = textwrap.dedent(
        f"""
        import sys
        sys.modules["opentelemetry"] = None  # as if it were not installed
        import uuid
        import pyqueue_sql
        from pyqueue_sql import tracing

        app = pyqueue_sql.App({dsn!r}, queue="t." + uuid.uuid4().hex[:12])
        seen = []

        @app.task
        def job() -> None:
            seen.append(pyqueue_sql.current_job().headers)

        app.create_queues()
        job.defer()
        job.configure(headers={{"tenant": "acme"}}).defer()
        assert app.run_pending().succeeded == 2
        assert sorted(seen, key=str) == [None, {{"tenant": "acme"}}], seen
        assert tracing.api() is None
        loaded = [m for m in sys.modules if m.startswith("opentelemetry") and sys.modules[m] is not None]
        assert not loaded, loaded
        print("ok")
        """
    )
    out = subprocess.run(
        [sys.executable, "-c", script], cwd=ROOT, capture_output=True, text=True, timeout=120
    )
    assert out.stdout.strip() == "ok", out.stderr
