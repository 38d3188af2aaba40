"""The approved bridge of a grant, proven from the kernel, and a port's VLAN table.

``bridge-grant`` (design §6.7): the alias resolves through the environment's
:class:`~dmn.opcodes.device_environment.BridgeGrant` to an existing Linux bridge that has VLAN
filtering on, the administrator's fixed MAC and is up. Its ifindex, name and MAC are recorded
(the incarnation) and rechecked before every later action; shared bridge attributes are only
read, never changed. A port's VLAN table is read and written through ``AF_BRIDGE``
rtnetlink (``RTEXT_FILTER_BRVLAN``): entries are ``(vid, pvid, untagged)``.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

from dmn.host.rtnetlink.links import LinkState, by_index, by_name, netlink_call
from dmn.opcodes.device_environment import BridgeGrant, bridge_grants
from dmn.opcodes.executor import ExecutorError

BRIDGE_VLAN_INFO_PVID = 0x2
BRIDGE_VLAN_INFO_UNTAGGED = 0x4
AF_BRIDGE = 7
RTEXT_FILTER_BRVLAN = 2

VlanEntry = tuple[int, bool, bool]
"""(vid, pvid, untagged)"""


@dataclass(frozen=True, slots=True)
class BridgeIdentity:
    index: int
    name: str
    mac: str
    alias: str

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_json(cls, data: Any) -> BridgeIdentity:
        return cls(int(data["index"]), str(data["name"]), str(data["mac"]), str(data["alias"]))


def grant(env: Any, alias: str) -> BridgeGrant:
    found = bridge_grants(env).get(alias)
    if found is None:
        raise ExecutorError("E_BRIDGE_GRANT", f"no allowedHostBridges grant with alias {alias!r}")
    return found


def vlan_filtering(ipr: Any, index: int) -> bool:
    """``IFLA_BR_VLAN_FILTERING`` of a bridge, read from the kernel's own link message."""
    msgs = netlink_call(f"read bridge {index}", ipr.link, "get", index=index)
    info = msgs[0].get_attr("IFLA_LINKINFO") if msgs else None
    data = info.get_attr("IFLA_INFO_DATA") if info is not None else None
    return bool(data.get_attr("IFLA_BR_VLAN_FILTERING")) if data is not None else False


def _check(ipr: Any, link: LinkState | None, g: BridgeGrant) -> LinkState:
    if link is None or link.kind != "bridge":
        raise ExecutorError("E_BRIDGE_GRANT", f"approved bridge {g.name} ({g.alias}) is not there")
    if not vlan_filtering(ipr, link.index):
        raise ExecutorError("E_BRIDGE_GRANT", f"bridge {g.name} has no VLAN filtering")
    if link.mac.lower() != g.mac.lower():
        raise ExecutorError("E_BRIDGE_GRANT", f"bridge {g.name} has MAC {link.mac}, not {g.mac}")
    if not link.up:
        raise ExecutorError("E_BRIDGE_GRANT", f"bridge {g.name} is down")
    return link


def verify(ipr: Any, g: BridgeGrant) -> BridgeIdentity:
    """``bridge-grant``: the granted bridge as it is now; its identity for the record."""
    link = _check(ipr, by_name(ipr, g.name), g)
    return BridgeIdentity(link.index, link.name, link.mac.lower(), g.alias)


def reverify(ipr: Any, recorded: BridgeIdentity) -> bool:
    """The recorded bridge incarnation is still there (same ifindex, name and MAC)."""
    link = by_index(ipr, recorded.index)
    return (
        link is not None
        and link.kind == "bridge"
        and link.name == recorded.name
        and link.mac.lower() == recorded.mac
    )


def grant_of_master(env: Any, ipr: Any, master: int) -> tuple[BridgeGrant, BridgeIdentity]:
    """The grant whose approved bridge is the port's master (E_BRIDGE_GRANT if none)."""
    link = by_index(ipr, master) if master else None
    for g in bridge_grants(env).values():
        if link is not None and g.name == link.name:
            return g, verify(ipr, g)
    raise ExecutorError("E_BRIDGE_GRANT", "the representor is not a port of an approved bridge")


def vlan_table(ipr: Any, index: int) -> list[VlanEntry]:
    """The port's VLAN entries, sorted by VID."""
    out: list[VlanEntry] = []
    for msg in ipr.link("dump", family=AF_BRIDGE, ext_mask=RTEXT_FILTER_BRVLAN):
        if int(msg["index"]) != index:
            continue
        spec = msg.get_attr("IFLA_AF_SPEC")
        for info in spec.get_attrs("IFLA_BRIDGE_VLAN_INFO") if spec is not None else ():
            flags = int(info["flags"])
            entry = (
                int(info["vid"]),
                bool(flags & BRIDGE_VLAN_INFO_PVID),
                bool(flags & BRIDGE_VLAN_INFO_UNTAGGED),
            )
            out.append(entry)
    return sorted(out)


def write_table(ipr: Any, index: int, target: list[VlanEntry]) -> None:
    """Make the port's VLAN table exactly ``target``: add/update first (so a PVID moves
    without a gap), then delete what ``target`` does not hold."""
    now = {vid: (pvid, untagged) for vid, pvid, untagged in vlan_table(ipr, index)}
    want = {vid: (pvid, untagged) for vid, pvid, untagged in target}
    for vid, (pvid, untagged) in sorted(want.items(), key=lambda kv: not kv[1][0]):
        if now.get(vid) == (pvid, untagged):
            continue
        flags = (BRIDGE_VLAN_INFO_PVID if pvid else 0) | (
            BRIDGE_VLAN_INFO_UNTAGGED if untagged else 0
        )
        if vid in now:  # flags are replaced, not merged: drop the entry first
            netlink_call(
                f"vlan del {vid}", ipr.vlan_filter, "del", index=index, vlan_info={"vid": vid}
            )
        info = {"vid": vid, "flags": flags}
        netlink_call(f"vlan add {vid}", ipr.vlan_filter, "add", index=index, vlan_info=info)
    for vid in sorted(set(now) - set(want)):
        netlink_call(f"vlan del {vid}", ipr.vlan_filter, "del", index=index, vlan_info={"vid": vid})
