"""What the node e2e tests do to the upstream lab: Pods, claims, the journal, Pod namespaces.

Every helper talks to the real components (the API server through our client, kubelet and
containerd through Pods, the agent through its journal command); none changes the lab's
configuration. Pods are busybox with one claim from a template; names and templates are
the caller's.
"""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from dmn.api.cluster import Cluster, NotFound
from dmn.api.cluster import resources as r
from dmn.api.identity import API_VERSION, DRIVER
from dmn.lab.pod_demo import NAMESPACE
from dmn.lab.upstream.cluster import UpstreamLab
from dmn.lab.upstream.configs import CNI_BRIDGE, NODE_NAME
from dmn.lab.upstream.demo import pod, pod_phase
from tests.waiting import wait_for

WAIT = 120.0
MTU_CODE = "E_MTU_EXCEEDS_PARENT"
#: shared-macvlan with ``mtu: 9000``: valid for the plugin's schema (it compiles to Ready and
#: is allocated and prepared), but no lab link has that MTU, so ``connect`` fails on the node
MTU_TOO_BIG = {
    "apiVersion": API_VERSION,
    "kind": "NetworkTopology",
    "metadata": {"name": "e2e-mtu-too-big"},
    "spec": {
        "effectBudget": {"allow": ["share/hold-parent/v1", "linux/create-macvlan/v2"]},
        "steps": [
            {
                "id": "net1",
                "kind": "Allocation",
                "pluginRef": {"name": "macvlan-cni"},
                "config": {"mode": "bridge", "ifName": "net1", "mtu": 9000, "up": True},
            }
        ],
    },
}


def run(admin: Cluster, created: list[str], name: str, template: str) -> None:
    """Create a busybox Pod with one claim from ``template``; ``created`` collects names."""
    admin.create(r.PODS, pod(name, template), NAMESPACE)
    created.append(name)


def wait_running(admin: Cluster, *names: str) -> None:
    """On timeout the message says where each Pod is *then* (:func:`describe`)."""
    try:
        wait_for(
            lambda: all(pod_phase(admin, n) == "Running" for n in names),
            timeout=WAIT,
            interval=0.5,
            what=f"{names} Running",
        )
    except AssertionError as exc:
        raise AssertionError(f"{exc}\n{describe(admin, *names)}") from None


def describe(admin: Cluster, *names: str) -> str:
    """Why Pods are not Running: each one's phase, scheduler verdict, container states and
    Events, and every claim of the lab namespace with its allocated devices and consumer
    (a device held by a claim of an earlier test shows there)."""
    lines = []
    for name in names:
        try:
            status = admin.get(r.PODS, name, NAMESPACE).get("status") or {}
        except NotFound:
            lines.append(f"pod {name}: gone")
            continue
        containers = [
            (c.get("name"), c.get("restartCount"), c.get("state"))
            for c in status.get("containerStatuses") or []
        ]
        said = [(e.get("reason"), e.get("message")) for e in events(admin, name)]
        lines.append(
            f"pod {name}: phase={status.get('phase')} unschedulable={unschedulable(admin, name)!r}"
            f" containers={containers} events={said}"
        )
    for claim in admin.list(r.RESOURCE_CLAIMS, NAMESPACE).items:
        reserved = [c.get("name") for c in (claim.get("status") or {}).get("reservedFor") or []]
        lines.append(
            f"claim {claim['metadata']['name']}: devices={allocated_devices(claim)}"
            f" reservedFor={reserved}"
        )
    return "\n".join(lines)


def wait_gone(admin: Cluster, *names: str) -> None:
    wait_for(
        lambda: all(pod_phase(admin, n) == "Gone" for n in names),
        timeout=WAIT,
        interval=0.5,
        what=f"{names} deleted",
    )


def delete(admin: Cluster, *names: str) -> None:
    for name in names:
        with contextlib.suppress(NotFound):
            admin.delete(r.PODS, name, NAMESPACE)


def uids(admin: Cluster, *names: str) -> set[str]:
    """The UIDs of those of ``names`` that exist."""
    found = set()
    for name in names:
        with contextlib.suppress(NotFound):
            found.add(uid(admin, name))
    return found


def wait_claims_gone(admin: Cluster, pod_uids: set[str]) -> None:
    """Wait until no ResourceClaim generated for (owned by) these Pods is left."""

    def owned() -> list[str]:
        return [
            c["metadata"]["name"]
            for c in admin.list(r.RESOURCE_CLAIMS, NAMESPACE).items
            if any(o.get("uid") in pod_uids for o in c["metadata"].get("ownerReferences") or [])
        ]

    if pod_uids:
        wait_for(lambda: not owned(), timeout=WAIT, interval=0.5, what="generated claims deleted")


def remove(admin: Cluster, *names: str) -> None:
    """Delete the Pods and wait until they and the claims generated for them are gone (a
    generated claim outlives its Pod until garbage collection, holding its share)."""
    owners = uids(admin, *names)
    delete(admin, *names)
    wait_gone(admin, *names)
    wait_claims_gone(admin, owners)


def uid(admin: Cluster, name: str) -> str:
    return str(admin.get(r.PODS, name, NAMESPACE)["metadata"]["uid"])


def claims_of(admin: Cluster, pod_uid: str) -> list[dict[str, Any]]:
    """The ResourceClaims generated for the Pod (owned by it)."""
    return [
        c
        for c in admin.list(r.RESOURCE_CLAIMS, NAMESPACE).items
        if any(o.get("uid") == pod_uid for o in c["metadata"].get("ownerReferences") or [])
    ]


