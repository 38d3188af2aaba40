"""Which netdev a ``HostRepresentor/v1`` handle is, proven from the kernel (no shell).

A switchdev representor is known to the kernel by its switch (``IFLA_PHYS_SWITCH_ID``, the
eswitch's ID shared by the PF and all its representors) and its port name on that switch
(``IFLA_PHYS_PORT_NAME``, e.g. ``pf0vf1``). Both are set by the driver, not by anyone holding
the link, so together with the ifindex they are the representor's recorded identity
(``representor-mapping-verified``): the handle's ``ifName``/``ifIndex`` hints find the link,
its ``physSwitchID``/``physPortName`` observations (from the inventory's devlink scan) must
match what the kernel reports, and undo acts only on a link that still matches the record.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

from pyroute2.netlink.exceptions import NetlinkError

from dmn.opcodes.executor import ExecutorError
from dmn.opcodes.linux.links import LinkState, by_index, locate_hinted
from dmn.vocabulary.handles import Handle


@dataclass(frozen=True, slots=True)
class RepresentorIdentity:
    index: int
    name: str
    switch_id: str
    port_name: str

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_json(cls, data: Any) -> RepresentorIdentity:
        return cls(
            index=int(data["index"]),
            name=str(data["name"]),
            switch_id=str(data["switch_id"]),
            port_name=str(data["port_name"]),
        )


def switch_port(ipr: Any, index: int) -> tuple[str, str] | None:
    """``(switch ID, port name)`` the kernel reports for a link ("" when it has none)."""
    try:
        msgs = ipr.link("get", index=index)
    except NetlinkError as exc:
        if exc.code == 19:  # ENODEV
            return None
        raise ExecutorError(f"E_NETLINK_{exc.code}", f"read link {index}: {exc}") from exc
    if not msgs:
        return None
    msg = msgs[0]
    switch = str(msg.get_attr("IFLA_PHYS_SWITCH_ID") or "").replace(":", "").lower()
    return switch, str(msg.get_attr("IFLA_PHYS_PORT_NAME") or "")


def locate(ipr: Any, handle: Handle) -> tuple[RepresentorIdentity, LinkState]:
    """The representor a handle names, verified: E_REPRESENTOR_MAPPING when unproven."""
    want_switch = str(handle.observations.get("physSwitchID", "") or "").replace(":", "").lower()
    want_port = str(handle.observations.get("physPortName", "") or "")
    if not want_switch or not want_port:
        raise ExecutorError(
            "E_REPRESENTOR_MAPPING",
            f"handle {handle.id} observes no physSwitchID/physPortName: mapping unverifiable",
        )
    link = locate_hinted(ipr, handle.observations)
    found = switch_port(ipr, link.index) if link is not None else None
    if link is None or found is None:
        raise ExecutorError("E_LINK_NOT_FOUND", f"no representor matching handle {handle.id}")
    if found != (want_switch, want_port):
        raise ExecutorError(
            "E_REPRESENTOR_MAPPING",
            f"{link.name} is port {found[1] or '-'} of switch {found[0] or '-'}, not "
            f"{want_port} of {want_switch}",
        )
    return RepresentorIdentity(link.index, link.name, want_switch, want_port), link


def relocate(ipr: Any, recorded: RepresentorIdentity) -> LinkState | None:
    """The recorded representor if the link at its ifindex still has its name and port."""
    link = by_index(ipr, recorded.index)
    if link is None or link.name != recorded.name:
        return None
    if switch_port(ipr, recorded.index) != (recorded.switch_id, recorded.port_name):
        return None
    return link
