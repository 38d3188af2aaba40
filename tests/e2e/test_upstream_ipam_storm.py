"""50 Pods created at once on one IPPool, on real Kubernetes: 50 distinct addresses, and
deleting them returns the pool to empty.

The lab node's macvlan persona has a ``children`` capacity of 4 per lab link (8 on the node,
``dmn.lab.node.CHILDREN``), which the demo and the other modules count on. For this test
only, the lab's ``lab-link-macvlan`` DeviceExposurePolicy gets a capacity of 32 per link (64
on the node; a macvlan parent has no kernel limit near that), the node's ResourceSlices are
waited for to show it, and afterwards it is put back and waited for again. The Pods are the
lab's busybox with one claim each, from a template of a test topology on a pool of its own.

Proven, with no address assigned by a test: every Pod Running with one address of the pool
on ``net1``, the same in its claim's networkData and its network-status annotation; the 50
addresses distinct and exactly the pool's IPAllocations; the controller's pool status
consistent while the Pods come up (``allocated + free == size``, never above 50) and 50
allocated once they run; after deletion no IPAllocation of the pool is left, the status
reads 0 allocated, and every address was released by the node agent itself (the
controller's log names none of them as collected for a claim that was gone).
"""

from __future__ import annotations

import contextlib
import ipaddress
import time
from typing import Any

import pytest

from dmn.api.cluster import Cluster, NotFound
from dmn.api.cluster import resources as r
from dmn.api.identity import DRIVER
from dmn.lab.node import CHILDREN
from dmn.lab.pod_demo import NAMESPACE
from dmn.lab.upstream.cluster import UpstreamLab
from dmn.lab.upstream.configs import NODE_NAME
from dmn.lab.upstream.demo import pod, pod_phase
from tests.e2e import installed_driver, lab_pods, lab_pools
from tests.waiting import wait_for

pytestmark = [pytest.mark.e2e]

PODS = 50
POLICY = "lab-link-macvlan"
STORM_CHILDREN = 32  # per lab link: two links hold the 50 Pods' macvlan children
CAPACITY = f"{DRIVER}/children"
#: a big wait: 50 sandboxes on a 2-core machine (each a pause and a busybox container,
#: our NRI hook, and kubelet's own pacing)
STORM_WAIT = 480.0
POOL = "e2e-storm"
FIRST, LAST = "10.63.0.10", "10.63.0.109"  # 100 addresses for 50 Pods


def _macvlan_capacities(admin: Cluster) -> list[str]:
    """The ``children`` capacity of each macvlan device our agent publishes for the node."""
    found = []
    for s in admin.list(r.RESOURCE_SLICES).items:
        spec = s["spec"]
        if spec["driver"] != DRIVER or spec.get("nodeName") != NODE_NAME:
            continue
        for d in spec.get("devices") or []:
            persona = ((d.get("attributes") or {}).get(f"{DRIVER}/persona") or {}).get("string")
            if persona == "macvlan":
                found.append(str(((d.get("capacity") or {}).get(CAPACITY) or {}).get("value")))
    return found


def _set_children(admin: Cluster, value: int) -> None:
    """The lab policy's children capacity, and wait until every published macvlan device
    carries it (the scheduler allocates against the slices)."""
    patch = {"spec": {"exposure": {"capacity": {"children": {"value": str(value)}}}}}
    admin.patch(r.DEVICE_EXPOSURE_POLICIES, POLICY, patch)
    wait_for(
        lambda: (c := _macvlan_capacities(admin)) and all(v == str(value) for v in c),
        timeout=lab_pods.WAIT,
        interval=0.5,
        what=f"macvlan devices published with children={value}",
    )


def _phases(admin: Cluster, names: list[str]) -> dict[str, int]:
    counts: dict[str, int] = {}
    for p in admin.list(r.PODS, NAMESPACE).items:
        if p["metadata"]["name"] in names:
            phase = str((p.get("status") or {}).get("phase", ""))
            counts[phase] = counts.get(phase, 0) + 1
    return counts


def _consistent(status: dict[str, Any], size: int) -> None:
    """The controller's counts at any moment: never more than the Pods, always adding up."""
    if "allocated" not in status:
        return
    allocated, free = int(status["allocated"]), int(status["free"])
    assert int(status["size"]) == size, status
    assert 0 <= allocated <= PODS and allocated + free == size, status


