"""Queues: create, settings, stats, pause/resume, drop, dead letters and redrive, topic bindings,
FIFO groups and their limits, rate limits."""

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
from ..display import (
    HORIZON_WARN_S,
    STATS_LEGEND,
    format_duration,
    format_horizon,
    format_kind_stats_table,
    format_stats_table,
    format_table,
    format_time,
    shorten,
)
from .common import (
    EXIT_FAILURE,
    EXIT_OK,
    PROG,
    Command,
    UsageError,
    confirm,
    open_database,
    positive_int,
    seconds_arg,
)

SETTINGS = (
    "visibility_timeout",
    "max_attempts",
    "dead_letter_queue",
    "history_retention",
    "result_retention",
)


def _settings_summary(settings: Any) -> str:
    # result retention is named only when the queue keeps results (most queues keep none)
    kept = getattr(settings, "result_retention", None)
    return (
        f"visibility timeout {format_duration(settings.visibility_timeout)}, "
        f"max attempts {settings.max_attempts}, "
        f"dead-letter queue {settings.dead_letter_queue or '-'}, "
        f"history retention {format_duration(settings.history_retention)}"
        + ("" if kept is None else f", result retention {format_duration(kept)}")
    )


def _settings_if_readable(queue: Any) -> Any:
    """The queue's settings, or None when the account may not call queue_settings."""
    try:
        return queue.settings()
    except errors.PermissionDeniedError:
        return None


def cmd_create(args: argparse.Namespace) -> int:
    """Creates a queue (unset settings: defaults) or changes the settings given (others stay).

    It needs only queue_create (and queue_reset_setting for --reset): the settings it reads to say
    "created" or "updated" and to show them need queue_settings (monitor), and an account without
    it is told the queue was created or updated, without them."""
    with open_database(args) as db:
        queue = db.queue(args.queue)
        try:  # None: not known (the account may not read settings)
            existed: bool | None = None if _settings_if_readable(queue) is None else True
        except errors.UnknownQueueError:
            existed = False
        try:
            with db.transaction():
                queue.create(
                    visibility_timeout=args.visibility_timeout,
                    max_attempts=args.max_attempts,
                    dead_letter_queue=args.dead_letter_queue,
                    history_retention=args.history_retention,
                )
                if args.result_retention is not None:
                    queue.set_result_retention(dt.timedelta(seconds=args.result_retention))
                for setting in args.reset or ():
                    queue.reset_setting(setting)
        except errors.UnknownQueueError as exc:
            dead = args.dead_letter_queue
            if dead and dead != args.queue and f'"{dead}"' in str(exc):
                raise errors.UnknownQueueError(
                    f"{exc}: the dead-letter queue must exist first: create it with "
                    f"`{PROG} create {shlex.quote(dead)}`, then run this again"
                ) from None
            raise
        settings = _settings_if_readable(queue)
    if settings is None:
        print(
            f"{'updated' if existed else 'created' if existed is False else 'created or updated'} "
            f"{args.queue} (its settings are not shown: this account may not call queue_settings, "
            "which the monitor capability grants)"
        )
        return EXIT_OK
    print(f"{'updated' if existed else 'created'} {args.queue}: {_settings_summary(settings)}")
    return EXIT_OK


def cmd_bind(args: argparse.Namespace) -> int:
    with open_database(args) as db:
        new = db.bind(args.pattern, args.queue)
    print(f"{'bound' if new else 'already bound'}: {args.pattern} -> {args.queue}")
    return EXIT_OK


def cmd_unbind(args: argparse.Namespace) -> int:
    with open_database(args) as db:
        removed = db.unbind(args.pattern, args.queue)
    if not removed:
        print(f"{PROG}: no binding {args.pattern} -> {args.queue}", file=sys.stderr)
        return EXIT_FAILURE
    print(f"unbound: {args.pattern} -> {args.queue}")
    return EXIT_OK


