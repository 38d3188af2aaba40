"""Bridge VLAN tables as iproute2 reads them: the independent reader the bridge tests compare
the executors' work against.

``bridge -n <ns>`` enters only the network namespace; ``ip netns exec`` also unshares a mount
namespace and remounts /sys for every call, which under the lab's emulation cost about half
a second per read.
"""

from __future__ import annotations

import json
import subprocess

Table = list[tuple[int, bool, bool]]  # (vid, pvid, egress untagged), sorted


def vlan_tables(ns: str, *dev: str) -> dict[str, Table]:
    """Every bridge port's and bridge's table in ``ns`` (one ``bridge -j vlan show`` call),
    or only ``dev``'s, by link name."""
    only = ("dev", *dev) if dev else ()
    out = subprocess.run(
        ["bridge", "-n", ns, "-j", "vlan", "show", *only],
        check=True, capture_output=True, text=True,
    ).stdout  # fmt: skip
    tables: dict[str, Table] = {}
    for row in json.loads(out or "[]"):
        entries = tables.setdefault(row["ifname"], [])
        for v in row.get("vlans", []):
            flags = v.get("flags", [])
            entries.append((int(v["vlan"]), "PVID" in flags, "Egress Untagged" in flags))
    return {name: sorted(entries) for name, entries in tables.items()}


def vlans(ns: str, ifname: str) -> Table:
    return vlan_tables(ns, ifname).get(ifname, [])


def bridge_vlan(ns: str, *args: str) -> None:
    """An administrator's ``bridge vlan`` change (the adversary of the bridge tests)."""
    subprocess.run(["bridge", "-n", ns, "vlan", *args], check=True)
