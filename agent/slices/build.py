"""PersonaSet → ResourceSlices (resource.k8s.io/v1), one pool per node.

Entry points: :func:`build_slices` (pure, one generation) and :class:`SlicePublisher`
(keeps the generation coherent: it increases exactly when the published content changes).

Shape and limits follow the v1 API (checked against the upstream 1.37 OpenAPI schema):
counter-bearing and device-bearing slices are separate (``sharedCounters`` and ``devices``
are mutually exclusive in one slice); ≤ 8 counter sets per slice, ≤ 32 counters per set;
≤ 128 devices per slice, ≤ 64 when a device in it consumes counters; ≤ 2 consumptions per
device; ≤ 32 attributes + capacities per device; attribute strings ≤ 64 characters. Every
slice of one generation carries the same ``pool.generation`` and the total
``resourceSliceCount``.
"""

from __future__ import annotations

import functools
import hashlib
import logging
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from dmn.agent.personas.model import DRIVER, MEMBERS, PersonaSet
from dmn.interpreter.canonical_json import canonical_json

log = logging.getLogger(__name__)

MAX_DEVICES = 128
MAX_DEVICES_WITH_COUNTERS = 64
MAX_COUNTER_SETS = 8
MAX_CONSUMPTIONS = 2


MAX_COUNTERS = 32
MAX_GROUPS = 2
MAX_ATTRIBUTES_AND_CAPACITIES = 32
MAX_STRING_VALUE = 64
MAX_ID = 32
_DNS_LABEL = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?")
_C_IDENTIFIER = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_DNS_SUBDOMAIN = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*")


class SliceLimitError(ValueError):
    """A persona set that cannot be published within the v1 limits (reason E_SLICE_LIMIT)."""

    code = "E_SLICE_LIMIT"


def _chunks(items: list[Any], size: int) -> list[list[Any]]:
    return [items[i : i + size] for i in range(0, len(items), size)]


def build_slices(
    personas: PersonaSet,
    node_name: str,
    generation: int,
    *,
    driver: str = DRIVER,
    devices: dict[str, dict[str, Any]] | None = None,
) -> list[dict[str, Any]]:
    """All slices of the node's pool at ``generation`` (counter slices first).

    ``devices`` may carry the already rendered device entries by name (the publisher
    renders them once for its digest)."""
    rendered = devices if devices is not None else _render(personas)
    for p in personas.personas:
        if len(p.consumptions) > MAX_CONSUMPTIONS:
            raise SliceLimitError(f"device {p.name}: {len(p.consumptions)} counter consumptions")
    counter_sets = [
        {"name": name, "counters": {MEMBERS: {"value": str(total)}}}
        for name, total in sorted(personas.counter_sets.items())
    ]
    ordered = sorted(personas.personas, key=lambda p: p.name)
    consuming = [rendered[p.name] for p in ordered if p.consumptions]
    plain = [rendered[p.name] for p in ordered if not p.consumptions]
    bodies: list[tuple[str, dict[str, Any]]] = []
    for i, chunk in enumerate(_chunks(counter_sets, MAX_COUNTER_SETS)):
        bodies.append((f"{node_name}-network-counters-{i}", {"sharedCounters": chunk}))
    device_chunks = _chunks(consuming, MAX_DEVICES_WITH_COUNTERS) + _chunks(plain, MAX_DEVICES)
    for i, chunk in enumerate(device_chunks):
        bodies.append((f"{node_name}-network-devices-{i}", {"devices": chunk}))
    if not bodies:
        bodies.append((f"{node_name}-network-devices-0", {"devices": []}))
    count = len(bodies)
    out: list[dict[str, Any]] = []
    for name, body in bodies:
        spec: dict[str, Any] = {
            "driver": driver,
            "nodeName": node_name,
            "pool": {"name": node_name, "generation": generation, "resourceSliceCount": count},
        }
        spec.update(body)
        out.append(
            {
                "apiVersion": "resource.k8s.io/v1",
                "kind": "ResourceSlice",
                "metadata": {"name": name, "labels": {f"{DRIVER}/node": node_name}},
                "spec": spec,
            }
        )
    problems = [f"{s['metadata']['name']}: {p}" for s in out for p in limit_violations(s)]
    if problems:
        raise SliceLimitError("; ".join(problems))
    return out


def _dns_label(name: str) -> bool:
    return len(name) <= 63 and _DNS_LABEL.fullmatch(name) is not None


@functools.lru_cache(maxsize=1024)
def _qualified_name_ok(name: str) -> bool:
    """``domain/ID`` or ``ID``: ID a C identifier ≤ 32, domain a DNS subdomain ≤ 63."""
    domain, _, ident = name.rpartition("/")
    if len(ident) > MAX_ID or _C_IDENTIFIER.fullmatch(ident) is None:
        return False
    return not domain or (len(domain) <= 63 and _DNS_SUBDOMAIN.fullmatch(domain) is not None)


