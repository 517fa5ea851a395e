"""Messages: push, publish, reserve, commit, rollback, remove, show, result, cancel."""

from __future__ import annotations

import argparse
import datetime as dt
import json
import shlex
import sys
from collections.abc import Callable
from typing import Any

from .. import errors
from ..dialects import dump_json_text
from ..display import format_duration, format_table, format_time, shorten
from ..logsafe import escape_control as esc
from .common import (
    EXIT_FAILURE,
    EXIT_OK,
    PROG,
    Command,
    UsageError,
    int32_arg,
    open_database,
    positive_int,
    seconds_arg,
)


def _refuse_constant(name: str) -> Any:
    raise ValueError(f"{name} is not JSON")


def _payload(args: argparse.Namespace) -> Any:
    try:
        return json.loads(args.payload, parse_constant=_refuse_constant)
    except ValueError as exc:
        raise UsageError(f"PAYLOAD_JSON is not valid JSON ({exc}): {args.payload[:60]!r}") from None


def _run_at(args: argparse.Namespace) -> dt.timedelta | None:
    return None if args.run_in is None else dt.timedelta(seconds=args.run_in)


def cmd_push(args: argparse.Namespace) -> int:
    payload = _payload(args)
    with open_database(args) as db:
        inserted = db.queue(args.queue).push(
            args.key, args.kind, payload, run_at=_run_at(args), priority=args.priority, group=args.group
        )
    print("inserted" if inserted else "duplicate")
    return EXIT_OK


def cmd_publish(args: argparse.Namespace) -> int:
    payload = _payload(args)
    with open_database(args) as db:
        queues = db.publish(
            args.topic, args.key, args.kind, payload, run_at=_run_at(args), priority=args.priority
        )
    if queues:
        print(f"published to {queues} queue(s)")
    else:
        print(
            f"published to 0 queues (no binding matches {args.topic}, or every queue bound to it "
            f"holds {args.key}/{args.kind} already)"
        )
    return EXIT_OK


def cmd_reserve(args: argparse.Namespace) -> int:
    with open_database(args) as db:
        queue = db.queue(args.queue)
        if args.commit:
            # One transaction: a crash between reserve and commit leaves nothing reserved.
            with db.transaction():
                reservations = queue.reserve(n=args.n, timeout=args.timeout)
                lost = [r for r in reservations if not queue.commit(r)]
            if lost:
                raise errors.QueueError(f"{len(lost)} reservation(s) no longer held at commit")
        else:
            reservations = queue.reserve(n=args.n, timeout=args.timeout)
    if not reservations:
        print(f"{args.queue}: {_why_nothing_ready(args)}", file=sys.stderr)
        return EXIT_OK
    for r in reservations:
        print(
            dump_json_text(
                {
                    "key": r.key,
                    "kind": r.kind,
                    "payload": r.payload,
                    "token": str(r.token),
                    "attempts": r.attempts,
                }
            )
        )
    return EXIT_OK


def _why_nothing_ready(args: argparse.Namespace) -> str:
    """Why a reserve got nothing: the queue is paused, or no message is ready (read with
    queue_stats; an account that may not call it gets the general answer)."""
    try:
        with open_database(args) as db:
            stats = db.queue(args.queue).stats()
    except errors.QueueError:
        stats = None
    if stats is not None and stats.paused:
        waiting = stats.ready + stats.delayed
        return f"paused: reserve hands out nothing until `{PROG} resume {shlex.quote(args.queue)}`" + (
            f" ({waiting} message(s) waiting)" if waiting else ""
        )
    return "no message ready (empty, all delayed or reserved, or paused)"


def _reservation(args: argparse.Namespace) -> Any:
    """The reservation a command line names (queue, key, kind, token): what commit/rollback need."""
    from ..client import Reservation

    return Reservation(args.queue, args.key, args.kind, None, args.token, 0, 0, None, None)


def _not_held(args: argparse.Namespace) -> int:
    print(
        f"{PROG}: the reservation of {args.key}/{args.kind} in {args.queue} no longer holds "
        "(expired and taken again, or already committed or rolled back)",
        file=sys.stderr,
    )
    return EXIT_FAILURE


def cmd_commit(args: argparse.Namespace) -> int:
    with open_database(args) as db:
        held = db.queue(args.queue).commit(_reservation(args))
    if not held:
        return _not_held(args)
    print("committed")
    return EXIT_OK


