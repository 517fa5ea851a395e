"""The topics topic's calls: publish to the queues bound to a pattern, bind, unbind, bindings
(sql/<dialect>/routines/10_topics.sql). Written sans-IO (pyqueue_sql.sansio); pyqueue_sql.client's
QueueCalls and DatabaseCalls are composed of these groups."""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterable, Mapping
from typing import Any

from .. import sansio, statements, tracing
from ..dialects import encode_json, key_value, text_value
from ..rows import Binding, Publication, named
from ..sansio import chunks, each_call, sans_io, statement_call
from .base import (
    DatabaseCallsBase,
    QueueCallsBase,
    batch_with_headers,
    encode_headers,
    headers_value,
    priority_value,
    queue_name_arg,
)


class TopicsDatabaseCalls(DatabaseCallsBase):
    """A database's calls of the topics topic (see DatabaseCalls)."""

    @sans_io
    def publish(
        self,
        topic: str,
        key: str | int,
        kind: str,
        payload: object,
        run_at: dt.datetime | dt.timedelta | None = None,
        priority: int | None = None,
        headers: Mapping[str, object] | None = None,
    ) -> int:
        """Pushes the message into every queue bound (bind) to a pattern that matches topic, one
        copy per queue; returns how many queues got a new one (a queue that holds a live message
        with this key and kind already does not count; no matching binding: 0). headers: as
        Queue.push's (each copy carries them)."""
        d = self.dialect
        params = dict(
            topic=text_value(topic, "topic"),
            key=key_value(key),
            kind=text_value(kind, "kind"),
            payload=encode_json(payload),
            run_at=d.codec.time(run_at, "run_at"),
            priority=priority_value(priority),
        )
        headers = tracing.with_context(headers_value(headers), tracing.current_carrier())
        if headers is None:
            rows = yield statement_call(statements.PUBLISH, **params)
        else:
            rows = yield statement_call(
                statements.PUBLISH_WITH_HEADERS, **params, headers=encode_headers(headers)
            )
        return int(rows[0][0])

    @sans_io
    def publish_many(self, messages: Iterable[Publication | tuple | Mapping[str, Any]]) -> int:
        """publish for many messages in one call; returns how many new messages all the queues got.
        Tuples are (topic, key, kind, payload[, run_at[, priority[, headers]]]).

        More than CHUNK_SIZE messages go in several calls of at most CHUNK_SIZE each, run as one
        transaction (all are validated before the first is sent)."""
        d = self.dialect
        topics, items = [], []
        headers: list[Mapping[str, object] | None] = []
        for m in messages:
            if isinstance(m, Mapping):
                m = Publication(**m)
            elif not isinstance(m, Publication):
                m = Publication(*m)
            topics.append(text_value(m.topic, "topic"))
            items.append(
                (
                    key_value(m.key),
                    text_value(m.kind, "kind"),
                    m.payload,
                    d.codec.time(m.run_at, "run_at"),
                    priority_value(m.priority),
                )
            )
            headers.append(headers_value(m.headers))
        if not items:
            return 0
        carrier = tracing.current_carrier()
        if carrier is not None:
            headers = [tracing.with_context(h, carrier) for h in headers]
        if all(h is None for h in headers):
            publishes = [
                statement_call(statements.PUBLISH_BATCH, **d.codec.topic_batch(topic_part, part))
                for topic_part, part in zip(
                    chunks(topics, sansio.CHUNK_SIZE), chunks(items, sansio.CHUNK_SIZE)
                )
            ]
        else:
            publishes = [
                statement_call(
                    statements.PUBLISH_BATCH_WITH_HEADERS,
                    **batch_with_headers(
                        lambda ix, t=topic_part, p=part: d.codec.topic_batch(
                            [t[i] for i in ix], [p[i] for i in ix]
                        ),
                        h_part,
                    ),
                )
                for topic_part, part, h_part in zip(
                    chunks(topics, sansio.CHUNK_SIZE),
                    chunks(items, sansio.CHUNK_SIZE),
                    chunks(headers, sansio.CHUNK_SIZE),
                )
            ]
        return sum(int(rows[0][0]) for rows in (yield from each_call(publishes)))

    @sans_io
    def bind(self, pattern: str, queue: str | QueueCallsBase) -> bool:
        """Binds a topic pattern to a queue: publish then pushes the messages of every matching
        topic into it. Words are dot-separated; ``*`` stands for one word, ``#`` for zero or more
        (``orders.*``, ``orders.#``, ``#``). True if new, False if it was bound already."""
        return bool(
            (
                yield statement_call(
                    statements.BIND, pattern=text_value(pattern, "pattern"), queue=queue_name_arg(queue)
                )
            )[0][0]
        )

    @sans_io
    def unbind(self, pattern: str, queue: str | QueueCallsBase) -> bool:
        """Removes a binding; False if there was none."""
        return bool(
            (
                yield statement_call(
                    statements.UNBIND, pattern=text_value(pattern, "pattern"), queue=queue_name_arg(queue)
                )
            )[0][0]
        )

    @sans_io
    def bindings(self, queue: str | QueueCallsBase | None = None) -> list[Binding]:
        """The bindings of one queue (None = every queue's), ordered by queue, then pattern."""
        d = self.dialect
        return [
            Binding(r.pattern, r.queue, d.codec.read_time(r.created_at))
            for row in (yield statement_call(statements.BINDINGS, queue=queue_name_arg(queue)))
            for r in (named(statements.BINDINGS, row),)
        ]