def cmd_bindings(args: argparse.Namespace) -> int:
    with open_database(args) as db:
        bindings = db.bindings(args.queue)
    if not bindings:
        print(f"no bindings (bind a topic pattern with `{PROG} bind PATTERN QUEUE`)")
        return EXIT_OK
    rows = [(b.pattern, b.queue, format_time(b.created_at)) for b in bindings]
    print(format_table(("pattern", "queue", "created at"), rows))
    return EXIT_OK


def cmd_groups(args: argparse.Namespace) -> int:
    with open_database(args) as db:
        groups = db.queue(args.queue).groups(n=args.n)
    if not groups:
        print(f"no groups in {args.queue}")
        return EXIT_OK
    rows = [
        (g.group_key, g.head_key or "-", g.head_kind or "-", g.head_state or "-", str(g.messages))
        for g in groups
    ]
    # the limit and heads columns only where a group may have more than one message in flight
    # (queue_set_group_limit; every group at the default, 1, delivers one at a time as always);
    # "heads": the group's live messages, ready, delayed or reserved (not only those running)
    if all((g.group_limit or 1) == 1 for g in groups):
        print(
            format_table(
                ("group", "head key", "head kind", "head state", "messages"), rows, right_aligned=(4,)
            )
        )
        return EXIT_OK
    rows = [
        (
            *row,
            "-" if g.group_limit is None else str(g.group_limit),
            "-" if g.in_flight is None else str(g.in_flight),
        )
        for row, g in zip(rows, groups)
    ]
    print(
        format_table(
            ("group", "head key", "head kind", "head state", "messages", "limit", "heads"),
            rows,
            right_aligned=(4, 5, 6),
        )
    )
    return EXIT_OK


# On the command line, `*` in place of a kind or a group: the whole queue (the rate of every kind
# together; the k of every group without its own).
WHOLE_QUEUE = "*"


def _kind_or_queue(kind: str) -> str | None:
    return None if kind == WHOLE_QUEUE else kind


def _set_or_remove(args: argparse.Namespace, given: tuple[str, ...], usage: str) -> bool:
    """True to remove (--remove, nothing else given); a usage error for a mix or a missing value."""
    values = [getattr(args, name) for name in given]
    if args.remove:
        if any(v is not None for v in values):
            raise UsageError(f"--remove takes no {' '.join(n.upper() for n in given)}: {usage}")
        return True
    if any(v is None for v in values):
        raise UsageError(f"give {' and '.join(n.upper() for n in given)}, or --remove: {usage}")
    return False


def cmd_rate(args: argparse.Namespace) -> int:
    usage = f"{PROG} rate QUEUE KIND N PER, or {PROG} rate QUEUE KIND --remove"
    remove = _set_or_remove(args, ("n", "per"), usage)
    kind = _kind_or_queue(args.kind)
    what = "every kind together" if kind is None else f"kind {kind}"
    with open_database(args) as db:
        queue = db.queue(args.queue)
        if remove:
            queue.set_rate(kind, None)
            print(f"no rate for {what} in {args.queue}")
            return EXIT_OK
        try:
            queue.set_rate(kind, args.n, args.per)
        except errors.InvalidArgumentError as exc:  # a value the routine refuses (per over a day...)
            raise UsageError(str(exc)) from None
    print(f"rate of {what} in {args.queue}: at most {args.n} per {format_duration(args.per)}")
    return EXIT_OK


def _rate_kind(kind: str | None) -> str:
    return WHOLE_QUEUE if kind is None else kind


def cmd_rates(args: argparse.Namespace) -> int:
    with open_database(args) as db:
        rates = db.queue(args.queue).rates() if args.queue else db.rates()
    if args.json:
        for r in rates:
            print(
                json.dumps(
                    {
                        "queue": r.queue,
                        "kind": r.kind,
                        "n": r.n,
                        "per_s": r.per.total_seconds(),
                        "in_window": r.in_window,
                        "next_free_at": None if r.next_free_at is None else r.next_free_at.isoformat(),
                    }
                )
            )
        return EXIT_OK
    if not rates:
        print(f"no rates (set one with `{PROG} rate QUEUE KIND N PER`)")
        return EXIT_OK
    rows = [
        (
            r.queue,
            _rate_kind(r.kind),
            str(r.n),
            format_duration(r.per),
            str(r.in_window),
            format_time(r.next_free_at),
        )
        for r in rates
    ]
    print(
        format_table(
            ("queue", "kind", "n", "per", "in window", "next free at"), rows, right_aligned=(2, 3, 4)
        )
    )
    return EXIT_OK


