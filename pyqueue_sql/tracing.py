"""OpenTelemetry for pyqueue-sql: trace context in the message headers, a span per job.

Installed with the ``otel`` extra (``pip install -e '.[otel]'``: opentelemetry-api only;
the SDK and exporters are the application's). Without it nothing here imports anything from
opentelemetry, and a push pays one cached check; with it, nothing is imported either until the
application has imported ``opentelemetry.trace`` (to set a provider or start a span) or
``OTEL_PYTHON_TRACER_PROVIDER`` names a provider: a worker's start does not wait for it (in_use).

- Producing: every push and publish (Queue, AsyncQueue, a task's defer) made while a span is
  current puts the current context in the message's headers through the configured propagator
  (``opentelemetry.propagate.inject``: W3C ``traceparent`` / ``tracestate`` by default). A
  ``traceparent`` header of the caller's own wins: then nothing is added.
- Consuming: both workers run each handler inside a CONSUMER span whose parent is the context
  extracted from the message's headers (none: a root span), named ``process <queue>``, with the
  messaging semantic conventions' attributes (see ``span_attributes``); a handler that raises
  ends it with status ERROR and the exception recorded.
"""

from __future__ import annotations

import contextlib
import os
import sys
from collections.abc import Awaitable, Callable, Iterator, Mapping
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:  # opentelemetry-api is optional: imported at run time only by _Api
    from opentelemetry.trace import Span, Tracer, TracerProvider


class TracedJob(Protocol):
    """What a job's span reads of a job (pyqueue_sql.worker.model.Job, which sits above this module)."""

    @property
    def queue(self) -> str: ...
    @property
    def key(self) -> str: ...
    @property
    def kind(self) -> str: ...
    @property
    def attempts(self) -> int: ...
    @property
    def headers(self) -> Mapping[str, object] | None: ...


# The instrumentation scope of the workers' spans.
TRACER_NAME = "pyqueue_sql"
# messaging.system of the spans.
MESSAGING_SYSTEM = "pyqueue-sql"

# None until the first use: then False (opentelemetry-api is not installed) or the API modules.
_api: Any = None


class _Api:
    def __init__(self) -> None:
        from opentelemetry import context, propagate, trace

        self.context = context
        self.propagate = propagate
        self.trace = trace
        self.get_current_span = trace.get_current_span
        self.SpanKind = trace.SpanKind
        self.Status = trace.Status
        self.StatusCode = trace.StatusCode
        # What the global provider is before an application sets one (or when it sets the no-op
        # one): its tracers' spans are INVALID_SPAN, which record nothing and carry no context.
        self.no_op_providers = (trace.ProxyTracerProvider, trace.NoOpTracerProvider)
        self.provider: TracerProvider | None = None
        self.tracer: Tracer | None = None
        # Whether the environment names a provider (OTEL_PYTHON_TRACER_PROVIDER), read once: while
        # none is set, get_tracer_provider() would look it up in os.environ on every job.
        self.env_provider = "OTEL_PYTHON_TRACER_PROVIDER" in os.environ

    def job_tracer(self) -> Tracer | None:
        """The tracer of the workers' spans, or None while no SDK provider is set: then a job's
        span would be a no-op, and building it cost about a fifth of a no-op job's CPU in the
        worker. The tracer is kept per provider, so a provider set later is used from then on."""
        # The global provider once one is set, read without get_tracer_provider()'s environment
        # lookup on every job; that call while none is set and the environment names one (it
        # loads it).
        provider = getattr(self.trace, "_TRACER_PROVIDER", None)
        if provider is None:
            if not self.env_provider:
                return None  # none set in code nor named by the environment: a no-op span
            provider = self.trace.get_tracer_provider()
        if isinstance(provider, self.no_op_providers):
            return None
        if provider is not self.provider:
            self.tracer = provider.get_tracer(TRACER_NAME)
            self.provider = provider
        return self.tracer


