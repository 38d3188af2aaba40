"""What a switch floods to a representor, seen from both ends: broadcasts sent from a client
namespace and the representor's transmit counter. netdevsim gives a VF no netdev, so the
counter is as far as traffic can be followed in the lab (the bridge and OVS tests)."""

from __future__ import annotations

import subprocess

from pyroute2 import IPRoute

IPV6_OFF = ("net.ipv6.conf.all.disable_ipv6=1", "net.ipv6.conf.default.disable_ipv6=1")


def quiet(ns: str) -> None:
    """No IPv6 in ``ns``: its DAD and MLD frames would move the counters under test."""
    subprocess.run(["ip", "netns", "exec", ns, "sysctl", "-q", "-w", *IPV6_OFF], check=True)


def broadcasts(ns: str, dev: str, address: str, count: int) -> None:
    """``count`` broadcast pings out of ``dev`` in ``ns`` (given ``address``, brought up)."""
    subprocess.run(["ip", "-n", ns, "addr", "add", address, "dev", dev], check=True)
    subprocess.run(["ip", "-n", ns, "link", "set", dev, "up"], check=True)
    subprocess.run(
        ["ip", "netns", "exec", ns, "ping", "-b", "-c", str(count), "-i", "0.2", "-W", "1",
         "192.0.2.255"],
        capture_output=True, check=False,
    )  # fmt: skip


def tx_packets(ipr: IPRoute, ifname: str) -> int:
    msg = ipr.link("get", ifname=ifname)[0]
    return int(msg.get_attr("IFLA_STATS64")["tx_packets"])
