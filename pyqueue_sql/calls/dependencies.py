"""The dependencies topic's calls: push_after, push_after_many, parent_results
(sql/<dialect>/routines/14_dependencies.sql). Written sans-IO (pyqueue_sql.sansio);
pyqueue_sql.client's QueueCalls and DatabaseCalls are composed of these groups."""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterable, Mapping
from typing import Any

from .. import errors, sansio, statements
from ..dialects import encode_json, key_value, text_value
from ..rows import ParentResult, named
from ..sansio import chunks, each_call, sans_io, statement_call
from .base import QueueCallsBase, encode_headers, headers_value, parent_refs, priority_value

RUN_ON = ("success", "failure", "always")


def check_run_on(run_on: object) -> None:
    """run_on of push_after / configure: one of RUN_ON (InvalidArgumentError otherwise)."""
    if run_on not in RUN_ON:
        raise errors.InvalidArgumentError(f"run_on must be 'success', 'failure' or 'always', not {run_on!r}")


class DependenciesCalls(QueueCallsBase):
    """A queue's calls of the dependencies topic (see QueueCalls)."""

    @sans_io
    def push_after(
        self,
        key: str | int,
        kind: str,
        payload: object,
        parents: Iterable[Any],
        run_on: str = "success",
        run_at: dt.datetime | dt.timedelta | None = None,
        priority: int | None = None,
        headers: Mapping[str, object] | None = None,
    ) -> bool:
        """push of a message that waits for its parents (queue_push_after): it is 'waiting' until
        every parent has succeeded, ready in the transaction of the commit that ends the last one,
        and cancelled when one fails or is cancelled. True if inserted, False if a live message
        with this key and kind exists (dedup: nothing changes).

        parents: 1 to 1000 messages, in the order the child reads them back (parent_results),
        each a (queue, key, kind) tuple, a {"queue", "p_key", "p_kind"} mapping, or anything with
        queue, key and kind attributes (a TaskHandle, a Result, a Reservation). This queue and
        each parent's must keep results (set_result_retention); a parent must be live there or
        have succeeded (InvalidArgumentError naming it otherwise, and nothing is pushed).

        run_on (queue_push_after_on): "success" as above; "failure", a failure callback: it runs
        once, when a parent fails for good (dead-lettered, dropped or cancelled), and is cancelled
        when every parent succeeds; "always": it runs once every parent has ended, either way.

        run_at, priority, headers (queue_push_after_on_with_headers): as push takes them; the
        message is due at the later of its run_at and the moment its parents let it run."""
        check_run_on(run_on)
        args = dict(
            queue=self.name,
            key=key_value(key),
            kind=text_value(kind, "kind"),
            payload=encode_json(payload),
            parents=encode_json(parent_refs(parents)),
        )
        if run_at is not None or priority is not None or headers is not None:
            d = self.db.dialect
            rows = yield statement_call(
                statements.PUSH_AFTER_WITH_HEADERS,
                run_on=run_on,
                run_at=d.codec.time(run_at, "run_at"),
                priority=priority_value(priority),
                headers=encode_headers(headers_value(headers)),
                **args,
            )
        elif run_on == "success":  # the routine of 0.1.0
            rows = yield statement_call(statements.PUSH_AFTER, **args)
        else:
            rows = yield statement_call(statements.PUSH_AFTER_ON, run_on=run_on, **args)
        return bool(rows[0][0])

    @sans_io
    def push_after_many(self, messages: Iterable[Mapping[str, Any]]) -> int:
        """Many push_after in one call (queue_push_after_batch), one transaction; returns how many
        were new. Each message is a mapping with key, kind, payload, parents, and optionally
        run_on, run_at, priority and headers, as push_after takes them; in order, so a message may
        name an earlier one as a parent. More than CHUNK_SIZE go in several calls of at most
        CHUNK_SIZE each, run as one transaction. A refused message refuses the whole batch, its
        error naming the element."""
        d = self.db.dialect
        items: list[dict[str, Any]] = []
        for m in messages:
            run_on = m.get("run_on", "success")
            check_run_on(run_on)
            item: dict[str, Any] = {
                "p_key": key_value(m["key"]),
                "p_kind": text_value(m["kind"], "kind"),
                "payload": m["payload"],
                "parents": parent_refs(m["parents"]),
            }
            if run_on != "success":
                item["run_on"] = run_on
            run_at = d.codec.time(m.get("run_at"), "run_at")
            if run_at is not None:
                item["run_at"] = run_at.isoformat(sep=" ", timespec="microseconds")
            if m.get("priority") is not None:
                item["priority"] = priority_value(m["priority"])
            headers = headers_value(m.get("headers"))
            if headers is not None:
                item["headers"] = headers
            items.append(item)
        if not items:
            return 0
        calls = [
            statement_call(statements.PUSH_AFTER_BATCH, queue=self.name, messages=encode_json(list(part)))
            for part in chunks(items, sansio.CHUNK_SIZE)
        ]
        results = yield from each_call(calls)
        return sum(int(rows[0][0]) for rows in results)

    @sans_io
    def parent_results(self, key: str | int, kind: str) -> list[ParentResult]:
        """The parents of a live message pushed with push_after (queue_parent_results), in the
        order they were given, each with its state and stored result (a parent that failed or was
        cancelled: its last error in ``error``); [] for a message without parents or not live."""
        d = self.db.dialect
        rows = yield statement_call(
            statements.PARENT_RESULTS, queue=self.name, key=key_value(key), kind=text_value(kind, "kind")
        )
        out = []
        for _, q, k, t, state, result in sorted(
            (named(statements.PARENT_RESULTS, row) for row in rows), key=lambda r: int(r.ordinal)
        ):
            value = d.codec.read_payload(result)
            if state in ("failed", "cancelled"):  # queue_parent_results gives its last_error there
                out.append(
                    ParentResult(
                        str(q), str(k), str(t), str(state), None, None if value is None else str(value)
                    )
                )
            else:
                out.append(ParentResult(str(q), str(k), str(t), str(state), value))
        return out