def cmd_group_limit(args: argparse.Namespace) -> int:
    usage = f"{PROG} group-limit QUEUE GROUP K, or {PROG} group-limit QUEUE GROUP --remove"
    remove = _set_or_remove(args, ("k",), usage)
    group = _kind_or_queue(args.group)
    what = "every group without its own (the default)" if group is None else f"group {group}"
    with open_database(args) as db:
        db.queue(args.queue).set_group_limit(group, None if remove else args.k)
    if remove:
        back = "1 at a time" if group is None else "the queue's default"
        print(f"group limit of {what} in {args.queue} removed: back to {back}")
    else:
        print(f"group limit of {what} in {args.queue}: up to {args.k} in flight")
    return EXIT_OK


def cmd_pause(args: argparse.Namespace) -> int:
    with open_database(args) as db:
        db.queue(args.queue).pause()
    print(f"paused {args.queue} (reserve hands out nothing until `{PROG} resume {args.queue}`)")
    return EXIT_OK


def cmd_resume(args: argparse.Namespace) -> int:
    with open_database(args) as db:
        db.queue(args.queue).resume()
    print(f"resumed {args.queue}")
    return EXIT_OK


def cmd_drop(args: argparse.Namespace) -> int:
    with open_database(args) as db:
        queue = db.queue(args.queue)
        s = queue.stats()
        held = s.ready + s.delayed + s.reserved
        if held and not args.yes:
            answer = confirm(
                f"{args.queue} holds {held} message(s) ({s.ready} ready, {s.delayed} delayed, "
                f"{s.reserved} reserved); drop the queue and them?"
            )
            if answer is None:
                raise errors.QueueError(
                    f"refusing to drop {args.queue}: it holds {held} message(s); "
                    "pass --yes (no terminal to ask on)"
                )
            if not answer:
                print("not dropped", file=sys.stderr)
                return EXIT_FAILURE
        queue.drop()
    print(f"dropped {args.queue}" + (f" and its {held} message(s)" if held else ""))
    return EXIT_OK


def cmd_dead_letters(args: argparse.Namespace) -> int:
    with open_database(args) as db:
        letters = db.queue(args.queue).dead_letters()
    if args.json:
        for d in letters:
            print(
                dump_json_text(
                    {
                        "from_queue": d.from_queue,
                        "key": d.key,
                        "kind": d.kind,
                        "payload": d.payload,
                        "attempts": d.attempts,
                        "priority": d.priority,
                        "created_at": d.created_at.isoformat(),
                        "dead_lettered_at": d.dead_lettered_at.isoformat(),
                        "reserved": d.reserved,
                        "last_error": getattr(d, "last_error", None),
                    }
                )
            )
        return EXIT_OK
    if not letters:
        print(f"no dead letters in {args.queue}")
        return EXIT_OK
    rows = [
        (
            d.from_queue or "-",
            d.key,
            d.kind,
            "-" if d.attempts is None else str(d.attempts),
            format_time(d.dead_lettered_at),
            "yes" if d.reserved else "no",
            shorten(getattr(d, "last_error", None), 60),
        )
        for d in letters
    ]
    print(
        format_table(
            ("from queue", "key", "kind", "attempts", "dead-lettered at", "reserved", "last error"),
            rows,
            right_aligned=(3,),
        )
    )
    return EXIT_OK


def cmd_redrive(args: argparse.Namespace) -> int:
    with open_database(args) as db:
        moved = db.queue(args.dead_queue).redrive(args.to_queue, n=args.n)
    print(f"redrove {moved} message(s) from {args.dead_queue} to {args.to_queue}")
    return EXIT_OK


