"""Bound programs: one hook program bound to the grants of one concrete call.

Binding (``dmn.engine.binder``) is pure; its result is this serialisable value.
Inputs are either concrete :class:`Handle` values taken from the call, or
:class:`EffectOutputRef` placeholders for outputs of earlier effects in the same
program, which only exist once the runner has applied those effects. Parameters are
fully concrete JSON values. The canonical JSON form (sorted maps, list order kept) is
what the journal stores and what :attr:`BoundProgram.digest` hashes.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from dmn.interpreter.canonical_json import JSONValue, canonical_json, sha256_digest
from dmn.vocabulary.handles import Handle


@dataclass(frozen=True, slots=True)
class EffectOutputRef:
    """Output ``port`` of the earlier effect ``effect``: one handle (``index``) or all (None)."""

    effect: str
    port: str
    index: int | None = None

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {"effect": self.effect, "port": self.port}
        if self.index is not None:
            out["index"] = self.index
        return out

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> EffectOutputRef:
        idx = data.get("index")
        return cls(effect=str(data["effect"]), port=str(data["port"]), index=idx)


BoundInput = Handle | EffectOutputRef


def _input_to_json(value: BoundInput) -> dict[str, Any]:
    if isinstance(value, Handle):
        return {"handle": value.to_json()}
    return {"output": value.to_json()}


def _input_from_json(data: Mapping[str, Any]) -> BoundInput:
    if "handle" in data:
        return Handle.from_json(data["handle"])
    return EffectOutputRef.from_json(data["output"])


def _ports_to_json(ports: Mapping[str, tuple[BoundInput, ...]]) -> dict[str, Any]:
    return {name: [_input_to_json(v) for v in values] for name, values in ports.items()}


def _ports_from_json(data: Mapping[str, Any]) -> dict[str, tuple[BoundInput, ...]]:
    return {name: tuple(_input_from_json(v) for v in values) for name, values in data.items()}


@dataclass(frozen=True, slots=True)
class BoundEffect:
    """One effect after guards, ``forEach`` expansion and reference substitution.

    ``id`` is unique in the program (an expanded ``forEach`` effect ``attach`` becomes
    ``attach[0]``, ``attach[1]``, ...); ``source_id`` is the id written in the document.
    """

    id: str
    source_id: str
    kind: str
    inputs: Mapping[str, tuple[BoundInput, ...]]
    parameters: Mapping[str, JSONValue]
    requires: tuple[str, ...] = ()
    postconditions: tuple[str, ...] = ()
    recovery: str = "ObserveAndReconcile"

    def to_json(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "sourceID": self.source_id,
            "kind": self.kind,
            "inputs": _ports_to_json(self.inputs),
            "parameters": dict(self.parameters),
            "requires": list(self.requires),
            "postconditions": list(self.postconditions),
            "recovery": self.recovery,
        }

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> BoundEffect:
        return cls(
            id=str(data["id"]),
            source_id=str(data["sourceID"]),
            kind=str(data["kind"]),
            inputs=_ports_from_json(data.get("inputs", {})),
            parameters=dict(data.get("parameters", {})),
            requires=tuple(data.get("requires", ())),
            postconditions=tuple(data.get("postconditions", ())),
            recovery=str(data.get("recovery", "ObserveAndReconcile")),
        )


@dataclass(frozen=True, slots=True)
class BoundProgram:
    """A complete, digestable program for one hook of one step of one call."""

    plugin: str
    plugin_version: str
    hook: str
    contract_digest: str
    effects: tuple[BoundEffect, ...]
    exports: Mapping[str, tuple[BoundInput, ...]] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        return {
            "plugin": self.plugin,
            "pluginVersion": self.plugin_version,
            "hook": self.hook,
            "contractDigest": self.contract_digest,
            "effects": [e.to_json() for e in self.effects],
            "exports": _ports_to_json(self.exports),
        }

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> BoundProgram:
        return cls(
            plugin=str(data["plugin"]),
            plugin_version=str(data["pluginVersion"]),
            hook=str(data["hook"]),
            contract_digest=str(data["contractDigest"]),
            effects=tuple(BoundEffect.from_json(e) for e in data.get("effects", ())),
            exports=_ports_from_json(data.get("exports", {})),
        )

    def canonical(self) -> bytes:
        return canonical_json(self.to_json())

    @property
    def digest(self) -> str:
        return sha256_digest(self.to_json())
