"""Reading and writing one VF's settings through its PF over rtnetlink (no shell).

A PF reports its VFs in ``IFLA_VFINFO_LIST`` when asked with ``RTEXT_FILTER_VF``; each
``IFLA_VF_INFO`` carries the MAC, VLAN/QoS (and the VLAN protocol in ``IFLA_VF_VLAN_LIST``),
spoof checking, trust, min/max TX rate and link state. Writes go through
``RTM_SETLINK`` on the PF with one ``IFLA_VF_INFO`` nest. A driver that does not implement
a setting reports ``(u32)-1`` (spoof checking, trust): such a value is recorded as unknown and
is never written back.
"""

from __future__ import annotations

import errno
from dataclasses import asdict, dataclass
from typing import Any

from pyroute2.netlink.exceptions import NetlinkError

from dmn.host.rtnetlink.links import netlink_call
from dmn.opcodes.executor import ExecutorError
from dmn.opcodes.sriov.specs import LINK_STATES

RTEXT_FILTER_VF = 1
ETH_P_8021Q = 0x8100
_U32_UNSET = 0xFFFFFFFF


@dataclass(frozen=True, slots=True)
class PfIdentity:
    """The PF as the kernel names it: what a tenant holding a VF cannot change."""

    index: int
    name: str
    parent: str
    """``IFLA_PARENT_DEV_NAME``: the PF's bus device (a PCI BDF, or ``netdevsimN``)."""
    parent_bus: str
    num_vfs: int

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_json(cls, data: Any) -> PfIdentity:
        return cls(
            index=int(data["index"]),
            name=str(data["name"]),
            parent=str(data["parent"]),
            parent_bus=str(data["parent_bus"]),
            num_vfs=int(data["num_vfs"]),
        )

    def same_device(self, other: PfIdentity) -> bool:
        """Same ifindex and bus device: the recorded PF, not a look-alike. The name is a
        label an operator or udev may change; it is not compared."""
        return (self.index, self.parent, self.parent_bus) == (
            other.index,
            other.parent,
            other.parent_bus,
        )


@dataclass(frozen=True, slots=True)
class VfSettings:
    """One VF's settings as the PF reports them (``None``: the driver does not report it)."""

    mac: str
    vlan: int
    qos: int
    vlan_proto: int
    spoof_check: bool | None
    trust: bool | None
    min_tx_rate: int
    max_tx_rate: int
    link_state: str | None

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_json(cls, data: Any) -> VfSettings:
        def opt_bool(key: str) -> bool | None:
            value = data.get(key)
            return None if value is None else bool(value)

        link_state = data.get("link_state")
        return cls(
            mac=str(data["mac"]),
            vlan=int(data["vlan"]),
            qos=int(data["qos"]),
            vlan_proto=int(data.get("vlan_proto", ETH_P_8021Q)),
            spoof_check=opt_bool("spoof_check"),
            trust=opt_bool("trust"),
            min_tx_rate=int(data["min_tx_rate"]),
            max_tx_rate=int(data["max_tx_rate"]),
            link_state=None if link_state is None else str(link_state),
        )


def _pf_message(ipr: Any, index: int) -> Any | None:
    try:
        msgs = ipr.link("get", index=index, ext_mask=RTEXT_FILTER_VF)
    except NetlinkError as exc:
        if exc.code == errno.ENODEV:  # a vanished PF reads as None, the caller decides
            return None
        raise ExecutorError("E_NETLINK", f"read PF {index}: {exc}") from exc
    return msgs[0] if msgs else None


def pf_identity(ipr: Any, index: int) -> PfIdentity | None:
    """The PF with this ifindex in ``ipr``'s namespace, or None when there is none."""
    msg = _pf_message(ipr, index)
    if msg is None:
        return None
    return PfIdentity(
        index=int(msg["index"]),
        name=str(msg.get_attr("IFLA_IFNAME") or ""),
        parent=str(msg.get_attr("IFLA_PARENT_DEV_NAME") or ""),
        parent_bus=str(msg.get_attr("IFLA_PARENT_DEV_BUS_NAME") or ""),
        num_vfs=int(msg.get_attr("IFLA_NUM_VF") or 0),
    )


def _vf_attr(info: Any, name: str) -> Any:
    value = info.get_attr(name)
    return value if value is not None else {}


def _opt_flag(value: Any) -> bool | None:
    if value is None or int(value) == _U32_UNSET:
        return None
    return bool(value)