def test_fifty_pods_at_once_get_fifty_distinct_addresses_and_give_them_all_back(
    upstream_lab: UpstreamLab, admin: Cluster, classes: dict[str, str], pods: list[str]
) -> None:
    network = ipaddress.ip_network("10.63.0.0/24")
    first, last = ipaddress.ip_address(FIRST), ipaddress.ip_address(LAST)
    names = [f"storm-{i:02d}" for i in range(PODS)]
    started = time.monotonic()
    _set_children(admin, STORM_CHILDREN)
    try:
        with lab_pools.pooled(admin, POOL, lab_pools.pool(POOL, str(network), FIRST, LAST)) as dc:
            size = int(
                wait_for(
                    lambda: lab_pools.pool_status(admin, POOL).get("size"),
                    timeout=lab_pods.WAIT,
                    what="the pool's status",
                )
            )
            assert lab_pools.pool_status(admin, POOL)["allocated"] == 0
            admin.apply(lab_pools.template(POOL, dc))
            try:
                ready = time.monotonic()
                for name in names:  # at once: 50 creates, no waiting in between
                    admin.create(r.PODS, pod(name, POOL), NAMESPACE)
                    pods.append(name)
                created = time.monotonic()

                def all_running() -> bool:
                    _consistent(lab_pools.pool_status(admin, POOL), size)
                    return _phases(admin, names).get("Running", 0) == PODS

                try:
                    wait_for(all_running, timeout=STORM_WAIT, interval=2.0, what="50 Running")
                except AssertionError as exc:
                    stuck = [n for n in names if pod_phase(admin, n) != "Running"][:3]
                    raise AssertionError(f"{exc}\n{lab_pods.describe(admin, *stuck)}") from None
                running = time.monotonic()

                addresses = _addresses_of(admin, names, network, first, last)
                assert len(set(addresses.values())) == PODS, addresses
                assert lab_pools.held(admin, POOL) == sorted(addresses.values())
                status = wait_for(
                    lambda: (
                        (s := lab_pools.pool_status(admin, POOL)).get("allocated") == PODS and s
                    ),
                    timeout=lab_pods.WAIT,
                    what="status: 50 allocated",
                )
                assert status["free"] == size - PODS, status

                lab_pods.delete(admin, *names)
                wait_for(
                    lambda: all(pod_phase(admin, n) == "Gone" for n in names),
                    timeout=STORM_WAIT,
                    interval=2.0,
                    what="50 Pods deleted",
                )
                pods.clear()
                wait_for(
                    lambda: not lab_pools.held(admin, POOL),
                    timeout=lab_pods.WAIT,
                    interval=1.0,
                    what="every IPAllocation of the pool deleted",
                )
                status = wait_for(
                    lambda: (s := lab_pools.pool_status(admin, POOL)).get("allocated") == 0 and s,
                    timeout=lab_pods.WAIT,
                    what="status: 0 allocated",
                )
                assert status["free"] == size, status
                gone = time.monotonic()
                if not installed_driver.runs_as_pods(upstream_lab):
                    collected = [
                        line
                        for line in (upstream_lab.procs.logs / "dmn-controller.log")
                        .read_text(errors="replace")
                        .splitlines()
                        if "ip allocation collected" in line and f"allocation={POOL}-" in line
                    ]
                    assert not collected, collected  # the agent released every address
            finally:
                lab_pods.remove(admin, *pods)
                pods.clear()
                with contextlib.suppress(NotFound):
                    admin.delete(r.RESOURCE_CLAIM_TEMPLATES, POOL, NAMESPACE)
                wait_for(
                    lambda: (
                        not [
                            c
                            for c in admin.list(r.RESOURCE_CLAIMS, NAMESPACE).items
                            if any(
                                (o.get("name") or "") in names
                                for o in c["metadata"].get("ownerReferences") or []
                            )
                        ]
                    ),
                    timeout=STORM_WAIT,
                    interval=1.0,
                    what="the 50 generated claims deleted",
                )
    finally:
        _set_children(admin, CHILDREN)
    # wall times, shown with -s (the CI log keeps --durations' total)
    print(
        f"\nstorm: setup {ready - started:.1f}s, {PODS} Pods created in {created - ready:.1f}s, "
        f"all Running {running - created:.1f}s later, all gone and released "
        f"{gone - running:.1f}s later"
    )


def _addresses_of(
    admin: Cluster,
    names: list[str],
    network: ipaddress.IPv4Network | ipaddress.IPv6Network,
    first: ipaddress.IPv4Address | ipaddress.IPv6Address,
    last: ipaddress.IPv4Address | ipaddress.IPv6Address,
) -> dict[str, str]:
    """Name → the address each Pod's claim reports (networkData), checked against its
    network-status annotation and the pool's dynamic range."""
    out: dict[str, str] = {}
    for name in names:
        data = wait_for(
            lambda n=name: lab_pools.network_data(admin, NAMESPACE, n),  # type: ignore[misc]
            timeout=lab_pods.WAIT,
            what=f"{name}'s networkData",
        )
        assert data is not None and data["interfaceName"] == "net1", data
        (cidr,) = data["ips"]
        iface = ipaddress.ip_interface(cidr)
        assert iface.network == network and first <= iface.ip <= last, (name, cidr)
        # written after the claim's status, off the hook path (reporting, in order)
        entries = wait_for(
            lambda n=name: [  # type: ignore[misc]
                e
                for e in lab_pools.network_status(admin.get(r.PODS, n, NAMESPACE))
                if e.get("interface") == "net1"
            ],
            timeout=lab_pods.WAIT,
            what=f"{name}'s network-status",
        )
        assert [e.get("ips") for e in entries] == [[str(iface.ip)]], (name, entries)
        out[name] = str(iface.ip)
    return out
