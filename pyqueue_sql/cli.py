"""The ``pyqueue-sql`` command: install the schema, print its SQL, work with queues, run the demo.

    pyqueue-sql migrate --dsn postgresql://localhost/app
    pyqueue-sql sql --dialect mysql > pyqueue.sql
    pyqueue-sql create emails --max-attempts 5
    pyqueue-sql push emails user-42 welcome '{"to": "a@example.com"}'
    pyqueue-sql bind 'orders.#' billing
    pyqueue-sql publish orders.eu.created order-7 created '{"order": 7}'
    pyqueue-sql reserve emails -n 10
    pyqueue-sql commit emails user-42 welcome TOKEN
    pyqueue-sql rollback emails user-42 welcome TOKEN --delay 60 --error "smtp timeout"
    pyqueue-sql show emails user-42 welcome
    pyqueue-sql stats
    pyqueue-sql demo
    pyqueue-sql worker myapp.tasks:handle --queue emails --concurrency 8
    pyqueue-sql grant --role shop_web --producer --apply

Every command that talks to a database takes ``--dsn`` (default: $PYQUEUE_DSN).
Exit codes: 0 success; 1 an error (one line on stderr: bad input, unknown
queue, unreachable server, a refused request) or an outcome that did not
happen (a token that no longer holds, a message that is not there); 2 a bad
command line; 130 interrupted (Ctrl-C). ``reserve`` on an empty queue prints
nothing on stdout, says so on stderr and exits 0.
"""

from __future__ import annotations

import _thread
import argparse
import datetime as dt
import json
import os
import sys
import threading
from collections.abc import Callable, Iterable, Sequence
from typing import Any

from . import __version__, dialects, errors, privileges
from .display import (
    describe_error,
    format_age,
    format_duration,
    format_stats_table,
    format_table,
    format_time,
    one_line,
    redact_dsn,
    shorten,
)

DSN_ENV = "PYQUEUE_DSN"
PROG = "pyqueue-sql"

EXIT_OK = 0
EXIT_FAILURE = 1
EXIT_USAGE = 2
EXIT_INTERRUPTED = 130


class UsageError(Exception):
    """A command line that cannot run (exit code 2)."""


# -- commands --------------------------------------------------------------------


def _dsn(args: argparse.Namespace) -> str:
    dsn = args.dsn or os.environ.get(DSN_ENV)
    if not dsn:
        raise UsageError(
            f"no database given: pass --dsn DSN or set {DSN_ENV} "
            "(postgresql://user@host/db or mysql://user@host/db)"
        )
    _check_scheme(dsn)
    return dsn


def _check_scheme(dsn: str) -> None:
    """Refuses a DSN of an unsupported database before any driver sees it."""
    from .dialects import for_dsn

    try:
        for_dsn(dsn)
    except errors.UnsupportedDsnError as exc:
        raise UsageError(str(exc)) from None


def _connect(args: argparse.Namespace):
    from .client import connect

    return connect(_dsn(args))


def _live_messages(migrate: Any, dsn: str) -> int:
    """Messages in pyqueue_message (0 when pyqueue-sql is not installed)."""
    return int(migrate.live_messages(dsn))


def _confirm(question: str) -> bool | None:
    """Asks a yes/no question on the terminal; None when there is no terminal to ask on."""
    stdin = sys.stdin
    if stdin is None or not stdin.isatty():
        return None
    sys.stderr.write(f"{question} [y/N] ")
    sys.stderr.flush()
    answer = stdin.readline()
    return answer.strip().lower() in ("y", "yes")


def _revisions(revisions: Sequence[str]) -> str:
    return ", ".join(revisions) if revisions else "base"


def cmd_migrate(args: argparse.Namespace) -> int:
    dsn = _dsn(args)
    if args.adopt and args.downgrade:
        raise UsageError("--adopt is for upgrades: it records a schema installed from the SQL script")
    try:
        from . import migrate

        if args.downgrade:
            return _migrate_down(migrate, dsn, args)
        return _migrate_up(migrate, dsn, args)
    except KeyboardInterrupt:
        print(f"{PROG}: migrate was interrupted; run it again to resume", file=sys.stderr)
        return EXIT_INTERRUPTED
    except Exception as exc:
        if isinstance(exc, migrate.MigrationInterrupted):
            print(f"{PROG}: migrate was interrupted; run it again to resume", file=sys.stderr)
            return EXIT_INTERRUPTED
        if isinstance(exc, migrate.UnrecordedSchemaError):
            text = one_line(str(exc))
            if "--adopt" not in text:
                text += (
                    " (if it was installed from `pyqueue-sql sql` or by an older release, "
                    "run `pyqueue-sql migrate --adopt` to record it)"
                )
            print(f"{PROG}: error: {text}", file=sys.stderr)
            return EXIT_FAILURE
        raise


def _migrate_up(migrate: Any, dsn: str, args: argparse.Namespace) -> int:
    result = migrate.upgrade(dsn, args.revision or "heads", adopt=args.adopt)
    before, after, adopted = tuple(result.before), tuple(result.after), result.adopted
    if adopted:
        print(f"recorded the existing schema as {adopted}")
        before = (adopted,)
    if before == after:
        print(f"already at {_revisions(after)}")
    elif not before:
        first = _first_revision(migrate)
        print(
            f"{first} -> {_revisions(after)}"
            if first and (first,) != after
            else f"installed {_revisions(after)}"
        )
    else:
        print(f"{_revisions(before)} -> {_revisions(after)}")
    _print_heads(migrate, after)
    return EXIT_OK


