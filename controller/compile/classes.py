"""DeviceClasses and their opaque TopologyRootConfiguration (design §4.7).

One class per allocation root. The selector pins this driver and the root's plugin,
mode and linkType plus ``allocationReady == true``; every attribute access is guarded
with ``has()`` so a device that lacks an attribute is simply not selected instead of
aborting allocation with a CEL runtime error. Administrator hardware selectors are
added as *separate* selectors (all selectors of a class must match), so they can
narrow but never replace the mandatory constraints.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from dmn.api.identity import (
    ANNOTATION_DIGEST,
    DRIVER,
    LABEL_MANAGED_BY,
    LABEL_REVISION,
    LABEL_ROOT_STEP,
    LABEL_TOPOLOGY,
    MANAGED_BY,
)
from dmn.api.model import RevisionRef
from dmn.api.root_config import TopologyRootConfiguration

DNS_SUBDOMAIN_MAX = 253
DIGEST_PREFIX_LEN = 10


@dataclass(frozen=True, slots=True)
class RootSelector:
    root_step: str
    plugin: str
    mode: str
    link_type: str | None
    hardware: tuple[str, ...] = ()
    shared: bool = False


def digest_prefix(digest: str) -> str:
    return digest.removeprefix("sha256:")[:DIGEST_PREFIX_LEN]


def _fit(*parts: str) -> str:
    """Join name parts with '-', shortening the first so the result is a DNS subdomain."""
    tail = "-" + "-".join(parts[1:]) if len(parts) > 1 else ""
    head = parts[0][: DNS_SUBDOMAIN_MAX - len(tail)].rstrip("-.")
    return head + tail


def revision_name(topology: str, digest: str) -> str:
    return _fit(topology, digest_prefix(digest))


def class_name(topology: str, root_step: str, digest: str) -> str:
    return _fit(topology, root_step, digest_prefix(digest))


def stable_class_name(topology: str, root_step: str) -> str:
    """The name of a root's stable DeviceClass: ``<topology>-<root step>``, the same for
    every revision (the per-revision name adds the digest prefix). Two topologies can map
    to one name (``a-b`` + ``c`` and ``a`` + ``b-c``, or a cut long name); the controller
    refuses the second with ``E_CONFLICT``."""
    return _fit(topology, root_step)


def _attr(name: str) -> str:
    return f"device.attributes[{json.dumps(DRIVER)}].{name}"


def selector_expression(sel: RootSelector) -> str:
    """The mandatory CEL selector for one root."""
    # The domain test keeps a device without any of our attributes a clean non-match.
    clauses = [
        f"device.driver == {json.dumps(DRIVER)}",
        f"{json.dumps(DRIVER)} in device.attributes",
    ]
    pins: list[tuple[str, str]] = [
        ("plugin", json.dumps(sel.plugin)),
        ("mode", json.dumps(sel.mode)),
    ]
    if sel.link_type is not None:
        pins.append(("linkType", json.dumps(sel.link_type)))
    for attr, literal in pins:
        clauses.append(f"has({_attr(attr)}) && {_attr(attr)} == {literal}")
    clauses.append(f"has({_attr('allocationReady')}) && {_attr('allocationReady')} == true")
    if sel.shared:
        # a shared root takes one unit of the parent's consumable children capacity
        domain = json.dumps(DRIVER)
        clauses.append(f"{domain} in device.capacity && has(device.capacity[{domain}].children)")
    return " &&\n".join(clauses)


def root_configuration(
    revision: RevisionRef, root_step: str, plugin_contract_digest: str
) -> dict[str, Any]:
    return TopologyRootConfiguration(
        revision_ref=revision, root_step=root_step, plugin_contract_digest=plugin_contract_digest
    ).to_api()


def device_class(
    *,
    topology: str,
    revision: RevisionRef,
    sel: RootSelector,
    plugin_contract_digest: str,
    naming_digest: str,
) -> dict[str, Any]:
    """The DeviceClass (resource.k8s.io/v1) for one root of ``revision``; named from
    ``naming_digest`` like the revision (offline and in-cluster names agree)."""
    selectors = [{"cel": {"expression": selector_expression(sel)}}]
    selectors += [{"cel": {"expression": expr}} for expr in sel.hardware]
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "DeviceClass",
        "metadata": {
            "name": class_name(topology, sel.root_step, naming_digest),
            "labels": {
                LABEL_MANAGED_BY: MANAGED_BY,
                LABEL_TOPOLOGY: topology[:63].rstrip("-."),
                LABEL_REVISION: revision.name[:63].rstrip("-."),
                LABEL_ROOT_STEP: sel.root_step,
            },
            "annotations": {ANNOTATION_DIGEST: revision.digest},
        },
        "spec": {
            "selectors": selectors,
            "config": [
                {
                    "opaque": {
                        "driver": DRIVER,
                        "parameters": root_configuration(
                            revision, sel.root_step, plugin_contract_digest
                        ),
                    }
                }
            ],
        },
    }
