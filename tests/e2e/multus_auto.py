"""Multus automatic mode on the upstream lab (real Multus thin and Whereabouts, enabled for a
module by ``multus_lab``): what a module applies, and how it reads back the result.

:func:`automatic_mode` applies, for the module's duration, the template NetworkAttachment
Definition (macvlan in bridge mode, no master, Whereabouts on :data:`RANGE`), an exposure
policy that takes the lab links' ``macvlan`` persona over for ``multus-cni-shared``
(priority 200 over the lab's ``macvlan-cni`` policy), the ``e2e-auto`` topology whose class
binds the template, and a claim template; afterwards it removes them and waits until the
node publishes its links for ``macvlan-cni`` again, so the modules after it find the lab
as they expect. :func:`whole_links_for_multus` does the same with the ``kernel`` persona
for ``multus-cni`` and a host-device template. The reference host-device plugin's DEL
returns a link down (its veth peer then loses carrier and the node would taint both links'
devices unhealthy); the driver's release sets the state it recorded at prepare again
(``linux/host-link-state/v1``), which the host-device test checks. :func:`lab_links_restored`
is that test's safety net when it fails midway: it brings the lab links back as the lab
made them, so the modules after it find their devices schedulable.
"""

from __future__ import annotations

import contextlib
import ipaddress
import json
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from dmn.agent.coordinator.multus_plan import FINALIZER, POD_UID_LABEL
from dmn.agent.slices.device_health import UNHEALTHY_TAINT_KEY
from dmn.api.cluster import Cluster, NotFound
from dmn.api.cluster import resources as r
from dmn.api.identity import API_VERSION, DRIVER
from dmn.api.multus.selections import NETWORKS_ANNOTATION, REGISTRY_ANNOTATION
from dmn.lab.demo import wait_settled
from dmn.lab.pod_demo import NAMESPACE, claim_template
from dmn.lab.upstream.driver import LAB_LINKS
from dmn.lab.upstream.images import BUSYBOX_IMAGE
from dmn.lab.upstream.multus import MultusInstall
from dmn.lab.upstream.multus_configs import network_attachment_definition, network_status
from tests.e2e.lab_pods import WAIT
from tests.waiting import wait_for

NADS = r.NETWORK_ATTACHMENT_DEFINITIONS
TEMPLATE = "e2e-auto-macvlan"
RANGE = "10.72.0.0/24"
CLASS_TEMPLATE = "e2e-auto"
HOSTDEV_TEMPLATE = "e2e-auto-hostdev"
HOSTDEV_CLASS_TEMPLATE = "e2e-auto-hostdev"
OPS = ["multus/pod-selection/v1", "multus/binding-ready/v1"]


def _policy(
    name: str, persona: str, plugin: str, mode: str, own_ops: tuple[str, ...]
) -> dict[str, Any]:
    exposure: dict[str, Any] = {
        "persona": persona,
        "plugin": plugin,
        "mode": mode,
        "compatibility": [
            {
                "scope": "Interface",
                "domain": "interface",
                "groups": ["macvlan" if persona == "macvlan" else "kernel-handoff"],
            }
        ],
        "effectPermissions": [*own_ops, *OPS],
    }
    if persona == "macvlan":
        exposure["allowMultipleAllocations"] = True
        exposure["capacity"] = {"children": {"value": "4"}}
    return {
        "apiVersion": API_VERSION,
        "kind": "DeviceExposurePolicy",
        "metadata": {"name": name},
        "spec": {
            "priority": 200,
            "action": "Expose",
            "selector": {"kind": "Link"},
            "exposure": exposure,
        },
    }


def _topology(
    name: str, plugin: str, mode: str, template: str, own_ops: tuple[str, ...]
) -> dict[str, Any]:
    return {
        "apiVersion": API_VERSION,
        "kind": "NetworkTopology",
        "metadata": {"name": name},
        "spec": {
            "effectBudget": {"allow": [*own_ops, *OPS]},
            "steps": [
                {
                    "id": "net",
                    "kind": "Allocation",
                    "pluginRef": {"name": plugin},
                    "config": {"mode": mode, "template": {"name": template}},
                }
            ],
        },
    }