def _first_revision(migrate: Any) -> str | None:
    try:
        from alembic.script import ScriptDirectory

        bases = ScriptDirectory.from_config(migrate.alembic_config()).get_bases()
        return bases[0] if len(bases) == 1 else None
    except Exception:
        return None


def _print_heads(migrate: Any, revisions: Sequence[str]) -> None:
    head = migrate.head()
    if not revisions:
        print("revision: none (pyqueue-sql is not installed)")
    for revision in revisions:
        print(f"revision: {revision}" + (" (head)" if revision == head else f" (head is {head})"))


def _migrate_down(migrate: Any, dsn: str, args: argparse.Namespace) -> int:
    revision = args.revision or "base"
    before = tuple(migrate.current(dsn))
    if not before:
        print("nothing to downgrade: pyqueue-sql is not installed")
        return EXIT_OK
    live = _live_messages(migrate, dsn) if revision == "base" else 0
    if live and not args.yes:
        answer = _confirm(f"this removes pyqueue-sql and drops its {live} live message(s); continue?")
        if answer is None:
            raise errors.QueueError(
                f"refusing to drop {live} live message(s) without confirmation: "
                "pass --yes (no terminal to ask on)"
            )
        if not answer:
            print("downgrade cancelled; nothing changed", file=sys.stderr)
            return EXIT_FAILURE
    result = migrate.downgrade(dsn, revision)
    before, after = tuple(result.before), tuple(result.after)
    if before == after:
        print(f"already at {_revisions(after)}")
    else:
        print(f"{_revisions(before)} -> {_revisions(after)}")
    if not after:
        print(
            "removed pyqueue-sql: its tables, views and routines"
            + (f", and {live} message(s)" if live else " (it held no messages)")
        )
    else:
        _print_heads(migrate, after)
    return EXIT_OK


def cmd_sql(args: argparse.Namespace) -> int:
    from .queries import install_script, script

    try:
        text = script(args.dialect, "uninstall.sql") if args.uninstall else install_script(args.dialect)
    except FileNotFoundError as exc:
        raise errors.QueueError(f"this installation is incomplete: {exc}") from None
    if not args.uninstall:
        sys.stdout.write(dialects.for_name(args.dialect).install_note)
    sys.stdout.write(text if text.endswith("\n") else text + "\n")
    return EXIT_OK


def cmd_grant(args: argparse.Namespace) -> int:
    """Prints (default) or runs (--apply) the GRANT/REVOKE statements of a least-privilege role."""
    caps = [c for c in privileges.CAPABILITIES if getattr(args, c)]
    if not caps:
        raise UsageError(
            "name at least one capability: " + " ".join(f"--{c}" for c in privileges.CAPABILITIES)
        )
    dsn = args.dsn or os.environ.get(DSN_ENV)
    if args.apply and not dsn:
        raise UsageError(f"--apply needs a database: pass --dsn DSN or set {DSN_ENV}")
    if dsn:
        _check_scheme(dsn)
        dialect = dialects.for_dsn(dsn).name
        if args.dialect and args.dialect != dialect:
            raise UsageError(f"--dialect {args.dialect} does not match the DSN ({dialect})")
    elif args.dialect:
        dialect = args.dialect
    else:
        raise UsageError(f"pass --dialect (to print) or --dsn DSN / ${DSN_ENV}")
    account = privileges.parse_account(dialect, args.role)
    if not dsn:
        stmts = privileges.statements(dialect, account, caps, schema=args.schema, revoke=args.revoke)
        print("\n".join(privileges.render(dialect, stmts)))
        return EXIT_OK
    connection = dialects.for_name(dialect).connect(dsn)
    try:
        schema = args.schema or privileges.current_schema(dialect, connection)
        stmts = privileges.statements(dialect, account, caps, schema=schema, revoke=args.revoke)
        text = privileges.render(dialect, stmts, connection)
        if args.apply:
            privileges.apply(dialect, connection, stmts)
            print(f"-- applied ({len(stmts)} statements):", file=sys.stderr)
        print("\n".join(text))
    finally:
        connection.close()
    return EXIT_OK


SETTINGS = ("visibility_timeout", "max_attempts", "dead_letter_queue", "history_retention")


def _settings_summary(settings: Any) -> str:
    return (
        f"visibility timeout {format_duration(settings.visibility_timeout)}, "
        f"max attempts {settings.max_attempts}, "
        f"dead-letter queue {settings.dead_letter_queue or '-'}, "
        f"history retention {format_duration(settings.history_retention)}"
    )


def cmd_create(args: argparse.Namespace) -> int:
    """Creates a queue (unset settings: defaults) or changes the settings given (others stay)."""
    with _connect(args) as db:
        queue = db.queue(args.queue)
        try:
            queue.settings()
            existed = True
        except errors.UnknownQueueError:
            existed = False
        with db.transaction():
            queue.create(
                visibility_timeout=args.visibility_timeout,
                max_attempts=args.max_attempts,
                dead_letter_queue=args.dead_letter_queue,
                history_retention=args.history_retention,
            )
            for setting in args.reset or ():
                queue.reset_setting(setting)
        settings = queue.settings()
    print(f"{'updated' if existed else 'created'} {args.queue}: {_settings_summary(settings)}")
    return EXIT_OK


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
    with _connect(args) as db:
        inserted = db.queue(args.queue).push(
            args.key, args.kind, payload, run_at=_run_at(args), priority=args.priority, group=args.group
        )
    print("inserted" if inserted else "duplicate")
    return EXIT_OK


def cmd_publish(args: argparse.Namespace) -> int:
    payload = _payload(args)
    with _connect(args) as db:
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