FAIL_OUTCOMES = {
    "retry": "rolled back: it will be delivered again{after}",
    "dead_lettered": "dead-lettered: max attempts reached, moved to the dead-letter queue",
    "dropped": "dropped: max attempts reached and the queue has no dead-letter queue",
}


def cmd_rollback(args: argparse.Namespace) -> int:
    after = "" if not args.delay else f" in {format_duration(args.delay)}"
    with open_database(args) as db:
        queue = db.queue(args.queue)
        if args.error is not None:
            outcome = queue.fail(_reservation(args), error=args.error, delay=args.delay)
            if outcome is None:
                return _not_held(args)
            print(FAIL_OUTCOMES.get(outcome, outcome).format(after=after))
            return EXIT_OK
        held = queue.rollback(_reservation(args), delay=args.delay)
    if not held:
        return _not_held(args)
    print(
        f"rolled back: it will be delivered again{after} (or, if that was its last allowed attempt, "
        "it is dead-lettered; `rollback --error TEXT` says which)"
    )
    return EXIT_OK


def cmd_remove(args: argparse.Namespace) -> int:
    with open_database(args) as db:
        removed = db.queue(args.queue).remove(args.key, args.kind)
    if not removed:
        print(f"{PROG}: no message {args.key}/{args.kind} in {args.queue}", file=sys.stderr)
        return EXIT_FAILURE
    print("removed")
    return EXIT_OK


def _field(obj: Any, *names: str) -> Any:
    for name in names:
        if hasattr(obj, name):
            return getattr(obj, name)
    return None


def _result_if_readable(queue: Any, key: str, kind: str) -> Any:
    """The message's Result (queue_result), or None when the account may not call it."""
    try:
        return queue.result(key, kind)
    except errors.PermissionDeniedError:
        return None


def _cancel_note(state: str) -> str:
    """What a cancel request means for a live message in this state."""
    if state == "reserved":
        return "requested (its consumer is asked to stop)"
    return f"requested (no consumer holds it now: `{PROG} cancel` removes it)"


def _json_text(value: Any) -> str:
    return "-" if value is None else dump_json_text(value)


def _dead_lettered_into(db: Any, queue: Any, key: str, kind: str, history: Any) -> str | None:
    """The dead-letter queue that holds a message gone from its queue: the one its history names,
    else its queue's dead-letter queue when the message is there; None otherwise (or when this
    account may not read the settings)."""
    for h in history or ():
        if h.outcome == "dead_lettered" and h.to_queue:
            return h.to_queue
    try:
        dead_letter_queue = queue.settings().dead_letter_queue
        if dead_letter_queue and db.queue(dead_letter_queue).message(key, kind) is not None:
            return dead_letter_queue
    except errors.QueueError:
        pass
    return None


def cmd_show(args: argparse.Namespace) -> int:
    with open_database(args) as db:
        queue = db.queue(args.queue)
        message = queue.message(args.key, args.kind)
        history = queue.message_history(args.key, args.kind)
        result = _result_if_readable(queue, args.key, args.kind)
        dead_in = _dead_lettered_into(db, queue, args.key, args.kind, history) if message is None else None
    finished = result is not None and result.finished and message is None
    if message is None and dead_in is None and not history and not finished:
        print(
            f"{PROG}: no message {args.key}/{args.kind} in {args.queue}, and no history of one",
            file=sys.stderr,
        )
        return EXIT_FAILURE
    print(f"queue:        {args.queue}")
    print(f"key / kind:   {esc(args.key)} / {esc(args.kind)}")
    if message is None and dead_in is not None:
        print(
            f"state:        gone, dead-lettered into {esc(dead_in)} "
            f"(`{PROG} show {esc(shlex.join([dead_in, args.key, args.kind]))}` shows it)"
        )
    elif message is None and finished:
        print(
            f"state:        gone, {result.state} at {format_time(result.finished_at)} (`{PROG} result` shows it)"
        )
    elif message is None:
        print("state:        gone (no longer in the queue; see its history below)")
    else:
        print(f"state:        {message.state}")
        print(f"attempts:     {message.attempts}")
        print(f"priority:     {message.priority}")
        print(f"created at:   {format_time(message.created_at)}")
        print(f"scheduled at: {format_time(message.scheduled_at)}")
        print(f"reserved by:  {esc(message.reserved_by or '-')}")
        dead_from = _field(message, "dead_from", "from_queue")
        if dead_from:
            print(f"dead from:    {dead_from}")
        print(f"last error:   {esc(message.last_error) if message.last_error is not None else '-'}")
        if result is not None and not result.finished:  # the live message's (queue_result)
            print(f"progress:     {_json_text(result.progress)}")
            if result.cancel_requested:
                print(f"cancel:       {_cancel_note(message.state)}")
        print(f"payload:      {dump_json_text(message.payload)}")
    if history:
        print()
        print("history (newest first):")
        rows = [
            (
                format_time(h.processed_at),
                h.outcome,
                h.to_queue or "-",
                str(h.attempts),
                h.reserved_by or "-",
                shorten(h.last_error, 60),
            )
            for h in history
        ]
        print(
            format_table(
                ("processed at", "outcome", "to queue", "attempts", "reserved by", "last error"),
                rows,
                right_aligned=(3,),
            )
        )
    else:
        print("history:      none")
    return EXIT_OK


