"""Reading the JSON the servers store (payloads, headers, results, progress) into Python values.

The rule (docs/contract.md, Payloads): what a push accepts, every client of the project reads back.
Python's own json.loads does not read all of what jsonb (PostgreSQL) and JSON_VALID (MariaDB/MySQL)
accept: an integer of more than sys.get_int_max_str_digits() digits (4,300 by default) raises
ValueError, an array nested deeper than the interpreter's recursion limit RecursionError, and a number
beyond a float's range comes back as inf. Here:

- an integer too long for int() and a number beyond a float's range are read exactly, as
  decimal.Decimal (the process-wide digit limit is left as it is);
- nesting of any depth the server holds is read (without recursion, once the C scanner gives up);
- text that still cannot be read becomes an UnreadableJSON value naming why, so that one message
  fails alone (the worker gives it up with that reason) instead of the whole call that read it.

The common case costs what it did: the C scanner reads the text, and the slow way runs only for
what it refuses.
"""

from __future__ import annotations

import json
import re
import sys
from decimal import Decimal
from typing import Any

__all__ = ["UnreadableJSON", "dump_json_text", "load_json", "read_number"]


class UnreadableJSON:
    """Stored JSON that this client could not read (in place of the value: a payload, headers, a
    result). ``reason`` says why; ``text`` is the stored text (up to its first 1,000 characters).
    The worker fails such a message alone, without running its handler; displays show the reason."""

    __slots__ = ("reason", "text")

    def __init__(self, reason: str, text: str) -> None:
        self.reason = reason
        self.text = text[:1000]

    def __repr__(self) -> str:
        return f"UnreadableJSON({self.reason!r})"

    def __eq__(self, other: object) -> bool:
        return isinstance(other, UnreadableJSON) and (self.reason, self.text) == (other.reason, other.text)

    def __hash__(self) -> int:
        return hash((self.reason, self.text))


def read_number(text: str) -> Any:
    """A JSON number's text as Python reads it (int or float), or exactly as a Decimal where that
    would fail or lose it: an integer longer than int() reads, a number beyond a float's range."""
    if _INTEGER.fullmatch(text):
        digits = len(text) - (text[0] == "-")
        if digits <= _int_limit():
            return int(text)
        return Decimal(text)
    return _read_float(text)


def _int_limit() -> int:
    limit = sys.get_int_max_str_digits()
    return limit if limit > 0 else sys.maxsize


def _read_float(text: str, _float: type[float] = float) -> Any:
    # called for every fractional or exponent number of every payload: a float's range is tested
    # as value - value, 0.0 for every finite value and nan for an infinite one (no call)
    value = _float(text)
    return Decimal(text) if value - value else value


_INTEGER = re.compile(r"-?(?:0|[1-9]\d*)")
_DECODER = json.JSONDecoder(parse_float=_read_float)
_SCAN = _DECODER.scan_once
_WHITESPACE = re.compile(r"[ \t\n\r]*")
_NUMBER = re.compile(r"-?(?:0|[1-9]\d*)(?:\.\d+)?(?:[eE][-+]?\d+)?")
_scanstring = json.decoder.scanstring
_LITERALS = {"true": True, "false": False, "null": None}


def load_json(text: str) -> Any:
    """The value of JSON text a server stored (see the module's docstring); never raises for it:
    text that cannot be read is an UnreadableJSON."""
    try:
        value, end = _SCAN(text, 0)
        if end == len(text):
            return value
    except (StopIteration, ValueError, RecursionError):
        pass
    try:
        return _DECODER.decode(text)
    except (ValueError, RecursionError):
        pass
    try:
        return _load_without_recursion(text)
    except (ValueError, IndexError) as exc:
        return UnreadableJSON(f"not JSON this client reads: {exc}", text)


def _load_without_recursion(text: str) -> Any:
    """JSON text read with an explicit stack (any depth), numbers by read_number."""
    stack: list[tuple[Any, str | None]] = []  # (the open container, the member name it waits for)
    pos = _WHITESPACE.match(text, 0).end()
    value: Any = None
    while True:
        char = text[pos] if pos < len(text) else ""
        if char == "{" or char == "[":
            pos = _WHITESPACE.match(text, pos + 1).end()
            if char == "[":
                if text[pos : pos + 1] == "]":
                    value, pos = [], pos + 1
                else:
                    stack.append(([], None))
                    continue
            elif text[pos : pos + 1] == "}":
                value, pos = {}, pos + 1
            else:
                name, pos = _member_name(text, pos)
                stack.append(({}, name))
                continue
        elif char == '"':
            value, pos = _scanstring(text, pos + 1)
        elif match := _NUMBER.match(text, pos):
            value, pos = read_number(match.group()), match.end()
        else:
            word = next((w for w in _LITERALS if text.startswith(w, pos)), None)
            if word is None:
                raise ValueError(f"unexpected character at {pos}")
            value, pos = _LITERALS[word], pos + len(word)
        # a value is complete: put it in its container, closing as many containers as end here
        while True:
            pos = _WHITESPACE.match(text, pos).end()
            if not stack:
                if pos != len(text):
                    raise ValueError(f"extra data at {pos}")
                return value
            container, name = stack[-1]
            if name is None:
                container.append(value)
            else:
                container[name] = value
            closer = "]" if name is None else "}"
            char = text[pos] if pos < len(text) else ""
            if char == ",":
                pos = _WHITESPACE.match(text, pos + 1).end()
                if name is not None:
                    name, pos = _member_name(text, pos)
                    stack[-1] = (container, name)
                break
            if char != closer:
                raise ValueError(f"expected ',' or {closer!r} at {pos}")
            stack.pop()
            value, pos = container, pos + 1


def _member_name(text: str, pos: int) -> tuple[str, int]:
    """An object member's name and the position after its colon (and the whitespace after it)."""
    if text[pos : pos + 1] != '"':
        raise ValueError(f"expected a member name at {pos}")
    name, pos = _scanstring(text, pos + 1)
    pos = _WHITESPACE.match(text, pos).end()
    if text[pos : pos + 1] != ":":
        raise ValueError(f"expected ':' at {pos}")
    return name, _WHITESPACE.match(text, pos + 1).end()


def dump_json_text(value: Any) -> str:
    """json.dumps(value) for what load_json reads (a display's JSON, as json.dumps writes it): a
    Decimal as its number, an UnreadableJSON as a string naming why, and nesting deeper than
    json.dumps recurses written without recursion."""
    try:
        return json.dumps(value)
    except (RecursionError, TypeError):
        return "".join(_dump_without_recursion(value))


class _Raw(str):
    """Text written as it is by _dump_without_recursion (punctuation, a member's name)."""


def _dump_without_recursion(value: Any) -> list[str]:
    out: list[str] = []
    todo: list[Any] = [value]
    while todo:
        item = todo.pop()
        if type(item) is _Raw:
            out.append(item)
        elif isinstance(item, dict):
            parts: list[Any] = [_Raw("{")]
            for i, (name, member) in enumerate(item.items()):
                parts += [_Raw(", " if i else ""), _Raw(json.dumps(str(name)) + ": "), member]
            todo.extend(reversed([*parts, _Raw("}")]))
        elif isinstance(item, (list, tuple)):
            parts = [_Raw("[")]
            for i, member in enumerate(item):
                parts += [_Raw(", " if i else ""), member]
            todo.extend(reversed([*parts, _Raw("]")]))
        elif isinstance(item, Decimal):
            out.append(str(item))
        elif isinstance(item, UnreadableJSON):
            out.append(json.dumps(f"(unreadable: {item.reason})"))
        else:
            out.append(json.dumps(item, default=str))
    return out
