"""Task arguments and results between Python values and JSON, by their annotations.

to_json writes a value as JSON-native data (dataclasses, datetime, date, time, timedelta as seconds,
UUID, Decimal as a string, Enum as its value, tuples, sets, pydantic models); reader_for(hint) makes
the function that checks JSON data against an annotation and rebuilds the value it says, raising
Mismatch (where in the value, what was expected, what came) when the data does not fit."""

from __future__ import annotations

import collections.abc
import dataclasses
import datetime as dt
import decimal
import enum
import inspect
import math
import types
import typing
import uuid
from collections.abc import Callable
from typing import Any, TypeAlias, TypeVar

from ..dialects import JSONValue

__all__ = [
    "Mismatch",
    "NotJson",
    "Reader",
    "UNION_TYPES",
    "exact_or_reader",
    "from_json",
    "json_type_name",
    "reader_for",
    "to_json",
    "type_hints",
    "type_name",
    "type_text",
]


class NotJson(Exception):
    pass


# A type annotation as typing.get_type_hints gives it: a class, a generic alias (list[int]), a union,
# Literal[...], Any. Any itself: it is inspected with typing.get_origin and issubclass, whatever it is.
Hint: TypeAlias = Any


def _is_pydantic_model(value: object) -> bool:
    return hasattr(type(value), "model_fields") and hasattr(value, "model_dump")


def to_json(value: Any) -> JSONValue:
    """value as JSON-native data (dict, list, str, int, float, bool, None); NotJson if it has none."""
    if value is None or isinstance(value, (bool, str)):
        return value
    if isinstance(value, enum.Enum):
        return to_json(value.value)
    if isinstance(value, int):
        return int(value)
    if isinstance(value, float):
        if not math.isfinite(value):
            raise NotJson(f"{value!r} is not a JSON number")
        return value
    if isinstance(value, (dt.datetime, dt.date, dt.time)):
        return value.isoformat()
    if isinstance(value, dt.timedelta):
        return value.total_seconds()
    if isinstance(value, uuid.UUID):
        return str(value)
    if isinstance(value, decimal.Decimal):
        if not value.is_finite():
            raise NotJson(f"{value!r} is not a JSON number")
        return str(value)
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {f.name: to_json(getattr(value, f.name)) for f in dataclasses.fields(value)}
    if _is_pydantic_model(value):
        return value.model_dump(mode="json")
    if isinstance(value, collections.abc.Mapping):
        out = {}
        for k, v in value.items():
            if not isinstance(k, str):
                raise NotJson(f"a JSON object's keys are strings, not {type(k).__name__} ({k!r})")
            out[k] = to_json(v)
        return out
    if isinstance(value, (list, tuple, set, frozenset)):
        items = [to_json(v) for v in value]
        if isinstance(value, (set, frozenset)):
            items.sort(key=repr)
        return items
    raise NotJson(f"JSON has no type for {type(value).__name__}")


UNION_TYPES: tuple[object, ...] = (typing.Union, types.UnionType)
_SEQUENCES = (list, collections.abc.Sequence, collections.abc.MutableSequence, collections.abc.Iterable)
_SETS = (set, frozenset, collections.abc.Set, collections.abc.MutableSet)
_MAPPINGS = (dict, collections.abc.Mapping, collections.abc.MutableMapping)


class Mismatch(Exception):
    """JSON data that does not fit an annotation: where in the value (``[2]``, ``['k']``,
    ``.field``), what was expected, what came."""

    def __init__(self, expected: str, data: JSONValue, where: str = "", detail: str = "") -> None:
        self.expected, self.data, self.where, self.detail = expected, data, where, detail
        super().__init__(self.text())

    def inside(self, step: str) -> Mismatch:
        self.where = step + self.where
        return self

    def text(self) -> str:
        shown = repr(self.data)
        if len(shown) > 60:
            shown = shown[:57] + "..."
        got = "null (None)" if self.data is None else f"{shown} ({json_type_name(self.data)})"
        return f"is {got}, expected {self.expected}" + (f" ({self.detail})" if self.detail else "")


def json_type_name(data: object) -> str:
    names: dict[type, str] = {dict: "object", list: "array"}
    return names.get(type(data), type(data).__name__)