def _result_fields(r: Any) -> dict[str, Any]:
    return {
        "queue": r.queue,
        "key": r.key,
        "kind": r.kind,
        "state": r.state,
        "result": r.result,
        "last_error": r.last_error,
        "attempts": r.attempts,
        "progress": r.progress,
        "finished_at": None if r.finished_at is None else r.finished_at.isoformat(),
        "cancel_requested": r.cancel_requested,
    }


def _no_result(args: argparse.Namespace, keeps_results: bool | None) -> int:
    hint = (
        f"; {args.queue} keeps no results (`{PROG} create {shlex.quote(args.queue)} --result-retention S`)"
        if keeps_results is False
        else ""
    )
    print(
        f"{PROG}: unknown: no live message {args.key}/{args.kind} in {args.queue} and no result "
        f"kept of one (never pushed, removed, moved, or its result expired){hint}",
        file=sys.stderr,
    )
    return EXIT_FAILURE


def cmd_result(args: argparse.Namespace) -> int:
    """The message's state: live (ready, delayed, reserved, blocked) or finished (succeeded,
    failed, cancelled, kept for the queue's result_retention). Exit 1 when nothing is known of
    it, and with --wait when it had not finished when the wait ended."""
    if args.wait is not None and args.wait < 0:
        raise UsageError(f"--wait must be seconds >= 0, not {args.wait:g}")
    keeps_results = None
    with open_database(args) as db:
        queue = db.queue(args.queue)
        if args.wait is None:
            r = queue.result(args.key, args.kind)
        else:
            r = queue.wait_result(args.key, args.kind, timeout=args.wait)
        if r.state == "unknown":
            try:
                keeps_results = queue.settings().result_retention is not None
            except errors.PermissionDeniedError:
                pass  # not known: no hint
    if r.state == "unknown":
        return _no_result(args, keeps_results)
    if args.json:
        print(dump_json_text(_result_fields(r)))
    else:
        print(f"queue:        {r.queue}")
        print(f"key / kind:   {esc(r.key)} / {esc(r.kind)}")
        print(f"state:        {r.state}")
        print(f"result:       {_json_text(r.result)}")
        print(f"last error:   {esc(r.last_error) if r.last_error is not None else '-'}")
        print(f"attempts:     {'-' if r.attempts is None else r.attempts}")
        print(f"progress:     {_json_text(r.progress)}")
        print(f"finished at:  {format_time(r.finished_at)}")
        if r.cancel_requested:
            print(f"cancel:       {_cancel_note(r.state)}")
    if args.wait is not None and not r.finished:
        print(
            f"{PROG}: {args.key}/{args.kind} has not finished after {format_duration(args.wait)}: "
            f"still {r.state}",
            file=sys.stderr,
        )
        return EXIT_FAILURE
    return EXIT_OK


def time_arg(text: str) -> dt.datetime:
    """A time on the command line: ISO 8601, UTC unless it names its offset (2026-11-29T09:00:00Z,
    2026-11-29 09:00:00, 2026-11-29T10:00:00+01:00)."""
    try:
        value = dt.datetime.fromisoformat(text.strip().replace("Z", "+00:00").replace("z", "+00:00"))
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"not a time: {text!r} (ISO 8601, UTC unless it says: 2026-11-29T09:00:00Z)"
        ) from None
    return value if value.tzinfo is not None else value.replace(tzinfo=dt.timezone.utc)


