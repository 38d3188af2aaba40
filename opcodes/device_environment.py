"""The environment of device executors: namespaces plus the node facts they may not guess.

A :class:`DeviceEnvironment` is a :class:`~dmn.host.netns.LinkEnvironment` (host,
sandbox and pinned namespaces) that also carries what the node agent resolved from its
DeviceExposurePolicies — the approved Linux bridges by administrator alias, the drivers a PCI
function may be bound to (``hardware.allowedDrivers``) — and the node's own roots: sysfs,
``/dev``, ``/proc`` and the CDI spec directory the agent writes. Executors never take a bridge
name, a driver outside the allowlist or a path from workload config: an alias in a parameter is
only a key into :attr:`bridge_grants`, a driver parameter must be in :attr:`allowed_drivers`.
Tests build one directly; the agent builds one per call. A plain ``LinkEnvironment`` works for
executors that need none of it (their lookups fall back to the node's real roots, "no
grants" and "no drivers"). The OVSDB endpoint (:attr:`ovsdb_remote`) and the approved OVS bridges
(:attr:`ovs_bridge_grants`) are node facts of the same kind. :attr:`netns_sysfs` gives the
sysfs a given namespace sees (a node mounts one per call, see
:mod:`dmn.host.netns_sysfs`; tests hand in recorded trees for hardware this machine lacks).
:attr:`effect_records` is the journal's read-only record view for effects that hold
references to shared state.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any

from dmn.host.netns import LinkEnvironment
from dmn.host.netns_sysfs import MountedNetnsSysfs, NetnsSysfs
from dmn.opcodes.address_pools import AddressPools, ClaimOwner
from dmn.opcodes.effect_records import EffectRecords
from dmn.opcodes.multus_objects import MultusObjects

SYSFS = Path("/sys")
DEV = Path("/dev")
PROC = Path("/proc")
CDI_ROOT = Path("/var/run/cdi")
OVSDB_REMOTE = "unix:/run/openvswitch/db.sock"


@dataclass(frozen=True, slots=True)
class UplinkGrant:
    """One ``allowedHostBridges[].uplinks[]`` entry (design §6.7): an existing port of the
    approved bridge whose VLAN table ``bridge/shared-uplink-vlan/v1`` may extend, by name,
    administrator alias and the canonical address of its device, with the VLANs it permits."""

    alias: str
    name: str
    device: str
    """The uplink's bus device as the kernel reports it (``IFLA_PARENT_DEV_NAME``): the
    canonical PCI address (``0000:3b:00.0``) of a NIC; a renamed or replaced netdev on another
    device is not the approved uplink."""
    vlans: frozenset[int]

    def to_json(self) -> dict[str, Any]:
        return {
            "alias": self.alias,
            "name": self.name,
            "device": self.device,
            "vlans": sorted(self.vlans),
        }

    @classmethod
    def from_json(cls, data: Any) -> UplinkGrant:
        return cls(
            alias=str(data["alias"]),
            name=str(data["name"]),
            device=str(data["device"]),
            vlans=frozenset(int(v) for v in data["vlans"]),
        )


@dataclass(frozen=True, slots=True)
class BridgeGrant:
    """One ``exposure.allowedHostBridges`` entry: an existing bridge the policy approves."""

    alias: str
    name: str
    vlans: frozenset[int]
    mac: str
    """The administrator-set MAC the bridge must still carry (its incarnation check)."""
    uplinks: tuple[UplinkGrant, ...] = ()
    """The bridge's approved shared uplinks (``uplinks[]``), each at most once by alias."""

    def uplink(self, alias: str) -> UplinkGrant | None:
        return next((u for u in self.uplinks if u.alias == alias), None)

    def to_json(self) -> dict[str, Any]:
        vlans = sorted(self.vlans)
        out: dict[str, Any] = {"alias": self.alias, "name": self.name, "vlans": vlans}
        out["mac"] = self.mac
        out["uplinks"] = [u.to_json() for u in self.uplinks]
        return out

    @classmethod
    def from_json(cls, data: Any) -> BridgeGrant:
        return cls(
            alias=str(data["alias"]),
            name=str(data["name"]),
            vlans=frozenset(int(v) for v in data["vlans"]),
            mac=str(data["mac"]).lower(),
            uplinks=tuple(UplinkGrant.from_json(u) for u in data.get("uplinks") or ()),
        )


