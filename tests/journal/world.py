"""A test world the runner's executors mutate, and executors that honour the real contract.

The runner's contract is under test here, not netlink: the world is a dict of named objects
(``objects``) and settable attributes (``attrs``), held in memory or in a JSON file (for the
subprocess crash tests; every mutation is written atomically by rename so a
SIGKILL never leaves a torn world). Executors prove ownership exactly as real ones must:
created objects carry the ``dmn:<op>:<effect>`` alias; a foreign object with the expected
name is never adopted or deleted.

Failure injection: ``world.fail`` maps ``"apply"``/``"observe"``/``"undo"``/``"recover"``
to effect ids whose call raises (``observe`` may instead return postconditions false when
the value is ``"postcondition"``); ``"defer-undo"`` makes that effect's undo raise
``UndoDeferred`` (a peer that did not answer).
"""

from __future__ import annotations

import copy
import json
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict

from dmn.opcodes.executor import (
    EffectContext,
    ExecutorError,
    Observed,
    RecoveryObservation,
    UndoDeferred,
)
from dmn.opcodes.spec import OpcodeSpec, PortSpec
from dmn.vocabulary.handles import Handle, Provenance
from dmn.vocabulary.terms import Access, HandleType, Hook, LinkType, RecoveryStrategy, Reversibility


class World:
    def __init__(self, path: Path | None = None, data: dict[str, Any] | None = None) -> None:
        self.path = path
        self.data: dict[str, Any] = data or {"objects": {}, "attrs": {}, "resets": {}}
        for k in ("objects", "attrs", "resets"):
            self.data.setdefault(k, {})
        self.fail: dict[str, str] = dict(self.data.get("fail", {}))
        self.calls: list[str] = []

    @classmethod
    def load(cls, path: Path) -> World:
        return cls(path, json.loads(path.read_text()))

    def snapshot(self) -> dict[str, Any]:
        self.reload()
        return copy.deepcopy({k: self.data[k] for k in ("objects", "attrs", "resets")})

    def reload(self) -> None:
        if self.path is not None:
            self.data = json.loads(self.path.read_text())

    def save(self) -> None:
        if self.path is None:
            return
        tmp = self.path.with_suffix(".tmp")
        with open(tmp, "w") as f:
            json.dump(self.data, f, sort_keys=True)
        os.replace(tmp, self.path)  # atomic against SIGKILL (page cache survives the process)

    def check_fail(self, step: str, effect_id: str) -> None:
        if self.fail.get(step) == effect_id:
            raise ExecutorError("E_INJECTED", f"injected {step} failure in {effect_id}")
        if step == "undo" and self.fail.get("defer-undo") == effect_id:
            raise UndoDeferred("E_INJECTED", f"injected unreachable peer in {effect_id}")


class Params(BaseModel):
    model_config = ConfigDict(extra="allow")


def _spec(
    name: str,
    reversibility: Reversibility,
    inputs: Mapping[str, PortSpec],
    outputs: Mapping[str, PortSpec],
) -> OpcodeSpec:
    return OpcodeSpec(
        name=name,
        summary=name,
        parameters=Params,
        inputs=inputs,
        outputs=outputs,
        hooks=frozenset({Hook.CONNECT, Hook.PREPARE}),
        reversibility=reversibility,
        recovery=frozenset(RecoveryStrategy),
    )


_IF = PortSpec(HandleType.KERNEL_INTERFACE, frozenset({LinkType.ETHERNET}))


def object_handle(name: str, alias: str, accesses: frozenset[Access]) -> Handle:
    op, _, eff = alias.removeprefix("dmn:").partition(":")
    return Handle(
        id=f"h:{name}",
        type=HandleType.KERNEL_INTERFACE,
        inventory_id=f"obj:{name}",
        accesses=accesses,
        link_type=LinkType.ETHERNET,
        provenance=Provenance(operation=op, effect=eff),
        observations={"ifName": name},
    )


def host_handle(name: str, *accesses: Access) -> Handle:
    """A handle the allocation granted over a pre-existing (foreign-owned) object."""
    return Handle(
        id=f"h:{name}",
        type=HandleType.KERNEL_INTERFACE,
        inventory_id=f"obj:{name}",
        accesses=frozenset(accesses),
        link_type=LinkType.ETHERNET,
        observations={"ifName": name},
    )


