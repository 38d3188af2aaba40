"""Merge the driver's managed selections into a Pod's Multus ``networks`` annotation, and
take exactly them out again.

The user-facing annotation stays :data:`NETWORKS_ANNOTATION`; what the driver owns in it is
recorded in :data:`REGISTRY_ANNOTATION` (JSON, ``{"version": 1, "entries": [...]}``, one entry
per binding with its key, claim, shadow namespace/name, interface and source template). The
rules (issue 41):

1. An absent or blank annotation is an empty list. A value containing ``[``, ``{`` or ``"``
   is a JSON array of objects (as Multus decides); anything else is Multus' comma notation
   ``[namespace/]name[@interface]``. Malformed input is refused, never replaced. An entry
   without a namespace means the Pod's namespace, as in Multus.
2. Unrelated JSON entries are kept byte for byte (their exact element text), with their
   unknown fields and their order; comma entries are rewritten as the equivalent JSON objects
   when the annotation must change.
3. Managed entries are exactly ``{"name", "namespace", "interface"}``; a recorded entry that
   was edited (other fields, another interface) is an ownership conflict, not a thing to fix.
4. An entry is owned only when the registry records its shadow; a selection of a shadow name
   the registry does not record (a generated-name collision) is an ownership conflict.
5. Missing managed entries are appended once, ordered by interface number, then key. Two
   bindings of the same template are two entries; nothing is deduplicated by template.
6. A user's own selection of a template a binding uses is
   :data:`~dmn.api.multus.errors.MANUAL_SELECTION`, naming that entry.
7. Release drops only one claim's recorded entries (and registry entries); a malformed
   registry or an unknown version is refused rather than guessed at.
8. The total size of all annotations (keys and values, UTF-8 bytes) after the merge must not
   exceed Kubernetes' :data:`MAX_ANNOTATIONS_BYTES`; nothing partial is produced.
9. Nothing to change gives None, so repeated repair never rewrites a running Pod.

Managed interfaces must also differ from every other entry's effective interface: its
``interface``, or ``net<position>`` (1-based position in the list), the name Multus gives an
entry without one when no default networks are configured.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from dmn.api.multus import lossless_json as lj
from dmn.api.multus.errors import (
    ANNOTATION_SIZE,
    INTERFACE_CONFLICT,
    MANUAL_SELECTION,
    OWNERSHIP,
    SELECTION_INVALID,
    MultusError,
)
from dmn.api.multus.names import DIGEST_HEX, INTERFACE_PREFIX, interface_number
from dmn.api.multus.template import (
    TemplateRef,
    valid_dns_label,
    valid_dns_subdomain,
    valid_ifname,
)

NETWORKS_ANNOTATION = "k8s.v1.cni.cncf.io/networks"
REGISTRY_ANNOTATION = "multus.dra-multi-network.schseba.github.io/selections"
REGISTRY_VERSION = 1
#: The interface the runtime gives the Pod's cluster network; never a managed one.
PRIMARY_INTERFACE = "eth0"
#: Kubernetes' limit on the sum of all annotation keys and values of one object, in bytes.
MAX_ANNOTATIONS_BYTES = 256 * 1024

_NETWORKS_FIELD = f"metadata.annotations[{NETWORKS_ANNOTATION}]"
_REGISTRY_FIELD = f"metadata.annotations[{REGISTRY_ANNOTATION}]"
_COMMA_PART = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?")
_SELECTION_KEYS = ("name", "namespace", "interface")
_KEY = re.compile(rf"[0-9a-f]{{{DIGEST_HEX}}}")


@dataclass(frozen=True)
class ManagedSelection:
    """One binding's selection: the shadow NAD the Pod attaches, and as which interface."""

    key: str
    claim_uid: str
    namespace: str
    name: str
    interface: str
    source: TemplateRef


