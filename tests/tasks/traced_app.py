"""An app whose worker process exports its spans to a file (PYQUEUE_TEST_SPANS, one JSON object a
line): the SDK configured at import, as an application's own tracing setup would be. Run by
tests/tasks/test_tracing.py through `pyqueue-sql worker tests.tasks.traced_app:app`."""

from __future__ import annotations

import json
import os
from collections.abc import Sequence

from opentelemetry import trace
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor, SpanExporter, SpanExportResult

import pyqueue_sql


class FileExporter(SpanExporter):
    def __init__(self, path: str) -> None:
        self.path = path

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        with open(self.path, "a") as f:
            for s in spans:
                line = {
                    "name": s.name,
                    "kind": s.kind.name,
                    "trace_id": format(s.context.trace_id, "032x"),
                    "span_id": format(s.context.span_id, "016x"),
                    "parent_span_id": None if s.parent is None else format(s.parent.span_id, "016x"),
                    "attributes": dict(s.attributes or {}),
                }
                f.write(json.dumps(line) + "\n")
        return SpanExportResult.SUCCESS


provider = TracerProvider()
provider.add_span_processor(SimpleSpanProcessor(FileExporter(os.environ["PYQUEUE_TEST_SPANS"])))
trace.set_tracer_provider(provider)

app = pyqueue_sql.App(queue=os.environ.get("PYQUEUE_TEST_QUEUE", "traced"))


@app.task
def notify(user: str) -> None:
    pass