def limit_violations(slice_doc: dict[str, Any]) -> list[str]:
    """Every resource.k8s.io/v1 ResourceSlice limit this slice breaks (empty: none).

    The upstream OpenAPI schema states most of these in prose only, so
    ``kubernetes-validate`` cannot catch them; this check runs on every slice
    :func:`build_slices` produces."""
    spec = slice_doc["spec"]
    out: list[str] = []
    devices = spec.get("devices") or []
    counter_sets = spec.get("sharedCounters") or []
    if devices and counter_sets:
        out.append("devices and sharedCounters in one slice")
    limit = (
        MAX_DEVICES_WITH_COUNTERS
        if any(d.get("consumesCounters") for d in devices)
        else MAX_DEVICES
    )
    if len(devices) > limit:
        out.append(f"{len(devices)} devices (limit {limit})")
    if len(counter_sets) > MAX_COUNTER_SETS:
        out.append(f"{len(counter_sets)} counter sets (limit {MAX_COUNTER_SETS})")
    for cs in counter_sets:
        if not _dns_label(cs["name"]):
            out.append(f"counter set name {cs['name']!r} is not a DNS label")
        if len(cs["counters"]) > MAX_COUNTERS:
            out.append(f"counter set {cs['name']}: {len(cs['counters'])} counters")
    for d in devices:
        name = d["name"]
        if not _dns_label(name):
            out.append(f"device name {name!r} is not a DNS label")
        consumptions = d.get("consumesCounters") or []
        if len(consumptions) > MAX_CONSUMPTIONS:
            out.append(f"device {name}: {len(consumptions)} counter consumptions")
        for c in consumptions:
            if len(c["counters"]) > MAX_COUNTERS:
                out.append(f"device {name}: {len(c['counters'])} counters consumed")
            groups = c.get("compatibilityGroups") or []
            if len(groups) > MAX_GROUPS or len(set(groups)) != len(groups):
                out.append(f"device {name}: compatibilityGroups {groups}")
        attributes = d.get("attributes") or {}
        total = len(attributes) + len(d.get("capacity") or {})
        if total > MAX_ATTRIBUTES_AND_CAPACITIES:
            out.append(f"device {name}: {total} attributes and capacities")
        for key, value in attributes.items():
            if not _qualified_name_ok(key):
                out.append(f"device {name}: attribute name {key!r}")
            text = value.get("string")
            if isinstance(text, str) and len(text) > MAX_STRING_VALUE:
                out.append(f"device {name}: attribute {key} is {len(text)} characters")
        for key in d.get("capacity") or {}:
            if not _qualified_name_ok(key):
                out.append(f"device {name}: capacity name {key!r}")
    return out


def _render(personas: PersonaSet) -> dict[str, dict[str, Any]]:
    return {p.name: p.to_device() for p in personas.personas}


def content_digest(personas: PersonaSet, devices: dict[str, dict[str, Any]] | None = None) -> str:
    """Digest of what the pool publishes, independent of generation."""
    rendered = devices if devices is not None else _render(personas)
    body = {
        "devices": [rendered[name] for name in sorted(rendered)],
        "counterSets": dict(sorted(personas.counter_sets.items())),
    }
    return hashlib.sha256(canonical_json(body)).hexdigest()


@dataclass
class SlicePublisher:
    """Per-node pool generations: bump only when the content changes.

    ``generation`` and ``digest`` are the last published values; the node agent persists
    them (a restarted agent must publish a generation above any it published before).
    """

    node_name: str
    generation: int = 0
    digest: str = ""

    def publish(
        self,
        personas: PersonaSet,
        taints: Mapping[str, list[dict[str, str]]] | None = None,
    ) -> tuple[bool, list[dict[str, Any]]]:
        """(changed, slices) for the current persona set, with ``taints`` by device name
        (a taint that comes or goes is a content change)."""
        devices = _with_taints(_render(personas), taints)
        digest = content_digest(personas, devices)
        changed = digest != self.digest
        if changed:
            self.generation += 1
            self.digest = digest
            log.info(
                "pool generation node=%s generation=%d devices=%d",
                self.node_name,
                self.generation,
                len(personas.personas),
            )
        return changed, build_slices(personas, self.node_name, self.generation, devices=devices)

    def changes(
        self,
        personas: PersonaSet,
        taints: Mapping[str, list[dict[str, str]]] | None = None,
    ) -> bool:
        """Whether :meth:`publish` with the same arguments would change the content (and
        so the generation); nothing is changed."""
        return content_digest(personas, _with_taints(_render(personas), taints)) != self.digest


def _with_taints(
    devices: dict[str, dict[str, Any]], taints: Mapping[str, list[dict[str, str]]] | None
) -> dict[str, dict[str, Any]]:
    for name, device_taints in (taints or {}).items():
        if name in devices and device_taints:
            devices[name] = {**devices[name], "taints": list(device_taints)}
    return devices


def personas_of(slices: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """Device entries by name across a pool's slices (for read-back checks)."""
    out: dict[str, dict[str, Any]] = {}
    for s in slices:
        for d in s["spec"].get("devices") or ():
            out[d["name"]] = d
    return out
