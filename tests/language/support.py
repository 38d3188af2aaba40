"""Shared fixtures for the language tests: a small opcode registry and plugin texts.

The unit tests use their own tiny specs (``t/*``) so that a rule is tested against a
contract the test controls; the builtin programs are tested against the real registry
in ``test_builtins.py``.
"""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field

from dmn.interpreter.diagnostics import Diagnostic
from dmn.interpreter.documents import NetworkPlugin
from dmn.interpreter.loader import Plugin, load_text, plugin_from_descriptor
from dmn.opcodes.spec import OpcodeRegistry, OpcodeSpec, PortSpec
from dmn.vocabulary.terms import (
    Access,
    HandleType,
    Hook,
    LinkType,
    RecoveryStrategy,
    Reversibility,
    ScopeKind,
)

ETH = frozenset({LinkType.ETHERNET})
IB = frozenset({LinkType.INFINIBAND})
KI = HandleType.KERNEL_INTERFACE
PCI = HandleType.PCI_FUNCTION


class _P(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True, frozen=True)


class MakeParams(_P):
    ifName: Annotated[str, Field(min_length=1, max_length=15)]
    vlanId: Annotated[int, Field(ge=1, le=4094)]
    mode: Literal["bridge", "private"] = "bridge"


class TuneParams(_P):
    up: bool | None = None
    mtu: Annotated[int, Field(ge=68, le=65535)] | None = None


class NoParams(_P):
    pass


MAKE = OpcodeSpec(
    name="t/make/v1",
    summary="create a child of a parent",
    parameters=MakeParams,
    inputs={"parent": PortSpec(HandleType.KERNEL_INTERFACE, ETH, None, Access.CREATE_CHILD)},
    outputs={
        "interface": PortSpec(
            HandleType.KERNEL_INTERFACE,
            ETH,
            ScopeKind.SANDBOX,
            grants=frozenset({Access.READ, Access.EXCLUSIVE_CONFIGURE, Access.EXCLUSIVE_MASTER}),
        )
    },
    hooks=frozenset({Hook.CONNECT}),
    reversibility=Reversibility.REVERSIBLE,
    recovery=frozenset({RecoveryStrategy.OBSERVE_AND_RECONCILE}),
    requires=frozenset({"same-sandbox"}),
    postconditions=frozenset({"made"}),
)
TUNE = OpcodeSpec(
    name="t/tune/v1",
    summary="configure a link",
    parameters=TuneParams,
    inputs={"interface": PortSpec(KI, None, None, Access.EXCLUSIVE_CONFIGURE)},
    outputs={"interface": PortSpec(KI, None, None, inherits="interface")},
    hooks=frozenset({Hook.CONNECT}),
    reversibility=Reversibility.REVERSIBLE,
    recovery=frozenset({RecoveryStrategy.OBSERVE_AND_RECONCILE, RecoveryStrategy.QUARANTINE}),
)
JOIN = OpcodeSpec(
    name="t/join/v1",
    summary="enslave a member",
    parameters=NoParams,
    inputs={
        "master": PortSpec(HandleType.KERNEL_INTERFACE, ETH, None, Access.EXCLUSIVE_MASTER),
        "member": PortSpec(HandleType.KERNEL_INTERFACE, ETH, None, Access.ATTACH_MEMBER),
    },
    outputs={},
    hooks=frozenset({Hook.CONNECT}),
    reversibility=Reversibility.REVERSIBLE,
    recovery=frozenset({RecoveryStrategy.OBSERVE_AND_RECONCILE}),
)
RESET = OpcodeSpec(
    name="t/reset/v1",
    summary="reset a function",
    parameters=NoParams,
    inputs={"function": PortSpec(PCI, None, ScopeKind.HOST, Access.EXCLUSIVE_CONFIGURE)},
    outputs={"function": PortSpec(PCI, None, ScopeKind.HOST, inherits="function")},
    hooks=frozenset({Hook.PREPARE}),
    reversibility=Reversibility.IRREVERSIBLE,
    recovery=frozenset({RecoveryStrategy.QUARANTINE}),
)
IBCONF = OpcodeSpec(
    name="t/ib/v1",
    summary="configure an IPoIB link",
    parameters=NoParams,
    inputs={"interface": PortSpec(KI, IB, None, Access.EXCLUSIVE_CONFIGURE)},
    outputs={},
    hooks=frozenset({Hook.CONNECT}),
    reversibility=Reversibility.REVERSIBLE,
    recovery=frozenset({RecoveryStrategy.OBSERVE_AND_RECONCILE}),
)