def _outcome_text(r: Any) -> str:
    if r.state == "succeeded":
        return shorten(_json_text(r.result), 60)
    return shorten(esc(r.last_error) if r.last_error is not None else "-", 60)


def cmd_results(args: argparse.Namespace) -> int:
    """The finished jobs a queue keeps (queue_results), newest first: a table, or with --json one
    object a line; the next page's --before on stderr when there may be more."""
    with open_database(args) as db:
        queue = db.queue(args.queue)
        rows = queue.results(kind=args.kind, state=args.state, n=args.n, before=args.before)
        keeps = None
        if not rows:
            try:
                keeps = queue.settings().result_retention is not None
            except errors.PermissionDeniedError:
                pass  # not known: no hint
    if args.json:
        for r in rows:
            print(json.dumps(_result_fields(r)))
    elif rows:
        print(
            format_table(
                ("finished at", "key", "kind", "state", "attempts", "result / last error"),
                [
                    (
                        format_time(r.finished_at),
                        shorten(r.key, 40),
                        r.kind,
                        r.state,
                        "-" if r.attempts is None else str(r.attempts),
                        _outcome_text(r),
                    )
                    for r in rows
                ],
                right_aligned=(4,),
            )
        )
    if not rows:
        hint = (
            f" ({args.queue} keeps no results: `{PROG} create {shlex.quote(args.queue)} --result-retention S`)"
            if keeps is False
            else ""
        )
        print(f"{PROG}: no finished job kept in {args.queue} that matches{hint}", file=sys.stderr)
    elif len(rows) >= (args.n or 100):
        last = rows[-1].finished_at
        print(f"{PROG}: more may be kept: the next page with --before {last.isoformat()}", file=sys.stderr)
    return EXIT_OK


CANCEL_OUTCOMES = {
    "cancelled": "cancelled: {key}/{kind} was waiting in {queue} and is removed; it will not run",
    "requested": "requested: {key}/{kind} is being handled (reserved) in {queue}; its consumer is asked "
    "to stop, and sees the request when it renews its reservation",
}


def cmd_cancel(args: argparse.Namespace) -> int:
    with open_database(args) as db:
        outcome = db.queue(args.queue).cancel(args.key, args.kind)
    if outcome not in CANCEL_OUTCOMES:
        print(
            f"{PROG}: {outcome}: no live message {args.key}/{args.kind} in {args.queue} "
            "(finished, removed or never pushed): nothing to cancel",
            file=sys.stderr,
        )
        return EXIT_FAILURE
    print(CANCEL_OUTCOMES[outcome].format(key=args.key, kind=args.kind, queue=args.queue))
    return EXIT_OK


def message_args(p: argparse.ArgumentParser, token: bool = False) -> None:
    p.add_argument("queue", metavar="QUEUE")
    p.add_argument("key", metavar="KEY")
    p.add_argument("kind", metavar="KIND")
    if token:
        p.add_argument("token", metavar="TOKEN", help="the token `reserve` printed")


# -- argument parsing -------------------------------------------------------------


def add_push(command: Command) -> None:
    p = command("push", cmd_push, "push one message; prints inserted or duplicate")
    p.add_argument("queue", metavar="QUEUE")
    p.add_argument("key", metavar="KEY", help="dedup key")
    p.add_argument("kind", metavar="KIND", help="payload type")
    p.add_argument("payload", metavar="PAYLOAD_JSON", help="the payload as JSON text")
    p.add_argument(
        "--run-in", type=seconds_arg, metavar="SECONDS", help="deliver no earlier than this from now"
    )
    p.add_argument("--priority", type=int32_arg, metavar="N", help="higher is served first (default 0)")
    p.add_argument(
        "--group",
        metavar="G",
        help="FIFO group: the group's messages are delivered one at a time, in run time and push order",
    )


