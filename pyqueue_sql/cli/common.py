"""What every command group shares: the --dsn default, exit codes, the usage error, opening
the database, asking a yes/no question, and the argument types."""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Callable
from typing import Any

from .. import errors
from ..display import redact, remember_secrets

# command(name, handler, help, dsn=True): adds a subcommand (with --dsn unless dsn=False) and
# returns its parser; build_parser passes it to each group's PARSERS.
Command = Callable[..., argparse.ArgumentParser]

DSN_ENV = "PYQUEUE_DSN"
PROG = "pyqueue-sql"

EXIT_OK = 0
EXIT_FAILURE = 1
EXIT_USAGE = 2
EXIT_INTERRUPTED = 130


class UsageError(Exception):
    """A command line that cannot run (exit code 2)."""


def dsn_of(args: argparse.Namespace) -> str:
    """The command's database: --dsn, else $PYQUEUE_DSN; a usage error without one or for a
    database pyqueue-sql does not support, DriverNotInstalledError when its driver is missing."""
    dsn = args.dsn or os.environ.get(DSN_ENV)
    if not dsn:
        raise UsageError(
            f"no database given: pass --dsn DSN or set {DSN_ENV} "
            "(postgresql://user@host/db or mysql://user@host/db)"
        )
    remember_secrets(dsn)  # masked in every message printed from now on
    check_scheme(dsn).import_driver()  # a missing driver: one line naming the extra (exit 1)
    return dsn


def check_scheme(dsn: str) -> Any:
    """The DSN's dialect; refuses a DSN of an unsupported database before any driver sees it."""
    from ..dialects import for_dsn

    try:
        return for_dsn(dsn)
    except errors.UnsupportedDsnError as exc:
        raise UsageError(str(exc)) from None


def open_database(args: argparse.Namespace) -> Any:
    """A pyqueue_sql.Database on the command's database (a context manager that closes it)."""
    from ..client import connect

    return connect(dsn_of(args))


def confirm(question: str) -> bool | None:
    """Asks a yes/no question on the terminal; None when there is no terminal to ask on."""
    stdin = sys.stdin
    if stdin is None or not stdin.isatty():
        return None
    sys.stderr.write(f"{question} [y/N] ")
    sys.stderr.flush()
    answer = stdin.readline()
    return answer.strip().lower() in ("y", "yes")


def _int_at_least(text: str, low: int) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not an integer: {text!r}") from None
    if value < low:
        raise argparse.ArgumentTypeError(f"must be at least {low}: {text}")
    return value


def positive_int(text: str) -> int:
    return _int_at_least(text, 1)


def non_negative_int(text: str) -> int:
    return _int_at_least(text, 0)


# The longest duration a command line takes (about 317 years): a time that far from now is still a
# date both databases (and Python) can hold, where 1e12 seconds is not.
MAX_SECONDS = 10**10
INT32 = (-(2**31), 2**31 - 1)


def seconds_arg(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number of seconds: {text!r}") from None
    if value != value or value in (float("inf"), float("-inf")):
        raise argparse.ArgumentTypeError(f"not a finite number of seconds: {text!r}")
    if abs(value) > MAX_SECONDS:
        raise argparse.ArgumentTypeError(
            f"{text} seconds is out of range: at most {MAX_SECONDS:.0e} (about 317 years) either way"
        )
    return value


def int32_arg(text: str) -> int:
    """A priority: a whole number a 32-bit integer holds (the same refusal on both databases)."""
    try:
        value = int(text)
    except ValueError:
        value = None
    if value is None or not INT32[0] <= value <= INT32[1]:
        raise argparse.ArgumentTypeError(f"must be a whole number from {INT32[0]} to {INT32[1]}: {text!r}")
    return value


class Parser(argparse.ArgumentParser):
    """argparse's parser, with a bad command line told in one line on stderr (exit 2) and any
    secret it would echo (a DSN given in the wrong place, say) masked."""

    def error(self, message: str) -> Any:
        if "invalid choice" in message and "://" in message:
            # `pyqueue-sql postgresql://... stats`: name the mistake, not the DSN
            message = "a DSN where the command belongs: pass it as --dsn DSN (before or after the command)"
        message = redact(message)
        self.exit(EXIT_USAGE, f"{self.prog}: error: {message} (see `{self.prog} --help`)\n")
