"""The real kube-scheduler over our slices: consumable capacity and compatibility groups.

Both on one lab link, chosen by its inventory ID (a claim template whose CEL selector pins
it): the link's macvlan persona shares the parent's ``children`` capacity
(``lab/node.py`` gives it 4), and its kernel persona (the whole link) is in another
compatibility group of the same ``interface`` domain, so the scheduler never allocates
both at once. A Pod it cannot place stays Pending with the scheduler's own message on
PodScheduled=False.

The shares are started one after another, each once the one before runs. Started together,
kube-scheduler v1.37.2 (``dynamicresources``) sometimes refused the last one that fits. Its
``GatherAllocatedState`` adds the consumed capacity of the allocations the informer has seen
to that of the allocations still in flight. After PreBind writes a claim's allocation, the
assume cache can see that write before the claim leaves the in-flight set. A scheduling cycle
in that window counts the claim's ``children`` twice. The Pod it refuses is then only retried
on an event that frees capacity, or after the queue's five-minute flush. Once seen in CI: three
of four shares ran, the fourth stayed Pending with "cannot allocate all claims" for 120 s.
"""

from __future__ import annotations

from collections import defaultdict

import pytest

from dmn.api.cluster import Cluster
from dmn.lab.node import CHILDREN
from dmn.lab.upstream.cluster import UpstreamLab
from dmn.lab.upstream.demo import pod_phase
from tests.e2e import lab_pods
from tests.e2e.lab_pods import WAIT
from tests.waiting import wait_for

pytestmark = [pytest.mark.e2e]


def _stays_pending(admin: Cluster, name: str) -> str:
    """Wait for the scheduler's verdict; the Pod is Pending and its claim unallocated."""
    message = wait_for(
        lambda: lab_pods.unschedulable(admin, name),
        timeout=WAIT,
        interval=0.5,
        what=f"{name} reported unschedulable",
    )
    assert pod_phase(admin, name) == "Pending"
    (claim,) = lab_pods.claims_of(admin, lab_pods.uid(admin, name))
    assert not lab_pods.allocated_devices(claim), claim["status"]
    return message


def test_capacity_and_compatibility_groups_on_one_link(
    upstream_lab: UpstreamLab, admin: Cluster, classes: dict[str, str], pods: list[str]
) -> None:
    personas: dict[str, dict[str, lab_pods.LabDevice]] = defaultdict(dict)
    for device in lab_pods.devices(admin):
        personas[device.inventory_id][device.persona] = device
    link = min(i for i, p in personas.items() if {"kernel", "macvlan"} <= set(p))
    macvlan, kernel = personas[link]["macvlan"], personas[link]["kernel"]
    admin.apply(lab_pods.pinned_template("one-link-macvlan", classes["shared-macvlan"], link))
    admin.apply(lab_pods.pinned_template("one-link-kernel", classes["lab-host-device"], link))

    # consumable capacity: CHILDREN shares of one parent run, one more stays Pending. One
    # at a time (see the module docstring: kube-scheduler v1.37.2 can count a share twice
    # while another Pod's allocation is in flight)
    shares = [f"share-{i}" for i in range(CHILDREN)]
    for name in shares:
        lab_pods.run(admin, pods, name, "one-link-macvlan")
        lab_pods.wait_running(admin, name)
    claims = [lab_pods.claims_of(admin, lab_pods.uid(admin, n))[0] for n in shares]
    assert {d for c in claims for d in lab_pods.allocated_devices(c)} == {macvlan.name}
    results = [c["status"]["allocation"]["devices"]["results"][0] for c in claims]
    assert len({x["shareID"] for x in results}) == CHILDREN
    lab_pods.run(admin, pods, "share-over", "one-link-macvlan")
    over = _stays_pending(admin, "share-over")
    assert "cannot allocate all claims" in over, over

    # compatibility groups: the whole link is not handed off while it parents children
    lab_pods.run(admin, pods, "whole-link", "one-link-kernel")
    blocked = _stays_pending(admin, "whole-link")
    assert "cannot allocate all claims" in blocked, blocked
    lab_pods.delete(admin, "share-over", *shares)
    lab_pods.wait_gone(admin, "share-over", *shares)
    lab_pods.wait_running(admin, "whole-link")
    (claim,) = lab_pods.claims_of(admin, lab_pods.uid(admin, "whole-link"))
    assert lab_pods.allocated_devices(claim) == [kernel.name]

    # and the other way round: no child on a link that is handed off whole
    lab_pods.run(admin, pods, "share-late", "one-link-macvlan")
    late = _stays_pending(admin, "share-late")
    assert "cannot allocate all claims" in late, late
