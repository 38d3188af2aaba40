"""The bridge grants of one step, from the policy that exposed its device, checked up front.

Why here: a bridge or OVS bridge is named in workload config only by an administrator alias;
what it resolves to — and which VLANs it permits — comes from the ``allowedHostBridges`` /
``allowedOvsBridges`` of the DeviceExposurePolicy that exposed the device whose representor
the step consumes (recorded on its persona), never from the workload. :func:`granting_roots`
traces an Operation step's inputs back to the Allocation roots they come from;
:meth:`StepGrants.of` keeps what every one of those roots' personas grants (one representor
feeds a bridge step, so in practice one persona). :func:`check_step` proves, before anything
changes, that the aliases and VLANs the step's ``connect`` program would use for this config
are granted (``E_BRIDGE_GRANT``, ``E_OVS_BRIDGE_GRANT``, ``E_VLAN_DENIED``), pointing at the
config field that binds them (the verifier turns that into its refusal); the executors check
the same again against the kernel and OVSDB when they run. Pure: no I/O.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from dmn.agent.personas.model import Persona
from dmn.engine.config_plan import ConfigPlan, plan_for_config
from dmn.interpreter.loader import Plugin
from dmn.opcodes.device_environment import BridgeGrant, OvsBridgeGrant

BRIDGE_ATTACH = "bridge/port-attach/v1"
BRIDGE_VLAN = "bridge/port-vlan/v1"
UPLINK_VLAN = "bridge/shared-uplink-vlan/v1"
OVS_ATTACH = "ovs/port-attach/v1"


@dataclass(frozen=True)
class GrantProblem:
    """Why a step's program may not run with its grants: a reason code, a message and the
    config field at fault."""

    code: str
    message: str
    field: str


@dataclass(frozen=True)
class StepGrants:
    """Approved Linux and OVS bridges by alias, for one step's executors."""

    bridges: Mapping[str, BridgeGrant] = field(default_factory=dict)
    ovs_bridges: Mapping[str, OvsBridgeGrant] = field(default_factory=dict)

    @classmethod
    def of(cls, personas: Iterable[Persona]) -> StepGrants:
        """What every persona grants: an alias survives only when each persona grants it
        with the same bridge and VLANs (no personas: nothing is granted)."""
        bridges: dict[str, BridgeGrant] | None = None
        ovs: dict[str, OvsBridgeGrant] | None = None
        for p in personas:
            mine = {g.alias: g for g in p.bridge_grants}
            mine_ovs = {g.alias: g for g in p.ovs_bridge_grants}
            bridges = mine if bridges is None else _common(bridges, mine)
            ovs = mine_ovs if ovs is None else _common(ovs, mine_ovs)
        return cls(bridges or {}, ovs or {})


def _common(a: dict[str, Any], b: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in a.items() if b.get(k) == v}


def granting_roots(
    step: str, steps: Mapping[str, Mapping[str, Any]], roots: Iterable[str]
) -> list[str]:
    """The Allocation roots an Operation step's inputs come from, through earlier Operation
    steps (``inputs: {port: {from: step.port}}``), in first-seen order."""
    root_set = set(roots)
    out: list[str] = []
    seen: set[str] = set()
    todo = [step]
    while todo:
        current = todo.pop()
        for binding in ((steps.get(current) or {}).get("inputs") or {}).values():
            refs = binding if isinstance(binding, list) else [binding]
            for ref in refs:
                source = str((ref or {}).get("from", "")).partition(".")[0]
                if not source or source in seen:
                    continue
                seen.add(source)
                if source in root_set:
                    out.append(source)
                else:
                    todo.append(source)
    return out


def _vids(params: Mapping[str, Any], *names: str) -> set[int]:
    out: set[int] = set()
    for name in names:
        value = params.get(name)
        values = value if isinstance(value, list) else [value]
        out |= {int(v) for v in values if isinstance(v, int) and not isinstance(v, bool)}
    return out


def check_step(
    plugin: Plugin, config: Mapping[str, Any], grants: StepGrants, where: str
) -> GrantProblem | None:
    """Why the step's planned ``connect`` effects (the config plan the binder binds,
    :func:`~dmn.engine.config_plan.plan_for_config`) would, for ``config``, name a bridge
    alias or VLAN its grants do not hold; None when they would not. ``where`` is the step's
    field path.

    A config that does not validate is left to the binder (it reports it with positions)."""
    plan = plan_for_config(plugin, dict(config))
    if not isinstance(plan, ConfigPlan):
        return None
    attached: list[BridgeGrant] = []
    for effect in plan.hook("connect"):
        if effect.kind not in (BRIDGE_ATTACH, BRIDGE_VLAN, UPLINK_VLAN, OVS_ATTACH):
            continue
        params, fields = effect.parameters, effect.bound_fields

        def at(name: str, fields: Mapping[str, str] = fields) -> str:
            return f"{where}.config.{fields[name]}" if name in fields else where

        if effect.kind in (BRIDGE_ATTACH, UPLINK_VLAN):
            alias = str(params.get("bridge", ""))
            grant = grants.bridges.get(alias)
            if grant is None:
                return GrantProblem(
                    "E_BRIDGE_GRANT",
                    f"{plugin.name} effect {effect.id}: bridge alias {alias!r} is not in the "
                    f"allowedHostBridges of the policy that exposed the device "
                    f"(granted: {sorted(grants.bridges) or 'none'})",
                    at("bridge"),
                )
            attached.append(grant)
        elif effect.kind == BRIDGE_VLAN:
            wanted = _vids(params, "pvid", "tagged")
            for grant in attached:
                denied = sorted(wanted - grant.vlans)
                if denied:
                    name = "pvid" if params.get("pvid") in denied else "tagged"
                    return GrantProblem(
                        "E_VLAN_DENIED",
                        f"{plugin.name} effect {effect.id}: VLANs {denied} are not granted on "
                        f"bridge {grant.alias}",
                        at(name),
                    )
        else:
            alias = str(params.get("bridge", ""))
            ovs = grants.ovs_bridges.get(alias)
            if ovs is None:
                return GrantProblem(
                    "E_OVS_BRIDGE_GRANT",
                    f"{plugin.name} effect {effect.id}: OVS bridge alias {alias!r} is not in "
                    f"the allowedOvsBridges of the policy that exposed the device "
                    f"(granted: {sorted(grants.ovs_bridges) or 'none'})",
                    at("bridge"),
                )
            denied = sorted(_vids(params, "tag", "trunks") - ovs.vlans)
            if denied:
                name = "tag" if params.get("tag") in denied else "trunks"
                return GrantProblem(
                    "E_VLAN_DENIED",
                    f"{plugin.name} effect {effect.id}: VLANs {denied} are not granted on OVS "
                    f"bridge {ovs.alias}",
                    at(name),
                )
    return None