def type_text(hint: Any) -> str:
    """An annotation as a reader writes it: int | None, list[str], Literal['a', 'b'], Address."""
    if hint is type(None) or hint is None:
        return "None"
    origin = typing.get_origin(hint)
    args = typing.get_args(hint)
    if origin is typing.Annotated:
        return type_text(args[0])
    if origin is typing.Literal:
        return f"Literal[{', '.join(map(repr, args))}]"
    if origin in UNION_TYPES:
        return " | ".join(type_text(a) for a in args)
    if origin is not None:
        name = getattr(origin, "__name__", str(origin))
        return (
            f"{name}[{', '.join('...' if a is Ellipsis else type_text(a) for a in args)}]" if args else name
        )
    return getattr(hint, "__name__", str(hint).replace("typing.", ""))


def detail(exc: BaseException) -> str:
    """What a conversion's error says, when it says something a reader can use."""
    if isinstance(exc, decimal.DecimalException):
        return ""  # its text is [<class 'decimal.ConversionSyntax'>]
    errors_of = getattr(exc, "errors", None)
    if callable(errors_of):  # pydantic's ValidationError: its first errors, each on its path
        try:
            return "; ".join(
                f"{'.'.join(map(str, e.get('loc', ()))) or 'value'}: {e.get('msg')}" for e in errors_of()[:3]
            )
        except Exception:
            pass
    return str(exc).splitlines()[0] if str(exc) else type(exc).__name__


# Reads JSON data as an annotation says; returns the value the application's function takes (Any:
# its type is the annotation's, handed to the application's code as it is).
Reader = Callable[[JSONValue], Any]


def reader_for(hint: Any) -> Reader | None:
    """How JSON data is checked against the annotation `hint` and rebuilt as it says: a function
    that returns the value or raises Mismatch; None when any data is taken as it is (no
    annotation, Any, object, an annotation that does not resolve). JSON-native types are checked
    as they are (an int is not a bool, nor a float; a float takes an int), containers item by
    item, unions in their order, Literal by value and type; the types JSON has none for
    (datetime, UUID, Decimal, Enum, dataclasses, pydantic models...) are rebuilt from what
    to_json writes, a value they cannot be rebuilt from being a mismatch."""
    if hint is Any or hint is inspect.Parameter.empty or hint is object or isinstance(hint, (str, TypeVar)):
        return None
    origin = typing.get_origin(hint)
    args = typing.get_args(hint)
    expected = type_text(hint)
    if origin is typing.Annotated:
        return reader_for(args[0])
    if hint is type(None) or hint is None:

        def none(data: JSONValue) -> Any:
            if data is None:
                return None
            raise Mismatch("None", data)

        return none
    if hint in (str, bool, int):

        def exact(data: JSONValue) -> Any:
            if type(data) is hint:
                return data
            raise Mismatch(expected, data)

        exact.exact = hint  # type: ignore[attr-defined]  # (what containers check inline)
        return exact
    if hint is float:

        def number(data: JSONValue) -> Any:
            kind = type(data)
            if kind is float:
                return data
            if kind is int:
                return float(data)
            raise Mismatch(expected, data)

        return number
    if origin is typing.Literal:
        allowed = [(a, type(a)) for a in args]

        def literal(data: JSONValue) -> Any:
            for value, kind in allowed:
                if data == value and type(data) is kind:
                    return data
                if isinstance(value, enum.Enum) and data == value.value and type(data) is type(value.value):
                    return value
            raise Mismatch(expected, data)

        return literal
    if origin in UNION_TYPES:
        readers = [reader_for(a) for a in args]
        if any(r is None for r in readers):
            return None

        optional = (
            next((r for a, r in zip(args, readers) if a is not type(None)), None) if len(args) == 2 else None
        )
        if optional is not None and type(None) in args:

            def optional_value(data: JSONValue) -> Any:
                if data is None:
                    return None
                try:
                    return optional(data)
                except Mismatch as m:
                    if not m.where:  # the value itself: say both types it could be
                        m.expected = expected
                    raise

            return optional_value

        def union(data: JSONValue) -> Any:
            for r in readers:
                try:
                    return r(data)  # type: ignore[misc]
                except Mismatch:
                    continue
            raise Mismatch(expected, data)

        return union
    if origin is tuple or hint is tuple:
        if args and not (len(args) == 2 and args[1] is Ellipsis):
            items = [reader_for(a) for a in args]

            def fixed_tuple(data: JSONValue) -> Any:
                if type(data) is not list:
                    raise Mismatch(expected, data)
                if len(data) != len(items):
                    raise Mismatch(expected, data, detail=f"{len(data)} items, not {len(items)}")
                return tuple(
                    v if r is None else _read_item(r, v, f"[{i}]")
                    for i, (r, v) in enumerate(zip(items, data))
                )

            return fixed_tuple
        return _array(expected, reader_for(args[0]) if args else None, tuple)
    if origin in _SEQUENCES or hint is list:
        return _array(expected, reader_for(args[0]) if args else None, None)
    if origin in _SETS or hint in (set, frozenset):
        return _array(
            expected, reader_for(args[0]) if args else None, frozenset if frozenset in (origin, hint) else set
        )
    if origin in _MAPPINGS or hint is dict:
        value_reader = reader_for(args[1]) if len(args) == 2 else None
        exact_value = getattr(value_reader, "exact", None)

        def mapping(data: JSONValue) -> Any:
            if type(data) is not dict:
                raise Mismatch(expected, data)
            if value_reader is None:
                return data
            if exact_value is not None and all(type(v) is exact_value for v in data.values()):
                return data
            return {k: _read_item(value_reader, v, f"[{k!r}]") for k, v in data.items()}

        return mapping
    if origin is not None or not isinstance(hint, type):
        return None  # a generic this module does not know: taken as it is
    if dataclasses.is_dataclass(hint):
        return _dataclass_reader(hint, expected)
    json_types: tuple[type, ...]
    if issubclass(hint, enum.Enum):
        convert: Callable[[JSONValue], object] = hint
        json_types = (str, int, float, bool)
    elif issubclass(hint, (dt.datetime, dt.date, dt.time)):
        convert, json_types = hint.fromisoformat, (str,)
    elif issubclass(hint, dt.timedelta):
        convert, json_types = (lambda data: hint(seconds=data)), (int, float)
    elif issubclass(hint, uuid.UUID):
        convert, json_types = hint, (str,)
    elif issubclass(hint, decimal.Decimal):
        convert, json_types = (lambda data: hint(str(data))), (str, int, float)
    elif hasattr(hint, "model_validate") and hasattr(hint, "model_fields"):
        convert, json_types = hint.model_validate, (dict,)
    else:
        return None  # a class of the application's own: its value as it is

    def convert_value(data: JSONValue) -> Any:
        if type(data) not in json_types:
            raise Mismatch(expected, data)
        try:
            return convert(data)
        except Exception as exc:
            raise Mismatch(expected, data, detail=detail(exc)) from None

    return convert_value