def api() -> Any:
    """The OpenTelemetry API (an _Api), or None when it is not installed; looked up once."""
    global _api
    if _api is None:
        try:
            _api = _Api()
        except ImportError:
            _api = False
    return _api or None


# Whether the environment names a tracer provider (get_tracer_provider() loads it), read once.
_ENV_PROVIDER = "OTEL_PYTHON_TRACER_PROVIDER" in os.environ


def in_use() -> Any:
    """api(), once the process may have a span or a tracer provider: when something has imported
    opentelemetry.trace (the one way to start a span or set a provider in code) or the environment
    names a provider. Until then None, and nothing of OpenTelemetry is imported: its import costs
    a worker about 0.1 s of CPU (its propagators are found through the installed packages' entry
    points) before the first job, for spans that would record nothing."""
    if _api is not None:
        return _api or None
    if "opentelemetry.trace" not in sys.modules and not _ENV_PROVIDER:
        return None
    return api()


def current_carrier() -> dict[str, str] | None:
    """The headers that carry the current trace context (``traceparent``, ``tracestate`` with
    the default propagator), or None when OpenTelemetry is not installed or no span is current."""
    a = in_use()
    if not a:
        return None
    if not a.get_current_span().get_span_context().is_valid:
        return None
    carrier: dict[str, str] = {}
    a.propagate.inject(carrier)
    return carrier or None


def with_context(
    headers: Mapping[str, object] | None, carrier: Mapping[str, str] | None
) -> Mapping[str, object] | None:
    """headers with the trace context of carrier added (a traceparent of the caller's own wins:
    then headers are returned as they are)."""
    if carrier is None or (headers is not None and "traceparent" in headers):
        return headers
    if not headers:
        return dict(carrier)
    return {**carrier, **headers}


def span_attributes(job: TracedJob) -> dict[str, str | int]:
    """The attributes of a job's span (OpenTelemetry messaging semantic conventions; the kind and
    the delivery under pyqueue_sql's own namespace)."""
    return {
        "messaging.system": MESSAGING_SYSTEM,
        "messaging.destination.name": job.queue,
        "messaging.operation.type": "process",
        "messaging.operation.name": "process",
        "messaging.message.id": job.key,
        "messaging.pyqueue_sql.kind": job.kind,
        "messaging.pyqueue_sql.attempt": job.attempts,
    }


@contextlib.contextmanager
def _job_span(a: _Api, tracer: Tracer, job: TracedJob) -> Iterator[Span]:
    parent = a.propagate.extract(job.headers or {}, context=a.context.Context())
    with tracer.start_as_current_span(
        f"process {job.queue}",
        context=parent,
        kind=a.SpanKind.CONSUMER,
        attributes=span_attributes(job),
        record_exception=False,
        set_status_on_exception=False,
    ) as span:
        yield span


def _settle(a: _Api, span: Span, error: BaseException | None) -> None:
    if error is not None:
        span.record_exception(error)
        span.set_status(a.Status(a.StatusCode.ERROR, f"{type(error).__name__}: {error}"[:500]))


def handle_traced(
    job: TracedJob, run: Callable[..., BaseException | None], *args: Any
) -> BaseException | None:
    """run(*args) (a worker's handling of job, returning the handler's exception or None) inside
    the job's span when OpenTelemetry is installed and a tracer provider is set."""
    a = in_use()
    tracer = a.job_tracer() if a else None
    if tracer is None:
        return run(*args)
    with _job_span(a, tracer, job) as span:
        error = run(*args)
        _settle(a, span, error)
    return error


async def handle_traced_async(
    job: TracedJob, run: Callable[[], Awaitable[BaseException | None]]
) -> BaseException | None:
    """handle_traced for the asyncio worker (run() is awaited)."""
    a = in_use()
    tracer = a.job_tracer() if a else None
    if tracer is None:
        return await run()
    with _job_span(a, tracer, job) as span:
        error = await run()
        _settle(a, span, error)
    return error
