"""Discovery documents (``/api``, ``/apis``, ``/apis/<g>``, ``/<g>/<v>``, ``/version``).

Legacy (non-aggregated) discovery, which is what the official Python client's
``DynamicClient`` reads. Built from the store's current types, so CRDs appear as soon as they
are created.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from typing import Any

from .kinds import ResourceType

_VERBS = ["create", "delete", "deletecollection", "get", "list", "patch", "update", "watch"]
_VERSION = re.compile(r"^v(\d+)(?:(alpha|beta)(\d+))?$")


def version_priority(version: str) -> tuple[int, int, int, str]:
    """Kubernetes version ordering: GA > beta > alpha, higher numbers first (sort ascending)."""
    match = _VERSION.match(version)
    if not match:
        return (3, 0, 0, version)
    major, stage, minor = match.groups()
    rank = {None: 0, "beta": 1, "alpha": 2}[stage]
    return (rank, -int(major), -int(minor or 0), version)


def version() -> dict[str, str]:
    return {
        "major": "1",
        "minor": "37",
        "gitVersion": "v1.37.0-dmn-lab",
        "gitCommit": "",
        "gitTreeState": "clean",
        "buildDate": "",
        "goVersion": "",
        "compiler": "cpython",
        "platform": "linux/amd64",
    }


def core_versions(address: str) -> dict[str, Any]:
    return {
        "kind": "APIVersions",
        "versions": ["v1"],
        "serverAddressByClientCIDRs": [{"clientCIDR": "0.0.0.0/0", "serverAddress": address}],
    }


def _groups(types: Iterable[ResourceType]) -> dict[str, list[str]]:
    groups: dict[str, set[str]] = {}
    for rt in types:
        if rt.group:
            groups.setdefault(rt.group, set()).add(rt.version)
    return {g: sorted(vs, key=version_priority) for g, vs in sorted(groups.items())}


def _group_doc(name: str, versions: list[str]) -> dict[str, Any]:
    entries = [{"groupVersion": f"{name}/{v}", "version": v} for v in versions]
    return {"name": name, "versions": entries, "preferredVersion": entries[0]}


def group_list(types: Iterable[ResourceType]) -> dict[str, Any]:
    return {
        "kind": "APIGroupList",
        "apiVersion": "v1",
        "groups": [_group_doc(g, vs) for g, vs in _groups(types).items()],
    }


def group(types: Iterable[ResourceType], name: str) -> dict[str, Any] | None:
    versions = _groups(types).get(name)
    if not versions:
        return None
    return {"kind": "APIGroup", "apiVersion": "v1", **_group_doc(name, versions)}


def resource_list(
    types: Iterable[ResourceType], group_name: str, version_name: str
) -> dict[str, Any] | None:
    matching = sorted(
        (t for t in types if t.group == group_name and t.version == version_name),
        key=lambda t: t.plural,
    )
    if not matching:
        return None
    resources: list[dict[str, Any]] = []
    for rt in matching:
        entry: dict[str, Any] = {
            "name": rt.plural,
            "singularName": rt.singular,
            "namespaced": rt.namespaced,
            "kind": rt.kind,
            "verbs": _VERBS,
        }
        if rt.short_names:
            entry["shortNames"] = list(rt.short_names)
        if rt.categories:
            entry["categories"] = list(rt.categories)
        resources.append(entry)
        if rt.status_subresource:
            resources.append(
                {
                    "name": f"{rt.plural}/status",
                    "singularName": "",
                    "namespaced": rt.namespaced,
                    "kind": rt.kind,
                    "verbs": ["get", "patch", "update"],
                }
            )
    group_version = f"{group_name}/{version_name}" if group_name else version_name
    return {
        "kind": "APIResourceList",
        "apiVersion": "v1",
        "groupVersion": group_version,
        "resources": resources,
    }