def cmd_release(args: argparse.Namespace) -> int:
    with open_database(args) as db:
        released = db.queue(args.queue).release(worker=args.worker)
    held = f" held by {args.worker}" if args.worker is not None else ""
    print(
        f"released {released} reservation(s){held} in {args.queue}: "
        + ("ready again, attempts unchanged" if released else "none was held")
    )
    return EXIT_OK


def cmd_settings(args: argparse.Namespace) -> int:
    with open_database(args) as db:
        settings = [db.queue(args.queue).settings()] if args.queue else db.settings()
    if not settings:
        print(f"no queues (create one with `{PROG} create QUEUE`)")
        return EXIT_OK
    rows = [
        (
            s.queue,
            format_duration(s.visibility_timeout),
            str(s.max_attempts),
            s.dead_letter_queue or "-",
            format_duration(s.history_retention),
            format_duration(s.result_retention),
            "yes" if s.paused else "no",
            format_duration(s.notify_window),
        )
        for s in settings
    ]
    print(
        format_table(
            (
                "queue",
                "visibility timeout",
                "max attempts",
                "dead-letter queue",
                "history retention",
                "result retention",
                "paused",
                "notify window",
            ),
            rows,
            right_aligned=(1, 2, 4, 5, 7),
        )
    )
    return EXIT_OK


def cmd_stats(args: argparse.Namespace) -> int:
    with open_database(args) as db:
        stats = [db.queue(q).stats() for q in dict.fromkeys(args.queue)] if args.queue else db.stats()
        horizon = None if args.json else _horizon(db)
        last_minute = _last_minute(db, [s.queue for s in stats])
        by_kind = _kind_stats(db, args.queue) if args.kinds else None
    if args.json:
        for s in stats:
            print(
                json.dumps(
                    {
                        "queue": s.queue,
                        "ready": s.ready,
                        "delayed": s.delayed,
                        "reserved": s.reserved,
                        "dead": s.dead,
                        "oldest_ready_age_s": s.oldest_ready_age_s,
                        "paused": s.paused,
                        "last_minute": last_minute.get(s.queue),
                        **(
                            {}
                            if by_kind is None
                            else {
                                "kinds": {
                                    k.kind: {"ready": k.ready, "delayed": k.delayed, "reserved": k.reserved}
                                    for k in by_kind
                                    if k.queue == s.queue
                                }
                            }
                        ),
                    }
                )
            )
    elif not stats:
        print(f"no queues (create one with `{PROG} create QUEUE`)")
    else:
        print(format_stats_table(stats, last_minute))
        if by_kind is not None:
            print()
            print(format_kind_stats_table(by_kind) if by_kind else "no messages of any kind")
    if horizon is not None and (horizon.oldest_age_s or 0) >= HORIZON_WARN_S:
        print(f"{PROG}: {format_horizon(horizon)} (docs/operations.md, A long transaction)", file=sys.stderr)
    return EXIT_OK


def _last_minute(db: Any, queues: list[str]) -> dict[str, int | None]:
    """Per queue, the messages that left it in the last minute (committed, dead-lettered, moved or
    popped: queue_throughput, from its history or the results it keeps), None for a queue that
    keeps neither (nothing to tell) or when the account may not read it."""
    if not queues:
        return {}
    try:
        keeping = {
            s.queue
            for s in db.settings()
            if s.history_retention is not None or s.result_retention is not None
        } & set(queues)
        rows = db.throughput(since=dt.timedelta(minutes=1)) if keeping else []
    except errors.QueueError:
        return {}
    done: dict[str, int | None] = {q: (0 if q in keeping else None) for q in queues}
    for r in rows:
        if r.queue in keeping:
            done[r.queue] = (done[r.queue] or 0) + r.committed + r.dead_lettered + r.moved + r.popped
    return done


def _kind_stats(db: Any, queues: list[str]) -> list[Any]:
    """The messages of the queues asked for (every queue when none) by kind: queue_kind_stats, a
    read of every message of each queue, made only when --kinds asks for it."""
    if not queues:
        return db.kind_stats()
    return [k for q in dict.fromkeys(queues) for k in db.queue(q).kind_stats()]


