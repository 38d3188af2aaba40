"""JSON that round-trips without loss: exact numeric text, key order, repeated keys.

Why not plain ``json.loads``: it turns ``1e400`` into ``inf``, ``0.1000000000000000055`` into a
rounded float, and keeps only the last of two equal keys, so re-serialising a CNI
configuration could change what a Go plugin reads. Here a number stays the text it was
written as (:class:`Number`), an object is the ordered list of its members (:class:`Object`,
repeats included, so the caller decides which repeats are ambiguous), and the serializer
writes exactly that back. The nesting depth is checked on the text before the standard
decoder (which recurses) ever sees it, so no input can raise anything but :class:`JsonError`.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Union

#: Deepest nesting of arrays and objects accepted. CNI configurations and Pod selections
#: are a few levels deep; the bound keeps every recursive walk far from Python's limit.
MAX_DEPTH = 32


class JsonError(ValueError):
    """The text is not JSON this module accepts; ``path`` is where, ``message`` why."""

    def __init__(self, path: str, message: str) -> None:
        super().__init__(path, message)
        self.path = path
        self.message = message


@dataclass(frozen=True, slots=True)
class Number:
    """A JSON number kept as its exact source text (``18446744073709551617``, ``1.50``)."""

    text: str


@dataclass(slots=True)
class Object:
    """A JSON object as its members in source order; a key may repeat."""

    members: list[tuple[str, Value]] = field(default_factory=list)

    def keys(self) -> list[str]:
        return [k for k, _ in self.members]

    def count(self, key: str) -> int:
        return sum(1 for k, _ in self.members if k == key)

    def has(self, key: str) -> bool:
        return any(k == key for k, _ in self.members)

    def get(self, key: str) -> Value | None:
        """The last value of ``key`` (what Go's decoder keeps), or None when absent.

        A present JSON ``null`` is also None; use :meth:`has` to tell them apart.
        """
        found: Value | None = None
        for k, v in self.members:
            if k == key:
                found = v
        return found

    def set(self, key: str, value: Value, after: str | None = None) -> None:
        """Replace every value of ``key`` in place, or insert it after ``after`` (or first)."""
        if self.has(key):
            self.members = [(k, value if k == key else v) for k, v in self.members]
            return
        index = 0
        if after is not None:
            for i, (k, _) in enumerate(self.members):
                if k == after:
                    index = i + 1
        self.members.insert(index, (key, value))

    def items(self) -> Iterator[tuple[str, Value]]:
        return iter(self.members)


Value = Union[None, bool, str, Number, list["Value"], Object]  # noqa: UP007


def check_depth(text: str, limit: int = MAX_DEPTH) -> None:
    """Refuse ``text`` whose arrays/objects nest deeper than ``limit`` (strings skipped)."""
    depth = 0
    in_string = False
    escaped = False
    for char in text:
        if in_string:
            if escaped:
                escaped = False
            elif char == "\\":
                escaped = True
            elif char == '"':
                in_string = False
        elif char == '"':
            in_string = True
        elif char in "[{":
            depth += 1
            if depth > limit:
                raise JsonError("", f"nested deeper than {limit} levels")
        elif char in "]}":
            depth -= 1


def _constant(name: str) -> Value:
    raise JsonError("", f"{name} is not JSON")


def parse(text: str) -> Value:
    """``text`` as a lossless value; :class:`JsonError` for anything that is not JSON."""
    check_depth(text)
    try:
        result: Value = json.loads(
            text,
            object_pairs_hook=lambda pairs: Object(list(pairs)),
            parse_int=Number,
            parse_float=Number,
            parse_constant=_constant,
        )
    except JsonError:
        raise
    except json.JSONDecodeError as exc:
        raise JsonError(
            "", f"malformed JSON at line {exc.lineno} column {exc.colno}: {exc.msg}"
        ) from None
    except (ValueError, RecursionError) as exc:
        raise JsonError("", f"malformed JSON: {exc}") from None
    return result


def parse_array_elements(text: str) -> list[tuple[str, Value]]:
    """A top-level JSON array as ``(exact element text, value)`` pairs, in order.

    The element text is the slice of ``text`` the element was decoded from, so an element
    written back is byte-for-byte what its author wrote. Anything but an array is refused.
    """
    check_depth(text)
    decoder = json.JSONDecoder(
        object_pairs_hook=lambda pairs: Object(list(pairs)),
        parse_int=Number,
        parse_float=Number,
        parse_constant=_constant,
    )
    ws = " \t\n\r"
    n = len(text)
    i = 0
    while i < n and text[i] in ws:
        i += 1
    if i >= n or text[i] != "[":
        raise JsonError("", "not a JSON array")
    i += 1
    elements: list[tuple[str, Value]] = []
    try:
        while True:
            while i < n and text[i] in ws:
                i += 1
            if i < n and text[i] == "]" and not elements:
                i += 1
                break
            value, end = decoder.raw_decode(text, i)
            elements.append((text[i:end], value))
            i = end
            while i < n and text[i] in ws:
                i += 1
            if i < n and text[i] == ",":
                i += 1
                continue
            if i < n and text[i] == "]":
                i += 1
                break
            raise JsonError(f"[{len(elements) - 1}]", "expected ',' or ']' after the element")
    except JsonError:
        raise
    except json.JSONDecodeError as exc:
        raise JsonError(
            f"[{len(elements)}]", f"malformed JSON at line {exc.lineno} column {exc.colno}"
        ) from None
    except (ValueError, RecursionError) as exc:
        raise JsonError(f"[{len(elements)}]", f"malformed JSON: {exc}") from None
    while i < n and text[i] in ws:
        i += 1
    if i != n:
        raise JsonError("", "extra data after the array")
    return elements


def _string(value: str) -> str:
    if any("\ud800" <= c <= "\udfff" for c in value):
        return json.dumps(value, ensure_ascii=True)
    return json.dumps(value, ensure_ascii=False)


def dumps(value: Value) -> str:
    """Compact JSON text of ``value``: numbers verbatim, members in order, repeats kept."""
    parts: list[str] = []
    _write(value, parts)
    return "".join(parts)


def _write(value: Value, out: list[str]) -> None:
    if value is None:
        out.append("null")
    elif value is True:
        out.append("true")
    elif value is False:
        out.append("false")
    elif isinstance(value, str):
        out.append(_string(value))
    elif isinstance(value, Number):
        out.append(value.text)
    elif isinstance(value, list):
        out.append("[")
        for i, item in enumerate(value):
            if i:
                out.append(",")
            _write(item, out)
        out.append("]")
    else:
        out.append("{")
        for i, (key, item) in enumerate(value.members):
            if i:
                out.append(",")
            out.append(_string(key))
            out.append(":")
            _write(item, out)
        out.append("}")


def equal(a: Value, b: Value) -> bool:
    """Structural equality with numbers compared by their exact text."""
    if isinstance(a, Object) and isinstance(b, Object):
        return len(a.members) == len(b.members) and all(
            ka == kb and equal(va, vb)
            for (ka, va), (kb, vb) in zip(a.members, b.members, strict=True)
        )
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(equal(x, y) for x, y in zip(a, b, strict=True))
    if isinstance(a, bool) or isinstance(b, bool):
        return a is b
    return type(a) is type(b) and a == b
