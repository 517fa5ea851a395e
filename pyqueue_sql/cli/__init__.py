"""The ``pyqueue-sql`` command: install the schema, print its SQL, work with queues, run the demo.

    pyqueue-sql migrate --dsn postgresql://localhost/app
    pyqueue-sql migrate --check
    pyqueue-sql version
    pyqueue-sql sql --dialect mysql > pyqueue.sql
    pyqueue-sql create emails --max-attempts 5
    pyqueue-sql push emails user-42 welcome '{"to": "a@example.com"}'
    pyqueue-sql bind 'orders.#' billing
    pyqueue-sql publish orders.eu.created order-7 created '{"order": 7}'
    pyqueue-sql reserve emails -n 10
    pyqueue-sql commit emails user-42 welcome TOKEN
    pyqueue-sql rollback emails user-42 welcome TOKEN --delay 60 --error "smtp timeout"
    pyqueue-sql show emails user-42 welcome
    pyqueue-sql result emails user-42 welcome --wait 30
    pyqueue-sql cancel emails user-42 welcome
    pyqueue-sql release emails --worker host-1:4242
    pyqueue-sql rate emails welcome 100 60
    pyqueue-sql rates
    pyqueue-sql stats
    pyqueue-sql demo
    pyqueue-sql worker myapp.tasks:handle --queue emails --concurrency 8
    pyqueue-sql grant --role shop_web --producer --apply
    pyqueue-sql dashboard --token SECRET

Every command that talks to a database takes ``--dsn`` (default: $PYQUEUE_DSN).
Exit codes: 0 success; 1 an error (one line on stderr: bad input, unknown
queue, unreachable server, a refused request) or an outcome that did not
happen (a token that no longer holds, a message that is not there, a
``result --wait`` that ended before the message finished); 2 a bad command line; 130 interrupted (Ctrl-C). ``reserve`` on an empty queue prints
nothing on stdout, says so on stderr and exits 0.

The commands live in modules by group (admin: migrate, version, sql, grant, demo; queues; messages;
workers; dashboard), each with the parsers of its commands (PARSERS); build_parser adds them in
the order of COMMANDS, the order ``pyqueue-sql --help`` lists them in. A command line that names
its command loads that command's group alone (GROUPS): ``pyqueue-sql worker`` never imports the
dashboard, the migrator or the other commands; ``--help`` before a command loads every group.
"""

from __future__ import annotations

import _thread
import argparse
import contextlib
import importlib
import logging
import os
import sys
import threading
from collections.abc import Callable, Sequence
from typing import Any

from .. import __version__
from ..display import describe_error, redact
from .common import (
    DSN_ENV,
    EXIT_FAILURE,
    EXIT_INTERRUPTED,
    EXIT_OK,
    EXIT_USAGE,
    PROG,
    Parser,
    UsageError,
)

__all__ = [
    "COMMANDS",
    "DSN_ENV",
    "EXIT_FAILURE",
    "EXIT_INTERRUPTED",
    "EXIT_OK",
    "EXIT_USAGE",
    "GROUPS",
    "PROG",
    "UsageError",
    "build_parser",
    "main",
]

# Every command, in the order `pyqueue-sql --help` lists them.
COMMANDS: tuple[str, ...] = (
    "migrate",
    "version",
    "sql",
    "grant",
    "create",
    "setup",
    "push",
    "publish",
    "bind",
    "unbind",
    "bindings",
    "groups",
    "group-limit",
    "rate",
    "rates",
    "reserve",
    "commit",
    "rollback",
    "remove",
    "show",
    "result",
    "results",
    "cancel",
    "pause",
    "resume",
    "drop",
    "dead-letters",
    "redrive",
    "release",
    "settings",
    "stats",
    "workers",
    "demo",
    "worker",
    "dashboard",
)

# The module of each command (pyqueue_sql.cli.<group>, whose PARSERS add them), imported only when
# one of its commands runs or every command's help is printed.
GROUPS: dict[str, str] = {
    command: group
    for group, commands in (
        ("admin", "migrate version sql grant demo"),
        ("queues", "create bind unbind bindings groups group-limit rate rates pause resume drop"),
        ("queues", "dead-letters redrive release settings stats"),
        ("messages", "push publish reserve commit rollback remove show result results cancel"),
        ("tasks", "setup"),
        ("workers", "workers worker"),
        ("dashboard", "dashboard"),
    )
    for command in commands.split()
}