def registry() -> OpcodeRegistry:
    return OpcodeRegistry([MAKE, TUNE, JOIN, RESET, IBCONF])


OPERATION = """\
apiVersion: networking.dra-multi-network.schseba.github.io/v1alpha1
kind: NetworkPlugin
metadata: {name: op}
spec:
  implementation: {type: EffectProgram}
  contractVersion: v1
  stepKinds: [Operation]
  configSchema:
    type: object
    additionalProperties: false
    required: [ifName, vlanId, up]
    properties:
      ifName: {type: string, minLength: 1, maxLength: 15}
      vlanId: {type: integer, minimum: 1, maximum: 4094}
      up: {type: boolean}
      mtu: {type: integer, minimum: 576, maximum: 9000}
  inputs:
    parent: {type: KernelInterface/v1, linkType: ethernet, access: CreateChild}
  outputs:
    interface: {type: KernelInterface/v1, linkType: ethernet, ownership: Created}
  allowedEffects: [t/make/v1, t/tune/v1, t/join/v1, t/ib/v1]
  stateContract: {version: v1, cleanup: RecordedEffects}
  hooks:
    connect:
      effects:
        - id: make
          kind: t/make/v1
          inputs:
            parent: {from: call.inputs.parent}
          parameterBindings:
            ifName: {from: call.config.ifName}
            vlanId: {from: call.config.vlanId}
          requires: [{kind: same-sandbox}]
          postconditions: [{kind: made}]
        - id: tune
          kind: t/tune/v1
          inputs: {interface: {from: effects.make.interface}}
          parameterBindings: {up: {from: call.config.up}}
      exports:
        interface: {from: effects.make.interface}
    remove: {undo: connect}
"""

ALLOCATION = """\
apiVersion: networking.dra-multi-network.schseba.github.io/v1alpha1
kind: NetworkPlugin
metadata: {name: root}
spec:
  implementation: {type: EffectProgram}
  contractVersion: v1
  stepKinds: [Allocation]
  configSchema:
    type: object
    additionalProperties: false
    required: [mode]
    properties:
      mode: {type: string, enum: [kernel, vfio]}
      reset: {type: boolean, default: false}
  allocation:
    function: {type: PciFunction/v1, access: ExclusiveConfigure}
    interface:
      type: KernelInterface/v1
      linkType: ethernet
      access: [ExclusiveConfigure, ExclusiveMaster]
      when: 'call.config.mode == "kernel"'
  outputs:
    interface:
      type: KernelInterface/v1
      linkType: ethernet
      ownership: Moved
      when: 'call.config.mode == "kernel"'
    function: {type: PciFunction/v1, ownership: Granted}
  allowedEffects: [t/reset/v1, t/tune/v1]
  stateContract: {version: v1, cleanup: RecordedEffects}
  hooks:
    prepare:
      effects:
        - id: reset
          kind: t/reset/v1
          when: 'call.config.reset'
          inputs: {function: {from: call.allocation.function}}
          recovery: {strategy: Quarantine}
      exports:
        interface: {from: call.allocation.interface}
        function: {from: call.allocation.function}
    connect:
      effects:
        - id: tune
          kind: t/tune/v1
          when: 'call.config.mode == "kernel"'
          inputs: {interface: {from: call.prepared.interface}}
          parameters: {up: true}
      exports:
        interface: {from: effects.tune.interface}
        function: {from: call.prepared.function}
    unprepare: {undo: prepare}
    remove: {undo: connect}
"""


def load_plugin(text: str, file: str = "plugin.yaml") -> tuple[Plugin | None, list[Diagnostic]]:
    docs, diags = load_text(text, file)
    for model, doc in docs:
        if isinstance(model, NetworkPlugin):
            plugin, merge = plugin_from_descriptor(model, doc.source)
            return plugin, diags + merge
    return None, diags


def plugin(text: str) -> Plugin:
    p, diags = load_plugin(text)
    assert p is not None, [d.render() for d in diags]
    assert not diags, [d.render() for d in diags]
    return p


def variant(text: str, old: str, new: str) -> str:
    assert old in text, old
    return text.replace(old, new, 1)


def codes(diagnostics: list[Diagnostic]) -> set[str]:
    return {d.code.value for d in diagnostics}
