"""Showing queue state and errors to a person: text tables, ages and durations, DSNs with the
password hidden, one-line error messages.

The command line, the demo and the examples use these; neither ``cli`` nor ``demo`` imports the
other, both import this module.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import os
import re
from collections.abc import Iterable, Mapping, Sequence
from typing import Any
from urllib.parse import quote, unquote

from . import errors

# The drivers a DSN may need: (module, the extra that installs it, what needs it).
DRIVERS = (
    ("psycopg", "postgresql", "a postgresql:// DSN"),
    ("pymysql", "mysql", "a mysql:// DSN"),
    ("aiomysql", "asyncio", "the asyncio client for a mysql:// DSN"),
)


# C0 controls and DEL, C1 controls (\x85 is a line break to str.splitlines, \x9b a CSI to some
# terminals), the Unicode line and paragraph separators, and the bidirectional embeddings,
# overrides and isolates (which reorder what a reader sees).
_CONTROL_CHARS = (
    *range(0x20),
    *range(0x7F, 0xA0),
    0x2028,
    0x2029,
    *range(0x202A, 0x202F),
    *range(0x2066, 0x206A),
)
_TABLE = {c: (f"\\x{c:02x}" if c <= 0xFF else f"\\u{c:04x}") for c in _CONTROL_CHARS} | {
    ord("\n"): "\\n",
    ord("\r"): "\\r",
    ord("\t"): "\\t",
}
# Finds any of those characters (pyqueue_sql.logsafe asks it whether a log record needs escaping).
CONTROL_PATTERN = re.compile("[" + "".join(re.escape(chr(c)) for c in _CONTROL_CHARS) + "]")


def escape_control(text: str) -> str:
    """text with every control character escaped: ``\\n``, ``\\r`` and ``\\t`` as such, the others
    as ``\\xHH`` or ``\\uHHHH``. Printable text (accents, other scripts, emoji) is left as it is;
    a backslash is not escaped, so escaping twice changes nothing more."""
    text = str(text)
    return text.translate(_TABLE) if CONTROL_PATTERN.search(text) else text


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


# From this age on, `pyqueue-sql stats` says which transaction holds back cleanup (queue_horizon).
HORIZON_WARN_S = 60.0


def format_horizon(horizon: Any) -> str:
    """What holds back the database's cleanup, in one line (a pyqueue_sql.rows.Horizon)."""
    if horizon.holder is None:
        return f"cleanup held back by no transaction (backlog {horizon.backlog:,})"
    who = ", ".join(str(v) for v in (horizon.user_name, horizon.state) if v is not None)
    pid = f" pid {horizon.pid}" if horizon.pid is not None else ""
    return (
        f"cleanup held back for {format_age(horizon.oldest_age_s)} by {horizon.holder}{pid}"
        f"{f' ({who})' if who else ''}; backlog {horizon.backlog:,}"
    )


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
    """An aligned text table: the header, a rule, then the rows. A cell's control characters (a
    key's newline or terminal escape, chosen by whoever pushed the message) are shown escaped
    (pyqueue_sql.logsafe.escape_control): a row is one line and changes nothing on a terminal."""
    header = tuple(escape_control(str(c)) for c in header)
    rows = [tuple(escape_control(str(c)) for c in r) for r in rows]
    widths = [max(len(row[i]) for row in [tuple(header), *rows]) for i in range(len(header))]
    right = set(right_aligned)

    def line(cells: Sequence[str]) -> str:
        return "  ".join(
            cell.rjust(widths[i]) if i in right else cell.ljust(widths[i]) for i, cell in enumerate(cells)
        ).rstrip()

    return "\n".join([line(header), line(["-" * w for w in widths]), *(line(r) for r in rows)])


def format_stats_table(stats: Iterable[Any], last_minute: Mapping[str, int | None] | None = None) -> str:
    """The stats of several queues (pyqueue_sql.QueueStats) as an aligned text table. Its "dead"
    column (as in SQL, Python and the dashboard) counts every message that used up its attempts in
    the queue since it was created; a redrive does not lower it (STATS_LEGEND says so). With
    last_minute (per queue, the messages that left it in the last minute; None: it keeps no
    history to tell), a column of them ("-" for None)."""
    header: tuple[str, ...] = ("queue", "ready", "delayed", "reserved", "dead", "oldest ready age", "paused")
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
    if last_minute is None:
        return format_table(header, rows, right_aligned=(1, 2, 3, 4, 5))
    done = [last_minute.get(r[0]) for r in rows]
    rows = [(*r, "-" if n is None else str(n)) for r, n in zip(rows, done)]
    return format_table((*header, "last minute"), rows, right_aligned=(1, 2, 3, 4, 5, 7))


def format_kind_stats_table(kinds: Iterable[Any]) -> str:
    """The messages of several queues by kind (pyqueue_sql.rows.KindStats) as an aligned text
    table."""
    rows = [(k.queue, k.kind, str(k.ready), str(k.delayed), str(k.reserved)) for k in kinds]
    return format_table(("queue", "kind", "ready", "delayed", "reserved"), rows, right_aligned=(2, 3, 4))


STATS_LEGEND = (
    "dead: messages that used up their attempts in the queue since it was created (dead-lettered "
    "or dropped); a redrive does not lower it. `dead-letters DLQ` lists those still in a "
    "dead-letter queue."
)


def shorten(text: str | None, width: int) -> str:
    """One line of at most width characters ("..." marks a cut); "-" for None."""
    if text is None:
        return "-"
    flat = one_line(text)
    return flat if len(flat) <= width else flat[: max(width - 3, 0)] + "..."