def command_in(argv: Sequence[str]) -> tuple[str, ...]:
    """The command a command line names, as build_parser's argument: () when it names none or asks
    for the help or the version before it (then every command is added, as --help lists them)."""
    args = iter(argv)
    for arg in args:
        if arg in ("-h", "--help", "--version"):
            return ()
        if arg == "--dsn":
            next(args, None)
        elif not arg.startswith("-"):
            return (arg,) if arg in GROUPS else ()
    return ()


def build_parser(command: str | None = None) -> argparse.ArgumentParser:
    """The command line's parser: every command, or with `command` that one alone (its group's
    module the only one imported)."""
    parser = Parser(
        prog=PROG,
        description="A durable message queue inside your PostgreSQL or MySQL/MariaDB database.",
        epilog=f"Commands that use a database take --dsn DSN (default: ${DSN_ENV}). Exit codes: 0 done; "
        "1 an error (one line on stderr) or an outcome that did not happen (a token that no longer "
        "holds, a message that is not there, `result --wait` ended before the message finished; "
        "`worker`: handlers still running when it stopped); "
        "2 a bad command line; 130 interrupted.",
    )
    parser.add_argument("--version", action="version", version=f"{PROG} {__version__}")
    # also accepted before the command (`pyqueue-sql --dsn DSN stats`), as many tools take it
    parser.add_argument("--dsn", dest="global_dsn", metavar="DSN", help=f"the database (default: ${DSN_ENV})")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)

    def add(
        name: str, handler: Callable[[argparse.Namespace], int], help: str, dsn: bool = True
    ) -> argparse.ArgumentParser:
        p = sub.add_parser(name, help=help, description=help)
        if dsn:
            p.add_argument("--dsn", help=f"postgresql://... or mysql://... (default: ${DSN_ENV})")
        p.set_defaults(handler=handler)
        return p

    for name in COMMANDS if command is None else (command,):
        group = importlib.import_module(f".{GROUPS[name]}", __name__)
        group.PARSERS[name](add)
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


class _NotLoggedInterrupts(logging.Filter):
    """Drops a log record that carries a KeyboardInterrupt. A library may log a Ctrl-C that went
    through it before passing it on: SQLAlchemy's pool logs "Exception during reset or similar"
    with its traceback when the interrupt lands while a connection is given back or closed, then
    raises it again. The command reports the interrupt itself (exit 130), without a traceback."""

    def filter(self, record: logging.LogRecord) -> bool:
        return not (record.exc_info and isinstance(record.exc_info[1], KeyboardInterrupt))


@contextlib.contextmanager
def interrupts_not_logged() -> Any:
    """While in the block, records of a KeyboardInterrupt that reach logging's last-resort
    handler (no logging configured: the CLI's case) are not printed."""
    handler, quiet = logging.lastResort, _NotLoggedInterrupts()
    if handler is not None:
        handler.addFilter(quiet)
    try:
        yield
    finally:
        if handler is not None:
            handler.removeFilter(quiet)


def main(argv: Sequence[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    args = build_parser(*command_in(argv)).parse_args(argv)
    previous_hook = sys.unraisablehook
    sys.unraisablehook = _deliver_interrupts_from_finalizers(previous_hook)
    try:
        with interrupts_not_logged():
            return _run(args)
    finally:
        sys.unraisablehook = previous_hook


def _global_options(args: argparse.Namespace) -> None:
    """--dsn given before the command: the command's own --dsn (one of them, not two different)."""
    given = getattr(args, "global_dsn", None)
    if given is None:
        return
    if not hasattr(args, "dsn"):
        raise UsageError(f"{args.command} takes no --dsn")
    if args.dsn is not None and args.dsn != given:
        raise UsageError("--dsn given twice, with two different databases: give it once")
    args.dsn = given


def _run(args: argparse.Namespace) -> int:
    try:
        _global_options(args)
        return args.handler(args)
    except UsageError as exc:
        print(f"{PROG}: error: {redact(str(exc))}", file=sys.stderr)
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
