"""Generate structural apiextensions.k8s.io/v1 CRDs from the pydantic models.

The pydantic JSON schema is rewritten into a Kubernetes *structural* schema: ``$ref``
inlined, ``Optional`` collapsed to the non-null branch, titles dropped, ``const`` to a
one-value ``enum``, ``null`` defaults dropped, and the Kubernetes extensions attached
through ``json_schema_extra`` kept. Unknown fields are preserved only where a model
says so (bounded config/program payloads). ``dmn generate`` calls :func:`generate`;
``--check`` reports drift without writing.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml
from pydantic import BaseModel

from dmn.api.identity import GROUP, VERSION
from dmn.interpreter.documents import CRD_SCHEMA

CRD_DIR = Path("charts/dra-multi-network/crds")

_DROP = {"title", "description", "discriminator"}
_REPLACED_BY_PAYLOAD = {CRD_SCHEMA, "$ref", "anyOf", "allOf", "default"}


@dataclass(frozen=True)
class CrdSpec:
    model: type[BaseModel]
    kind: str
    plural: str
    scope: str  # Cluster | Namespaced
    short_names: tuple[str, ...] = ()
    columns: tuple[dict[str, Any], ...] = ()
    categories: tuple[str, ...] = ("dra-multi-network",)
    extra: dict[str, Any] = field(default_factory=dict)


def _resolve(node: Any, defs: dict[str, Any]) -> Any:
    if isinstance(node, list):
        return [_resolve(v, defs) for v in node]
    if not isinstance(node, dict):
        return node
    if CRD_SCHEMA in node:
        # A payload the model types but the CRD stores as given: its CRD schema replaces
        # the model's (the field's other keywords, e.g. maxProperties, still apply).
        rest = {k: v for k, v in node.items() if k not in _REPLACED_BY_PAYLOAD}
        return _resolve({**copy.deepcopy(node[CRD_SCHEMA]), **rest}, defs)
    node = dict(node)
    if "$ref" in node:
        target = defs[node.pop("$ref").rsplit("/", 1)[-1]]
        merged = copy.deepcopy(target)
        merged.update(node)  # field-level extras win over the referenced model
        node = merged
    if "allOf" in node and len(node["allOf"]) == 1:
        inner = node.pop("allOf")[0]
        node = {**_resolve(inner, defs), **node}
    if "anyOf" in node:
        branches = [b for b in node["anyOf"] if b.get("type") != "null"]
        if len(branches) == 1:
            node.pop("anyOf")
            node = {**_resolve(branches[0], defs), **node}
    out: dict[str, Any] = {}
    for key, value in node.items():
        if key in _DROP:
            continue
        if key == "default" and value is None:
            continue
        if key == "const":
            out["enum"] = [value]
            continue
        if key == "properties":
            out[key] = {k: _resolve(v, defs) for k, v in value.items()}
            continue
        out[key] = _resolve(value, defs)
    return out


def _structural(node: Any) -> Any:
    """Second pass: Kubernetes specifics (preserve-unknown payloads, no additionalProperties)."""
    if isinstance(node, list):
        return [_structural(v) for v in node]
    if not isinstance(node, dict):
        return node
    out = {k: _structural(v) for k, v in node.items()}
    if out.get("x-kubernetes-preserve-unknown-fields") and out.get("additionalProperties") in (
        True,
        {},
    ):
        out.pop("additionalProperties")
    if out.get("type") == "object" and out.get("additionalProperties") is False:
        out.pop("additionalProperties")  # structural schemas forbid unknown fields by default
    if out.get("additionalProperties") is True:
        out.pop("additionalProperties")
        out["x-kubernetes-preserve-unknown-fields"] = True
    if "enum" in out and "type" not in out:
        out["type"] = "string"
    if "required" in out:
        out["required"] = sorted(out["required"])
    if "enum" in out and out.get("type") == "string" and isinstance(out.get("default"), str):
        pass
    return out


def openapi_schema(model: type[BaseModel]) -> dict[str, Any]:
    raw = model.model_json_schema(by_alias=True, mode="validation")
    defs = raw.pop("$defs", {})
    schema: dict[str, Any] = _structural(_resolve(raw, defs))
    props = schema["properties"]
    # apiVersion/kind/metadata are the API server's: plain strings and an object.
    props["apiVersion"] = {"type": "string"}
    props["kind"] = {"type": "string"}
    props["metadata"] = {"type": "object"}
    schema.pop("required", None)
    schema["required"] = ["spec"]
    return schema


def build_crd(spec: CrdSpec) -> dict[str, Any]:
    plural = spec.plural
    age = {"name": "Age", "type": "date", "jsonPath": ".metadata.creationTimestamp"}
    columns = [*spec.columns, age]
    return {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {
            "name": f"{plural}.{GROUP}",
            "labels": {"app.kubernetes.io/part-of": "dra-multi-network"},
        },
        "spec": {
            "group": GROUP,
            "names": {
                "kind": spec.kind,
                "listKind": f"{spec.kind}List",
                "plural": plural,
                "singular": spec.kind.lower(),
                "shortNames": list(spec.short_names),
                "categories": list(spec.categories),
            },
            "scope": spec.scope,
            "versions": [
                {
                    "name": VERSION,
                    "served": True,
                    "storage": True,
                    "subresources": {"status": {}},
                    "additionalPrinterColumns": columns,
                    "schema": {"openAPIV3Schema": openapi_schema(spec.model)},
                }
            ],
        },
    }


def _ready(json_path: str = '.status.conditions[?(@.type=="Ready")].status') -> dict[str, Any]:
    return {"name": "Ready", "type": "string", "jsonPath": json_path}


def crd_specs() -> list[CrdSpec]:
    from dmn.api.attachment import NetworkAttachmentStatus
    from dmn.api.plugin import NetworkPlugin
    from dmn.api.revision import NetworkTopologyRevision
    from dmn.api.topology import NetworkTopology

    specs = [
        CrdSpec(
            NetworkPlugin,
            "NetworkPlugin",
            "networkplugins",
            "Cluster",
            ("netplugin",),
            (
                _ready(),
                {"name": "Type", "type": "string", "jsonPath": ".spec.implementation.type"},
                {
                    "name": "Contract",
                    "type": "string",
                    "jsonPath": ".status.contractDigest",
                    "priority": 1,
                },
            ),
        ),
        CrdSpec(
            NetworkTopology,
            "NetworkTopology",
            "networktopologies",
            "Cluster",
            ("nettopo",),
            (
                _ready(),
                {
                    "name": "Devices",
                    "type": "string",
                    "jsonPath": '.status.conditions[?(@.type=="DevicesMatched")].status',
                },
                {"name": "Revision", "type": "string", "jsonPath": ".status.revision.name"},
            ),
        ),
        CrdSpec(
            NetworkTopologyRevision,
            "NetworkTopologyRevision",
            "networktopologyrevisions",
            "Cluster",
            ("netrev",),
            (
                _ready(),
                {"name": "Phase", "type": "string", "jsonPath": ".status.phase"},
                {"name": "Topology", "type": "string", "jsonPath": ".spec.topologyRef.name"},
                {"name": "Digest", "type": "string", "jsonPath": ".spec.digest", "priority": 1},
            ),
        ),
        CrdSpec(
            NetworkAttachmentStatus,
            "NetworkAttachmentStatus",
            "networkattachmentstatuses",
            "Namespaced",
            ("netattach",),
            (
                {"name": "Phase", "type": "string", "jsonPath": ".status.phase"},
                {"name": "Revision", "type": "string", "jsonPath": ".spec.revisionRef.name"},
                {"name": "Node", "type": "string", "jsonPath": ".spec.nodeName"},
            ),
        ),
    ]
    specs += _ipam_specs()
    policy = _policy_model()
    if policy is not None:
        specs.append(
            CrdSpec(
                policy,
                "DeviceExposurePolicy",
                "deviceexposurepolicies",
                "Cluster",
                ("netpolicy",),
                (_ready(), {"name": "Priority", "type": "integer", "jsonPath": ".spec.priority"}),
            )
        )
    return specs


def _ipam_specs() -> list[CrdSpec]:
    from dmn.api.ipam.ipallocation import IPAllocation
    from dmn.api.ipam.ippool import IPPool

    def count(name: str, field: str) -> dict[str, Any]:
        return {"name": name, "type": "integer", "jsonPath": f".status.{field}"}

    return [
        CrdSpec(
            IPPool,
            "IPPool",
            "ippools",
            "Cluster",
            ("ippool",),
            (
                {
                    "name": "Valid",
                    "type": "string",
                    "jsonPath": '.status.conditions[?(@.type=="Valid")].status',
                },
                count("Size", "size"),
                count("Allocated", "allocated"),
                count("Free", "free"),
                {
                    "name": "Exhausted",
                    "type": "string",
                    "jsonPath": '.status.conditions[?(@.type=="Exhausted")].status',
                    "priority": 1,
                },
            ),
        ),
        CrdSpec(
            IPAllocation,
            "IPAllocation",
            "ipallocations",
            "Cluster",
            ("ipalloc",),
            (
                {"name": "Pool", "type": "string", "jsonPath": ".spec.pool"},
                {"name": "Address", "type": "string", "jsonPath": ".spec.address"},
                {"name": "Kind", "type": "string", "jsonPath": ".spec.kind"},
                {"name": "Claim", "type": "string", "jsonPath": ".spec.owner.claimName"},
                {"name": "Node", "type": "string", "jsonPath": ".spec.owner.nodeName"},
            ),
        ),
    ]


def _policy_model() -> type[BaseModel] | None:
    """h5's DeviceExposurePolicy model, once it exists (api/policy.py)."""
    try:
        from dmn.api import policy
    except ImportError:
        return None
    model = getattr(policy, "DeviceExposurePolicy", None)
    return model if isinstance(model, type) and issubclass(model, BaseModel) else None


def render(crd: dict[str, Any]) -> str:
    header = "# Generated by `dmn generate` from dmn.api models. Do not edit.\n"
    return header + yaml.safe_dump(crd, sort_keys=False, width=100)


def generate(root: Path, check: bool) -> list[str]:
    """``dmn generate`` entry: write (or check) one CRD file per kind; return drifted paths."""
    drift: list[str] = []
    out_dir = root / CRD_DIR
    wanted: dict[str, str] = {}
    for spec in crd_specs():
        crd = build_crd(spec)
        wanted[f"{crd['metadata']['name']}.yaml"] = render(crd)
    existing = {p.name for p in out_dir.glob("*.yaml")} if out_dir.exists() else set()
    for name, text in sorted(wanted.items()):
        path = out_dir / name
        if path.exists() and path.read_text() == text:
            continue
        drift.append(str(CRD_DIR / name))
        if not check:
            out_dir.mkdir(parents=True, exist_ok=True)
            path.write_text(text)
    for stale in sorted(existing - set(wanted)):
        drift.append(str(CRD_DIR / stale))
        if not check:
            (out_dir / stale).unlink()
    return drift