@dataclass(frozen=True, slots=True)
class OvsBridgeGrant:
    """An approved Open vSwitch bridge: its OVSDB ``Bridge`` name and the VLANs it permits.

    The bridge's row UUID is read at capture and recorded (its incarnation); a bridge deleted
    and re-created under the same name is another row and no longer the approved one.
    """

    alias: str
    name: str
    vlans: frozenset[int]

    def to_json(self) -> dict[str, Any]:
        return {"alias": self.alias, "name": self.name, "vlans": sorted(self.vlans)}

    @classmethod
    def from_json(cls, data: Any) -> OvsBridgeGrant:
        vlans = frozenset(int(v) for v in data["vlans"])
        return cls(alias=str(data["alias"]), name=str(data["name"]), vlans=vlans)


@dataclass
class DeviceEnvironment(LinkEnvironment):
    sysfs_root: Path = SYSFS
    bridge_grants: Mapping[str, BridgeGrant] = field(default_factory=dict)
    allowed_drivers: frozenset[str] = frozenset()
    dev_root: Path = DEV
    proc_root: Path = PROC
    cdi_root: Path = CDI_ROOT
    ovs_bridge_grants: Mapping[str, OvsBridgeGrant] = field(default_factory=dict)
    ovsdb_remote: str = OVSDB_REMOTE
    netns_sysfs: NetnsSysfs = field(default_factory=MountedNetnsSysfs)
    effect_records: EffectRecords | None = None
    """The journal's effect records, read-only (:mod:`dmn.opcodes.effect_records`); None
    where nothing journals (an executor that needs it then refuses)."""
    address_pools: AddressPools | None = None
    """The IPPool allocation port (:mod:`dmn.opcodes.address_pools`), built by the agent
    from its cluster connection; None where there is none (``ip/pool-addresses`` refuses)."""
    claim_owner: ClaimOwner | None = None
    """The ResourceClaim the agent verified for this run and the node's name: who holds
    the addresses a run allocates. None for cleanup and recovery (they read the owner from
    the before-image) and where no claim was verified."""
    multus: MultusObjects | None = None
    """The API port of the ``multus/*`` executors (:mod:`dmn.opcodes.multus_objects`),
    carrying the shadow bindings the agent verified for this run; None where the node has
    no cluster connection (the executors refuse)."""

    @classmethod
    def extend(
        cls,
        env: LinkEnvironment,
        sysfs_root: Path = SYSFS,
        bridge_grants: Mapping[str, BridgeGrant] | None = None,
        **device: Any,
    ) -> DeviceEnvironment:
        """The same namespaces as ``env`` (every public field of it; its own sockets are not
        shared), plus device facts."""
        base = {
            f.name: getattr(env, f.name)
            for f in fields(LinkEnvironment)
            if f.init and not f.name.startswith("_")
        }
        grants = dict(bridge_grants or {})
        return cls(**base, sysfs_root=sysfs_root, bridge_grants=grants, **device)


def sysfs_root(env: Any) -> Path:
    return env.sysfs_root if isinstance(env, DeviceEnvironment) else SYSFS


def bridge_grants(env: Any) -> Mapping[str, BridgeGrant]:
    return env.bridge_grants if isinstance(env, DeviceEnvironment) else {}


def allowed_drivers(env: Any) -> frozenset[str]:
    return env.allowed_drivers if isinstance(env, DeviceEnvironment) else frozenset()


def dev_root(env: Any) -> Path:
    return env.dev_root if isinstance(env, DeviceEnvironment) else DEV


def proc_root(env: Any) -> Path:
    return env.proc_root if isinstance(env, DeviceEnvironment) else PROC


def cdi_root(env: Any) -> Path:
    return env.cdi_root if isinstance(env, DeviceEnvironment) else CDI_ROOT


def ovs_bridge_grants(env: Any) -> Mapping[str, OvsBridgeGrant]:
    return env.ovs_bridge_grants if isinstance(env, DeviceEnvironment) else {}


def ovsdb_remote(env: Any) -> str:
    return env.ovsdb_remote if isinstance(env, DeviceEnvironment) else OVSDB_REMOTE


def netns_sysfs(env: Any) -> NetnsSysfs:
    return env.netns_sysfs if isinstance(env, DeviceEnvironment) else MountedNetnsSysfs()


def effect_records(env: Any) -> EffectRecords | None:
    return env.effect_records if isinstance(env, DeviceEnvironment) else None


def address_pools(env: Any) -> AddressPools | None:
    return env.address_pools if isinstance(env, DeviceEnvironment) else None


def claim_owner(env: Any) -> ClaimOwner | None:
    return env.claim_owner if isinstance(env, DeviceEnvironment) else None


def multus_objects(env: Any) -> MultusObjects | None:
    return env.multus if isinstance(env, DeviceEnvironment) else None