def published(admin: Cluster, plugin: str) -> bool:
    """Whether the node's ResourceSlices offer a device for ``plugin``."""
    for s in admin.list(r.RESOURCE_SLICES).items:
        for device in (s.get("spec") or {}).get("devices") or []:
            attribute = (device.get("attributes") or {}).get(f"{DRIVER}/plugin") or {}
            if attribute.get("string") == plugin:
                return True
    return False


@contextlib.contextmanager
def _taken_over(
    admin: Cluster,
    policy: dict[str, Any],
    topology: dict[str, Any],
    template: dict[str, Any],
    claims: str,
    plugin: str,
    before: str,
) -> Iterator[str]:
    name = topology["metadata"]["name"]
    admin.apply(template)
    admin.apply(policy)
    try:
        admin.apply(topology)
        (topo,) = wait_settled(admin, [name], WAIT)
        assert topo.ready == "True", topo
        wait_for(lambda: published(admin, plugin), timeout=WAIT, interval=0.5, what=plugin)
        admin.apply(claim_template(claims, topo.device_classes[0]))
        yield topo.device_classes[0]
    finally:
        with contextlib.suppress(NotFound):
            admin.delete(r.RESOURCE_CLAIM_TEMPLATES, claims, NAMESPACE)
        with contextlib.suppress(NotFound):
            admin.delete(r.NETWORK_TOPOLOGIES, name)
        with contextlib.suppress(NotFound):
            admin.delete(r.DEVICE_EXPOSURE_POLICIES, policy["metadata"]["name"])
        wait_for(
            lambda: published(admin, before) and not published(admin, plugin),
            timeout=WAIT,
            interval=0.5,
            what=f"the lab links published for {before} again",
        )
        wait_for(
            lambda: not tainted_unhealthy(admin),
            timeout=WAIT,
            interval=0.5,
            what="no device of ours tainted unhealthy",
        )
        with contextlib.suppress(NotFound):
            admin.delete(NADS, template["metadata"]["name"], NAMESPACE)


def host_links() -> dict[str, dict[str, Any]]:
    """The host's links by name (``ip -j link``)."""
    out = subprocess.run(["ip", "-j", "link", "show"], capture_output=True, text=True, check=True)
    return {link["ifname"]: link for link in json.loads(out.stdout)}


def tainted_unhealthy(admin: Cluster) -> list[str]:
    """Names of our published devices the node taints unhealthy."""
    return [
        d["name"]
        for s in admin.list(r.RESOURCE_SLICES).items
        if (s.get("spec") or {}).get("driver") == DRIVER
        for d in s["spec"].get("devices") or []
        if any(t.get("key") == UNHEALTHY_TAINT_KEY for t in d.get("taints") or [])
    ]


def lab_links_restored(admin: Cluster) -> None:
    """Wait until both lab links are on the host again, set each up (a delegate's DEL may
    leave it down), and wait until they are UP and no device of ours is tainted unhealthy."""
    wait_for(
        lambda: set(LAB_LINKS) <= set(host_links()),
        timeout=WAIT,
        interval=0.5,
        what="the lab links back on the host",
    )
    for link in LAB_LINKS:
        subprocess.run(["ip", "link", "set", link, "up"], check=True)
    wait_for(
        lambda: all(host_links()[n].get("operstate") == "UP" for n in LAB_LINKS),
        timeout=WAIT,
        interval=0.2,
        what="the lab links up",
    )
    wait_for(
        lambda: not tainted_unhealthy(admin),
        timeout=WAIT,
        interval=0.2,
        what="no device of ours tainted unhealthy",
    )


def macvlan_template(multus: MultusInstall) -> dict[str, Any]:
    config = {
        "cniVersion": "1.0.0",
        "name": TEMPLATE,
        "type": "macvlan",
        "mode": "bridge",
        "ipam": multus.ipam(RANGE),
    }
    return network_attachment_definition(TEMPLATE, NAMESPACE, config)


@contextlib.contextmanager
def automatic_mode(admin: Cluster, multus: MultusInstall) -> Iterator[str]:
    """The macvlan template bound through ``multus-cni-shared`` (module doc); the class."""
    own_ops = ("multus/shadow-nad-shared/v1",)
    with _taken_over(
        admin,
        _policy("e2e-auto-links", "macvlan", "multus-cni-shared", "shared", own_ops),
        _topology("e2e-auto", "multus-cni-shared", "shared", TEMPLATE, own_ops),
        macvlan_template(multus),
        CLASS_TEMPLATE,
        "multus-cni-shared",
        "macvlan-cni",
    ) as device_class:
        yield device_class


