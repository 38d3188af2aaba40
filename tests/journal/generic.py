"""Test executors registered under the real opcode names, over the test world.

They let the crash matrix run every builtin hook program through the real runner and the
real RocksDB journal with the real opcode specs (ports, accesses, reversibility), while
the world stays a JSON file. Each effect, in one atomic world write:

* leaves an ownership marker ``objects["dmn:<op>:<effect>"]`` (what a real executor proves
  with the link alias or a recorded identity), which ``recover`` checks;
* for each input it configures (access ExclusiveConfigure / AttachMember / DeviceAccess),
  sets ``attrs["<inventory id>.<opcode>"]`` to the effect's parameters, restoring the
  before-image on undo;
* for Irreversible opcodes, also bumps ``resets[<inventory id>]``, which undo cannot take
  back, and ``recover`` answers Uncertain (as the real ``pci/function-reset`` does): the
  runner-contract matrix then exercises quarantine, not a replay, after such a crash.

Outputs follow the spec: an ``inherits`` port continues the input handle (with the port's
grants added); any other port yields a new handle (same inventory identity as an input of
the same type, else a new one named after the alias) granting the port's ``grants``.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from dmn.opcodes.executor import EffectContext, Observed, RecoveryObservation
from dmn.opcodes.registry import default_registry
from dmn.opcodes.spec import OpcodeSpec
from dmn.vocabulary.handles import Handle, Provenance, Scope
from dmn.vocabulary.terms import Access, Reversibility, ScopeKind
from tests.journal.world import World

_CONFIGURES = {Access.EXCLUSIVE_CONFIGURE, Access.ATTACH_MEMBER, Access.DEVICE_ACCESS}


class GenericExecutor:
    def __init__(self, spec: OpcodeSpec, world: World) -> None:
        self.spec = spec
        self.world = world

    def _configured(self, ctx: EffectContext) -> list[str]:
        out = []
        for port, pspec in self.spec.inputs.items():
            if pspec.access in _CONFIGURES:
                out += [f"{h.inventory_id}.{self.spec.name}" for h in ctx.inputs.get(port, ())]
        return sorted(out)

    def capture(self, ctx: EffectContext) -> Any:
        self.world.reload()
        attrs = self.world.data["attrs"]
        return {
            "attrs": {
                a: {"present": a in attrs, "value": attrs.get(a)} for a in self._configured(ctx)
            }
        }

    def apply(self, ctx: EffectContext, before: Any) -> None:
        self.world.reload()
        self.world.calls.append(f"apply:{ctx.effect_id}")
        data = self.world.data
        data["objects"][ctx.alias] = {
            "kind": self.spec.name,
            "inputs": sorted(h.inventory_id for hs in ctx.inputs.values() for h in hs),
        }
        for attr in before["attrs"]:
            data["attrs"][attr] = dict(ctx.parameters)
        if self.spec.reversibility is Reversibility.IRREVERSIBLE:
            for hs in ctx.inputs.values():
                for h in hs:
                    data["resets"][h.inventory_id] = data["resets"].get(h.inventory_id, 0) + 1
        self.world.save()
        self.world.check_fail("apply", ctx.effect_id)

    def _outputs(self, ctx: EffectContext) -> dict[str, tuple[Handle, ...]]:
        op, _, eff = ctx.alias.removeprefix("dmn:").partition(":")
        outputs: dict[str, tuple[Handle, ...]] = {}
        for port, pspec in self.spec.outputs.items():
            scope = Scope(pspec.scope) if pspec.scope is not None else Scope(ScopeKind.HOST)
            if pspec.inherits is not None:
                outputs[port] = tuple(
                    Handle(
                        id=h.id,
                        type=h.type,
                        inventory_id=h.inventory_id,
                        scope=scope,
                        accesses=h.accesses | pspec.grants,
                        link_type=h.link_type,
                        provenance=h.provenance,
                        observations=dict(h.observations),
                    )
                    for h in ctx.inputs.get(pspec.inherits, ())
                )
                continue
            same = [h for hs in ctx.inputs.values() for h in hs if h.type == pspec.type]
            inventory = same[0].inventory_id if same else f"obj:{ctx.alias}"
            link = next(iter(pspec.link_types)) if pspec.link_types else None
            outputs[port] = (
                Handle(
                    id=f"{ctx.alias}/{port}",
                    type=pspec.type,
                    inventory_id=inventory,
                    scope=scope,
                    accesses=pspec.grants,
                    link_type=link,
                    provenance=Provenance(operation=op, effect=eff),
                ),
            )
        return outputs

    def observe(self, ctx: EffectContext, before: Any) -> Observed:
        self.world.reload()
        self.world.check_fail("observe", ctx.effect_id)
        ok = ctx.alias in self.world.data["objects"]
        if self.world.fail.get("observe") == f"{ctx.effect_id}=postcondition":
            ok = False
        return Observed(ok, self._outputs(ctx) if ok else {})

    def undo(
        self, ctx: EffectContext, before: Any, outputs: Mapping[str, tuple[Handle, ...]]
    ) -> None:
        self.world.reload()
        self.world.calls.append(f"undo:{ctx.effect_id}")
        self.world.check_fail("undo", ctx.effect_id)
        data = self.world.data
        data["objects"].pop(ctx.alias, None)
        for attr, image in before["attrs"].items():
            if image["present"]:
                data["attrs"][attr] = image["value"]
            else:
                data["attrs"].pop(attr, None)
        self.world.save()

    def recover(self, ctx: EffectContext, before: Any) -> RecoveryObservation:
        if self.spec.reversibility is Reversibility.IRREVERSIBLE:
            # like the real pci/function-reset: an irreversible action leaves nothing to
            # read back, so after a crash whether it happened is unknowable
            return RecoveryObservation.UNCERTAIN
        self.world.reload()
        if ctx.alias in self.world.data["objects"]:
            return RecoveryObservation.APPLIED
        return RecoveryObservation.NOT_APPLIED


def builtin_executors(world: World) -> dict[str, Any]:
    registry = default_registry()
    return {name: GenericExecutor(registry.get(name), world) for name in registry.names()}  # type: ignore[arg-type]
