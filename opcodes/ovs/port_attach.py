"""Executor of ``ovs/port-attach/v1``: a verified host representor becomes an owned port of
the approved Open vSwitch bridge, through one OVSDB transaction.

Ownership — the journal is the proof. ``capture`` refuses a representor that already has a
``Port`` or ``Interface`` row under its name (``E_OVS_PORT_EXISTS``: never adopted, whoever
made it) and draws the UUIDs of the two rows the effect will create; the runner journals that
before-image before ``apply`` inserts the rows *with those UUIDs* (``persist_uuid``). So after
any crash the journal names exactly which rows are ours, and ``recover``/``undo`` act on those
UUIDs only (and only while the row still has the recorded name). The rows also carry
``external_ids`` ``dmn-owner=dmn:<operation>:<effect>`` and ``dmn-representor=<switch>/<port>``
for operators; they are compared and reported, never taken as proof on their own.

The bridge is an administrator alias resolved through the environment's
:class:`~dmn.opcodes.device_environment.OvsBridgeGrant`; its row UUID is recorded at capture
(its incarnation) and must be unchanged at apply (``E_OVS_BRIDGE_GRANT``). The access tag and
trunks must be in the grant's VLANs (``E_VLAN_DENIED``). ``apply`` waits until
``ovs-vswitchd`` has applied the change; ``observe`` requires the interface to have an
OpenFlow port number and no error (the datapath took it).
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Mapping
from typing import Any

from dmn.host.rtnetlink.representor import RepresentorIdentity, relocate
from dmn.opcodes.device_environment import (
    OvsBridgeGrant,
    ovs_bridge_grants,
    ovsdb_remote,
)
from dmn.opcodes.effect_handles import environment, representor_input, single
from dmn.opcodes.executor import EffectContext, ExecutorError, Observed, RecoveryObservation
from dmn.opcodes.ovs import specs
from dmn.opcodes.ovs.ovsdb_session import OvsdbSession, OvsdbView
from dmn.opcodes.spec import OpcodeSpec
from dmn.vocabulary.handles import Handle

_log = logging.getLogger(__name__)

OWNER_KEY = "dmn-owner"
REPRESENTOR_KEY = "dmn-representor"


def _grant(ctx: EffectContext) -> OvsBridgeGrant:
    alias = str(ctx.parameters["bridge"])
    found = ovs_bridge_grants(ctx.env).get(alias)
    if found is None:
        raise ExecutorError("E_OVS_BRIDGE_GRANT", f"no OVS bridge grant with alias {alias!r}")
    return found


def _vlans(ctx: EffectContext) -> tuple[int | None, tuple[int, ...]]:
    tag = ctx.parameters.get("tag")
    trunks = tuple(sorted(int(v) for v in ctx.parameters.get("trunks") or ()))
    return (int(tag) if tag is not None else None), trunks


def _session(ctx: EffectContext) -> OvsdbSession:
    return OvsdbSession(ovsdb_remote(ctx.env))


def _external_ids(ctx: EffectContext, before: Any) -> dict[str, str]:
    rep = before["representor"]
    return {OWNER_KEY: ctx.alias, REPRESENTOR_KEY: f"{rep['switch_id']}/{rep['port_name']}"}


class PortAttach:
    spec: OpcodeSpec = specs.PORT_ATTACH

    def capture(self, ctx: EffectContext) -> Any:
        _, identity, link = representor_input(ctx)
        grant = _grant(ctx)
        tag, trunks = _vlans(ctx)
        denied = sorted({v for v in (tag, *trunks) if v is not None} - grant.vlans)
        if denied:
            raise ExecutorError("E_VLAN_DENIED", f"VLANs {denied} are not granted on {grant.alias}")
        with _session(ctx) as session:
            view = session.view()
        bridge = view.bridge_named(grant.name)
        if bridge is None:
            raise ExecutorError(
                "E_OVS_BRIDGE_GRANT",
                f"approved OVS bridge {grant.name} ({grant.alias}) is not there",
            )
        _refuse_foreign_rows(view, link.name)
        return {
            "representor": identity.to_json(),
            "bridge": {"alias": grant.alias, "name": grant.name, "uuid": bridge.uuid},
            "port": {"name": link.name, "uuid": str(uuid.uuid4())},
            "interface": {"name": link.name, "uuid": str(uuid.uuid4())},
        }

    def _representor(self, ctx: EffectContext, before: Any) -> Any:
        env = environment(ctx)
        return relocate(env.rtnl(env.host), RepresentorIdentity.from_json(before["representor"]))

    def apply(self, ctx: EffectContext, before: Any) -> None:
        if self._representor(ctx, before) is None:
            raise ExecutorError("E_LINK_CHANGED", "the recorded representor is gone or changed")
        port, iface, bridge = before["port"], before["interface"], before["bridge"]
        tag, trunks = _vlans(ctx)
        with _session(ctx) as session:
            view = session.view()
            if port["uuid"] in view.ports:  # a replay after our own commit: nothing to add
                return
            recorded = view.bridges.get(bridge["uuid"])
            if recorded is None or recorded.name != bridge["name"]:
                raise ExecutorError(
                    "E_OVS_BRIDGE_GRANT", f"the approved OVS bridge {bridge['name']} was replaced"
                )
            _refuse_foreign_rows(view, port["name"])
            ids = _external_ids(ctx, before)

            def build(txn: Any) -> None:
                i = txn.insert(
                    session.idl.tables["Interface"], uuid.UUID(iface["uuid"]), persist_uuid=True
                )
                i.name = iface["name"]
                i.external_ids = ids
                p = txn.insert(
                    session.idl.tables["Port"], uuid.UUID(port["uuid"]), persist_uuid=True
                )
                p.name = port["name"]
                p.interfaces = [i]
                p.tag = [tag] if tag is not None else []
                p.trunks = list(trunks)
                p.external_ids = ids
                session.row("Bridge", bridge["uuid"]).addvalue("ports", p.uuid)

            session.transact(f"add port {port['name']}", build, wait_applied=True)

    def observe(self, ctx: EffectContext, before: Any) -> Observed:
        with _session(ctx) as session:
            view = session.view()
        problem = _mismatch(ctx, before, view)
        if self._representor(ctx, before) is None:
            problem = problem or "the recorded representor is gone or changed"
        out = {"representor": (single(ctx, "representor"),)}
        return Observed(not problem, out, problem)

    def recover(self, ctx: EffectContext, before: Any) -> RecoveryObservation:
        with _session(ctx) as session:
            view = session.view()
        port = view.ports.get(before["port"]["uuid"])
        iface = view.interfaces.get(before["interface"]["uuid"])
        if port is None and iface is None:
            return RecoveryObservation.NOT_APPLIED  # one transaction: none of it committed
        if port is not None and iface is not None and view.bridges_of_port(port.uuid):
            return RecoveryObservation.APPLIED
        return RecoveryObservation.UNCERTAIN

    def undo(
        self, ctx: EffectContext, before: Any, outputs: Mapping[str, tuple[Handle, ...]]
    ) -> None:
        port_rec, iface_rec = before["port"], before["interface"]
        with _session(ctx) as session:
            view = session.view()
            port = view.ports.get(port_rec["uuid"])
            iface = view.interfaces.get(iface_rec["uuid"])
            if port is not None and port.name != port_rec["name"]:
                _log.warning("effect=%s event=undo-keep reason=port-renamed", ctx.effect_id)
                port = None
            if iface is not None and iface.name != iface_rec["name"]:
                _log.warning("effect=%s event=undo-keep reason=interface-renamed", ctx.effect_id)
                iface = None
            if iface is not None:
                mine = port.uuid if port is not None else ""
                holders = [
                    p.name
                    for p in view.ports.values()
                    if iface.uuid in p.interfaces and p.uuid != mine
                ]
                if holders:  # someone put our interface row in their port: theirs now
                    _log.warning(
                        "effect=%s event=undo-keep reason=interface-in-foreign-port ports=%s",
                        ctx.effect_id,
                        holders,
                    )
                    iface = None
            if port is None and iface is None:
                return
            for row in (port, iface):
                if row is not None and row.external_ids.get(OWNER_KEY) != ctx.alias:
                    _log.warning(
                        "effect=%s event=undo-owner-mismatch row=%s external_ids=%s",
                        ctx.effect_id,
                        row.uuid,
                        dict(row.external_ids),
                    )
            bridges = view.bridges_of_port(port.uuid) if port is not None else []

            def build(txn: Any) -> None:
                for b in bridges:
                    session.row("Bridge", b.uuid).delvalue("ports", uuid.UUID(port_rec["uuid"]))
                if port is not None:
                    session.row("Port", port.uuid).delete()
                if iface is not None:
                    session.row("Interface", iface.uuid).delete()

            session.transact(f"delete port {port_rec['name']}", build, wait_applied=True)


def _refuse_foreign_rows(view: OvsdbView, name: str) -> None:
    """A Port or Interface row under the representor's name is not ours: never adopt it."""
    port, iface = view.port_named(name), view.interface_named(name)
    if port is not None or iface is not None:
        row = port or iface
        assert row is not None
        owner = row.external_ids.get(OWNER_KEY, "-")
        raise ExecutorError(
            "E_OVS_PORT_EXISTS",
            f"OVSDB already has a {'Port' if port else 'Interface'} {name} (row {row.uuid}, "
            f"{OWNER_KEY}={owner}) that this effect's journal did not record: not adopted",
        )


def _mismatch(ctx: EffectContext, before: Any, view: OvsdbView) -> str:
    """Why ``ovs-port-owned`` does not hold ("" when it does)."""
    port = view.ports.get(before["port"]["uuid"])
    iface = view.interfaces.get(before["interface"]["uuid"])
    bridge = view.bridges.get(before["bridge"]["uuid"])
    tag, trunks = _vlans(ctx)
    ids = _external_ids(ctx, before)
    if port is None or iface is None:
        return "the recorded Port/Interface rows are not in OVSDB"
    if bridge is None or port.uuid not in bridge.ports:
        return f"port {port.name} is not on the recorded bridge {before['bridge']['name']}"
    if port.interfaces != frozenset({iface.uuid}):
        return f"port {port.name} has other interfaces than the recorded one"
    if (port.tag, port.trunks) != (tag, trunks):
        return f"port {port.name} has tag {port.tag} trunks {list(port.trunks)}"
    for row in (port, iface):
        if any(row.external_ids.get(k) != v for k, v in ids.items()):
            return f"row {row.uuid} lost its ownership external_ids"
    if iface.error or not iface.ofport or iface.ofport < 0:
        return f"interface {iface.name} not in the datapath (ofport {iface.ofport}, {iface.error})"
    return ""