class CreateExecutor:
    """``test/create/v1``: create object ``name`` (owned by alias) as a child of ``parent``."""

    spec = _spec(
        "test/create/v1",
        Reversibility.REVERSIBLE,
        {"parent": PortSpec(HandleType.KERNEL_INTERFACE, access=Access.CREATE_CHILD)},
        {"interface": _IF},
    )

    def __init__(self, world: World) -> None:
        self.world = world

    def _name(self, ctx: EffectContext) -> str:
        return str(ctx.parameters["name"])

    def capture(self, ctx: EffectContext) -> Any:
        self.world.reload()
        existing = self.world.data["objects"].get(self._name(ctx))
        return {"name": self._name(ctx), "existed": existing is not None}

    def apply(self, ctx: EffectContext, before: Any) -> None:
        self.world.reload()
        self.world.calls.append(f"apply:{ctx.effect_id}")
        objects = self.world.data["objects"]
        name = self._name(ctx)
        if name in objects and objects[name].get("alias") != ctx.alias:
            raise ExecutorError("E_EXISTS", f"{name} exists and is not ours")
        parent = ctx.inputs["parent"][0].inventory_id
        objects[name] = {"alias": ctx.alias, "parent": parent}
        self.world.save()
        self.world.check_fail("apply", ctx.effect_id)

    def observe(self, ctx: EffectContext, before: Any) -> Observed:
        self.world.reload()
        self.world.check_fail("observe", ctx.effect_id)
        obj = self.world.data["objects"].get(self._name(ctx))
        ok = obj is not None and obj.get("alias") == ctx.alias
        if self.world.fail.get("observe") == f"{ctx.effect_id}=postcondition":
            ok = False
        grants = frozenset({Access.READ, Access.EXCLUSIVE_CONFIGURE, Access.CREATE_CHILD})
        outputs = {"interface": (object_handle(self._name(ctx), ctx.alias, grants),)} if ok else {}
        return Observed(ok, outputs, "" if ok else "object missing or not ours")

    def undo(
        self, ctx: EffectContext, before: Any, outputs: Mapping[str, tuple[Handle, ...]]
    ) -> None:
        self.world.reload()
        self.world.calls.append(f"undo:{ctx.effect_id}")
        self.world.check_fail("undo", ctx.effect_id)
        objects = self.world.data["objects"]
        name = self._name(ctx)
        if name in objects and objects[name].get("alias") == ctx.alias:
            del objects[name]
            self.world.save()

    def recover(self, ctx: EffectContext, before: Any) -> RecoveryObservation:
        self.world.reload()
        self.world.check_fail("recover", ctx.effect_id)
        obj = self.world.data["objects"].get(self._name(ctx))
        if obj is not None and obj.get("alias") == ctx.alias:
            return RecoveryObservation.APPLIED
        return RecoveryObservation.NOT_APPLIED


class SetExecutor:
    """``test/set/v1``: set attribute ``key`` of the input object to ``value``; undo restores."""

    spec = _spec(
        "test/set/v1",
        Reversibility.REVERSIBLE,
        {"interface": PortSpec(HandleType.KERNEL_INTERFACE, access=Access.EXCLUSIVE_CONFIGURE)},
        {"interface": PortSpec(HandleType.KERNEL_INTERFACE, inherits="interface")},
    )

    def __init__(self, world: World) -> None:
        self.world = world

    def _attr(self, ctx: EffectContext) -> str:
        return f"{ctx.inputs['interface'][0].inventory_id}.{ctx.parameters['key']}"

    def capture(self, ctx: EffectContext) -> Any:
        self.world.reload()
        attrs = self.world.data["attrs"]
        attr = self._attr(ctx)
        return {"attr": attr, "present": attr in attrs, "value": attrs.get(attr)}

    def apply(self, ctx: EffectContext, before: Any) -> None:
        self.world.reload()
        self.world.calls.append(f"apply:{ctx.effect_id}")
        self.world.data["attrs"][before["attr"]] = ctx.parameters["value"]
        self.world.save()
        self.world.check_fail("apply", ctx.effect_id)

    def observe(self, ctx: EffectContext, before: Any) -> Observed:
        self.world.reload()
        self.world.check_fail("observe", ctx.effect_id)
        ok = self.world.data["attrs"].get(before["attr"]) == ctx.parameters["value"]
        if self.world.fail.get("observe") == f"{ctx.effect_id}=postcondition":
            ok = False
        return Observed(ok, {"interface": ctx.inputs["interface"]})

    def undo(
        self, ctx: EffectContext, before: Any, outputs: Mapping[str, tuple[Handle, ...]]
    ) -> None:
        self.world.reload()
        self.world.calls.append(f"undo:{ctx.effect_id}")
        self.world.check_fail("undo", ctx.effect_id)
        attrs = self.world.data["attrs"]
        if before["present"]:
            attrs[before["attr"]] = before["value"]
        else:
            attrs.pop(before["attr"], None)
        self.world.save()

    def recover(self, ctx: EffectContext, before: Any) -> RecoveryObservation:
        self.world.reload()
        value = self.world.data["attrs"].get(before["attr"])
        if value == ctx.parameters["value"]:
            return RecoveryObservation.APPLIED
        if value == (before["value"] if before["present"] else None):
            return RecoveryObservation.NOT_APPLIED
        return RecoveryObservation.UNCERTAIN


class ResetExecutor:
    """``test/reset/v1``: an irreversible action (a counter); recovery cannot tell → Uncertain."""

    spec = _spec(
        "test/reset/v1",
        Reversibility.IRREVERSIBLE,
        {"device": PortSpec(HandleType.KERNEL_INTERFACE, access=Access.EXCLUSIVE_CONFIGURE)},
        {},
    )

    def __init__(self, world: World) -> None:
        self.world = world

    def _target(self, ctx: EffectContext) -> str:
        return ctx.inputs["device"][0].inventory_id

    def capture(self, ctx: EffectContext) -> Any:
        self.world.reload()
        return {"target": self._target(ctx)}

    def apply(self, ctx: EffectContext, before: Any) -> None:
        self.world.reload()
        self.world.calls.append(f"apply:{ctx.effect_id}")
        resets = self.world.data["resets"]
        resets[before["target"]] = resets.get(before["target"], 0) + 1
        self.world.save()
        self.world.check_fail("apply", ctx.effect_id)

    def observe(self, ctx: EffectContext, before: Any) -> Observed:
        self.world.check_fail("observe", ctx.effect_id)
        return Observed(True, {})

    def undo(
        self, ctx: EffectContext, before: Any, outputs: Mapping[str, tuple[Handle, ...]]
    ) -> None:
        self.world.calls.append(f"undo:{ctx.effect_id}")  # nothing to restore after a reset

    def recover(self, ctx: EffectContext, before: Any) -> RecoveryObservation:
        return RecoveryObservation.UNCERTAIN


def world_executors(world: World) -> dict[str, Any]:
    return {
        e.spec.name: e for e in (CreateExecutor(world), SetExecutor(world), ResetExecutor(world))
    }
