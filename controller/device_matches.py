"""How many published devices each DeviceClass of a topology selects (pure).

A topology can be Ready — compiled, revision and classes created — while no node publishes a
device its class selects (no DeviceExposurePolicy exposes the persona, a policy conflict
withdrew the devices, a hardware selector matches nothing). A claim for such a class stays
unschedulable with no hint why, so the controller reports the count per class on the
topology (``status.deviceMatches`` and the ``DevicesMatched`` condition).

The count evaluates each class's real CEL selectors with the one evaluator the lab's
scheduler uses (:mod:`dmn.api.device_selectors`) over the devices of the pools the scheduler
would allocate from (:func:`dmn.api.published_pools.usable_slices`). Selectors run in class
order and the first ``false`` stops, as upstream's ``selectorsMatch``; a CEL runtime error on
a device is counted apart, because upstream aborts every allocation attempt that reaches
that device. A device counts whether or not it is allocated now (the question is whether the
class can ever select something, not whether something is free).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from dmn.api.device_selectors import SelectorCache, SelectorError, device_variables
from dmn.api.identity import LABEL_ROOT_STEP
from dmn.api.published_pools import usable_slices

CONDITION = "DevicesMatched"
#: some class of the topology selects no published device
NO_MATCHING_DEVICES = "E_NO_MATCHING_DEVICES"
#: a class selector fails with a CEL runtime error on some published device
SELECTOR_ERROR = "E_SELECTOR_ERROR"


@dataclass(frozen=True, slots=True)
class ClassMatch:
    root_step: str
    device_class_name: str
    devices: int
    nodes: int
    errors: int = 0
    first_error: str = ""

    def to_api(self) -> dict[str, Any]:
        return {
            "rootStep": self.root_step,
            "deviceClassName": self.device_class_name,
            "devices": self.devices,
            "nodes": self.nodes,
            "selectorErrors": self.errors,
        }

    def describe(self) -> str:
        text = (
            f"root {self.root_step} (class {self.device_class_name}): "
            f"{self.devices} device(s) on {self.nodes} node(s)"
        )
        if self.errors:
            text += f", selector errors on {self.errors} device(s): {self.first_error}"
        return text


def _selected(
    cache: SelectorCache, expressions: Sequence[str], variables: Mapping[str, Any]
) -> bool:
    return all(cache.get(expression).matches(variables) for expression in expressions)


@dataclass(frozen=True, slots=True)
class _SliceCount:
    devices: int
    errors: int
    first_error: str


class SliceMatchMemo:
    """What a class's selectors select in one stored slice, by the selectors' text and the
    slice's UID and ``resourceVersion``: a slice the API server has not changed selects the
    same devices, so only changed slices are evaluated again.

    Why: every topology is reconciled again on each resync and on slice changes, and each
    count evaluated every selector on every published device — the controller's CPU per
    topology grew with the cluster's devices (scale.py: 1.2 → 3.0 → 5.5 s from 50 to 200
    nodes). Bounded: past ``limit`` entries it starts over (entries of superseded
    resourceVersions are never looked up again)."""

    def __init__(self, limit: int = 200_000) -> None:
        self.limit = limit
        self._counts: dict[tuple[tuple[str, ...], str, str], _SliceCount] = {}
        self.evaluated = 0  #: slices evaluated (tests read it)

    def count(
        self, cache: SelectorCache, expressions: tuple[str, ...], s: Mapping[str, Any]
    ) -> _SliceCount:
        """The kept count of ``s`` for ``expressions``, else evaluated now (and kept when
        the slice has a UID and a resourceVersion, as every stored slice does)."""
        meta = s.get("metadata") or {}
        uid, version = str(meta.get("uid") or ""), str(meta.get("resourceVersion") or "")
        key = (expressions, uid, version)
        got = self._counts.get(key) if uid and version else None
        if got is None:
            got = _count_slice(cache, expressions, s)
            self.evaluated += 1
            if uid and version:
                if len(self._counts) >= self.limit:
                    self._counts.clear()
                self._counts[key] = got
        return got


def _count_slice(
    cache: SelectorCache, expressions: Sequence[str], s: Mapping[str, Any]
) -> _SliceCount:
    driver = s["spec"]["driver"]
    devices, errors, first_error = 0, 0, ""
    for device in s["spec"].get("devices") or ():
        try:
            hit = _selected(cache, expressions, device_variables(driver, device))
        except SelectorError as exc:
            errors += 1
            first_error = first_error or f"device {device.get('name')}: {exc}"
            continue
        if hit:
            devices += 1
    return _SliceCount(devices, errors, first_error)


def count_matches(
    classes: Iterable[Mapping[str, Any]],
    slices: Iterable[Mapping[str, Any]],
    cache: SelectorCache | None = None,
    memo: SliceMatchMemo | None = None,
) -> list[ClassMatch]:
    """One :class:`ClassMatch` per DeviceClass in ``classes`` (order kept) over ``slices``.

    ``cache`` keeps compiled selectors across calls (the same classes are counted again on
    every slice change); ``memo`` keeps each unchanged slice's count."""
    cache = cache or SelectorCache()
    usable = usable_slices(slices)
    out: list[ClassMatch] = []
    for cls in classes:
        meta = cls["metadata"]
        expressions = tuple(
            sel["cel"]["expression"] for sel in (cls.get("spec") or {}).get("selectors") or ()
        )
        devices, errors, nodes, first_error = 0, 0, set(), ""
        for s in usable:
            if memo is None:
                count = _count_slice(cache, expressions, s)
            else:
                count = memo.count(cache, expressions, s)
            devices += count.devices
            errors += count.errors
            first_error = first_error or count.first_error
            if count.devices:
                nodes.add(s["spec"].get("nodeName") or "")
        out.append(
            ClassMatch(
                root_step=(meta.get("labels") or {}).get(LABEL_ROOT_STEP, ""),
                device_class_name=meta["name"],
                devices=devices,
                nodes=len(nodes),
                errors=errors,
                first_error=first_error[:512],
            )
        )
    return out


def matches_condition(matches: Sequence[ClassMatch]) -> tuple[bool, str, str]:
    """(status, reason, message) of the ``DevicesMatched`` condition.

    False with ``E_NO_MATCHING_DEVICES`` when some class selects no published device, else
    False with ``E_SELECTOR_ERROR`` when a selector fails on some device, else True."""
    message = "; ".join(m.describe() for m in matches)
    empty = [m for m in matches if m.devices == 0]
    if empty:
        names = ", ".join(f"{m.device_class_name} (root {m.root_step})" for m in empty)
        return False, NO_MATCHING_DEVICES, f"no published device matches {names}; {message}"
    if any(m.errors for m in matches):
        return False, SELECTOR_ERROR, message
    return True, "DevicesPublished", message