# Query parameters of a DSN that carry a secret (libpq's password and sslpassword; the spellings
# other drivers accept), compared case-insensitively.
SECRET_PARAMETERS = ("password", "passwd", "pwd", "sslpassword")
# Environment variables the drivers (or their users) read a password from: never printed either.
PASSWORD_VARIABLES = ("PGPASSWORD", "MYSQL_PWD", "PYQUEUE_DASHBOARD_TOKEN")
MASK = "***"
# A secret shorter than this is not searched for in free text (masking every "a" of a message
# would make it unreadable); the DSN's own password field is masked whatever its length.
_MIN_SCRUBBED = 3
_SECRET_QUERY = re.compile(
    r"(?P<name>(?:^|[?&;\s])(?:" + "|".join(SECRET_PARAMETERS) + r")=)(?P<value>[^&;#\s'\"]*)",
    re.IGNORECASE,
)
# A DSN inside free text (an error message, an argument echoed by argparse).
_DSN_IN_TEXT = re.compile(r"\b[A-Za-z][A-Za-z0-9+.-]*://[^\s'\"<>`]+")
_remembered: set[str] = set()


def redact_dsn(dsn: str) -> str:
    """The DSN with every password in it replaced by ***, for printing: the one of user:password@,
    and the value of a password= (or passwd=, pwd=, sslpassword=) parameter wherever it stands in
    the query. Nothing is decoded, so a password that is not valid percent-encoding is masked too."""
    scheme, sep, rest = dsn.partition("://")
    if not sep:  # key=value connection strings: their password= values
        return _SECRET_QUERY.sub(lambda m: m["name"] + MASK, dsn)
    at = _userinfo_end(rest)
    if at < 0:
        userinfo, after = "", rest
    else:
        user, colon, _ = rest[:at].partition(":")
        userinfo, after = (f"{user}:{MASK}" if colon else user) + "@", rest[at + 1 :]
    cut = [i for i in (after.find("/"), after.find("?")) if i >= 0]
    host_end = min(cut) if cut else len(after)
    tail = _SECRET_QUERY.sub(lambda m: m["name"] + MASK, after[host_end:])
    return f"{scheme}{sep}{userinfo}{after[:host_end]}{tail}"


def _userinfo_end(rest: str) -> int:
    """Where the user information of a DSN (after its ://) ends: the last @ before the query of
    its path, -1 without one. A password may hold @, :, ? or / unencoded; the drivers differ in how
    they split such a DSN, so the widest reading is masked."""
    slash = rest.find("/")
    query = rest.find("?", slash) if slash >= 0 else -1
    return (rest if query < 0 else rest[:query]).rfind("@")


def dsn_secrets(dsn: str) -> set[str]:
    """The passwords a DSN carries, as written and percent-decoded (the forms an error message
    may quote): the user information's and every password-like query parameter's."""
    found: set[str] = set()
    scheme, sep, rest = dsn.partition("://")
    if sep:
        at = _userinfo_end(rest)
        if at >= 0:
            _, colon, password = rest[:at].partition(":")
            if colon and password:
                found.add(password)
    found.update(m["value"] for m in _SECRET_QUERY.finditer(dsn) if m["value"])
    decoded = set()
    for secret in found:
        with contextlib.suppress(Exception):
            decoded.add(unquote(secret, errors="strict"))
        decoded.add(secret.replace("+", " "))
        decoded.add(quote(secret, safe=""))
    return {s for s in found | decoded if s}


def remember_secrets(dsn: str | None) -> None:
    """Keeps the passwords of this DSN, so that redact() masks them in any text from now on (the
    command line calls it for the DSN a command uses)."""
    if dsn:
        _remembered.update(dsn_secrets(dsn))


def redact(text: str, dsn: str | None = None) -> str:
    """Text with every secret it may quote masked: DSNs in it (their passwords), the passwords of
    dsn and of every DSN given to remember_secrets, and the values of $PGPASSWORD, $MYSQL_PWD and
    $PYQUEUE_DASHBOARD_TOKEN. For error messages and log lines."""
    text = _DSN_IN_TEXT.sub(lambda m: redact_dsn(m.group(0)), str(text))
    secrets = set(_remembered)
    if dsn:
        secrets |= dsn_secrets(dsn)
    secrets |= {v for v in (os.environ.get(name) for name in PASSWORD_VARIABLES) if v}
    for secret in sorted(secrets, key=len, reverse=True):
        if len(secret) >= _MIN_SCRUBBED and secret != MASK:
            text = text.replace(secret, MASK)
    return text


def one_line(text: str) -> str:
    """text on one line: runs of whitespace (newlines included) as one space, every other control
    character escaped (a terminal escape sequence is shown, not run)."""
    return escape_control(" ".join(str(text).split()))


def describe_error(exc: BaseException) -> str | None:
    """A one-line message for errors a user can cause (bad input, unreachable or
    misconfigured server, unknown revision), with every secret it could quote masked (see
    redact); None for a bug worth a traceback."""
    message = _describe(exc)
    return None if message is None else redact(message)


def _describe(exc: BaseException) -> str | None:
    from .embedded import EmbeddedPostgresError

    if isinstance(exc, (errors.QueueError, EmbeddedPostgresError)):
        return one_line(str(exc))
    missing = getattr(exc, "name", None) if isinstance(exc, ImportError) else None
    for module, extra, what in DRIVERS:
        if missing == module:  # a driver imported elsewhere (SQLAlchemy's, for migrate)
            return one_line(str(errors.DriverNotInstalledError(module, extra, what)))
    modules = {cls.__module__.split(".", 1)[0] for cls in type(exc).__mro__}
    if "sqlalchemy" in modules and getattr(exc, "orig", None) is not None:
        return _describe(exc.orig)  # a driver error wrapped by SQLAlchemy (migrate)
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