def read_vf(ipr: Any, pf_index: int, vf: int) -> VfSettings:
    """The settings the PF reports for VF ``vf`` (E_VF_NOT_FOUND when it reports none)."""
    msg = _pf_message(ipr, pf_index)
    vflist = msg.get_attr("IFLA_VFINFO_LIST") if msg is not None else None
    for info in vflist.get_attrs("IFLA_VF_INFO") if vflist is not None else ():
        mac_attr = _vf_attr(info, "IFLA_VF_MAC")
        if int(mac_attr.get("vf", -1)) != vf:
            continue
        vlan = _vf_attr(info, "IFLA_VF_VLAN")
        proto = ETH_P_8021Q
        vlist = info.get_attr("IFLA_VF_VLAN_LIST")
        if vlist is not None:
            for entry in vlist.get_attrs("IFLA_VF_VLAN_INFO"):
                proto = int(entry.get("proto", ETH_P_8021Q)) or ETH_P_8021Q
        rate = _vf_attr(info, "IFLA_VF_RATE")
        state = _vf_attr(info, "IFLA_VF_LINK_STATE").get("link_state")
        names = {v: k for k, v in LINK_STATES.items()}
        return VfSettings(
            mac=str(mac_attr.get("mac", "00:00:00:00:00:00")).lower(),
            vlan=int(vlan.get("vlan", 0)),
            qos=int(vlan.get("qos", 0)),
            vlan_proto=proto,
            spoof_check=_opt_flag(_vf_attr(info, "IFLA_VF_SPOOFCHK").get("spoofchk")),
            trust=_opt_flag(_vf_attr(info, "IFLA_VF_TRUST").get("trust")),
            min_tx_rate=int(rate.get("min_tx_rate", 0)),
            max_tx_rate=int(rate.get("max_tx_rate", 0)),
            link_state=None if state is None else names.get(int(state), str(state)),
        )
    raise ExecutorError("E_VF_NOT_FOUND", f"PF {pf_index} reports no VF {vf}")


def desired(parameters: Any, current: VfSettings) -> VfSettings:
    """``current`` with the bound parameters applied (unset parameters keep their value)."""
    p = dict(parameters)

    def pick(key: str, now: Any) -> Any:
        value = p.get(key)
        return now if value is None else value

    vlan = pick("vlan", current.vlan)
    changes_vlan = p.get("vlan") is not None
    return VfSettings(
        mac=str(pick("mac", current.mac)).lower(),
        vlan=vlan,
        qos=int(p.get("qos") or 0) if changes_vlan else current.qos,
        vlan_proto=ETH_P_8021Q if changes_vlan else current.vlan_proto,
        spoof_check=pick("spoofCheck", current.spoof_check),
        trust=pick("trust", current.trust),
        min_tx_rate=pick("minTxRate", current.min_tx_rate),
        max_tx_rate=pick("maxTxRate", current.max_tx_rate),
        link_state=pick("linkState", current.link_state),
    )


def write_vf(ipr: Any, pf_index: int, vf: int, target: VfSettings, now: VfSettings) -> None:
    """Make the PF hold ``target`` for VF ``vf``, sending only the settings that differ."""
    spec: dict[str, Any] = {"vf": vf}
    if target.mac != now.mac:
        spec["mac"] = target.mac
    if (target.vlan, target.qos, target.vlan_proto) != (now.vlan, now.qos, now.vlan_proto):
        if target.vlan_proto == ETH_P_8021Q or target.vlan == 0:
            spec["vlan"] = {"vlan": target.vlan, "qos": target.qos}
        else:
            spec["vlan"] = [{"vlan": target.vlan, "qos": target.qos, "proto": target.vlan_proto}]
    if (target.min_tx_rate, target.max_tx_rate) != (now.min_tx_rate, now.max_tx_rate):
        spec["rate"] = {"min_tx_rate": target.min_tx_rate, "max_tx_rate": target.max_tx_rate}
    if target.spoof_check is not None and target.spoof_check != now.spoof_check:
        spec["spoofchk"] = int(target.spoof_check)
    if target.trust is not None and target.trust != now.trust:
        spec["trust"] = int(target.trust)
    if target.link_state is not None and target.link_state != now.link_state:
        spec["link_state"] = LINK_STATES[target.link_state]
    if len(spec) > 1:
        netlink_call(f"set PF {pf_index} vf {vf}", ipr.link, "set", index=pf_index, vf=spec)