@dataclass(frozen=True)
class _Entry:
    text: str  # the element's exact JSON text (canonical JSON for a comma item)
    name: str
    namespace: str | None
    interface: str | None
    plain: bool  # exactly name, namespace and interface, each once, all strings

    def target(self, pod_namespace: str | None) -> tuple[str | None, str]:
        return (self.namespace or pod_namespace, self.name)


def _selection_text(name: str, namespace: str | None, interface: str | None) -> str:
    doc: dict[str, str] = {"name": name}
    if namespace:
        doc["namespace"] = namespace
    if interface:
        doc["interface"] = interface
    return json.dumps(doc, separators=(",", ":"), ensure_ascii=False)


def _comma_entries(value: str) -> list[_Entry]:
    entries: list[_Entry] = []
    for i, raw in enumerate(value.split(",")):
        field = f"{_NETWORKS_FIELD}[{i}]"
        item = raw.strip()
        slash = item.split("/")
        if len(slash) > 2:
            raise MultusError(SELECTION_INVALID, field, f"{item!r}: more than one '/'")
        namespace = slash[0].strip() if len(slash) == 2 else ""
        at = slash[-1].split("@")
        if len(at) > 2:
            raise MultusError(SELECTION_INVALID, field, f"{item!r}: more than one '@'")
        name = at[0].strip()
        interface = at[1].strip() if len(at) == 2 else ""
        if not name:
            raise MultusError(SELECTION_INVALID, field, f"{item!r}: no network name")
        for part in (namespace, name, interface):
            if part and (len(part) > 253 or _COMMA_PART.fullmatch(part) is None):
                raise MultusError(SELECTION_INVALID, field, f"{item!r}: {part!r} is invalid")
        entries.append(
            _Entry(
                text=_selection_text(name, namespace or None, interface or None),
                name=name,
                namespace=namespace or None,
                interface=interface or None,
                plain=True,
            )
        )
    return entries


def _json_entry(i: int, text: str, value: lj.Value) -> _Entry:
    field = f"{_NETWORKS_FIELD}[{i}]"
    if not isinstance(value, lj.Object):
        raise MultusError(SELECTION_INVALID, field, "each selection must be a JSON object")
    strings: dict[str, str | None] = {}
    for key in _SELECTION_KEYS:
        if value.count(key) > 1:
            raise MultusError(SELECTION_INVALID, f"{field}.{key}", f"{key!r} is repeated")
        if not value.has(key):
            strings[key] = None
            continue
        item = value.get(key)
        if not isinstance(item, str):
            raise MultusError(SELECTION_INVALID, f"{field}.{key}", f"{key!r} must be a string")
        strings[key] = item
    name = strings["name"]
    if not name:
        raise MultusError(SELECTION_INVALID, f"{field}.name", "the network name is missing")
    plain = set(value.keys()) <= set(_SELECTION_KEYS) and all(strings[k] for k in _SELECTION_KEYS)
    return _Entry(text, name, strings["namespace"] or None, strings["interface"] or None, plain)


def parse_networks(value: str | None) -> list[_Entry]:
    """The annotation's entries in order (rule 1)."""
    if value is None or not value.strip():
        return []
    if not any(c in value for c in '[{"'):
        return _comma_entries(value)
    try:
        elements = lj.parse_array_elements(value)
    except lj.JsonError as exc:
        raise MultusError(SELECTION_INVALID, _NETWORKS_FIELD + exc.path, exc.message) from None
    return [_json_entry(i, text, item) for i, (text, item) in enumerate(elements)]


def _registry_string(obj: lj.Object, key: str, field: str) -> str:
    value = obj.get(key)
    if obj.count(key) != 1 or not isinstance(value, str) or not value:
        raise MultusError(OWNERSHIP, f"{field}.{key}", f"{key!r} must be one nonempty string")
    return value


