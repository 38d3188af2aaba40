"""Which netdev a ``HostRepresentor/v1`` handle is, proven from the kernel (no shell).

A switchdev representor is known to the kernel by its switch (``IFLA_PHYS_SWITCH_ID``, the
eswitch's ID shared by the PF and all its representors) and its port name on that switch
(``IFLA_PHYS_PORT_NAME``, e.g. ``pf0vf1``). Both are set by the driver, not by anyone holding
the link, so together with the ifindex they are the representor's recorded identity
(``representor-mapping-verified``): the handle's ``ifName``/``ifIndex`` hints find the link,
its ``physSwitchID``/``physPortName`` observations (from the inventory's devlink scan) must
match what the kernel reports. Afterwards the representor is followed by its recorded ifindex
and those two facts only — never re-resolved by name — and a link at that ifindex that
reports another switch or port is never written.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

from pyroute2.netlink.exceptions import NetlinkError

from dmn.host.errors import HostError
from dmn.host.rtnetlink.links import LinkState, by_index, locate_hinted
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
        raise HostError(f"E_NETLINK_{exc.code}", f"read link {index}: {exc}") from exc
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
        raise HostError(
            "E_REPRESENTOR_MAPPING",
            f"handle {handle.id} observes no physSwitchID/physPortName: mapping unverifiable",
        )
    link = locate_hinted(ipr, handle.observations)
    found = switch_port(ipr, link.index) if link is not None else None
    if link is None or found is None:
        raise HostError("E_LINK_NOT_FOUND", f"no representor matching handle {handle.id}")
    if found != (want_switch, want_port):
        raise HostError(
            "E_REPRESENTOR_MAPPING",
            f"{link.name} is port {found[1] or '-'} of switch {found[0] or '-'}, not "
            f"{want_port} of {want_switch}",
        )
    return RepresentorIdentity(link.index, link.name, want_switch, want_port), link


def relocate(ipr: Any, recorded: RepresentorIdentity) -> LinkState | None:
    """The recorded representor, followed by its ifindex and proven by the switch ID and port
    name its driver reports; its name is a label (udev or an operator may rename it) and is
    not compared. None when the ifindex is free (the representor is gone: its VF was removed
    or the eswitch left switchdev mode); ``E_IDENTITY_MISMATCH`` when another link holds it
    (the runner quarantines the effect, nothing is written)."""
    link = by_index(ipr, recorded.index)
    found = switch_port(ipr, recorded.index) if link is not None else None
    if link is None or found is None:
        return None
    if found != (recorded.switch_id, recorded.port_name):
        raise HostError(
            "E_IDENTITY_MISMATCH",
            f"ifindex {recorded.index} holds {link.name!r}, port {found[1] or '-'} of switch "
            f"{found[0] or '-'}, not the recorded representor {recorded.port_name} of "
            f"{recorded.switch_id}; not touched",
        )
    return link