def _read_item(reader: Reader, data: JSONValue, step: str) -> Any:
    try:
        return reader(data)
    except Mismatch as m:
        raise m.inside(step) from None


def _array(expected: str, item: Reader | None, container: Callable[[list[Any]], object] | None) -> Reader:
    exact = getattr(item, "exact", None)

    def array(data: JSONValue) -> Any:
        if type(data) is not list:
            raise Mismatch(expected, data)
        if item is None:
            return data if container is None else container(data)
        if exact is not None:  # list[str] and the like: one pass, no call per item
            for v in data:
                if type(v) is not exact:
                    break
            else:
                return data if container is None else container(data)
        values = [_read_item(item, v, f"[{i}]") for i, v in enumerate(data)]
        return values if container is None else container(values)

    return array


def _dataclass_reader(hint: type, expected: str) -> Reader:
    readers: dict[str, Reader | None] | None = None

    def dataclass_value(data: JSONValue) -> Any:
        nonlocal readers
        if readers is None:  # made at first use: a dataclass may refer to one defined after it
            hints = type_hints(hint)
            readers = {f.name: reader_for(hints.get(f.name, Any)) for f in dataclasses.fields(hint) if f.init}
        if type(data) is not dict:
            raise Mismatch(expected, data)
        unknown = sorted(set(data) - set(readers))
        if unknown:
            raise Mismatch(expected, data, detail=f"{expected} has no field {unknown[0]!r}")
        values = {}
        for k, v in data.items():
            r = readers[k]
            values[k] = v if r is None else _read_item(r, v, f".{k}")
        try:
            return hint(**values)
        except Exception as exc:
            raise Mismatch(expected, data, detail=detail(exc)) from None

    return dataclass_value


def exact_or_reader(hint: Any) -> type | Reader | None:
    """reader_for, or for str, int and bool the type itself (checked inline: the worker's common case)."""
    if hint in (str, int, bool):
        exact: type = hint
        return exact
    return reader_for(hint)


def from_json(data: JSONValue, hint: Any) -> Any:
    """JSON-native data as the annotation `hint` says (reader_for; as it is when it says nothing);
    Mismatch when it does not fit."""
    reader = reader_for(hint)
    return data if reader is None else reader(data)


def type_hints(obj: object) -> dict[str, Hint]:
    try:
        return typing.get_type_hints(obj, include_extras=True)
    except Exception:  # an annotation that does not resolve: those values come as they are
        return {}


def type_name(value: object) -> str:
    return type(value).__name__