def cmd_bind(args: argparse.Namespace) -> int:
    with _connect(args) as db:
        new = db.bind(args.pattern, args.queue)
    print(f"{'bound' if new else 'already bound'}: {args.pattern} -> {args.queue}")
    return EXIT_OK


def cmd_unbind(args: argparse.Namespace) -> int:
    with _connect(args) as db:
        removed = db.unbind(args.pattern, args.queue)
    if not removed:
        print(f"{PROG}: no binding {args.pattern} -> {args.queue}", file=sys.stderr)
        return EXIT_FAILURE
    print(f"unbound: {args.pattern} -> {args.queue}")
    return EXIT_OK


def cmd_bindings(args: argparse.Namespace) -> int:
    with _connect(args) as db:
        bindings = db.bindings(args.queue)
    if not bindings:
        print(f"no bindings (bind a topic pattern with `{PROG} bind PATTERN QUEUE`)")
        return EXIT_OK
    rows = [(b.pattern, b.queue, format_time(b.created_at)) for b in bindings]
    print(format_table(("pattern", "queue", "created at"), rows))
    return EXIT_OK


def cmd_groups(args: argparse.Namespace) -> int:
    with _connect(args) as db:
        groups = db.queue(args.queue).groups(n=args.n)
    if not groups:
        print(f"no groups in {args.queue}")
        return EXIT_OK
    rows = [
        (g.group_key, g.head_key or "-", g.head_kind or "-", g.head_state or "-", str(g.messages))
        for g in groups
    ]
    print(
        format_table(("group", "head key", "head kind", "head state", "messages"), rows, right_aligned=(4,))
    )
    return EXIT_OK