def add_publish(command: Command) -> None:
    p = command(
        "publish",
        cmd_publish,
        "push one message into every queue bound to a pattern matching TOPIC; prints how many got it",
    )
    p.add_argument("topic", metavar="TOPIC", help="dot-separated words, e.g. orders.eu.created")
    p.add_argument("key", metavar="KEY", help="dedup key (per queue)")
    p.add_argument("kind", metavar="KIND", help="payload type")
    p.add_argument("payload", metavar="PAYLOAD_JSON", help="the payload as JSON text")
    p.add_argument(
        "--run-in", type=seconds_arg, metavar="SECONDS", help="deliver no earlier than this from now"
    )
    p.add_argument("--priority", type=int32_arg, metavar="N", help="higher is served first (default 0)")


def add_reserve(command: Command) -> None:
    p = command(
        "reserve",
        cmd_reserve,
        "reserve messages; prints one JSON line per message (nothing, and a note on stderr, when none is ready; exit 0)",
    )
    p.add_argument("queue", metavar="QUEUE")
    p.add_argument("-n", type=positive_int, default=1, metavar="N", help="at most this many (default 1)")
    p.add_argument(
        "--timeout",
        type=seconds_arg,
        metavar="S",
        help="reservation length in seconds (default: the queue's visibility timeout)",
    )
    p.add_argument("--commit", action="store_true", help="commit (delete) them right away")


def add_commit(command: Command) -> None:
    p = command(
        "commit",
        cmd_commit,
        "commit (delete) a reserved message; exit 1 when the reservation no longer holds",
    )
    message_args(p, token=True)


def add_rollback(command: Command) -> None:
    p = command(
        "rollback",
        cmd_rollback,
        "give a reserved message back (dead-lettered after max attempts); "
        "with --error record why and print the outcome",
    )
    message_args(p, token=True)
    p.add_argument(
        "--delay", type=seconds_arg, metavar="S", help="deliver again no earlier than this (default 0)"
    )
    p.add_argument(
        "--error",
        metavar="TEXT",
        help="the error to record as the message's last error; prints retry, dead-lettered or dropped",
    )


def add_remove(command: Command) -> None:
    p = command("remove", cmd_remove, "delete a message whatever its state; exit 1 when there is none")
    message_args(p)


def add_show(command: Command) -> None:
    p = command(
        "show",
        cmd_show,
        "a message's state, attempts, last error, progress and payload, and its history rows",
    )
    message_args(p)


def add_result(command: Command) -> None:
    p = command(
        "result",
        cmd_result,
        "a message's state and, once it finished, its result: state, result, last error, attempts, "
        "progress, finished at; exit 1 when nothing is known of it",
    )
    message_args(p)
    p.add_argument("--json", action="store_true", help="one JSON object (the fields, unformatted)")
    p.add_argument(
        "--wait",
        type=seconds_arg,
        metavar="SECONDS",
        help="wait up to this long for it to finish (succeeded, failed or cancelled); exit 1 when it has not",
    )


def add_results(command: Command) -> None:
    p = command(
        "results",
        cmd_results,
        "the finished jobs a queue keeps (its result retention), newest first: finished at, key, kind, "
        "state, attempts, result or last error",
    )
    p.add_argument("queue", metavar="QUEUE")
    p.add_argument("--state", choices=("succeeded", "failed", "cancelled"), help="only jobs that ended so")
    p.add_argument("--kind", metavar="KIND", help="only jobs of this kind")
    p.add_argument("-n", type=positive_int, metavar="N", help="at most N jobs (default 100, at most 1000)")
    p.add_argument(
        "--before",
        type=time_arg,
        metavar="TIME",
        help="only jobs finished before this time (ISO 8601, UTC unless it says): the next page",
    )
    p.add_argument("--json", action="store_true", help="one JSON object a line (the fields, unformatted)")


def add_cancel(command: Command) -> None:
    p = command(
        "cancel",
        cmd_cancel,
        "cancel a message: prints cancelled (it was waiting: removed, it will not run) or requested "
        "(a consumer holds it: asked to stop); exit 1 when there is no live message",
    )
    message_args(p)


PARSERS: dict[str, Callable[[Command], None]] = {
    "push": add_push,
    "publish": add_publish,
    "reserve": add_reserve,
    "commit": add_commit,
    "rollback": add_rollback,
    "remove": add_remove,
    "show": add_show,
    "result": add_result,
    "results": add_results,
    "cancel": add_cancel,
}