def _registry_entry(i: int, value: lj.Value) -> ManagedSelection:
    field = f"{_REGISTRY_FIELD}.entries[{i}]"
    wanted = {"key", "claimUID", "namespace", "name", "interface", "source"}
    if not isinstance(value, lj.Object) or set(value.keys()) != wanted:
        raise MultusError(OWNERSHIP, field, f"an entry has exactly the fields {sorted(wanted)}")
    source = value.get("source")
    if (
        value.count("source") != 1
        or not isinstance(source, lj.Object)
        or set(source.keys()) != {"namespace", "name"}
    ):
        raise MultusError(OWNERSHIP, f"{field}.source", "'source' must be {namespace, name}")
    selection = ManagedSelection(
        key=_registry_string(value, "key", field),
        claim_uid=_registry_string(value, "claimUID", field),
        namespace=_registry_string(value, "namespace", field),
        name=_registry_string(value, "name", field),
        interface=_registry_string(value, "interface", field),
        source=TemplateRef(
            _registry_string(source, "namespace", f"{field}.source"),
            _registry_string(source, "name", f"{field}.source"),
        ),
    )
    _check_selection(selection, field)
    return selection


def parse_registry(value: str | None) -> list[ManagedSelection]:
    """The recorded managed selections, in their recorded order ([] when absent)."""
    if value is None:
        return []
    try:
        doc = lj.parse(value)
    except lj.JsonError as exc:
        raise MultusError(OWNERSHIP, _REGISTRY_FIELD + exc.path, exc.message) from None
    if not isinstance(doc, lj.Object) or set(doc.keys()) != {"version", "entries"}:
        raise MultusError(OWNERSHIP, _REGISTRY_FIELD, "not a selection registry")
    version = doc.get("version")
    if (
        doc.count("version") != 1
        or not isinstance(version, lj.Number)
        or version.text != str(REGISTRY_VERSION)
    ):
        raise MultusError(
            OWNERSHIP,
            f"{_REGISTRY_FIELD}.version",
            f"unknown registry version (this driver writes {REGISTRY_VERSION}); nothing is "
            "changed until a driver that knows it runs",
        )
    entries = doc.get("entries")
    if doc.count("entries") != 1 or not isinstance(entries, list):
        raise MultusError(OWNERSHIP, f"{_REGISTRY_FIELD}.entries", "'entries' must be an array")
    registry = [_registry_entry(i, item) for i, item in enumerate(entries)]
    _check_distinct(registry, _REGISTRY_FIELD)
    return registry


def _registry_text(registry: Sequence[ManagedSelection]) -> str:
    doc = {
        "version": REGISTRY_VERSION,
        "entries": [
            {
                "key": s.key,
                "claimUID": s.claim_uid,
                "namespace": s.namespace,
                "name": s.name,
                "interface": s.interface,
                "source": {"namespace": s.source.namespace, "name": s.source.name},
            }
            for s in registry
        ],
    }
    return json.dumps(doc, separators=(",", ":"), ensure_ascii=False)


def _check_selection(s: ManagedSelection, field: str) -> None:
    problems = [
        ("key", _KEY.fullmatch(s.key) is not None),
        ("claimUID", 0 < len(s.claim_uid) <= 128 and s.claim_uid.isprintable()),
        ("namespace", valid_dns_label(s.namespace)),
        ("name", valid_dns_label(s.name)),
        ("interface", valid_ifname(s.interface)),
        ("source.namespace", valid_dns_label(s.source.namespace)),
        ("source.name", valid_dns_subdomain(s.source.name)),
    ]
    for what, ok in problems:
        if not ok:
            raise MultusError(
                OWNERSHIP, f"{field}.{what}", f"invalid {what} in a managed selection"
            )


def _check_distinct(selections: Sequence[ManagedSelection], field: str) -> None:
    for attribute in ("key", "name", "interface"):
        seen: set[str] = set()
        for i, s in enumerate(selections):
            value = getattr(s, attribute)
            if value in seen:
                raise MultusError(
                    OWNERSHIP, f"{field}[{i}].{attribute}", f"{attribute} {value!r} repeats"
                )
            seen.add(value)
    if len({s.namespace for s in selections}) > 1:
        raise MultusError(OWNERSHIP, field, "managed selections in different namespaces")


