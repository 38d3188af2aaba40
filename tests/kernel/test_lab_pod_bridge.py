"""The upstream lab's Pod network bridge keeps its address while Pods come and go.

A Linux bridge created without an address takes the lowest address of its ports and
changes it when that port leaves. The Pods on it keep the old address in their neighbour
entry for the gateway and their frames to the host go nowhere until it expires: in the
upstream lab, a controller replica's webhook review (which reads plugins from the API
server on the host) and its replies to kubelet's probes — the likely cause of a review
timing out during the helm rollout test. The lab
gives the bridge an address at creation (:func:`pod_bridge_address`), which the kernel then
never changes. Shown here on real bridges and veths in a scratch namespace.
"""

from __future__ import annotations

import re
import subprocess

import pytest
from pyroute2 import IPRoute

from dmn.lab.upstream.cluster import pod_bridge_address
from tests.kernel.scratch import scratch_netns

pytestmark = [pytest.mark.netns]

LOWEST = "02:00:00:00:00:01"


def _address_after_lowest_port_leaves(ns: str, given: str | None) -> tuple[str, str, str]:
    """(bridge address, with the lowest-address port attached, after it left)."""
    with IPRoute(netns=ns) as ip:
        extra = {"address": given} if given else {}
        ip.link("add", ifname="br0", kind="bridge", **extra)
        bridge = ip.link_lookup(ifname="br0")[0]
        ip.link("add", ifname="p0", kind="veth", peer="p1", address=LOWEST)
        ip.link("add", ifname="q0", kind="veth", peer="q1", address="0e:00:00:00:00:02")
        for port in ("p0", "q0"):
            ip.link("set", index=ip.link_lookup(ifname=port)[0], master=bridge, state="up")

        def address() -> str:
            return str(ip.get_links(bridge)[0].get_attr("IFLA_ADDRESS"))

        first = address()
        ip.link("del", index=ip.link_lookup(ifname="p0")[0])
        return given or "", first, address()


def test_a_bridge_without_an_address_follows_its_ports() -> None:
    with scratch_netns("dmpb") as ns:
        _, attached, after = _address_after_lowest_port_leaves(ns, None)
    assert attached == LOWEST
    assert after != LOWEST  # the Pods' neighbour entries for the gateway are now wrong


def test_the_labs_bridge_address_is_kept_when_ports_come_and_go() -> None:
    with scratch_netns("dmpb") as ns:
        given, attached, after = _address_after_lowest_port_leaves(ns, pod_bridge_address())
        kind = subprocess.run(
            ["ip", "netns", "exec", ns, "cat", "/sys/class/net/br0/addr_assign_type"],
            capture_output=True,
            text=True,
            check=True,
        ).stdout.strip()
    assert attached == after == given
    assert kind == "3"  # NET_ADDR_SET: the kernel will not replace it


def test_the_address_is_a_locally_administered_unicast_one() -> None:
    for _ in range(200):
        address = pod_bridge_address()
        assert re.fullmatch(r"([0-9a-f]{2}:){5}[0-9a-f]{2}", address)
        first = int(address[:2], 16)
        assert first & 0x01 == 0 and first & 0x02 == 0x02