def unschedulable(admin: Cluster, name: str) -> str:
    """The scheduler's message while it keeps the Pod Pending (PodScheduled=False), else ''."""
    status = admin.get(r.PODS, name, NAMESPACE).get("status") or {}
    for cond in status.get("conditions") or []:
        if cond.get("type") == "PodScheduled" and cond.get("status") == "False":
            return str(cond.get("message") or cond.get("reason") or "")
    return ""


def events(admin: Cluster, name: str) -> list[dict[str, Any]]:
    """Every core/v1 Event about the Pod ``name`` (kubelet's and ours)."""
    return [
        e
        for e in admin.list(r.EVENTS, NAMESPACE).items
        if (e.get("involvedObject") or {}).get("kind") == "Pod"
        and (e.get("involvedObject") or {}).get("name") == name
    ]


def journal(lab: UpstreamLab) -> dict[str, Any]:
    """``dmn journal show`` of the lab's node agent (read-only; the agent keeps running)."""
    state = str(lab.layout.agent_state)
    out = subprocess.run(
        [sys.executable, "-m", "dmn", "journal", "show", "--state-dir", state, "--format", "json"],
        capture_output=True,
        text=True,
        check=True,
    )
    doc: dict[str, Any] = json.loads(out.stdout)
    return doc


def attachment_states(lab: UpstreamLab, pod_uid: str) -> set[str]:
    return {a["state"] for a in journal(lab)["attachments"] if a["identity"]["podUID"] == pod_uid}


def preparation_states(lab: UpstreamLab, claim_uids: set[str]) -> set[str]:
    return {p["state"] for p in journal(lab)["preparations"] if p["claimUID"] in claim_uids}


# --- devices and pinned claims ----------------------------------------------------------


@dataclass(frozen=True)
class LabDevice:
    pool: str
    name: str
    persona: str
    inventory_id: str


def devices(admin: Cluster) -> list[LabDevice]:
    """Our published devices on the lab node."""
    out = []
    for s in admin.list(r.RESOURCE_SLICES).items:
        spec = s["spec"]
        if spec["driver"] != DRIVER or spec.get("nodeName") != NODE_NAME:
            continue
        for d in spec.get("devices") or []:
            attrs = d.get("attributes") or {}
            out.append(
                LabDevice(
                    spec["pool"]["name"],
                    d["name"],
                    str((attrs.get(f"{DRIVER}/persona") or {}).get("string", "")),
                    str((attrs.get(f"{DRIVER}/inventoryID") or {}).get("string", "")),
                )
            )
    return out


def pinned_template(name: str, device_class: str, inventory_id: str) -> dict[str, Any]:
    """A claim template from ``device_class`` restricted to one lab link (its inventory ID)."""
    selector = f'device.attributes["{DRIVER}"].inventoryID == "{inventory_id}"'
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaimTemplate",
        "metadata": {"name": name, "namespace": NAMESPACE},
        "spec": {
            "spec": {
                "devices": {
                    "requests": [
                        {
                            "name": "net",
                            "exactly": {
                                "deviceClassName": device_class,
                                "selectors": [{"cel": {"expression": selector}}],
                            },
                        }
                    ]
                }
            }
        },
    }


def allocated_devices(claim: dict[str, Any]) -> list[str]:
    allocation = (claim.get("status") or {}).get("allocation") or {}
    return [x["device"] for x in (allocation.get("devices") or {}).get("results") or []]


# --- a Pod's network namespace, seen from the host ----------------------------------------


def _pids_of_pod(pod_uid: str) -> list[int]:
    """Processes whose cgroup path names the Pod (kubelet's cgroupfs layout ``pod<uid>``)."""
    needle = f"/pod{pod_uid}/"
    pids = []
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            if needle in (proc / "cgroup").read_text():
                pids.append(int(proc.name))
        except OSError:
            continue
    return pids


@contextlib.contextmanager
def held_netns(pod_uid: str) -> Iterator[int]:
    """An fd on the Pod's network namespace, held by the test: the namespace (and every
    link a tenant left in it) outlives the Pod until the block ends, so a test can see
    what removal did inside it."""
    fd = -1
    for pid in _pids_of_pod(pod_uid):
        with contextlib.suppress(OSError):
            fd = os.open(f"/proc/{pid}/ns/net", os.O_RDONLY)
            break
    assert fd >= 0, f"no process of Pod {pod_uid} found"
    if os.fstat(fd).st_ino == os.stat("/proc/self/ns/net").st_ino:
        os.close(fd)
        raise AssertionError(f"Pod {pod_uid} runs in the host network namespace")
    try:
        yield fd
    finally:
        os.close(fd)


def ns_ip(fd: int, *args: str) -> subprocess.CompletedProcess[str]:
    """iproute2's ``ip`` inside the namespace ``fd`` — the same netlink requests a process
    with CAP_NET_ADMIN in that namespace can make (busybox's ``ip`` has no ``alias``)."""
    return subprocess.run(
        ["nsenter", f"--net=/proc/self/fd/{fd}", "ip", *args],
        capture_output=True,
        text=True,
        pass_fds=(fd,),
        timeout=30,
    )


def ns_links(fd: int) -> dict[str, dict[str, Any]]:
    """Name → ``ip -j -d link`` entry of every link in the namespace ``fd``."""
    out = ns_ip(fd, "-j", "-d", "link", "show")
    assert out.returncode == 0, out.stderr
    return {link["ifname"]: link for link in json.loads(out.stdout)}


def host_links() -> dict[str, dict[str, Any]]:
    """The host's links except the primary Pod network's plumbing (the CNI bridge and the
    Pods' veth ends on it, which come and go with Pods)."""
    out = subprocess.run(
        ["ip", "-j", "-d", "link", "show"], capture_output=True, text=True, check=True
    )
    return {
        link["ifname"]: link
        for link in json.loads(out.stdout)
        if link["ifname"] != CNI_BRIDGE and link.get("master") != CNI_BRIDGE
    }