@contextlib.contextmanager
def whole_links_for_multus(admin: Cluster) -> Iterator[str]:
    """A host-device template bound through ``multus-cni`` (the ``kernel`` persona taken
    over from the lab's ``host-cni``); the class."""
    own_ops = ("multus/shadow-nad/v1", "linux/host-link-state/v1")
    config = {"cniVersion": "1.0.0", "name": HOSTDEV_TEMPLATE, "type": "host-device"}
    with _taken_over(
        admin,
        _policy("e2e-auto-whole", "kernel", "multus-cni", "kernel", own_ops),
        _topology("e2e-auto-hostdev", "multus-cni", "kernel", HOSTDEV_TEMPLATE, own_ops),
        network_attachment_definition(HOSTDEV_TEMPLATE, NAMESPACE, config),
        HOSTDEV_CLASS_TEMPLATE,
        "multus-cni",
        "host-cni",
    ) as device_class:
        yield device_class


def auto_pod(
    name: str,
    templates: tuple[str, ...] = (CLASS_TEMPLATE,),
    annotations: dict[str, str] | None = None,
    command: tuple[str, ...] = ("sleep", "3600"),
    restart: str = "Always",
) -> dict[str, Any]:
    """A busybox Pod (ping needs NET_RAW) with one claim per template, named ``net<i>``."""
    meta: dict[str, Any] = {"name": name, "namespace": NAMESPACE}
    if annotations:
        meta["annotations"] = annotations
    claims = [{"name": f"c{i}", "resourceClaimTemplateName": t} for i, t in enumerate(templates)]
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": meta,
        "spec": {
            "terminationGracePeriodSeconds": 1,
            "restartPolicy": restart,
            "resourceClaims": claims,
            "containers": [
                {
                    "name": "main",
                    "image": BUSYBOX_IMAGE,
                    "imagePullPolicy": "Never",
                    "command": list(command),
                    "securityContext": {"capabilities": {"add": ["NET_RAW"]}},
                    "resources": {"claims": [{"name": c["name"]} for c in claims]},
                }
            ],
        },
    }


def shadows(admin: Cluster, pod_uid: str | None = None) -> list[dict[str, Any]]:
    """The shadows in the lab namespace (of one Pod)."""
    selector = f"{POD_UID_LABEL}={pod_uid}" if pod_uid else POD_UID_LABEL
    return admin.list(NADS, NAMESPACE, label_selector=selector).items


@dataclass(frozen=True)
class Bound:
    """What a Running Pod of the automatic mode shows: its shadow and Multus' report."""

    shadow: dict[str, Any]
    address: str


def bound(admin: Cluster, name: str, pod_uid: str, interface: str = "net1") -> Bound:
    """Exactly one shadow, owned by the Pod and protected; the Pod selects it as
    ``interface`` and records it; Multus reports it attached with an address of the range."""
    (shadow,) = shadows(admin, pod_uid)
    meta = shadow["metadata"]
    assert [o["uid"] for o in meta["ownerReferences"]] == [pod_uid], meta
    assert meta["finalizers"] == [FINALIZER] and not meta.get("deletionTimestamp"), meta
    pod_doc = admin.get(r.PODS, name, NAMESPACE)
    annotations = pod_doc["metadata"]["annotations"]
    entries = json.loads(annotations[NETWORKS_ANNOTATION])
    assert {"name": meta["name"], "namespace": NAMESPACE, "interface": interface} in entries
    assert meta["name"] in annotations[REGISTRY_ANNOTATION]

    def reported() -> dict[str, Any] | None:
        status = network_status(admin.get(r.PODS, name, NAMESPACE))
        found = [e for e in status if e.get("name") == f"{NAMESPACE}/{meta['name']}"]
        return found[0] if found else None

    entry = wait_for(reported, timeout=WAIT, interval=0.5, what=f"{name}'s Multus report")
    assert entry["interface"] == interface, entry
    ips = entry.get("ips") or []
    address = str(ips[0]) if ips else ""
    if address:
        assert ipaddress.ip_address(address) in ipaddress.ip_network(RANGE), entry
    return Bound(shadow, address)