def _horizon(db: Any) -> Any:
    """queue_horizon's row, or None where the account or the schema cannot tell (the stats stand
    without it)."""
    try:
        return db.horizon()
    except errors.QueueError:
        return None


# -- argument parsing -------------------------------------------------------------


def add_create(command: Command) -> None:
    p = command(
        "create",
        cmd_create,
        "create a queue, or change the settings given (the others stay "
        "as they are; --reset puts one back to its default)",
    )
    p.add_argument("queue", metavar="QUEUE")
    p.add_argument(
        "--visibility-timeout",
        type=seconds_arg,
        metavar="S",
        help="seconds a reservation hides a message (new queue: 30)",
    )
    p.add_argument(
        "--max-attempts",
        type=positive_int,
        metavar="N",
        help="deliveries before dead-lettering (new queue: 10)",
    )
    p.add_argument(
        "--dead-letter-queue",
        metavar="Q",
        help="queue that receives exhausted messages (new queue: none, they are dropped)",
    )
    p.add_argument(
        "--history-retention",
        type=seconds_arg,
        metavar="S",
        help="seconds processed messages stay in the history (new queue: none, no history is kept)",
    )
    p.add_argument(
        "--result-retention",
        type=seconds_arg,
        metavar="S",
        help="seconds each finished message's result (state, result, last error) is kept for "
        "`result` (new queue: none, no result is kept; at most 3650 days)",
    )
    p.add_argument(
        "--reset",
        action="append",
        choices=SETTINGS,
        metavar="SETTING",
        help="put SETTING back to its default (repeatable): " + ", ".join(SETTINGS),
    )


def add_bind(command: Command) -> None:
    p = command(
        "bind",
        cmd_bind,
        "bind a topic pattern to a queue (* = one word, # = zero or more words); "
        "prints bound or already bound",
    )
    p.add_argument("pattern", metavar="PATTERN", help="e.g. orders.*.created or orders.#")
    p.add_argument("queue", metavar="QUEUE")


def add_unbind(command: Command) -> None:
    p = command("unbind", cmd_unbind, "remove a binding; exit 1 when there is none")
    p.add_argument("pattern", metavar="PATTERN")
    p.add_argument("queue", metavar="QUEUE")


def add_bindings(command: Command) -> None:
    p = command("bindings", cmd_bindings, "list the topic bindings of one queue or every queue")
    p.add_argument("--queue", metavar="QUEUE", help="one queue (default: all)")


def add_groups(command: Command) -> None:
    p = command(
        "groups",
        cmd_groups,
        "list a queue's FIFO groups: each group's head message (delivered next) and its size",
    )
    p.add_argument("queue", metavar="QUEUE")
    p.add_argument(
        "-n", type=positive_int, metavar="N", help="at most this many groups (default 100, at most 1000)"
    )


def add_group_limit(command: Command) -> None:
    p = command(
        "group-limit",
        cmd_group_limit,
        "up to K messages of a FIFO group in flight at once, started in the group's order (GROUP `*`: "
        "the queue's default for every group without its own; --remove: back to the default, 1) "
        "(admin capability)",
    )
    p.add_argument("queue", metavar="QUEUE")
    p.add_argument(
        "group", metavar="GROUP", help="a group, or '*' for the queue's default (quote it in a shell)"
    )
    p.add_argument("k", metavar="K", nargs="?", type=positive_int, help="1 to 10000")
    p.add_argument(
        "--remove", action="store_true", help="remove the group's own K (GROUP '*': the default's)"
    )


def add_rate(command: Command) -> None:
    p = command(
        "rate",
        cmd_rate,
        "at most N messages of a kind delivered in any window of PER seconds, by every delivery "
        "(reserve, pop, workers); KIND `*`: every kind of the queue together; --remove: no rate "
        "(admin capability)",
    )
    p.add_argument("queue", metavar="QUEUE")
    p.add_argument("kind", metavar="KIND", help="a kind, or '*' for the whole queue (quote it in a shell)")
    p.add_argument("n", metavar="N", nargs="?", type=positive_int, help="1 to 10000")
    p.add_argument(
        "per", metavar="PER", nargs="?", type=seconds_arg, help="seconds, more than 0, at most 86400"
    )
    p.add_argument("--remove", action="store_true", help="remove the rate of KIND")


