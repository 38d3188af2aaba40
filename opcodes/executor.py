"""The executor contract every native opcode implementation fulfils (design §3.5–§3.6).

This module defines the interface only; it imports no native library. Executors live in
per-family modules (``dmn.opcodes.linux.executors`` and so on) beside their pure specs,
and receive their environment (netns handles, sysfs root, OVSDB endpoint, clock) through
:class:`EffectContext.env`, so the same executor runs on a node, in a test namespace, or
against a sysfs tree a test built.

Protocol, per effect, driven by the runner::

    before  = capture(ctx)                  # before-image, journaled before anything changes
    apply(ctx, before)                      # the one mutation
    result  = observe(ctx, before)          # read back; postconditions; typed outputs
    undo(ctx, before, result.outputs)       # compensation / cleanup, from recorded data only
    recover(ctx, before) -> RecoveryObservation   # after a crash left the effect Applying
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any, Protocol

from dmn.host.errors import HostError
from dmn.opcodes.spec import OpcodeSpec
from dmn.vocabulary.handles import Handle

JSONValue = Any


class RecoveryObservation(StrEnum):
    APPLIED = "Applied"
    NOT_APPLIED = "NotApplied"
    UNCERTAIN = "Uncertain"


def ownership_alias(operation_id: str, effect_id: str) -> str:
    """The unique alias that proves a created link is ours: ``dmn:<operation>:<effect>``."""
    return f"dmn:{operation_id}:{effect_id}"


@dataclass(frozen=True, slots=True)
class EffectContext:
    """Everything one effect execution may use; inputs are already resolved handles."""

    operation_id: str
    effect_id: str
    inputs: Mapping[str, tuple[Handle, ...]]
    parameters: Mapping[str, JSONValue]
    env: Any = None

    @property
    def alias(self) -> str:
        return ownership_alias(self.operation_id, self.effect_id)


@dataclass(frozen=True, slots=True)
class Observed:
    """What ``observe`` read back: whether postconditions hold, and the typed outputs."""

    postconditions_ok: bool
    outputs: Mapping[str, tuple[Handle, ...]] = field(default_factory=dict)
    detail: str = ""


ExecutorError = HostError
"""An executor refused or failed; ``code`` is a stable reason code. The host layer's error
itself, so a kernel refusal raised below the executor is the effect's failure as it is."""


class UndoDeferred(HostError):
    """``undo`` could not reach what it must change (an API server that did not answer)
    and changed nothing a later undo would not redo: the runner leaves the effect Undoing
    and the operation unfinished, undoes nothing after it, and a later cleanup or recovery
    undoes it again — instead of quarantining an effect whose undo a blip interrupted."""


class Executor(Protocol):
    spec: OpcodeSpec

    def capture(self, ctx: EffectContext) -> JSONValue: ...

    def apply(self, ctx: EffectContext, before: JSONValue) -> None: ...

    def observe(self, ctx: EffectContext, before: JSONValue) -> Observed: ...

    def undo(
        self, ctx: EffectContext, before: JSONValue, outputs: Mapping[str, tuple[Handle, ...]]
    ) -> None: ...

    def recover(self, ctx: EffectContext, before: JSONValue) -> RecoveryObservation: ...
