"""Label and field selectors, parsed once per request and matched against stored objects.

Grammar follows apimachinery ``labels.Parse`` (``=``, ``==``, ``!=``, ``in``, ``notin``,
``key`` exists, ``!key`` does not exist, comma = AND) and ``fields.ParseSelector`` (``=``,
``==``, ``!=`` only). Field values are read through the resource type's supported field
labels; an unsupported field label is a 400, as in Kubernetes. A missing field reads as
the empty string.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from .errors import ApiError, bad_request

LABEL_KEY = re.compile(
    r"^([a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*/)?"
    r"[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?$"
)
LABEL_VALUE = re.compile(r"^(([A-Za-z0-9][-A-Za-z0-9_.]{0,61})?[A-Za-z0-9])?$")


@dataclass(frozen=True)
class Requirement:
    key: str
    op: str  # "=", "!=", "in", "notin", "exists", "!exists"
    values: tuple[str, ...] = ()

    def matches(self, labels: Mapping[str, str]) -> bool:
        present = self.key in labels
        value = labels.get(self.key)
        if self.op == "exists":
            return present
        if self.op == "!exists":
            return not present
        if self.op in ("=", "in"):
            return present and value in self.values
        # "!=" and "notin" match objects without the key, like Kubernetes.
        return not present or value not in self.values


def _split_top_level(text: str) -> list[str]:
    parts: list[str] = []
    current: list[str] = []
    depth = 0
    for ch in text:
        if ch == "(":
            depth += 1
        elif ch == ")":
            depth -= 1
        if ch == "," and depth == 0:
            parts.append("".join(current))
            current = []
        else:
            current.append(ch)
    parts.append("".join(current))
    return [p.strip() for p in parts if p.strip()]


def _check_key(key: str, text: str) -> str:
    if not LABEL_KEY.match(key):
        raise bad_request(f'unable to parse requirement: invalid label key "{key}" in "{text}"')
    return key


def _check_value(value: str, text: str) -> str:
    if not LABEL_VALUE.match(value):
        raise bad_request(f'unable to parse requirement: invalid label value "{value}" in "{text}"')
    return value


_SET_RE = re.compile(r"^(\S+)\s+(in|notin)\s*\((.*)\)$")


def parse_label_selector(text: str | None) -> tuple[Requirement, ...]:
    """Parse ``labelSelector``; raises a 400 ApiError on bad syntax."""
    if not text:
        return ()
    reqs: list[Requirement] = []
    for part in _split_top_level(text):
        set_match = _SET_RE.match(part)
        if set_match:
            key = _check_key(set_match.group(1), text)
            values = tuple(
                _check_value(v.strip(), text) for v in set_match.group(3).split(",") if v.strip()
            )
            reqs.append(Requirement(key, set_match.group(2), values))
            continue
        for token, op in (("!=", "!="), ("==", "="), ("=", "=")):
            if token in part:
                key, value = part.split(token, 1)
                reqs.append(
                    Requirement(
                        _check_key(key.strip(), text), op, (_check_value(value.strip(), text),)
                    )
                )
                break
        else:
            if part.startswith("!"):
                reqs.append(Requirement(_check_key(part[1:].strip(), text), "!exists"))
            elif re.search(r"[\s()<>]", part):
                raise bad_request(f'unable to parse requirement: "{part}" in "{text}"')
            else:
                reqs.append(Requirement(_check_key(part, text), "exists"))
    return tuple(reqs)


def labels_match(reqs: tuple[Requirement, ...], obj: Mapping[str, Any]) -> bool:
    labels = (obj.get("metadata") or {}).get("labels") or {}
    return all(r.matches(labels) for r in reqs)


FieldReader = Callable[[Mapping[str, Any]], Any]


@dataclass(frozen=True)
class FieldRequirement:
    field: str
    equal: bool
    value: str


def parse_field_selector(
    text: str | None, supported: Mapping[str, FieldReader]
) -> tuple[FieldRequirement, ...]:
    """Parse ``fieldSelector`` against the resource's supported field labels."""
    if not text:
        return ()
    reqs: list[FieldRequirement] = []
    for part in _split_top_level(text):
        for token, equal in (("!=", False), ("==", True), ("=", True)):
            if token in part:
                field, value = part.split(token, 1)
                field = field.strip()
                if field not in supported:
                    raise ApiError(400, "BadRequest", f"field label not supported: {field}")
                reqs.append(FieldRequirement(field, equal, value.strip()))
                break
        else:
            raise bad_request(f"invalid selector: '{text}'; can't understand '{part}'")
    return tuple(reqs)


def field_value(reader: FieldReader, obj: Mapping[str, Any]) -> str:
    value = reader(obj)
    if value is None:
        return ""
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


def fields_match(
    reqs: tuple[FieldRequirement, ...],
    supported: Mapping[str, FieldReader],
    obj: Mapping[str, Any],
) -> bool:
    for req in reqs:
        actual = field_value(supported[req.field], obj)
        if (actual == req.value) != req.equal:
            return False
    return True


def path_reader(path: str) -> FieldReader:
    """A reader for a dotted path such as ``spec.nodeName``."""
    parts = path.split(".")

    def read(obj: Mapping[str, Any]) -> Any:
        current: Any = obj
        for part in parts:
            if not isinstance(current, Mapping):
                return None
            current = current.get(part)
        return current

    return read
