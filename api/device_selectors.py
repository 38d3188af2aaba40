"""DRA CEL device selectors evaluated with the ``cel`` package (common-expression-language).

The ``device`` variable mirrors k8s.io/dynamic-resource-allocation/cel: ``device.driver``,
``device.allowMultipleAllocations``, ``device.attributes[domain][id]`` and
``device.capacity[domain][id]``. Attribute and capacity names without a domain belong to
the device's driver domain.

Missing data, as upstream: looking up a domain the device does not have yields an empty
map (upstream's map-with-default), so ``"x" in device.attributes["other.io"]`` is false;
looking up a missing *attribute* inside a domain is a CEL "no such key" runtime error.
Upstream, a runtime error is not "not selected": the scheduler aborts the allocation
attempt with that error. :class:`SelectorError` carries it so the allocator can do the
same. The emulation of the empty-map default pre-populates every domain literal the
expression names (``device.attributes["..."]``), because the Python CEL binding has no
map-with-default hook.

Deviations (documented in lab/allocator/README.md): capacities are plain numbers (ints
when whole), not the Kubernetes ``quantity`` CEL type, so ``compareTo``/``isGreaterThan``
are unavailable; the semver library is not implemented.

Bounded: the ``cel`` binding has no cost limit and holds the interpreter while it runs,
so nothing is compiled or evaluated before :func:`dmn.api.selector_language.check_selector`
has parsed it and found its worst-case cost within Kubernetes' limit for device selectors:
one evaluation cannot stall the caller (Kubernetes' API server refuses the same expressions
when a DeviceClass or ResourceClaim is written). Type problems are left to evaluation here,
because of the capacity deviation above; the compiler refuses them in topologies. A type
problem never lowers the estimate: what it makes unknown is unbounded.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from fractions import Fraction
from typing import Any

import cel

from dmn.api.quantity import parse_quantity
from dmn.api.selector_language import SYNTAX, TOO_COSTLY, check_selector

_DOMAIN_LITERAL = re.compile(r"device\.(attributes|capacity)\[\s*(['\"])([^'\"]+)\2\s*\]")


class SelectorError(Exception):
    """A selector failed to compile or evaluate; the allocation attempt fails with it."""

    def __init__(self, reason: str, message: str) -> None:
        super().__init__(message)
        self.reason = reason


class CompiledSelector:
    def __init__(self, expression: str) -> None:
        self.expression = expression
        for problem in check_selector(expression).problems:
            if problem.code == TOO_COSTLY:
                raise SelectorError("CELCostLimit", f"{expression[:200]!r}: {problem.message}")
            if problem.code == SYNTAX:
                raise SelectorError("CELCompileError", f"{expression[:200]!r}: {problem.message}")
        try:
            self.program = cel.compile(expression)
        except Exception as exc:  # the binding raises ValueError on syntax errors
            raise SelectorError("CELCompileError", f"{expression!r}: {exc}") from exc
        self.domains: dict[str, set[str]] = {"attributes": set(), "capacity": set()}
        for m in _DOMAIN_LITERAL.finditer(expression):
            self.domains[m.group(1)].add(m.group(3))

    def matches(self, variables: Mapping[str, Any]) -> bool:
        device = dict(variables["device"])
        for key in ("attributes", "capacity"):
            present = dict(device[key])
            for domain in self.domains[key]:
                present.setdefault(domain, {})
            device[key] = present
        try:
            result = self.program.execute({"device": device})
        except Exception as exc:
            raise SelectorError("CELRuntimeError", f"{self.expression!r}: {exc}") from exc
        if not isinstance(result, bool):
            raise SelectorError(
                "CELRuntimeError", f"{self.expression!r}: result {result!r} is not a bool"
            )
        return result


class SelectorCache:
    def __init__(self) -> None:
        self._compiled: dict[str, CompiledSelector] = {}

    def get(self, expression: str) -> CompiledSelector:
        compiled = self._compiled.get(expression)
        if compiled is None:
            compiled = CompiledSelector(expression)
            self._compiled[expression] = compiled
        return compiled


def _split(name: str, driver: str) -> tuple[str, str]:
    if "/" in name:
        domain, ident = name.split("/", 1)
        return domain, ident
    return driver, name


def _attribute_value(value: Mapping[str, Any]) -> Any:
    for key in ("string", "int", "bool", "version"):
        if key in value:
            return value[key]
    for key in ("strings", "ints", "bools", "versions"):
        if key in value:
            return list(value[key])
    raise SelectorError("UnsupportedAttribute", f"unsupported attribute value {value!r}")


def _number(q: Fraction) -> int | float:
    return q.numerator if q.denominator == 1 else float(q)


def device_variables(driver: str, device: Mapping[str, Any]) -> dict[str, Any]:
    """The CEL ``device`` variable of one ResourceSlice device entry."""
    attributes: dict[str, dict[str, Any]] = {}
    for name, value in (device.get("attributes") or {}).items():
        domain, ident = _split(name, driver)
        attributes.setdefault(domain, {})[ident] = _attribute_value(value)
    capacity: dict[str, dict[str, Any]] = {}
    for name, cap in (device.get("capacity") or {}).items():
        domain, ident = _split(name, driver)
        capacity.setdefault(domain, {})[ident] = _number(parse_quantity(cap["value"]))
    return {
        "device": {
            "driver": driver,
            "allowMultipleAllocations": bool(device.get("allowMultipleAllocations", False)),
            "attributes": attributes,
            "capacity": capacity,
        }
    }


def qualified_attribute(driver: str, device: Mapping[str, Any], name: str) -> Any | None:
    """Value of a fully qualified attribute (``domain/id``), or None when absent."""
    domain, ident = _split(name, driver)
    for key, value in (device.get("attributes") or {}).items():
        if _split(key, driver) == (domain, ident):
            return _attribute_value(value)
    return None
