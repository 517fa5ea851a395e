"""What the groups of calls share: their base classes and the checks and encodings of the
arguments several topics take (headers, priorities, reservations, parents, errors)."""

from __future__ import annotations

import os
import socket
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any, Final

from .. import dialects, errors
from ..dialects import encode_json, key_value, text_value, token_value, whole_number
from ..rows import Reservation, WorkerRegistration
from ..sansio import INT_MAX

# move()'s payload when none is given: the message keeps its own.
UNCHANGED: Final = object()

# What queue_fail stores of an error (the routine keeps the first 2000 characters too).
LAST_ERROR_MAX_CHARS = 2000

# The largest headers the push routines take, in bytes of their JSON text (the routines check it:
# a larger one is refused with InvalidArgumentError "headers are N bytes, more than 8192 bytes").
MAX_HEADERS_BYTES = 8192


def headers_value(headers: object) -> dict[str, object] | None:
    """Headers as a push takes them: None (none) or a dict of str to JSON values; anything else
    is refused with InvalidArgumentError before any call (the size is the routine's check)."""
    if headers is None:
        return None
    if not isinstance(headers, Mapping):
        raise errors.InvalidArgumentError(
            f"headers must be a dict of str to JSON values (a JSON object), not {type(headers).__name__}"
        )
    for name in headers:
        if not isinstance(name, str):
            raise errors.InvalidArgumentError(
                f"headers: a name must be a str, not {type(name).__name__} ({name!r:.40})"
            )
    return headers if isinstance(headers, dict) else dict(headers)


def encode_headers(headers: Mapping[str, object] | None) -> str | None:
    """Headers as JSON text (None: none); InvalidArgumentError for a value JSON cannot hold."""
    if headers is None:
        return None
    try:
        return encode_json(headers)
    except errors.InvalidPayloadError as exc:
        raise errors.InvalidArgumentError(f"headers are not JSON-serialisable: {exc.__cause__}") from None


def batch_with_headers(
    encode: Callable[[Sequence[int]], dict[str, Any]], headers: Sequence[Mapping[str, object] | None]
) -> dict[str, Any]:
    """The arguments of a *batch_with_headers routine: the plain batch's (encode(indices) encodes
    the items at those indices) and the headers of each item, either as an array beside the others
    or, where the batch is one JSON array of message objects (its "messages" argument), as each
    object's "headers" member."""
    params = encode(range(len(headers)))
    if "messages" not in params:
        params["headers"] = [encode_headers(h) for h in headers]
        return params
    parts = []
    for i, h in enumerate(headers):
        one = encode([i])["messages"]  # '[{...}]', compact: the object ends 2 characters before the end
        parts.append(f'{one[1:-2]},"headers":{encode_headers(h) or "null"}}}')
    params["messages"] = "[" + ",".join(parts) + "]"
    return params


def default_worker_name() -> str:
    return f"{socket.gethostname()}:{os.getpid()}"


def registration_arg(registration: object) -> WorkerRegistration:
    if not isinstance(registration, WorkerRegistration):
        raise errors.InvalidArgumentError(
            "pass the WorkerRegistration that register_worker returned (its secret shows the "
            f"registration is yours), not {type(registration).__name__}"
        )
    whole_number(registration.worker_id, "worker_id")
    text_value(registration.secret, "secret")
    return registration


INT_MIN = -2147483648  # INT_MAX: pyqueue_sql.sansio
MAX_PAYLOAD_LIMIT = 268435456  # the largest max_payload a queue may have (256 MiB)


def whole_number_within(value: object, what: str, low: int, high: int) -> int | None:
    """whole_number, refused outside [low, high] with the words the MySQL/MariaDB routines use,
    so that a number out of range gives one message on both dialects (PostgreSQL would answer
    "integer out of range" from its cast, before the routine runs)."""
    checked = whole_number(value, what)
    if checked is not None and not low <= checked <= high:
        raise errors.InvalidArgumentError(f"{what} must be a whole number from {low} to {high}")
    return checked