def _natural(s: ManagedSelection) -> tuple[int, str, str]:
    number = interface_number(s.interface)
    return (number if number is not None else 1 << 62, s.interface, s.key)


def annotations_size(annotations: Mapping[str, str]) -> int:
    """Bytes Kubernetes counts against :data:`MAX_ANNOTATIONS_BYTES`: keys plus values."""
    return sum(
        len(k.encode("utf-8", "surrogatepass")) + len(v.encode("utf-8", "surrogatepass"))
        for k, v in annotations.items()
    )


def _owned(
    entries: Sequence[_Entry],
    registry: Sequence[ManagedSelection],
    pod_namespace: str | None,
    recorded_before: set[str],
    *,
    check_manual: bool,
) -> dict[int, ManagedSelection]:
    """Entry index -> the registry entry it is, with the ownership checks of rules 3, 4, 6."""
    by_target = {(s.namespace, s.name): s for s in registry}
    by_name = {s.name: s for s in registry}
    sources = {(s.source.namespace, s.source.name): s for s in registry}
    owned: dict[int, ManagedSelection] = {}
    for i, entry in enumerate(entries):
        field = f"{_NETWORKS_FIELD}[{i}]"
        target = entry.target(pod_namespace)
        selection = by_target.get((target[0] or "", target[1])) or by_name.get(entry.name)
        if selection is None:
            manual = sources.get((target[0] or "", target[1]))
            if manual is not None and check_manual:
                raise MultusError(
                    MANUAL_SELECTION,
                    field,
                    f"the selection {entry.text} names template "
                    f"{manual.source.namespace}/{manual.source.name}, which claim "
                    f"{manual.claim_uid} binds automatically as {manual.interface}; remove "
                    "the manual selection (the claim's device brings that network), or use a "
                    "class without the Multus template to keep selecting it by hand",
                )
            continue
        if selection.key not in recorded_before:
            raise MultusError(
                OWNERSHIP,
                field,
                f"the selection {entry.text} names the generated shadow {selection.name}, "
                "which no registry entry records: refusing a name collision without provenance",
            )
        if not (
            entry.plain
            and entry.namespace == selection.namespace
            and entry.interface == selection.interface
        ):
            raise MultusError(
                OWNERSHIP,
                field,
                f"the managed selection {entry.text} was edited; it must be exactly "
                f"{_selection_text(selection.name, selection.namespace, selection.interface)}",
            )
        if selection.key in {s.key for s in owned.values()}:
            raise MultusError(OWNERSHIP, field, f"the managed selection {entry.text} repeats")
        owned[i] = selection
    return owned


def _effective_interfaces(entries: Sequence[_Entry]) -> list[str]:
    return [e.interface or f"{INTERFACE_PREFIX}{i + 1}" for i, e in enumerate(entries)]


def _check_interfaces(entries: Sequence[_Entry], managed_at: set[int]) -> None:
    names = _effective_interfaces(entries)
    first: dict[str, int] = {}
    for i, name in enumerate(names):
        if i in managed_at and name == PRIMARY_INTERFACE:
            raise MultusError(
                INTERFACE_CONFLICT,
                f"{_NETWORKS_FIELD}[{i}]",
                f"a managed selection may not use the Pod's primary interface {name!r}",
            )
        if name in first and (i in managed_at or first[name] in managed_at):
            other = i if first[name] in managed_at else first[name]
            raise MultusError(
                INTERFACE_CONFLICT,
                f"{_NETWORKS_FIELD}[{other}]",
                f"the selection {entries[other].text} uses interface {name!r}, which a managed "
                "selection needs",
            )
        first.setdefault(name, i)


def _join(entries: Sequence[_Entry]) -> str:
    return "[" + ",".join(e.text for e in entries) + "]"


