"""The produce topic's calls: push, push_many, push_replace (sql/<dialect>/routines/04_produce.sql).
Written sans-IO (pyqueue_sql.sansio); pyqueue_sql.client's QueueCalls and DatabaseCalls are composed
of these groups."""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterable, Mapping
from typing import Any

from .. import sansio, statements, tracing
from ..dialects import encode_json, key_value, text_value
from ..rows import NewMessage
from ..sansio import chunks, each_call, sans_io, statement_call
from .base import QueueCallsBase, batch_with_headers, encode_headers, headers_value, priority_value


class ProduceCalls(QueueCallsBase):
    """A queue's calls of the produce topic (see QueueCalls)."""

    @sans_io
    def push(
        self,
        key: str | int,
        kind: str,
        payload: object,
        run_at: dt.datetime | dt.timedelta | None = None,
        priority: int | None = None,
        group: str | None = None,
        headers: Mapping[str, object] | None = None,
    ) -> bool:
        """True if inserted, False if a live message with this key and kind exists (dedup: its
        headers are not changed either).

        With a group (queue_push_grouped) the messages of that group are delivered one at a time,
        in run_at and push order: each waits until the one before it has left the queue.

        headers: a dict of str to JSON values carried beside the payload (at most 8192 bytes of
        JSON), None for none; with OpenTelemetry installed and a span current, the trace context
        is added (see pyqueue_sql.tracing)."""
        d = self.db.dialect
        params = dict(
            queue=self.name,
            key=key_value(key),
            kind=text_value(kind, "kind"),
            payload=encode_json(payload),
            run_at=d.codec.time(run_at, "run_at"),
            priority=priority_value(priority),
        )
        headers = tracing.with_context(headers_value(headers), tracing.current_carrier())
        if headers is not None:
            params["headers"] = encode_headers(headers)
        if group is None:
            rows = yield statement_call(
                statements.PUSH if headers is None else statements.PUSH_WITH_HEADERS, **params
            )
        else:
            rows = yield statement_call(
                statements.PUSH_GROUPED if headers is None else statements.PUSH_GROUPED_WITH_HEADERS,
                **params,
                group=text_value(group, "group"),
            )
        return bool(rows[0][0])

    @sans_io
    def push_many(self, messages: Iterable[NewMessage | tuple | Mapping[str, Any]]) -> int:
        """Pushes many in one call; returns how many were new. Tuples are
        (key, kind, payload[, run_at[, priority[, group[, headers]]]]).

        A batch in which some message has a group goes through queue_push_batch_grouped (the
        others: no group), any other through queue_push_batch. More than CHUNK_SIZE messages go
        in several calls of at most CHUNK_SIZE each, run as one transaction (all are validated
        before the first is sent)."""
        d = self.db.dialect
        items, groups = [], []
        headers: list[Mapping[str, object] | None] = []
        for m in messages:
            if type(m) is tuple and len(m) == 3 and type(m[0]) is str and type(m[1]) is str:
                # the common shape, (str key, str kind, payload): nothing to convert or check here,
                # and no NewMessage to build (a third of the client's time for a batch)
                items.append((m[0], m[1], m[2], None, None))
                groups.append(None)
                headers.append(None)
                continue
            if isinstance(m, Mapping):
                m = NewMessage(**m)
            elif not isinstance(m, NewMessage):
                m = NewMessage(*m)
            items.append(
                (
                    key_value(m.key),
                    text_value(m.kind, "kind"),
                    m.payload,
                    d.codec.time(m.run_at, "run_at"),
                    priority_value(m.priority),
                )
            )
            groups.append(text_value(m.group, "group"))
            headers.append(headers_value(m.headers))
        if not items:
            return 0
        carrier = tracing.current_carrier()
        if carrier is not None:
            headers = [tracing.with_context(h, carrier) for h in headers]
        grouped = any(g is not None for g in groups)
        if all(h is None for h in headers):
            if not grouped:
                pushes = [
                    statement_call(statements.PUSH_BATCH, queue=self.name, **d.codec.batch(part))
                    for part in chunks(items, sansio.CHUNK_SIZE)
                ]
            else:
                pushes = [
                    statement_call(
                        statements.PUSH_BATCH_GROUPED,
                        queue=self.name,
                        **d.codec.grouped_batch(part, group_part),
                    )
                    for part, group_part in zip(
                        chunks(items, sansio.CHUNK_SIZE), chunks(groups, sansio.CHUNK_SIZE)
                    )
                ]
        elif not grouped:
            pushes = [
                statement_call(
                    statements.PUSH_BATCH_WITH_HEADERS,
                    queue=self.name,
                    **batch_with_headers(lambda ix, p=part: d.codec.batch([p[i] for i in ix]), h_part),
                )
                for part, h_part in zip(chunks(items, sansio.CHUNK_SIZE), chunks(headers, sansio.CHUNK_SIZE))
            ]
        else:
            pushes = [
                statement_call(
                    statements.PUSH_BATCH_GROUPED_WITH_HEADERS,
                    queue=self.name,
                    **batch_with_headers(
                        lambda ix, p=part, g=group_part: d.codec.grouped_batch(
                            [p[i] for i in ix], [g[i] for i in ix]
                        ),
                        h_part,
                    ),
                )
                for part, group_part, h_part in zip(
                    chunks(items, sansio.CHUNK_SIZE),
                    chunks(groups, sansio.CHUNK_SIZE),
                    chunks(headers, sansio.CHUNK_SIZE),
                )
            ]
        return sum(int(rows[0][0]) for rows in (yield from each_call(pushes)))

    @sans_io
    def push_replace(
        self,
        key: str | int,
        kind: str,
        payload: object,
        run_at: dt.datetime | dt.timedelta | None = None,
        priority: int | None = None,
    ) -> str:
        """Like push, but a waiting message with this key and kind gets the new payload, run_at and
        priority (debounce). Returns 'inserted', 'replaced', or 'reserved' (held by a consumer: left alone)."""
        d = self.db.dialect
        rows = yield statement_call(
            statements.PUSH_REPLACE,
            queue=self.name,
            key=key_value(key),
            kind=text_value(kind, "kind"),
            payload=encode_json(payload),
            run_at=d.codec.time(run_at, "run_at"),
            priority=priority_value(priority),
        )
        return str(rows[0][0])