def priority_value(value: object) -> int | None:
    """A message's priority: a whole number in the range of a 32-bit integer (None = 0)."""
    return whole_number_within(value, "priority", INT_MIN, INT_MAX)


def error_text(error: object) -> str | None:
    """What Queue.fail stores for an error: a str as it is, an exception as "Type: message"
    (just "Type" when it has no message); at most LAST_ERROR_MAX_CHARS characters."""
    if error is None:
        return None
    if isinstance(error, BaseException):
        message = str(error)
        text = f"{type(error).__name__}: {message}" if message else type(error).__name__
    elif isinstance(error, str):
        text = error
    else:
        raise errors.InvalidArgumentError(f"error must be a str or an exception, not {type(error).__name__}")
    return text[:LAST_ERROR_MAX_CHARS]


def held_reservation(r: object) -> Any:
    """A reservation argument (commit, rollback, fail, extend, move...): a Reservation as reserve
    returned it, or an object with its key, kind and token; anything else is refused with
    InvalidArgumentError, the same on both clients, before any call."""
    if isinstance(r, Reservation) or all(hasattr(r, name) for name in ("key", "kind", "token")):
        return r
    raise errors.InvalidArgumentError(
        f"pass the Reservation that reserve returned (its key, kind and token name the message "
        f"and prove it is held), not {type(r).__name__} ({r!r:.40})"
    )


def parent_refs(parents: Iterable[Any]) -> list[dict[str, str | None]]:
    """push_after's parents as queue_push_after takes them: [{"queue", "p_key", "p_kind"}, ...] in
    order. Each is a (queue, key, kind) tuple, such a mapping, or an object with queue, key and
    kind attributes (a queue may be a Queue); anything else is refused with InvalidArgumentError
    naming it (how many, and whether they are known, is the routine's check)."""
    if isinstance(parents, (str, bytes, Mapping)) or not isinstance(parents, Iterable):
        raise errors.InvalidArgumentError(
            f"parents must be a list of (queue, key, kind) (one parent: [it]), not {type(parents).__name__}"
        )
    refs = []
    for i, p in enumerate(parents, 1):  # counted from 1, as the routine names them
        if isinstance(p, Mapping):
            missing = {"queue", "p_key", "p_kind"} - p.keys()
            if missing:
                raise errors.InvalidArgumentError(f"parents[{i}] has no {sorted(missing)[0]!r}")
            queue, key, kind = p["queue"], p["p_key"], p["p_kind"]
        elif isinstance(p, tuple) and len(p) == 3:
            queue, key, kind = p
        elif all(hasattr(p, a) for a in ("queue", "key", "kind")) and not isinstance(p, (str, bytes)):
            queue, key, kind = p.queue, p.key, p.kind
        else:
            raise errors.InvalidArgumentError(
                f"parents[{i}] must be a (queue, key, kind) tuple, a mapping or a handle, "
                f"not {type(p).__name__} ({p!r:.40})"
            )
        refs.append(
            {
                "queue": queue_name_arg(queue),
                "p_key": key_value(key, f"parents[{i}]'s key"),
                "p_kind": text_value(kind, f"parents[{i}]'s kind"),
            }
        )
    return refs


def queue_name_arg(queue: object) -> str | None:
    """A queue argument: a name (None passed on), or a Queue / AsyncQueue."""
    return queue.name if isinstance(queue, QueueCallsBase) else text_value(queue, "queue")


class QueueCallsBase:
    """What each group of a queue's calls stands on: the queue's database and its name (set by
    pyqueue_sql.client.QueueCalls, which composes the groups)."""

    db: DatabaseCallsBase
    name: str

    def _held(self, r: Reservation) -> dict[str, str | None]:
        """The (key, kind, token) arguments that name a reservation."""
        r = held_reservation(r)
        return dict(
            queue=self.name, key=key_value(r.key), kind=text_value(r.kind, "kind"), token=token_value(r.token)
        )


class DatabaseCallsBase:
    """What each group of a database's calls stands on: its dialect (set by
    pyqueue_sql.client.DatabaseCalls, which composes the groups)."""

    dialect: dialects.Dialect