def add_rates(command: Command) -> None:
    p = command(
        "rates",
        cmd_rates,
        "list the rate limits of one queue or every queue: N per PER, the units used in the last PER "
        "(in window) and when the next is free (kind * = the whole queue's rate)",
    )
    p.add_argument("queue", metavar="QUEUE", nargs="?", help="one queue (default: all)")
    p.add_argument(
        "--json", action="store_true", help="one JSON object per rate (per in seconds, times ISO 8601)"
    )


def add_pause(command: Command) -> None:
    p = command("pause", cmd_pause, "stop handing out messages of a queue (pushes still go in)")
    p.add_argument("queue", metavar="QUEUE")


def add_resume(command: Command) -> None:
    p = command("resume", cmd_resume, "hand out the messages of a paused queue again")
    p.add_argument("queue", metavar="QUEUE")


def add_drop(command: Command) -> None:
    p = command("drop", cmd_drop, "drop a queue and its messages; asks first when it holds messages")
    p.add_argument("queue", metavar="QUEUE")
    p.add_argument(
        "--yes",
        "-y",
        action="store_true",
        help="do not ask (needed without a terminal when the queue holds messages)",
    )


def add_dead_letters(command: Command) -> None:
    p = command(
        "dead-letters",
        cmd_dead_letters,
        "list the messages in a dead-letter queue: where they came from, their attempts and last error",
    )
    p.add_argument("queue", metavar="QUEUE", help="the dead-letter queue")
    p.add_argument("--json", action="store_true", help="one JSON object per message, payload included")


def add_redrive(command: Command) -> None:
    p = command(
        "redrive", cmd_redrive, "move messages of a dead-letter queue back to a queue, attempts reset"
    )
    p.add_argument("dead_queue", metavar="DEAD_QUEUE")
    p.add_argument("to_queue", metavar="TO_QUEUE")
    p.add_argument("-n", type=positive_int, default=1, metavar="N", help="at most this many (default 1)")


def add_release(command: Command) -> None:
    p = command(
        "release",
        cmd_release,
        "hand back the messages of a queue reserved now (by one worker with --worker), deleting "
        "nothing: each is ready at once with its attempts unchanged, and its holder's token no "
        "longer holds; prints how many (admin capability)",
    )
    p.add_argument("queue", metavar="QUEUE")
    p.add_argument(
        "--worker",
        metavar="W",
        help="only the reservations made by this worker name (as `show` and the dashboard name it)",
    )


def add_settings(command: Command) -> None:
    p = command("settings", cmd_settings, "show the settings of one queue or every queue")
    p.add_argument("queue", metavar="QUEUE", nargs="?", help="one queue (default: all)")


def add_stats(command: Command) -> None:
    p = command(
        "stats",
        cmd_stats,
        "show queue depths, and the messages that left each queue in the last minute (a queue that "
        "keeps history or results; - for one that keeps neither). " + STATS_LEGEND,
    )
    p.add_argument("queue", metavar="QUEUE", nargs="*", help="the queues to show (default: all)")
    p.add_argument(
        "--kinds",
        action="store_true",
        help="also the ready, delayed and reserved messages of each task kind (a read of every "
        'message of each queue shown, as the depths are; JSON: a "kinds" object per queue)',
    )
    p.add_argument(
        "--json", action="store_true", help="one JSON object per queue (the table's columns, unformatted)"
    )


PARSERS: dict[str, Callable[[Command], None]] = {
    "create": add_create,
    "bind": add_bind,
    "unbind": add_unbind,
    "bindings": add_bindings,
    "groups": add_groups,
    "group-limit": add_group_limit,
    "rate": add_rate,
    "rates": add_rates,
    "pause": add_pause,
    "resume": add_resume,
    "drop": add_drop,
    "dead-letters": add_dead_letters,
    "redrive": add_redrive,
    "release": add_release,
    "settings": add_settings,
    "stats": add_stats,
}
