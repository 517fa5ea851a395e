"""Log records that text from a message's author cannot forge.

A message's key, kind, payload and a handler's exception text are chosen by whoever pushed the
message. Written to a log as they are, a newline in them starts a line that looks like a record of
its own, a carriage return overwrites the start of the line, and an escape sequence (``\\x1b[2J``)
clears the terminal of whoever reads the log. This module escapes them:

- ``escape_control(text)``: every control character shown as an escape (``\\n``, ``\\r``,
  ``\\t``, ``\\x1b``, ``\\x85``, ``\\u2028``...), so the text is one line that changes nothing on
  a terminal;
- ``format_exception(exc)``: a traceback whose lines are the traceback's own (one physical line
  per line), each escaped: an exception message holding a newline stays on its one line;
- ``EscapeFilter``: a ``logging.Filter`` that escapes a record's message, its string extras and
  its traceback before any formatter sees them. The package attaches one to each of its loggers
  ("pyqueue_sql", "pyqueue_sql.worker", "pyqueue_sql.worker.processes", "pyqueue_sql.migrate",
  "pyqueue_sql.dashboard", "pyqueue_sql.spark", "pyqueue_sql.django": LOGGERS),
  so a plain ``logging.basicConfig()`` shows their records escaped;
- ``SafeFormatter``: a ``logging.Formatter`` that does the same for any record, and masks
  passwords as the command line does (pyqueue_sql.display.redact: DSNs' passwords, those of
  $PGPASSWORD and $MYSQL_PWD): for the handlers of an application whose own records may carry
  such text.
"""

from __future__ import annotations

import logging
import traceback
from typing import Any

from .display import CONTROL_PATTERN, escape_control, redact

__all__ = [
    "LOGGERS",
    "EscapeFilter",
    "SafeFormatter",
    "attach",
    "escape_control",
    "format_exception",
    "protect",
]

# The attributes every LogRecord has: what is not one of them came from `extra=`.
STANDARD_ATTRIBUTES = set(vars(logging.LogRecord("", 0, "", 0, "", (), None))) | {
    "message",
    "asctime",
    "taskName",
}


def _escape_fields(te: traceback.TracebackException, seen: set[int]) -> None:
    """Escapes the exception texts of te and of every exception chained to it or grouped in it
    (the message, the notes, a SyntaxError's own fields)."""
    if id(te) in seen:
        return
    seen.add(id(te))
    if isinstance(getattr(te, "_str", None), str):
        te._str = escape_control(te._str)  # type: ignore[attr-defined]
    notes = getattr(te, "__notes__", None)
    if notes:
        te.__notes__ = [escape_control(n) for n in notes]  # type: ignore[attr-defined]
    for name in ("msg", "text", "filename"):
        value = getattr(te, name, None)
        if isinstance(value, str):
            setattr(te, name, escape_control(value))
    for linked in (te.__cause__, te.__context__, *(getattr(te, "exceptions", None) or ())):
        if linked is not None:
            _escape_fields(linked, seen)


def format_exception(
    exc: BaseException | tuple[Any, Any, Any],
) -> str:
    """The traceback of exc (an exception, or a sys.exc_info() tuple), chained causes included, as
    traceback.format_exception shows it, with every control character of each line escaped: an
    exception message with a newline is one line (``ValueError: a\\nb``), each traceback line is
    one physical line. No trailing newline."""
    if isinstance(exc, tuple):
        exc_type, value, tb = exc
    else:
        exc_type, value, tb = type(exc), exc, exc.__traceback__
    if value is None:
        return escape_control(str(exc_type.__name__ if exc_type else ""))
    te = traceback.TracebackException(exc_type, value, tb, compact=True)
    _escape_fields(te, set())
    lines = "".join(te.format()).rstrip("\n").split("\n")
    return "\n".join(escape_control(line) for line in lines)


def format_stack(stack_info: str) -> str:
    """A stack (a record's stack_info) with each line's control characters escaped."""
    return "\n".join(escape_control(line) for line in stack_info.rstrip("\n").split("\n"))


def _traceback_of(exc_info: Any) -> str:
    if isinstance(exc_info, BaseException):
        return format_exception(exc_info)
    return format_exception(tuple(exc_info))


class EscapeFilter(logging.Filter):
    """Escapes a record's text before any formatter sees it: its message (args merged in, only when
    there is something to escape: a record without control characters keeps its msg and args), its
    string extras, and its traceback, stored in record.exc_text (which logging.Formatter then shows
    instead of formatting record.exc_info again; exc_info is kept for handlers that read it).
    Never drops a record. Attach it to a logger (logger.addFilter) to escape the records logged on
    that logger, or to a handler to escape every record the handler gets."""

    def filter(self, record: logging.LogRecord) -> bool:
        protect(record)
        return True


def protect(record: logging.LogRecord) -> logging.LogRecord:
    """record with its message, string extras and traceback escaped in place (EscapeFilter's work);
    returns it."""
    try:
        message = record.getMessage()
    except Exception:  # a bad format string: logging reports it when the record is formatted
        return record
    if CONTROL_PATTERN.search(message):
        record.msg, record.args = escape_control(message), None
    for name, value in list(vars(record).items()):
        if name not in STANDARD_ATTRIBUTES and isinstance(value, str) and CONTROL_PATTERN.search(value):
            setattr(record, name, escape_control(value))
    if record.exc_info and record.exc_info[0] is not None:
        record.exc_text = _traceback_of(record.exc_info)
    elif record.exc_text:  # a traceback some formatter already wrote: its lines escaped
        record.exc_text = format_stack(record.exc_text)
    if record.stack_info:
        record.stack_info = format_stack(record.stack_info)
    return record


class SafeFormatter(logging.Formatter):
    """A logging.Formatter (same arguments) whose output is safe to write to a terminal or a log
    file: the record's message and string extras escaped (escape_control), its traceback and stack
    escaped line by line (format_exception), then every password masked as the command line
    masks it (pyqueue_sql.display.redact: a DSN's password wherever a DSN appears, the passwords
    of the DSNs given to display.remember_secrets, $PGPASSWORD, $MYSQL_PWD). The record itself is
    not changed: other handlers see it as it was."""

    def format(self, record: logging.LogRecord) -> str:
        return redact(super().format(protect(logging.makeLogRecord(vars(record)))))

    def formatException(self, ei: Any) -> str:  # noqa: N802 (logging's name)
        return _traceback_of(ei)

    def formatStack(self, stack_info: str) -> str:  # noqa: N802 (logging's name)
        return format_stack(stack_info)


# The package's loggers: pyqueue_sql imports this module, so their records are escaped from the
# package's first import on, whatever handlers and formatters the application configures. A filter
# of a logger sees only the records logged on that very logger, hence one per logger.
LOGGERS = (
    "pyqueue_sql",
    "pyqueue_sql.worker",
    "pyqueue_sql.worker.processes",
    "pyqueue_sql.migrate",
    "pyqueue_sql.dashboard",
    "pyqueue_sql.spark",
    "pyqueue_sql.django",
)


def attach(logger: logging.Logger) -> logging.Logger:
    """Adds an EscapeFilter to logger (once); returns the logger."""
    if not any(isinstance(f, EscapeFilter) for f in logger.filters):
        logger.addFilter(EscapeFilter())
    return logger


for _name in LOGGERS:
    attach(logging.getLogger(_name))