def selected_interfaces(annotations: Mapping[str, str]) -> frozenset[str]:
    """Every interface name the Pod's current selections take (explicit or positional)."""
    entries = parse_networks(annotations.get(NETWORKS_ANNOTATION))
    parse_registry(annotations.get(REGISTRY_ANNOTATION))
    return frozenset(_effective_interfaces(entries))


def merge_selections(
    annotations: Mapping[str, str], managed: Sequence[ManagedSelection]
) -> dict[str, str] | None:
    """The new values of both annotations with ``managed`` in them, or None when unchanged.

    Additive: recorded entries of other claims stay, missing recorded entries are restored,
    a recorded binding (same key) must be given exactly as recorded. Removal is
    :func:`release_selections`.
    """
    for i, selection in enumerate(managed):
        _check_selection(selection, f"managed[{i}]")
    _check_distinct(managed, "managed")
    entries = parse_networks(annotations.get(NETWORKS_ANNOTATION))
    registry = parse_registry(annotations.get(REGISTRY_ANNOTATION))
    recorded = {s.key: s for s in registry}
    added: list[ManagedSelection] = []
    for i, selection in enumerate(managed):
        before = recorded.get(selection.key)
        if before is None:
            added.append(selection)
        elif before != selection:
            raise MultusError(
                OWNERSHIP,
                f"managed[{i}]",
                f"binding {selection.key} is recorded as {before.namespace}/{before.name} on "
                f"{before.interface} (template {before.source.namespace}/{before.source.name}); "
                "a prepared binding never changes",
            )
    added.sort(key=_natural)
    new_registry = [*registry, *added]
    _check_distinct(new_registry, _REGISTRY_FIELD)
    pod_namespace = new_registry[0].namespace if new_registry else None
    owned = _owned(entries, new_registry, pod_namespace, set(recorded), check_manual=True)
    present = {s.key for s in owned.values()}
    missing = [s for s in new_registry if s.key not in present]
    if not missing and not added:
        return None
    appended = [
        _Entry(
            _selection_text(s.name, s.namespace, s.interface),
            s.name,
            s.namespace,
            s.interface,
            True,
        )
        for s in missing
    ]
    final = [*entries, *appended]
    managed_at = set(owned) | set(range(len(entries), len(final)))
    _check_interfaces(final, managed_at)
    result = {
        NETWORKS_ANNOTATION: _join(final),
        REGISTRY_ANNOTATION: _registry_text(new_registry)
        if added
        else annotations[REGISTRY_ANNOTATION],
    }
    size = annotations_size({**annotations, **result})
    if size > MAX_ANNOTATIONS_BYTES:
        raise MultusError(
            ANNOTATION_SIZE,
            "metadata.annotations",
            f"the Pod's annotations would take {size} bytes, more than Kubernetes' "
            f"{MAX_ANNOTATIONS_BYTES}; nothing was merged",
        )
    return result


def release_selections(
    annotations: Mapping[str, str], claim_uid: str
) -> dict[str, str | None] | None:
    """The annotation changes that drop ``claim_uid``'s recorded selections, or None.

    A key maps to None when the annotation is to be removed (nothing left in it); a key is
    in the result only when its annotation changes.
    """
    registry = parse_registry(annotations.get(REGISTRY_ANNOTATION))
    mine = [s for s in registry if s.claim_uid == claim_uid]
    if not mine:
        return None
    entries = parse_networks(annotations.get(NETWORKS_ANNOTATION))
    pod_namespace = registry[0].namespace
    keys = {s.key for s in registry}
    owned = _owned(entries, registry, pod_namespace, keys, check_manual=False)
    drop = {i for i, s in owned.items() if s.claim_uid == claim_uid}
    result: dict[str, str | None] = {}
    if drop:
        kept = [e for i, e in enumerate(entries) if i not in drop]
        result[NETWORKS_ANNOTATION] = _join(kept) if kept else None
    rest = [s for s in registry if s.claim_uid != claim_uid]
    result[REGISTRY_ANNOTATION] = _registry_text(rest) if rest else None
    return result
