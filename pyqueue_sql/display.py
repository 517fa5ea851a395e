"""Showing queue state and errors to a person: text tables, ages and durations, DSNs with the
password hidden, one-line error messages.

The command line, the demo and the examples use these; neither ``cli`` nor ``demo`` imports the
other, both import this module.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterable, Sequence
from typing import Any

from . import errors

# The drivers a DSN may need: (module, the extra that installs it, what needs it).
DRIVERS = (
    ("psycopg", "postgresql", "a postgresql:// DSN"),
    ("pymysql", "mysql", "a mysql:// DSN"),
    ("aiomysql", "asyncio", "the asyncio client for a mysql:// DSN"),
)


def format_age(seconds: float | None) -> str:
    """A duration in seconds as 4.2s, 3m05s, 2h10m or 1d03h ("-" for None)."""
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


def format_duration(value: Any) -> str:
    """A queue setting's duration (timedelta, seconds as a number, or None) as text."""
    if value is None:
        return "-"
    if isinstance(value, dt.timedelta):
        seconds = value.total_seconds()
    else:
        seconds = float(value)
    if seconds == int(seconds):
        return f"{int(seconds)}s"
    return f"{seconds:g}s"


def format_time(value: dt.datetime | None) -> str:
    """A time in UTC, its zone said: 2026-11-25 06:00:00 UTC ("-" for None; a naive datetime is
    taken as UTC, as the routines' times are)."""
    if value is None:
        return "-"
    if value.tzinfo is None:
        value = value.replace(tzinfo=dt.timezone.utc)
    return value.astimezone(dt.timezone.utc).strftime("%Y-%m-%d %H:%M:%S UTC")


def format_table(
    header: Sequence[str], rows: Iterable[Sequence[str]], right_aligned: Iterable[int] = ()
) -> str:
    """An aligned text table: the header, a rule, then the rows."""
    rows = [tuple(str(c) for c in r) for r in rows]
    widths = [max(len(row[i]) for row in [tuple(header), *rows]) for i in range(len(header))]
    right = set(right_aligned)

    def line(cells: Sequence[str]) -> str:
        return "  ".join(
            cell.rjust(widths[i]) if i in right else cell.ljust(widths[i]) for i, cell in enumerate(cells)
        ).rstrip()

    return "\n".join([line(header), line(["-" * w for w in widths]), *(line(r) for r in rows)])


def format_stats_table(stats: Iterable[Any]) -> str:
    """The stats of several queues (pyqueue_sql.QueueStats) as an aligned text table, and a
    legend for its "dead (ever)" column: a count of every message ever dead-lettered from the
    queue, which a redrive does not lower."""
    header = ("queue", "ready", "delayed", "reserved", "dead (ever)", "oldest ready age", "paused")
    rows = [
        (
            s.queue,
            str(s.ready),
            str(s.delayed),
            str(s.reserved),
            str(s.dead),
            format_age(s.oldest_ready_age_s),
            "yes" if s.paused else "no",
        )
        for s in stats
    ]
    return format_table(header, rows, right_aligned=(1, 2, 3, 4, 5))


def shorten(text: str | None, width: int) -> str:
    """One line of at most width characters ("..." marks a cut); "-" for None."""
    if text is None:
        return "-"
    flat = one_line(text)
    return flat if len(flat) <= width else flat[: max(width - 3, 0)] + "..."


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
    missing = getattr(exc, "name", None) if isinstance(exc, ImportError) else None
    for module, extra, what in DRIVERS:
        if missing == module:  # a driver imported elsewhere (SQLAlchemy's, for migrate)
            return one_line(str(errors.DriverNotInstalledError(module, extra, what)))
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
