"""A hostile tenant on real kubelet and containerd: link tricks inside its own Pod.

The Pods have CAP_NET_ADMIN (the lab's Pod manifest adds it), so inside their network
namespace they may rename, re-alias, re-address and create links. From the Pod itself
(``kubectl exec``, busybox ``ip``) the tenant renames our ``net1`` away and creates a veth
named ``net1``; busybox's ``ip`` cannot set an alias, so the alias moves are made with
iproute2 entered into the Pod's namespace — the same netlink requests, with the same
rights, a CAP_NET_ADMIN process there can make. The fake ends up with our name, our
ownership alias (and, for a whole link, its MAC); our link keeps none of them.

The test holds the Pod's network namespace open (an fd) across the Pod's deletion, so it
can look inside afterwards: removal must have undone exactly our link — identified by
what the journal recorded, not by name, alias or MAC — and left the tenant's link where
it was. On the host nothing foreign may arrive and our link must come back as it was.
"""

from __future__ import annotations

import pytest

from dmn.api.cluster import Cluster
from dmn.lab.upstream.cluster import UpstreamLab
from dmn.lab.upstream.demo import Kubectl
from dmn.lab.upstream.driver import LAB_LINKS
from tests.e2e import lab_pods

pytestmark = [pytest.mark.e2e, pytest.mark.adversarial]

# from inside the Pod: our net1 renamed away, a veth pair net1/veth0 of the tenant's own
RENAME_AND_FAKE = " && ".join(
    ("ip link set net1 down", "ip link set net1 name stolen", "ip link add net1 type veth")
)


def _trick(lab: UpstreamLab, pod: str, fd: int, fake_mac: str = "") -> tuple[int, int]:
    """Play the tenant; returns (our link's ifindex, the fake's ifindex) in the Pod."""
    ours = lab_pods.ns_links(fd)["net1"]
    alias = ours.get("ifalias", "")
    assert alias.startswith("dmn:"), ours  # what removal used to trust
    done = Kubectl(lab.admin_kubeconfig).exec(pod, "sh", "-c", RENAME_AND_FAKE)
    assert done.returncode == 0, done.stderr
    for argv in (
        ("link", "set", "dev", "stolen", "alias", "tenant"),
        ("link", "set", "dev", "net1", "alias", alias),
        *((("link", "set", "dev", "net1", "address", fake_mac),) if fake_mac else ()),
    ):
        out = lab_pods.ns_ip(fd, *argv)
        assert out.returncode == 0, (argv, out.stderr)
    links = lab_pods.ns_links(fd)
    assert links["stolen"]["ifindex"] == ours["ifindex"]
    assert links["net1"].get("ifalias") == alias
    return int(ours["ifindex"]), int(links["net1"]["ifindex"])


def test_renamed_and_faked_macvlan_child(
    upstream_lab: UpstreamLab, admin: Cluster, classes: dict[str, str], pods: list[str]
) -> None:
    """Removal deletes our renamed child, never the tenant's veth carrying our alias."""
    host_before = lab_pods.host_links()
    lab_pods.run(admin, pods, "tenant-mac", "shared-macvlan")
    lab_pods.wait_running(admin, "tenant-mac")
    pod_uid = lab_pods.uid(admin, "tenant-mac")
    with lab_pods.held_netns(pod_uid) as fd:
        ours, fake = _trick(upstream_lab, "tenant-mac", fd)
        lab_pods.delete(admin, "tenant-mac")
        lab_pods.wait_gone(admin, "tenant-mac")
        inside = {link["ifindex"]: link["ifname"] for link in lab_pods.ns_links(fd).values()}
    assert inside.get(fake) == "net1", inside  # the tenant's link is untouched
    assert ours not in inside, inside  # ours is gone
    assert set(lab_pods.host_links()) == set(host_before)
    assert lab_pods.attachment_states(upstream_lab, pod_uid) == {"Removed"}


def test_renamed_and_faked_whole_link(
    upstream_lab: UpstreamLab, admin: Cluster, classes: dict[str, str], pods: list[str]
) -> None:
    """A lab link handed off whole comes back to the host — the real one, under its name,
    with its MAC and its veth peer — and the tenant's look-alike stays in the Pod."""
    host_before = lab_pods.host_links()
    lab_pods.run(admin, pods, "tenant-host", "lab-host-device")
    lab_pods.wait_running(admin, "tenant-host")
    pod_uid = lab_pods.uid(admin, "tenant-host")
    (name,) = [n for n in LAB_LINKS if n not in lab_pods.host_links()]
    (peer,) = [n for n in LAB_LINKS if n != name]
    with lab_pods.held_netns(pod_uid) as fd:
        ours, fake = _trick(upstream_lab, "tenant-host", fd, host_before[name]["address"])
        lab_pods.delete(admin, "tenant-host")
        lab_pods.wait_gone(admin, "tenant-host")
        inside = {link["ifindex"]: link["ifname"] for link in lab_pods.ns_links(fd).values()}
        host_after = lab_pods.host_links()
    assert inside.get(fake) == "net1", inside  # the look-alike was not moved out
    assert ours not in inside, inside  # the real link left the Pod
    assert set(host_after) == set(host_before), sorted(set(host_after) ^ set(host_before))
    back = host_after[name]
    assert back["address"] == host_before[name]["address"]
    assert back.get("link") == peer, back  # still the peer of the lab's other end
    assert back.get("ifalias", "") == host_before[name].get("ifalias", "")
    assert lab_pods.attachment_states(upstream_lab, pod_uid) == {"Removed"}