def cmd_reserve(args: argparse.Namespace) -> int:
    with _connect(args) as db:
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
        print(f"{args.queue}: no message ready (empty, all delayed or reserved, or paused)", file=sys.stderr)
        return EXIT_OK
    for r in reservations:
        print(
            json.dumps(
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


def _reservation(args: argparse.Namespace) -> Any:
    """The reservation a command line names (queue, key, kind, token): what commit/rollback need."""
    from .client import Reservation

    return Reservation(args.queue, args.key, args.kind, None, args.token, 0, 0, None, None)


def _not_held(args: argparse.Namespace) -> int:
    print(
        f"{PROG}: the reservation of {args.key}/{args.kind} in {args.queue} no longer holds "
        "(expired and taken again, or already committed or rolled back)",
        file=sys.stderr,
    )
    return EXIT_FAILURE


def cmd_commit(args: argparse.Namespace) -> int:
    with _connect(args) as db:
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
    with _connect(args) as db:
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
    with _connect(args) as db:
        removed = db.queue(args.queue).remove(args.key, args.kind)
    if not removed:
        print(f"{PROG}: no message {args.key}/{args.kind} in {args.queue}", file=sys.stderr)
        return EXIT_FAILURE
    print("removed")
    return EXIT_OK


def cmd_pause(args: argparse.Namespace) -> int:
    with _connect(args) as db:
        db.queue(args.queue).pause()
    print(f"paused {args.queue} (reserve hands out nothing until `{PROG} resume {args.queue}`)")
    return EXIT_OK


def cmd_resume(args: argparse.Namespace) -> int:
    with _connect(args) as db:
        db.queue(args.queue).resume()
    print(f"resumed {args.queue}")
    return EXIT_OK


def cmd_drop(args: argparse.Namespace) -> int:
    with _connect(args) as db:
        queue = db.queue(args.queue)
        s = queue.stats()
        held = s.ready + s.delayed + s.reserved
        if held and not args.yes:
            answer = _confirm(
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
    with _connect(args) as db:
        letters = db.queue(args.queue).dead_letters()
    if args.json:
        for d in letters:
            print(
                json.dumps(
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
    with _connect(args) as db:
        moved = db.queue(args.dead_queue).redrive(args.to_queue, n=args.n)
    print(f"redrove {moved} message(s) from {args.dead_queue} to {args.to_queue}")
    return EXIT_OK


def _field(obj: Any, *names: str) -> Any:
    for name in names:
        if hasattr(obj, name):
            return getattr(obj, name)
    return None


def cmd_show(args: argparse.Namespace) -> int:
    with _connect(args) as db:
        queue = db.queue(args.queue)
        message = queue.message(args.key, args.kind)
        history = queue.message_history(args.key, args.kind)
    if message is None and not history:
        print(
            f"{PROG}: no message {args.key}/{args.kind} in {args.queue}, and no history of one",
            file=sys.stderr,
        )
        return EXIT_FAILURE
    print(f"queue:        {args.queue}")
    print(f"key / kind:   {args.key} / {args.kind}")
    if message is None:
        print("state:        gone (no longer in the queue; see its history below)")
    else:
        print(f"state:        {message.state}")
        print(f"attempts:     {message.attempts}")
        print(f"priority:     {message.priority}")
        print(f"created at:   {format_time(message.created_at)}")
        print(f"scheduled at: {format_time(message.scheduled_at)}")
        print(f"reserved by:  {message.reserved_by or '-'}")
        dead_from = _field(message, "dead_from", "from_queue")
        if dead_from:
            print(f"dead from:    {dead_from}")
        print(f"last error:   {message.last_error if message.last_error is not None else '-'}")
        print(f"payload:      {json.dumps(message.payload)}")
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


def cmd_settings(args: argparse.Namespace) -> int:
    with _connect(args) as db:
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
                "paused",
                "notify window",
            ),
            rows,
            right_aligned=(1, 2, 4, 6),
        )
    )
    return EXIT_OK


def cmd_stats(args: argparse.Namespace) -> int:
    with _connect(args) as db:
        stats = [db.queue(args.queue).stats()] if args.queue else db.stats()
    if not stats:
        print("no queues (create one with `pyqueue-sql create QUEUE`)")
    else:
        print(format_stats_table(stats))
    return EXIT_OK


DEFAULT_STALE_AFTER_S = 60.0


def format_workers_table(workers: Iterable[Any], stale_after: float = DEFAULT_STALE_AFTER_S) -> str:
    """Registered workers (pyqueue_sql.WorkerInfo) as an aligned text table; ``state`` is
    "stale" when the last heartbeat is older than stale_after seconds."""
    header = ("id", "name", "host", "pid", "queues", "started", "last heartbeat", "state")
    rows = [
        (
            str(w.worker_id),
            w.name,
            w.host or "-",
            "-" if w.pid is None else str(w.pid),
            ",".join(w.queues) if w.queues else "-",
            w.started_at.strftime("%Y-%m-%d %H:%M:%S"),
            format_age(w.heartbeat_age_s) + " ago",
            "stale" if w.heartbeat_age_s > stale_after else "ok",
        )
        for w in workers
    ]
    return format_table(header, rows)


def cmd_workers(args: argparse.Namespace) -> int:
    with _connect(args) as db:
        if args.release_older_than is not None:
            released = db.release_dead_workers(args.release_older_than)
            print(f"released {released} message(s) of workers silent for over {args.release_older_than:g}s")
        workers = db.workers()
    if not workers:
        print("no workers registered")
        return EXIT_OK
    print(format_workers_table(workers, args.stale_after))
    stale = sum(w.heartbeat_age_s > args.stale_after for w in workers)
    if stale:
        print(
            f"{stale} stale worker(s): no heartbeat for over {args.stale_after:g}s (stopped, hung or "
            f"cut off; `{PROG} workers --release-older-than S` makes their messages ready)",
            file=sys.stderr,
        )
    return EXIT_OK


def cmd_demo(args: argparse.Namespace) -> int:
    from .demo import run_demo

    dsn = args.dsn or os.environ.get(DSN_ENV) or None
    if dsn:
        _check_scheme(dsn)
    return run_demo(dsn, messages=args.messages, timeout=args.timeout, data_dir=args.data_dir)


def _load_handler(spec: str) -> Callable[[Any], Any]:
    import importlib

    module_name, sep, attr = spec.partition(":")
    if not sep or not module_name or not attr:
        raise UsageError(f"handler must be module:function, not {spec!r}")
    if os.getcwd() not in sys.path and "" not in sys.path:
        sys.path.insert(0, os.getcwd())  # like `python -m`: modules of the current directory
    try:
        target: Any = importlib.import_module(module_name)
    except ImportError as exc:
        raise UsageError(f"cannot import {module_name!r}: {exc}") from None
    for part in attr.split("."):
        try:
            target = getattr(target, part)
        except AttributeError:
            raise UsageError(f"{module_name!r} has no attribute {attr!r}") from None
    if not callable(target):
        raise UsageError(f"{spec} is not callable")
    return target


class _JsonLogFormatter:
    """One JSON object per log line: time, level, message and the record's extra fields."""

    _STANDARD = set(vars(__import__("logging").LogRecord("", 0, "", 0, "", (), None))) | {
        "message",
        "asctime",
        "taskName",
    }

    def format(self, record: Any) -> str:
        entry = {
            "ts": dt.datetime.fromtimestamp(record.created, dt.timezone.utc).isoformat(
                timespec="milliseconds"
            ),
            "level": record.levelname.lower(),
            "msg": record.getMessage(),
        }
        entry.update({k: v for k, v in vars(record).items() if k not in self._STANDARD})
        if record.exc_info:
            import traceback

            entry["exc"] = "".join(traceback.format_exception(*record.exc_info))
        return json.dumps(entry, default=str)


class _TextLogFormatter:
    """time level message key=value...; extras whose value the message already shows are left out."""

    _STANDARD = _JsonLogFormatter._STANDARD

    def format(self, record: Any) -> str:
        message = record.getMessage()
        extra = " ".join(
            f"{k}={v}"
            for k, v in vars(record).items()
            if k not in self._STANDARD and not (isinstance(v, str) and v and v in message)
        )
        text = f"{dt.datetime.now().strftime('%H:%M:%S.%f')[:-3]} {record.levelname.lower():7} {message}"
        text = f"{text} {extra}".rstrip()
        if record.exc_info:
            import traceback

            text += "\n" + "".join(traceback.format_exception(*record.exc_info)).rstrip()
        return text


class StatusLine:
    """A live status line at the bottom of a terminal stream, with log records printed above it.

    Every write to the stream goes through ``lock``: a log record first clears the
    status line (``\\r`` + erase to end of line), is written with its newline, and
    the status is drawn again after it, so the two never share a line. The text is
    computed outside the lock (``update``), so a record logged while the worker
    holds one of its own locks never waits for the worker.
    """

    CLEAR = "\r\x1b[K"

    def __init__(self, stream: Any) -> None:
        import threading

        self.stream = stream
        self.lock = threading.RLock()
        self.text = ""
        self.shown = False
        self.active = True

    def update(self, text: str) -> None:
        with self.lock:
            self.text = text
            self._draw()

    def _width(self) -> int:
        try:
            return os.get_terminal_size(self.stream.fileno()).columns
        except (OSError, ValueError, AttributeError):
            return 0  # not a terminal: no limit

    def _draw(self) -> None:
        if self.active and self.text:
            width = self._width()
            # a line longer than the terminal would wrap, and \r then clears only its last row
            text = self.text if not width or len(self.text) < width else self.text[: width - 1]
            self.stream.write(self.CLEAR + text)
            self.stream.flush()
            self.shown = True

    def clear(self) -> None:
        if self.shown:
            self.stream.write(self.CLEAR)
            self.shown = False

    def redraw(self) -> None:
        self._draw()

    def finish(self, text: str) -> None:
        """The last status, ended with a newline; nothing is drawn after it."""
        with self.lock:
            self.clear()
            self.stream.write(text + "\n")
            self.stream.flush()
            self.active = False


def _log_handler(stream: Any, status: StatusLine | None) -> Any:
    import logging

    class Handler(logging.StreamHandler):  # type: ignore[type-arg]
        def emit(self, record: logging.LogRecord) -> None:
            if status is None:
                super().emit(record)
                return
            with status.lock:
                status.clear()
                super().emit(record)
                status.redraw()

    return Handler(stream)


def cmd_worker(args: argparse.Namespace) -> int:
    import asyncio
    import inspect
    import logging
    import threading

    from .worker import RetryPolicy, Worker

    dsn = _dsn(args)
    fn = _load_handler(args.handler_spec)
    # An `async def` handler runs as asyncio tasks on AsyncWorker; anything else on Worker's threads.
    is_async = inspect.iscoroutinefunction(fn)
    if is_async:
        from .aio.worker import AsyncWorker as worker_class
    else:
        worker_class = Worker
    show_status = args.status if args.status is not None else sys.stderr.isatty()
    status = StatusLine(sys.stderr) if show_status else None
    handler = _log_handler(sys.stderr, status)
    handler.setFormatter(_JsonLogFormatter() if args.log_format == "json" else _TextLogFormatter())  # type: ignore[arg-type]
    logger = logging.getLogger("pyqueue_sql")
    logger.addHandler(handler)
    logger.setLevel(getattr(logging, args.log_level.upper()))
    try:
        try:
            retry = RetryPolicy(
                base=args.retry_base,
                factor=args.retry_factor,
                max_delay=args.retry_max,
                jitter=args.retry_jitter,
            )
            worker = worker_class(
                dsn,
                concurrency=args.concurrency,
                name=args.name,
                lease=args.lease,
                poll_fallback=args.poll_fallback,
                shutdown_timeout=args.shutdown_timeout,
                register=args.register,
                release_dead_after=args.release_dead_after,
            )
            for queue in args.queue:
                for kind in args.kind or [None]:
                    worker.add_handler(queue, fn, kind, retry=retry)
        except errors.InvalidArgumentError as exc:
            raise UsageError(str(exc)) from None
        metrics = _worker_metrics(worker, args)
        finished = threading.Event()
        if status is not None:

            def show() -> None:
                while not finished.wait(1.0):
                    status.update(worker.status_line())

            threading.Thread(target=show, daemon=True, name="pyqueue-status").start()
        try:
            clean = asyncio.run(worker.run()) if is_async else worker.run()
        finally:
            finished.set()
            if metrics is not None:
                metrics.close()
            if status is not None:
                status.finish(worker.status_line())
    finally:
        logger.removeHandler(handler)
    if clean is False:
        unfinished = list(getattr(worker, "unfinished", ()) or ())
        listed = (
            (": " + ", ".join(unfinished[:10]) + (", ..." if len(unfinished) > 10 else ""))
            if unfinished
            else ""
        )
        print(
            f"{PROG}: error: {len(unfinished) or 'some'} handler(s) still running when the worker stopped"
            f"{listed}; their messages come back when their lease ends",
            file=sys.stderr,
        )
        return EXIT_FAILURE
    return EXIT_OK


def _worker_metrics(worker: Any, args: argparse.Namespace) -> Any:
    """WorkerMetrics served on --metrics-host:--metrics-port, or None without --metrics-port."""
    if args.metrics_port is None:
        return None
    try:
        from .metrics import WorkerMetrics
    except ImportError as exc:
        raise UsageError(
            f"--metrics-port needs prometheus-client: pip install 'pyqueue-sql[metrics]' ({exc})"
        ) from None
    metrics = WorkerMetrics(worker)
    try:
        port = metrics.serve(args.metrics_port, args.metrics_host)
    except OSError as exc:
        metrics.close()
        raise UsageError(f"cannot serve metrics on {args.metrics_host}:{args.metrics_port}: {exc}") from None
    print(f"{PROG}: metrics on http://{args.metrics_host}:{port}/metrics", file=sys.stderr)
    return metrics


def cmd_dashboard(args: argparse.Namespace) -> int:
    try:
        from .dashboard import serve
    except ImportError as exc:
        print(
            f"{PROG}: error: the dashboard needs its extra: pip install 'pyqueue-sql[dashboard]' ({exc})",
            file=sys.stderr,
        )
        return EXIT_FAILURE
    dsn = _dsn(args)
    token = args.token if args.token is not None else os.environ.get("PYQUEUE_DASHBOARD_TOKEN") or None
    where = f"http://{args.host}:{args.port}/"
    print(
        f"{PROG}: dashboard of {redact_dsn(dsn)} on {where}"
        + (" (read-only)" if args.read_only else "")
        + (" (token required)" if token else ""),
        file=sys.stderr,
    )
    serve(dsn, host=args.host, port=args.port, read_only=args.read_only, token=token)
    return EXIT_OK


# -- argument parsing -------------------------------------------------------------


def _positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not an integer: {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1: {text}")
    return value


def _seconds(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number of seconds: {text!r}") from None
    if value != value or value in (float("inf"), float("-inf")):
        raise argparse.ArgumentTypeError(f"not a finite number of seconds: {text!r}")
    return value


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog=PROG,
        description="A durable message queue inside your PostgreSQL or MySQL/MariaDB database.",
        epilog=f"Commands that use a database take --dsn DSN (default: ${DSN_ENV}). Exit codes: 0 done; "
        "1 an error (one line on stderr) or an outcome that did not happen (a token that no longer "
        "holds, a message that is not there; `worker`: handlers still running when it stopped); "
        "2 a bad command line; 130 interrupted.",
    )
    parser.add_argument("--version", action="version", version=f"{PROG} {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)

    def command(
        name: str, handler: Callable[[argparse.Namespace], int], help: str, dsn: bool = True
    ) -> argparse.ArgumentParser:
        p = sub.add_parser(name, help=help, description=help)
        if dsn:
            p.add_argument("--dsn", help=f"postgresql://... or mysql://... (default: ${DSN_ENV})")
        p.set_defaults(handler=handler)
        return p

    p = command(
        "migrate",
        cmd_migrate,
        "install or upgrade (or downgrade) the pyqueue-sql schema; prints "
        'what it applied ("0001_core -> 0004_errors_and_safety" or "already at ...")',
    )
    p.add_argument(
        "--revision",
        help="target revision (default: heads; with --downgrade: base, "
        "which removes pyqueue-sql and every message)",
    )
    p.add_argument(
        "--downgrade",
        action="store_true",
        help="go back to --revision instead of up; asks "
        "before dropping live messages (refuses without a terminal unless --yes)",
    )
    p.add_argument(
        "--adopt",
        action="store_true",
        help="record a schema installed from `pyqueue-sql sql` (or by an older release) after "
        "checking that it matches a known revision, then upgrade it",
    )
    p.add_argument("--yes", "-y", action="store_true", help="do not ask before dropping live messages")
    p = command("sql", cmd_sql, "print the schema SQL, for use with your own migration tool", dsn=False)
    p.add_argument("--dialect", required=True, choices=dialects.NAMES)
    p.add_argument("--uninstall", action="store_true", help="print the SQL that removes the schema")

    p = command(
        "grant",
        cmd_grant,
        "print (or --apply) the GRANTs that let an existing role or account call "
        "the routines of some capabilities, and nothing else (README: Least privilege)",
    )
    p.add_argument(
        "--role",
        required=True,
        metavar="NAME",
        help="PostgreSQL role, or MySQL account user@host (host %% when omitted; name@ for a "
        "MariaDB role); never created here: a GRANT to a missing one fails",
    )
    for cap, what in privileges.DESCRIPTIONS.items():
        p.add_argument(f"--{cap}", action="store_true", help=what)
    p.add_argument("--revoke", action="store_true", help="REVOKE these capabilities instead")
    p.add_argument("--apply", action="store_true", help="run the statements (default: print them)")
    p.add_argument("--dialect", choices=dialects.NAMES, help="the SQL to print, without a database")
    p.add_argument(
        "--schema",
        help="PostgreSQL schema / MySQL database of the routines "
        "(default: the connection's current one; unqualified without --dsn)",
    )

    p = command(
        "create",
        cmd_create,
        "create a queue, or change the settings given (the others stay "
        "as they are; --reset puts one back to its default)",
    )
    p.add_argument("queue", metavar="QUEUE")
    p.add_argument(
        "--visibility-timeout",
        type=_seconds,
        metavar="S",
        help="seconds a reservation hides a message (new queue: 30)",
    )
    p.add_argument(
        "--max-attempts",
        type=_positive_int,
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
        type=_seconds,
        metavar="S",
        help="seconds processed messages stay in the history (new queue: none, no history is kept)",
    )
    p.add_argument(
        "--reset",
        action="append",
        choices=SETTINGS,
        metavar="SETTING",
        help="put SETTING back to its default (repeatable): " + ", ".join(SETTINGS),
    )
    p = command("push", cmd_push, "push one message; prints inserted or duplicate")
    p.add_argument("queue", metavar="QUEUE")
    p.add_argument("key", metavar="KEY", help="dedup key")
    p.add_argument("kind", metavar="KIND", help="payload type")
    p.add_argument("payload", metavar="PAYLOAD_JSON", help="the payload as JSON text")
    p.add_argument("--run-in", type=_seconds, metavar="SECONDS", help="deliver no earlier than this from now")
    p.add_argument("--priority", type=int, metavar="N", help="higher is served first (default 0)")
    p.add_argument(
        "--group",
        metavar="G",
        help="FIFO group: the group's messages are delivered one at a time, in run time and push order",
    )

    p = command(
        "publish",
        cmd_publish,
        "push one message into every queue bound to a pattern matching TOPIC; prints how many got it",
    )
    p.add_argument("topic", metavar="TOPIC", help="dot-separated words, e.g. orders.eu.created")
    p.add_argument("key", metavar="KEY", help="dedup key (per queue)")
    p.add_argument("kind", metavar="KIND", help="payload type")
    p.add_argument("payload", metavar="PAYLOAD_JSON", help="the payload as JSON text")
    p.add_argument("--run-in", type=_seconds, metavar="SECONDS", help="deliver no earlier than this from now")
    p.add_argument("--priority", type=int, metavar="N", help="higher is served first (default 0)")

    p = command(
        "bind",
        cmd_bind,
        "bind a topic pattern to a queue (* = one word, # = zero or more words); "
        "prints bound or already bound",
    )
    p.add_argument("pattern", metavar="PATTERN", help="e.g. orders.*.created or orders.#")
    p.add_argument("queue", metavar="QUEUE")
    p = command("unbind", cmd_unbind, "remove a binding; exit 1 when there is none")
    p.add_argument("pattern", metavar="PATTERN")
    p.add_argument("queue", metavar="QUEUE")
    p = command("bindings", cmd_bindings, "list the topic bindings of one queue or every queue")
    p.add_argument("--queue", metavar="QUEUE", help="one queue (default: all)")
    p = command(
        "groups",
        cmd_groups,
        "list a queue's FIFO groups: each group's head message (delivered next) and its size",
    )
    p.add_argument("queue", metavar="QUEUE")
    p.add_argument(
        "-n", type=_positive_int, metavar="N", help="at most this many groups (default 100, at most 1000)"
    )

    p = command(
        "reserve",
        cmd_reserve,
        "reserve messages; prints one JSON line per message (nothing, and a note on stderr, when none is ready; exit 0)",
    )
    p.add_argument("queue", metavar="QUEUE")
    p.add_argument("-n", type=_positive_int, default=1, metavar="N", help="at most this many (default 1)")
    p.add_argument(
        "--timeout",
        type=_seconds,
        metavar="S",
        help="reservation length in seconds (default: the queue's visibility timeout)",
    )
    p.add_argument("--commit", action="store_true", help="commit (delete) them right away")

    def message_args(p: argparse.ArgumentParser, token: bool = False) -> None:
        p.add_argument("queue", metavar="QUEUE")
        p.add_argument("key", metavar="KEY")
        p.add_argument("kind", metavar="KIND")
        if token:
            p.add_argument("token", metavar="TOKEN", help="the token `reserve` printed")

    p = command(
        "commit",
        cmd_commit,
        "commit (delete) a reserved message; exit 1 when the reservation no longer holds",
    )
    message_args(p, token=True)

    p = command(
        "rollback",
        cmd_rollback,
        "give a reserved message back (dead-lettered after max attempts); "
        "with --error record why and print the outcome",
    )
    message_args(p, token=True)
    p.add_argument(
        "--delay", type=_seconds, metavar="S", help="deliver again no earlier than this (default 0)"
    )
    p.add_argument(
        "--error",
        metavar="TEXT",
        help="the error to record as the message's last error; prints retry, dead-lettered or dropped",
    )

    p = command("remove", cmd_remove, "delete a message whatever its state; exit 1 when there is none")
    message_args(p)

    p = command("show", cmd_show, "a message's state, attempts, last error and payload, and its history rows")
    message_args(p)

    p = command("pause", cmd_pause, "stop handing out messages of a queue (pushes still go in)")
    p.add_argument("queue", metavar="QUEUE")
    p = command("resume", cmd_resume, "hand out the messages of a paused queue again")
    p.add_argument("queue", metavar="QUEUE")

    p = command("drop", cmd_drop, "drop a queue and its messages; asks first when it holds messages")
    p.add_argument("queue", metavar="QUEUE")
    p.add_argument(
        "--yes",
        "-y",
        action="store_true",
        help="do not ask (needed without a terminal when the queue holds messages)",
    )

    p = command(
        "dead-letters",
        cmd_dead_letters,
        "list the messages in a dead-letter queue: where they came from, their attempts and last error",
    )
    p.add_argument("queue", metavar="QUEUE", help="the dead-letter queue")
    p.add_argument("--json", action="store_true", help="one JSON object per message, payload included")

    p = command(
        "redrive", cmd_redrive, "move messages of a dead-letter queue back to a queue, attempts reset"
    )
    p.add_argument("dead_queue", metavar="DEAD_QUEUE")
    p.add_argument("to_queue", metavar="TO_QUEUE")
    p.add_argument("-n", type=_positive_int, default=1, metavar="N", help="at most this many (default 1)")

    p = command("settings", cmd_settings, "show the settings of one queue or every queue")
    p.add_argument("queue", metavar="QUEUE", nargs="?", help="one queue (default: all)")

    p = command("stats", cmd_stats, "show queue depths")
    p.add_argument("queue", metavar="QUEUE", nargs="?", help="one queue (default: all)")

    p = command("workers", cmd_workers, "list the registered workers and their last heartbeat")
    p.add_argument(
        "--release-older-than",
        type=_seconds,
        metavar="S",
        help="first remove workers silent for over S seconds and make their messages ready",
    )

    p.add_argument(
        "--stale-after",
        type=_seconds,
        default=DEFAULT_STALE_AFTER_S,
        metavar="S",
        help="mark a worker stale when its last heartbeat is older than this (default "
        f"{DEFAULT_STALE_AFTER_S:g}; workers heartbeat every lease/3, 10 s with the default lease)",
    )

    p = command(
        "demo",
        cmd_demo,
        "run producers and consumers against a demo queue "
        "(an embedded PostgreSQL unless --dsn / $PYQUEUE_DSN is set)",
    )
    p.add_argument(
        "--messages", type=_positive_int, default=4000, metavar="N", help="messages to push (default 4000)"
    )
    p.add_argument(
        "--timeout",
        type=_seconds,
        default=120.0,
        metavar="S",
        help="give up after this many seconds (default 120)",
    )
    p.add_argument(
        "--data-dir", metavar="DIR", help="embedded PostgreSQL data directory (default .pyqueue-demo/pgdata)"
    )

    p = command(
        "worker",
        cmd_worker,
        "run a handler (a function or an async def) for the messages of one or more queues "
        "until SIGTERM/SIGINT (a second one stops at once); exit 1 when handlers were still running "
        "at the shutdown deadline",
    )
    p.add_argument(
        "handler_spec",
        metavar="MODULE:FUNCTION",
        help="the handler, called with one pyqueue_sql.worker.Job per message",
    )
    p.add_argument(
        "--queue", "-q", action="append", required=True, metavar="Q", help="queue to serve (repeatable)"
    )
    p.add_argument(
        "--kind",
        action="append",
        metavar="KIND",
        help="only messages of this kind (repeatable; default: every kind)",
    )
    p.add_argument(
        "--concurrency",
        "-c",
        type=_positive_int,
        default=4,
        metavar="N",
        help="messages handled at once, one thread each (an async def handler: one asyncio task each) "
        "(default 4)",
    )
    p.add_argument("--name", help="worker name recorded on reserved messages (default host:pid)")
    p.add_argument(
        "--lease",
        type=_seconds,
        default=30.0,
        metavar="S",
        help="reservation length; a heartbeat extends it every S/3 while a handler runs (default 30)",
    )
    p.add_argument(
        "--poll-fallback",
        type=_seconds,
        metavar="S",
        help="PostgreSQL: longest wait for a NOTIFY before looking anyway (default 5); "
        "MySQL waits in 1 s long polls inside the server",
    )
    p.add_argument(
        "--shutdown-timeout",
        type=_seconds,
        default=30.0,
        metavar="S",
        help="on SIGTERM/SIGINT, how long running handlers may take to finish (default 30); "
        "a second signal stops at once",
    )
    p.add_argument(
        "--register",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="register in the worker registry (`pyqueue-sql workers`), heartbeat it and "
        "deregister on stop (default on)",
    )
    p.add_argument(
        "--release-dead-after",
        type=_seconds,
        metavar="S",
        help="each heartbeat, release the messages of workers silent for over S seconds "
        "(default off; S must be at least every worker's lease)",
    )
    p.add_argument(
        "--retry-base",
        type=_seconds,
        default=1.0,
        metavar="S",
        help="first retry delay after a handler exception (default 1)",
    )
    p.add_argument("--retry-factor", type=float, default=2.0, metavar="F", help="backoff factor (default 2)")
    p.add_argument(
        "--retry-max", type=_seconds, default=300.0, metavar="S", help="longest retry delay (default 300)"
    )
    p.add_argument(
        "--retry-jitter",
        type=float,
        default=0.2,
        metavar="J",
        help="random +-fraction applied to each delay (default 0.2)",
    )
    p.add_argument("--log-format", choices=("text", "json"), default="text")
    p.add_argument("--log-level", choices=("debug", "info", "warning", "error"), default="info")
    p.add_argument(
        "--metrics-port",
        type=int,
        metavar="N",
        help="serve Prometheus metrics on http://HOST:N/metrics (the metrics extra)",
    )
    p.add_argument(
        "--metrics-host",
        default="127.0.0.1",
        metavar="HOST",
        help="address for --metrics-port (default 127.0.0.1)",
    )
    p.add_argument(
        "--status",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="a live status line at the bottom of stderr, log lines printed above it "
        "(default: when stderr is a terminal)",
    )

    p = command(
        "dashboard",
        cmd_dashboard,
        "a live web dashboard of the queues, dead letters, workers and schedules, with /metrics "
        "(the dashboard extra; docs/dashboard.md)",
    )
    p.add_argument("--host", default="127.0.0.1", help="address to listen on (default 127.0.0.1)")
    p.add_argument("--port", type=int, default=8080, help="port (default 8080)")
    p.add_argument(
        "--read-only", action="store_true", help="offer and accept no action (pause, redrive, remove...)"
    )
    p.add_argument(
        "--token",
        help="require this access token (login form, ?token= once, or Authorization: Bearer); "
        "default: $PYQUEUE_DASHBOARD_TOKEN",
    )
    return parser


def _deliver_interrupts_from_finalizers(previous: Callable[[Any], None]) -> Callable[[Any], None]:
    """A sys.unraisablehook. A Ctrl-C that arrives while a finalizer runs (a driver result's
    ``__del__``, say) cannot propagate from there: Python would print it as an ignored exception
    with a traceback and carry on as if no key had been pressed. Signal it again instead, from a
    thread a moment later (signalled from here, it would land in this hook), so that it interrupts
    the command once the finalizer has returned, as any other Ctrl-C does (exit 130)."""

    def hook(unraisable: Any) -> None:
        if isinstance(unraisable.exc_value, KeyboardInterrupt):
            again = threading.Timer(0.05, _thread.interrupt_main)
            again.daemon = True
            again.start()
            return
        previous(unraisable)

    return hook


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    previous_hook = sys.unraisablehook
    sys.unraisablehook = _deliver_interrupts_from_finalizers(previous_hook)
    try:
        return args.handler(args)
    except UsageError as exc:
        print(f"{PROG}: error: {exc}", file=sys.stderr)
        return EXIT_USAGE
    except KeyboardInterrupt:
        print(f"{PROG}: interrupted", file=sys.stderr)
        return EXIT_INTERRUPTED
    except BrokenPipeError:
        # `pyqueue-sql sql ... | head`: the reader left; nothing left to say.
        # Point stdout at /dev/null so the flush at exit does not fail again.
        try:
            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        except (OSError, ValueError):
            pass
        return EXIT_OK
    except Exception as exc:
        message = describe_error(exc)
        if message is None:
            raise
        print(f"{PROG}: error: {message}", file=sys.stderr)
        return EXIT_FAILURE
    finally:
        sys.unraisablehook = previous_hook


if __name__ == "__main__":
    sys.exit(main())
