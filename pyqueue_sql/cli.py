"""The ``pyqueue-sql`` command: install the schema, print its SQL, poke at queues, run the demo.

    pyqueue-sql migrate --dsn postgresql://localhost/app
    pyqueue-sql sql --dialect mysql > pyqueue.sql
    pyqueue-sql create emails --max-attempts 5
    pyqueue-sql push emails user-42 welcome '{"to": "a@example.com"}'
    pyqueue-sql reserve emails -n 10 --commit
    pyqueue-sql stats
    pyqueue-sql demo
    pyqueue-sql worker myapp.tasks:handle --queue emails --concurrency 8
    pyqueue-sql grant --role shop_web --producer --apply

Every command that talks to a database takes ``--dsn`` (default: $PYQUEUE_DSN).
User errors (bad input, unknown queue, unreachable server) print one line on
stderr and exit non-zero: 2 for a bad command line, 1 for anything else.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import sys
from typing import Any, Callable, Iterable, Sequence

from . import __version__, errors

DSN_ENV = "PYQUEUE_DSN"
PROG = "pyqueue-sql"

EXIT_OK = 0
EXIT_FAILURE = 1
EXIT_USAGE = 2
EXIT_INTERRUPTED = 130


class UsageError(Exception):
    """A command line that cannot run (exit code 2)."""


# -- helpers shared with the demo ------------------------------------------------

def format_age(seconds: float | None) -> str:
    if seconds is None:
        return "-"
    if seconds < 60:
        return f"{seconds:.1f}s"
    minutes, secs = divmod(int(seconds), 60)
    if minutes < 60:
        return f"{minutes}m{secs:02d}s"
    hours, minutes = divmod(minutes, 60)
    if hours < 24:
        return f"{hours}h{minutes:02d}m"
    days, hours = divmod(hours, 24)
    return f"{days}d{hours:02d}h"


def format_stats_table(stats: Iterable[Any]) -> str:
    """The stats of several queues (pyqueue_sql.QueueStats) as an aligned text table."""
    header = ("queue", "ready", "delayed", "reserved", "dead", "oldest ready age", "paused")
    rows = [
        (s.queue, str(s.ready), str(s.delayed), str(s.reserved), str(s.dead),
         format_age(s.oldest_ready_age_s), "yes" if s.paused else "no")
        for s in stats
    ]
    widths = [max(len(row[i]) for row in [header, *rows]) for i in range(len(header))]
    left_aligned = {0, 6}

    def line(cells: Sequence[str]) -> str:
        return "  ".join(
            cell.ljust(widths[i]) if i in left_aligned else cell.rjust(widths[i])
            for i, cell in enumerate(cells)
        ).rstrip()

    return "\n".join([line(header), line(["-" * w for w in widths]), *(line(r) for r in rows)])


def redact_dsn(dsn: str) -> str:
    """The DSN with its password replaced by ***, for printing."""
    scheme, sep, rest = dsn.partition("://")
    if not sep:
        return dsn
    netloc, slash, tail = rest.partition("/")
    userinfo, at, hostport = netloc.rpartition("@")
    if at and ":" in userinfo:
        user, _, password = userinfo.partition(":")
        if password:
            netloc = f"{user}:***@{hostport}"
    return f"{scheme}{sep}{netloc}{slash}{tail}"


def one_line(text: str) -> str:
    return " ".join(str(text).split())


def describe_error(exc: BaseException) -> str | None:
    """A one-line message for errors a user can cause (bad input, unreachable or
    misconfigured server, unknown revision); None for a bug worth a traceback."""
    from .embedded import EmbeddedPostgresError

    if isinstance(exc, (errors.QueueError, EmbeddedPostgresError)):
        return one_line(str(exc))
    modules = {cls.__module__.split(".", 1)[0] for cls in type(exc).__mro__}
    if "sqlalchemy" in modules and getattr(exc, "orig", None) is not None:
        return describe_error(exc.orig)  # a driver error wrapped by SQLAlchemy (migrate)
    if "pymysql" in modules:
        if len(exc.args) >= 2:
            return one_line(f"MySQL error {exc.args[0]}: {exc.args[1]}")
        return one_line(f"MySQL error: {exc}")
    if "psycopg" in modules:
        diag = getattr(exc, "diag", None)  # the server's own message, without DETAIL/CONTEXT
        primary = getattr(diag, "message_primary", None)
        return one_line(f"PostgreSQL error: {primary or exc}")
    if modules & {"sqlalchemy", "alembic"}:
        return one_line(str(exc))
    if isinstance(exc, FileNotFoundError) and exc.filename:
        return one_line(f"missing file {exc.filename} (is this installation complete?)")
    if isinstance(exc, ConnectionError):
        return one_line(f"cannot connect: {exc}")
    return None


# -- commands --------------------------------------------------------------------

def _dsn(args: argparse.Namespace) -> str:
    dsn = args.dsn or os.environ.get(DSN_ENV)
    if not dsn:
        raise UsageError(f"no database given: pass --dsn DSN or set {DSN_ENV} "
                         "(postgresql://user@host/db or mysql://user@host/db)")
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


def cmd_migrate(args: argparse.Namespace) -> int:
    from . import migrate

    dsn = _dsn(args)
    if args.downgrade:
        migrate.downgrade(dsn, args.revision or "base")
    else:
        migrate.upgrade(dsn, args.revision or "heads")
    revisions = migrate.current(dsn)
    head = migrate.head()
    if not revisions:
        print("revision: none (pyqueue-sql is not installed)")
    for revision in revisions:
        print(f"revision: {revision}" + (" (head)" if revision == head else f" (head is {head})"))
    return EXIT_OK


def cmd_sql(args: argparse.Namespace) -> int:
    from .queries import install_script, script

    try:
        text = script(args.dialect, "uninstall.sql") if args.uninstall else install_script(args.dialect)
    except FileNotFoundError as exc:
        raise errors.QueueError(f"this installation is incomplete: {exc}") from None
    if args.dialect == "postgresql" and not args.uninstall:
        sys.stdout.write(POSTGRESQL_INSTALL_NOTE)
    sys.stdout.write(text if text.endswith("\n") else text + "\n")
    return EXIT_OK


POSTGRESQL_INSTALL_NOTE = """\
-- pyqueue-sql install script (PostgreSQL). Run it in ONE transaction:
--   psql --single-transaction -v ON_ERROR_STOP=1 -f this.sql
-- (Flyway and Liquibase run each migration in a transaction; in a sqitch
-- deploy script keep the template's BEGIN; and COMMIT; around it.)
-- Its routines are SECURITY DEFINER and EXECUTE is revoked from PUBLIC at the
-- end of the script: a run in autocommit mode that stops half-way would leave
-- them callable by every role until the script is run to its end.
"""


def cmd_grant(args: argparse.Namespace) -> int:
    """Prints (default) or runs (--apply) the GRANT/REVOKE statements of a least-privilege role."""
    from . import dialects, privileges

    caps = [c for c in privileges.CAPABILITIES if getattr(args, c)]
    if not caps:
        raise UsageError("name at least one capability: " + " ".join(f"--{c}" for c in privileges.CAPABILITIES))
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


def cmd_create(args: argparse.Namespace) -> int:
    with _connect(args) as db:
        db.queue(args.queue).create(visibility_timeout=args.visibility_timeout,
                                    max_attempts=args.max_attempts,
                                    dead_letter_queue=args.dead_letter_queue)
    print(f"created {args.queue}")
    return EXIT_OK


def _refuse_constant(name: str) -> Any:
    raise ValueError(f"{name} is not JSON")


def cmd_push(args: argparse.Namespace) -> int:
    try:
        payload = json.loads(args.payload, parse_constant=_refuse_constant)
    except ValueError as exc:
        raise UsageError(f"PAYLOAD_JSON is not valid JSON ({exc}): {args.payload[:60]!r}") from None
    run_at = None if args.run_in is None else dt.timedelta(seconds=args.run_in)
    with _connect(args) as db:
        inserted = db.queue(args.queue).push(args.key, args.kind, payload, run_at=run_at,
                                             priority=args.priority)
    print("inserted" if inserted else "duplicate")
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
    for r in reservations:
        print(json.dumps({"key": r.key, "kind": r.kind, "payload": r.payload,
                          "token": str(r.token), "attempts": r.attempts}))
    return EXIT_OK


def cmd_stats(args: argparse.Namespace) -> int:
    with _connect(args) as db:
        stats = [db.queue(args.queue).stats()] if args.queue else db.stats()
    if not stats:
        print("no queues (create one with `pyqueue-sql create QUEUE`)")
    else:
        print(format_stats_table(stats))
    return EXIT_OK


def format_workers_table(workers: Iterable[Any]) -> str:
    """Registered workers (pyqueue_sql.WorkerInfo) as an aligned text table."""
    header = ("id", "name", "host", "pid", "queues", "started", "last heartbeat")
    rows = [
        (str(w.worker_id), w.name, w.host or "-", "-" if w.pid is None else str(w.pid),
         ",".join(w.queues) if w.queues else "-", w.started_at.strftime("%Y-%m-%d %H:%M:%S"),
         format_age(w.heartbeat_age_s) + " ago")
        for w in workers
    ]
    widths = [max(len(row[i]) for row in [header, *rows]) for i in range(len(header))]
    return "\n".join("  ".join(cell.ljust(widths[i]) for i, cell in enumerate(r)).rstrip()
                     for r in [header, tuple("-" * w for w in widths), *rows])


def cmd_workers(args: argparse.Namespace) -> int:
    with _connect(args) as db:
        if args.release_older_than is not None:
            released = db.release_dead_workers(args.release_older_than)
            print(f"released {released} message(s) of workers silent for over {args.release_older_than:g}s")
        workers = db.workers()
    if not workers:
        print("no workers registered")
    else:
        print(format_workers_table(workers))
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

    _STANDARD = set(vars(__import__("logging").LogRecord("", 0, "", 0, "", (), None))) | {"message", "asctime"}

    def format(self, record: Any) -> str:
        entry = {"ts": dt.datetime.fromtimestamp(record.created, dt.timezone.utc).isoformat(timespec="milliseconds"),
                 "level": record.levelname.lower(), "msg": record.getMessage()}
        entry.update({k: v for k, v in vars(record).items() if k not in self._STANDARD})
        if record.exc_info:
            import traceback

            entry["exc"] = "".join(traceback.format_exception(*record.exc_info))
        return json.dumps(entry, default=str)


class _TextLogFormatter:
    _STANDARD = _JsonLogFormatter._STANDARD

    def format(self, record: Any) -> str:
        extra = " ".join(f"{k}={v}" for k, v in vars(record).items() if k not in self._STANDARD)
        text = f"{dt.datetime.now().strftime('%H:%M:%S.%f')[:-3]} {record.levelname.lower():7} {record.getMessage()}"
        return f"{text} {extra}".rstrip()


def cmd_worker(args: argparse.Namespace) -> int:
    import logging
    import threading

    from .worker import RetryPolicy, Worker

    dsn = _dsn(args)
    fn = _load_handler(args.handler_spec)
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(_JsonLogFormatter() if args.log_format == "json" else _TextLogFormatter())  # type: ignore[arg-type]
    logger = logging.getLogger("pyqueue_sql")
    logger.addHandler(handler)
    logger.setLevel(getattr(logging, args.log_level.upper()))
    try:
        retry = RetryPolicy(base=args.retry_base, factor=args.retry_factor, max_delay=args.retry_max,
                            jitter=args.retry_jitter)
        worker = Worker(dsn, concurrency=args.concurrency, name=args.name, lease=args.lease,
                        poll_fallback=args.poll_fallback, shutdown_timeout=args.shutdown_timeout,
                        register=args.register, release_dead_after=args.release_dead_after)
    except errors.InvalidArgumentError as exc:
        raise UsageError(str(exc)) from None
    for queue in args.queue:
        for kind in (args.kind or [None]):
            worker.add_handler(queue, fn, kind, retry=retry)
    status = args.status if args.status is not None else sys.stderr.isatty()
    if status:
        def show() -> None:
            while not worker._stopped.wait(1.0):
                sys.stderr.write("\r\x1b[K" + worker.status_line())
                sys.stderr.flush()
        threading.Thread(target=show, daemon=True, name="pyqueue-status").start()
    try:
        worker.run()
    finally:
        logger.removeHandler(handler)
        if status:
            sys.stderr.write("\r\x1b[K" + worker.status_line() + "\n")
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
        epilog=f"Commands that use a database take --dsn DSN (default: ${DSN_ENV}).",
    )
    parser.add_argument("--version", action="version", version=f"{PROG} {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)

    def command(name: str, handler: Callable[[argparse.Namespace], int], help: str,
                dsn: bool = True) -> argparse.ArgumentParser:
        p = sub.add_parser(name, help=help, description=help)
        if dsn:
            p.add_argument("--dsn", help=f"postgresql://... or mysql://... (default: ${DSN_ENV})")
        p.set_defaults(handler=handler)
        return p

    p = command("migrate", cmd_migrate, "install or upgrade (or downgrade) the pyqueue-sql schema")
    p.add_argument("--revision", help="target revision (default: heads; with --downgrade: base, "
                                      "which removes pyqueue-sql and every message)")
    p.add_argument("--downgrade", action="store_true", help="go back to --revision instead of up")

    p = command("sql", cmd_sql, "print the schema SQL, for use with your own migration tool", dsn=False)
    p.add_argument("--dialect", required=True, choices=("postgresql", "mysql"))
    p.add_argument("--uninstall", action="store_true", help="print the SQL that removes the schema")

    p = command("grant", cmd_grant, "print (or --apply) the GRANTs that let an existing role or account call "
                "the routines of some capabilities, and nothing else (README: Least privilege)")
    p.add_argument("--role", required=True, metavar="NAME",
                   help="PostgreSQL role, or MySQL account user@host (host %% when omitted; name@ for a "
                        "MariaDB role); never created here: a GRANT to a missing one fails")
    for cap, what in (("producer", "push, push_batch, push_replace"),
                      ("consumer", "reserve, pop, commit, rollback, extend, move, the fast paths, wakeups, "
                                   "worker registry"),
                      ("monitor", "stats, limits, workers, schedules, dead letters"),
                      ("admin", "create, drop, pause, resume, remove, limits, schedules, history, redrive, "
                                "replay; plus monitor"),
                      ("ingest", "INSERT into queue_ingest, queue_ingest_flush")):
        p.add_argument(f"--{cap}", action="store_true", help=what)
    p.add_argument("--revoke", action="store_true", help="REVOKE these capabilities instead")
    p.add_argument("--apply", action="store_true", help="run the statements (default: print them)")
    p.add_argument("--dialect", choices=("postgresql", "mysql"), help="the SQL to print, without a database")
    p.add_argument("--schema", help="PostgreSQL schema / MySQL database of the routines "
                                    "(default: the connection's current one; unqualified without --dsn)")

    p = command("create", cmd_create, "create a queue or change its settings")
    p.add_argument("queue", metavar="QUEUE")
    p.add_argument("--visibility-timeout", type=_seconds, metavar="S",
                   help="seconds a reservation hides a message (default 30)")
    p.add_argument("--max-attempts", type=_positive_int, metavar="N",
                   help="deliveries before dead-lettering (default 10)")
    p.add_argument("--dead-letter-queue", metavar="Q", help="queue that receives exhausted messages")

    p = command("push", cmd_push, "push one message; prints inserted or duplicate")
    p.add_argument("queue", metavar="QUEUE")
    p.add_argument("key", metavar="KEY", help="dedup key")
    p.add_argument("kind", metavar="KIND", help="payload type")
    p.add_argument("payload", metavar="PAYLOAD_JSON", help="the payload as JSON text")
    p.add_argument("--run-in", type=_seconds, metavar="SECONDS", help="deliver no earlier than this from now")
    p.add_argument("--priority", type=int, metavar="N", help="higher is served first (default 0)")

    p = command("reserve", cmd_reserve, "reserve messages; prints one JSON line per message")
    p.add_argument("queue", metavar="QUEUE")
    p.add_argument("-n", type=_positive_int, default=1, metavar="N", help="at most this many (default 1)")
    p.add_argument("--timeout", type=_seconds, metavar="S",
                   help="reservation length in seconds (default: the queue's visibility timeout)")
    p.add_argument("--commit", action="store_true", help="commit (delete) them right away")

    p = command("stats", cmd_stats, "show queue depths")
    p.add_argument("queue", metavar="QUEUE", nargs="?", help="one queue (default: all)")

    p = command("workers", cmd_workers, "list the registered workers and their last heartbeat")
    p.add_argument("--release-older-than", type=_seconds, metavar="S",
                   help="first remove workers silent for over S seconds and make their messages ready")

    p = command("demo", cmd_demo, "run producers and consumers against a demo queue "
                                  "(an embedded PostgreSQL unless --dsn / $PYQUEUE_DSN is set)")
    p.add_argument("--messages", type=_positive_int, default=4000, metavar="N",
                   help="messages to push (default 4000)")
    p.add_argument("--timeout", type=_seconds, default=120.0, metavar="S",
                   help="give up after this many seconds (default 120)")
    p.add_argument("--data-dir", metavar="DIR",
                   help="embedded PostgreSQL data directory (default .pyqueue-demo/pgdata)")

    p = command("worker", cmd_worker, "run a handler for the messages of one or more queues until SIGTERM/SIGINT")
    p.add_argument("handler_spec", metavar="MODULE:FUNCTION",
                   help="the handler, called with one pyqueue_sql.worker.Job per message")
    p.add_argument("--queue", "-q", action="append", required=True, metavar="Q", help="queue to serve (repeatable)")
    p.add_argument("--kind", action="append", metavar="KIND",
                   help="only messages of this kind (repeatable; default: every kind)")
    p.add_argument("--concurrency", "-c", type=_positive_int, default=4, metavar="N",
                   help="messages handled at once, one thread each (default 4)")
    p.add_argument("--name", help="worker name recorded on reserved messages (default host:pid)")
    p.add_argument("--lease", type=_seconds, default=30.0, metavar="S",
                   help="reservation length; a heartbeat extends it every S/3 while a handler runs (default 30)")
    p.add_argument("--poll-fallback", type=_seconds, metavar="S",
                   help="PostgreSQL: longest wait for a NOTIFY before looking anyway (default 5); "
                        "MySQL waits in 1 s long polls inside the server")
    p.add_argument("--shutdown-timeout", type=_seconds, default=30.0, metavar="S",
                   help="on SIGTERM/SIGINT, how long running handlers may take to finish (default 30)")
    p.add_argument("--register", action=argparse.BooleanOptionalAction, default=True,
                   help="register in the worker registry (`pyqueue-sql workers`), heartbeat it and "
                        "deregister on stop (default on)")
    p.add_argument("--release-dead-after", type=_seconds, metavar="S",
                   help="each heartbeat, release the messages of workers silent for over S seconds "
                        "(default off; S must be at least every worker's lease)")
    p.add_argument("--retry-base", type=_seconds, default=1.0, metavar="S",
                   help="first retry delay after a handler exception (default 1)")
    p.add_argument("--retry-factor", type=float, default=2.0, metavar="F", help="backoff factor (default 2)")
    p.add_argument("--retry-max", type=_seconds, default=300.0, metavar="S", help="longest retry delay (default 300)")
    p.add_argument("--retry-jitter", type=float, default=0.2, metavar="J",
                   help="random +-fraction applied to each delay (default 0.2)")
    p.add_argument("--log-format", choices=("text", "json"), default="text")
    p.add_argument("--log-level", choices=("debug", "info", "warning", "error"), default="info")
    p.add_argument("--status", action=argparse.BooleanOptionalAction, default=None,
                   help="a live status line on stderr (default: when stderr is a terminal)")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
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


if __name__ == "__main__":
    sys.exit(main())
