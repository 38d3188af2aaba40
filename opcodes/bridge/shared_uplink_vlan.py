"""Executor of ``bridge/shared-uplink-vlan/v1``: one attachment's reference to a VLAN on an
approved uplink of an approved Linux bridge (design §6.7).

Several attachments may need one VID on the uplink; the reference count lives in the journal,
read through the environment's :class:`~dmn.opcodes.effect_records.EffectRecords` port, never
in kernel state an administrator can change. A reference is a recorded effect of this opcode
for the same bridge, uplink (by recorded ifindex) and VID that still needs it (``Applying``,
``Applied`` or ``Quarantined``; an ``Undoing`` one is being released). Capture, apply and undo
each read and act under the port's :meth:`~dmn.opcodes.effect_records.EffectRecords.serialized`
lock of that uplink, since operations of other sandboxes run concurrently.

The before-image records the bridge incarnation, the uplink's identity (ifindex, name, parent
device), the VID, the uplink's entry for it at capture and ``created``: whether the VID's
presence is this driver's doing — it was absent at capture, or a recorded reference we joined
(one being released too) says so. A VID the administrator had on the uplink before any
reference of ours is ``created: false`` in every record that joins it, so it is never removed.

Undo removes the VID only when no other reference holds it, ``created`` is true, the entry is
still the tagged one we install and no other port of the bridge (nor the bridge itself) uses
the VID. Foreign flags on the entry, a foreign port using the VID, or a changed bridge/uplink
identity refuse the removal (the effect stays Quarantined, i.e. reserved: the VID stays,
referenced by that record). An uplink that is gone or left the bridge has no VLAN entries
left to remove.

Known limit: an administrator who deletes a pre-existing VID while a reference holds it, after
which a new reference re-adds it, leaves it to the last record to decide; when that last one
is a ``created: false`` record the VID is treated as the administrator's and stays.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import asdict, dataclass
from typing import Any

from dmn.host.rtnetlink.links import LinkState, by_index, by_name, netlink_call
from dmn.opcodes.bridge import specs
from dmn.opcodes.bridge.approved_bridge import (
    AF_BRIDGE,
    RTEXT_FILTER_BRVLAN,
    BridgeIdentity,
    VlanEntry,
    grant,
    reverify,
    verify,
    vlan_table,
)
from dmn.opcodes.device_environment import UplinkGrant, effect_records
from dmn.opcodes.effect_handles import environment, representor_input
from dmn.opcodes.effect_records import RELEASING, EffectRecords, RecordedEffect
from dmn.opcodes.executor import EffectContext, ExecutorError, Observed, RecoveryObservation
from dmn.opcodes.spec import OpcodeSpec
from dmn.vocabulary.handles import Handle

_log = logging.getLogger(__name__)

KIND = specs.SHARED_UPLINK_VLAN.name


@dataclass(frozen=True, slots=True)
class UplinkIdentity:
    index: int
    name: str
    device: str
    alias: str

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_json(cls, data: Any) -> UplinkIdentity:
        return cls(int(data["index"]), str(data["name"]), str(data["device"]), str(data["alias"]))


def approved_uplink(ipr: Any, g: UplinkGrant, bridge: BridgeIdentity) -> UplinkIdentity:
    """``uplink-grant``: the granted uplink exists on the granted device and is a port of the
    approved bridge incarnation."""
    link = by_name(ipr, g.name)
    if link is None:
        raise ExecutorError("E_UPLINK_GRANT", f"approved uplink {g.name} ({g.alias}) is not there")
    if link.parent_dev != g.device:
        raise ExecutorError(
            "E_UPLINK_GRANT",
            f"uplink {g.name} is on device {link.parent_dev or 'none'!r}, not {g.device!r}",
        )
    if link.master != bridge.index:
        raise ExecutorError(
            "E_UPLINK_NOT_PORT", f"uplink {g.name} is not a port of bridge {bridge.name}"
        )
    return UplinkIdentity(link.index, link.name, link.parent_dev, g.alias)


def entry_of(table: list[VlanEntry], vid: int) -> VlanEntry | None:
    return next((e for e in table if e[0] == vid), None)


def _same_vlan(before: Any, bridge: BridgeIdentity, uplink: UplinkIdentity, vid: int) -> bool:
    try:
        return (
            int(before["bridge"]["index"]) == bridge.index
            and str(before["bridge"]["mac"]) == bridge.mac
            and int(before["uplink"]["index"]) == uplink.index
            and int(before["vid"]) == vid
        )
    except (KeyError, TypeError, ValueError):
        return True  # an unreadable record of this opcode may hold anything: count it


def _records(ctx: EffectContext) -> EffectRecords:
    records = effect_records(ctx.env)
    if records is None:
        raise ExecutorError(
            "E_REFERENCES_UNAVAILABLE",
            "shared uplink VLANs are reference-counted in the journal; this environment "
            "gives the executor no journal records",
        )
    return records


def _section(records: EffectRecords, bridge: BridgeIdentity, uplink: UplinkIdentity) -> Any:
    return records.serialized(f"bridge-uplink/{bridge.index}/{uplink.index}")


def other_references(
    records: EffectRecords,
    ctx: EffectContext,
    bridge: BridgeIdentity,
    uplink: UplinkIdentity,
    vid: int,
) -> list[RecordedEffect]:
    """The journal's recorded references to this VID on this uplink, this effect excluded
    (releasing ones included: see :func:`_needs`)."""
    return [
        r
        for r in records.held(KIND)
        if (r.operation_id, r.effect_id) != (ctx.operation_id, ctx.effect_id)
        and _same_vlan(r.before, bridge, uplink, vid)
    ]


def _needs(ref: RecordedEffect) -> bool:
    return ref.state != RELEASING


def _created(ref: RecordedEffect) -> bool:
    before = ref.before
    return bool(before.get("created", True)) if isinstance(before, Mapping) else True


def bridge_users(ipr: Any, bridge: int, vid: int, skip: int) -> list[int]:
    """Ifindexes of the bridge's ports (and the bridge itself) other than ``skip`` whose VLAN
    table holds ``vid``: a dependency that keeps the VID on the uplink."""
    users = []
    for msg in ipr.link("dump", family=AF_BRIDGE, ext_mask=RTEXT_FILTER_BRVLAN):
        index = int(msg["index"])
        if index == skip or (index != bridge and msg.get_attr("IFLA_MASTER") != bridge):
            continue
        spec = msg.get_attr("IFLA_AF_SPEC")
        infos = spec.get_attrs("IFLA_BRIDGE_VLAN_INFO") if spec is not None else ()
        if any(int(info["vid"]) == vid for info in infos):
            users.append(index)
    return sorted(set(users))


class SharedUplinkVlan:
    spec: OpcodeSpec = specs.SHARED_UPLINK_VLAN

    def capture(self, ctx: EffectContext) -> Any:
        env = environment(ctx)
        ipr = env.rtnl(env.host)
        _, representor, _ = representor_input(ctx)
        g = grant(env, str(ctx.parameters["bridge"]))
        alias, vid = str(ctx.parameters["uplink"]), int(ctx.parameters["vlanId"])
        ug = g.uplink(alias)
        if ug is None:
            raise ExecutorError("E_UPLINK_GRANT", f"bridge {g.alias} has no uplink grant {alias!r}")
        if vid not in ug.vlans:
            raise ExecutorError("E_VLAN_DENIED", f"VLAN {vid} is not granted on uplink {alias}")
        records = _records(ctx)
        bridge = verify(ipr, g)
        uplink = approved_uplink(ipr, ug, bridge)
        with _section(records, bridge, uplink):
            entry = entry_of(vlan_table(ipr, uplink.index), vid)
            others = other_references(records, ctx, bridge, uplink, vid)
        created = entry is None or any(_created(r) for r in others)
        return {
            "representor": representor.to_json(),
            "bridge": bridge.to_json(),
            "uplink": uplink.to_json(),
            "vid": vid,
            "entry": list(entry) if entry is not None else None,
            "created": created,
        }

    def _uplink(self, ctx: EffectContext, before: Any) -> tuple[Any, LinkState | None, bool]:
        """(rtnl, the live uplink link or None if gone, whether its identity still holds)."""
        env = environment(ctx)
        ipr = env.rtnl(env.host)
        bridge = BridgeIdentity.from_json(before["bridge"])
        uplink = UplinkIdentity.from_json(before["uplink"])
        link = by_index(ipr, uplink.index)
        if link is None:
            return ipr, None, False
        same = (
            link.name == uplink.name
            and link.parent_dev == uplink.device
            and link.master == bridge.index
            and reverify(ipr, bridge)
        )
        return ipr, link, same

    def apply(self, ctx: EffectContext, before: Any) -> None:
        records = _records(ctx)
        bridge = BridgeIdentity.from_json(before["bridge"])
        with _section(records, bridge, UplinkIdentity.from_json(before["uplink"])):
            ipr, link, same = self._uplink(ctx, before)
            if link is None or not same:
                raise ExecutorError(
                    "E_LINK_CHANGED", "the approved uplink or bridge changed identity"
                )
            vid = int(before["vid"])
            if entry_of(vlan_table(ipr, link.index), vid) is None:
                info = {"vid": vid, "flags": 0}  # tagged, not the uplink's PVID
                netlink_call(
                    f"vlan add {vid}", ipr.vlan_filter, "add", index=link.index, vlan_info=info
                )

    def observe(self, ctx: EffectContext, before: Any) -> Observed:
        ipr, link, same = self._uplink(ctx, before)
        if link is None or not same:
            return Observed(False, detail="the approved uplink or bridge changed identity")
        vid = int(before["vid"])
        present = entry_of(vlan_table(ipr, link.index), vid) is not None
        return Observed(present, {}, "" if present else f"uplink {link.name} lacks VLAN {vid}")

    def recover(self, ctx: EffectContext, before: Any) -> RecoveryObservation:
        ipr, link, same = self._uplink(ctx, before)
        if link is None or not same:
            return RecoveryObservation.UNCERTAIN
        present = entry_of(vlan_table(ipr, link.index), int(before["vid"])) is not None
        return RecoveryObservation.APPLIED if present else RecoveryObservation.NOT_APPLIED

    def undo(
        self, ctx: EffectContext, before: Any, outputs: Mapping[str, tuple[Handle, ...]]
    ) -> None:
        records = _records(ctx)
        bridge = BridgeIdentity.from_json(before["bridge"])
        uplink = UplinkIdentity.from_json(before["uplink"])
        with _section(records, bridge, uplink):
            self._release(ctx, records, before, bridge, uplink)

    def _release(
        self,
        ctx: EffectContext,
        records: EffectRecords,
        before: Any,
        bridge: BridgeIdentity,
        uplink: UplinkIdentity,
    ) -> None:
        ipr, link, same = self._uplink(ctx, before)
        vid = int(before["vid"])
        tag = f"effect={ctx.effect_id} uplink={uplink.name} vid={vid}"
        if link is None or link.master != bridge.index:
            # gone, or no longer a port: the kernel dropped its VLAN entries with it
            _log.warning("%s event=undo-skip reason=uplink-left-bridge", tag)
            return
        if not same:
            raise ExecutorError(
                "E_LINK_CHANGED",
                f"uplink {uplink.name} or bridge {bridge.name} changed identity; "
                f"VLAN {vid} stays reserved",
            )
        others = [r for r in other_references(records, ctx, bridge, uplink, vid) if _needs(r)]
        if others:
            _log.info("%s event=release references=%d", tag, len(others))
            return
        if not before.get("created", False):
            _log.info("%s event=release reason=administrator-vlan", tag)
            return
        entry = entry_of(vlan_table(ipr, link.index), vid)
        if entry is None:
            _log.warning("%s event=undo-skip reason=vlan-already-removed", tag)
            return
        if entry != (vid, False, False):
            flags = [n for n, on in (("pvid", entry[1]), ("untagged", entry[2])) if on]
            raise ExecutorError(
                "E_UPLINK_VLAN_CHANGED",
                f"VLAN {vid} on uplink {uplink.name} now has foreign flags {flags}; it stays",
            )
        users = bridge_users(ipr, bridge.index, vid, skip=link.index)
        if users:
            raise ExecutorError(
                "E_UPLINK_VLAN_IN_USE",
                f"VLAN {vid} is still used by bridge ports {users}; it stays on {uplink.name}",
            )
        netlink_call(
            f"vlan del {vid}", ipr.vlan_filter, "del", index=link.index, vlan_info={"vid": vid}
        )
        _log.info("%s event=removed", tag)
