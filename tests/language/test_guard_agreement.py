"""Lint, compile and bind agree on random guards and configs (one guard evaluator).

A plugin whose configSchema has required, defaulted, optional and enum fields of every
guard type carries a random ``when:`` guard on one effect and a random ``requiredWhen:``
on an unbound optional field. For random configs (valid or not):

* the checker (``dmn lint``'s core), the topology compiler's per-step check and the binder
  accept or refuse the same configs, with the same diagnostic codes from the checker;
* when the program binds, the guarded effect is bound exactly when the compiler counts its
  opcode for the effect budget, and exactly when :func:`dmn.interpreter.guards.holds` says
  the guard holds;
* the checker's typing is sound: a plugin that checks clean (no config) never meets an
  evaluation error for a config that validates, so "an ill-typed guard does not hold" is
  only ever reached by programs the checker refused.
"""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from dmn.controller.compile.programs import step_programs
from dmn.engine.binder import Call, bind_program
from dmn.engine.bound import BoundProgram
from dmn.engine.config_plan import plan_validated
from dmn.interpreter.checker import check_plugin
from dmn.interpreter.config_schema import validate_config
from dmn.interpreter.diagnostics import Severity
from dmn.interpreter.expressions import GuardError, evaluate
from dmn.interpreter.guards import holds, parsed_guard
from dmn.vocabulary.handles import Handle, NamespaceIdentity, Scope
from dmn.vocabulary.terms import Access, HandleType, LinkType, ScopeKind

from .support import load_plugin, registry

pytestmark = pytest.mark.property

SANDBOX = Scope(ScopeKind.SANDBOX, NamespaceIdentity(7, 4026532000, "boot-1"))
PARENT = Handle(
    id="parent",
    type=HandleType.KERNEL_INTERFACE,
    inventory_id="inv-parent",
    scope=SANDBOX,
    accesses=frozenset({Access.CREATE_CHILD, Access.READ}),
    link_type=LinkType.ETHERNET,
)

TEMPLATE = """\
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
      mode: {type: string, enum: [a, b, c]}
      flag: {type: boolean}
      level: {type: integer, minimum: 0, maximum: 9, default: 3}
      count: {type: integer, minimum: 0, maximum: 9}
      note: {type: string, requiredWhen: REQUIRED_WHEN}
  inputs:
    parent: {type: KernelInterface/v1, linkType: ethernet, access: CreateChild}
  outputs:
    interface: {type: KernelInterface/v1, linkType: ethernet, ownership: Created}
  allowedEffects: [t/make/v1, t/tune/v1]
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
          when: WHEN
          inputs: {interface: {from: effects.make.interface}}
          parameterBindings: {up: {from: call.config.up}}
      exports:
        interface: {from: effects.make.interface}
    remove: {undo: connect}
"""

FIELDS = ["mode", "flag", "level", "count", "up", "vlanId", "ifName", "note"]
LITERALS = ['"a"', '"b"', '"z"', "true", "false", "null", "0", "3", "9", "-1"]
LISTS = ['["a", "b"]', "[1, 3]", "[]", "[true]"]
COMPARE = ["==", "!=", "<", "<=", ">", ">="]

operand = st.one_of(
    st.sampled_from([f"call.config.{f}" for f in FIELDS]), st.sampled_from(LITERALS)
)
comparison = st.one_of(
    st.tuples(operand, st.sampled_from(COMPARE), operand).map(" ".join),
    st.tuples(operand, st.sampled_from(["in", "not in"]), st.sampled_from(LISTS)).map(" ".join),
    operand,
)
guards = st.recursive(
    comparison,
    lambda inner: st.one_of(
        st.tuples(inner, st.sampled_from(["and", "or"]), inner).map(lambda t: f"({' '.join(t)})"),
        inner.map(lambda g: f"not {g}"),
    ),
    max_leaves=5,
)

field_values: dict[str, Any] = {
    "mode": st.sampled_from(["a", "b", "c", "z", 1]),
    "flag": st.sampled_from([True, False, "yes"]),
    "level": st.sampled_from([0, 3, 9, 12, True]),
    "count": st.sampled_from([0, 4, 9, -1]),
    "note": st.sampled_from(["x", ""]),
}
configs = st.fixed_dictionaries(
    {"ifName": st.sampled_from(["net1", "eth0", "a/b"]), "vlanId": st.just(100)},
    optional={"up": st.booleans(), **field_values},
)


def _yaml_scalar(text: str) -> str:
    return "'" + text.replace("'", "''") + "'"


def _plugin(when: str, required_when: str) -> Any:
    text = TEMPLATE.replace("REQUIRED_WHEN", _yaml_scalar(required_when)).replace(
        "WHEN", _yaml_scalar(when)
    )
    plugin, diags = load_plugin(text)
    assert plugin is not None and not diags, [d.render() for d in diags]
    return plugin


def _errors(diags: list[Any]) -> list[str]:
    return sorted(d.code.value for d in diags if d.severity is Severity.ERROR)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(when=guards, required_when=guards, config=configs)
def test_lint_compile_and_bind_agree(when: str, required_when: str, config: dict[str, Any]) -> None:
    plugin = _plugin(when, required_when)
    reg = registry()
    lint = _errors(check_plugin(plugin, reg, config))
    bound = bind_program(
        plugin, "connect", Call(config=config, inputs={"parent": (PARENT,)}, sandbox=SANDBOX), reg
    )
    normalised, problems = validate_config(plugin.descriptor.spec.config_schema, config)
    if problems:  # the compiler reports these and never checks the step's programs
        assert lint and not isinstance(bound, BoundProgram)
        return
    compiled = step_programs(plugin, plan_validated(plugin, normalised), reg)
    assert _errors(compiled.diagnostics) == lint
    if lint:
        assert not isinstance(bound, BoundProgram), lint
        return
    assert isinstance(bound, BoundProgram), [d.render() for d in bound]
    tune_bound = any(e.id == "tune" for e in bound.effects)
    assert tune_bound == holds(when, normalised) == ("t/tune/v1" in compiled.opcodes)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(when=guards, required_when=guards, config=configs)
def test_a_guard_that_checks_never_fails_to_evaluate(
    when: str, required_when: str, config: dict[str, Any]
) -> None:
    plugin = _plugin(when, required_when)
    if _errors(check_plugin(plugin, registry())):
        return
    normalised, problems = validate_config(plugin.descriptor.spec.config_schema, config)
    if problems:
        return
    for text in (when, required_when):
        expr = parsed_guard(text)
        assert expr is not None
        try:
            evaluate(expr, normalised)
        except GuardError as exc:  # pragma: no cover - the property under test
            pytest.fail(f"{text!r} checks clean but fails on {normalised}: {exc}")


def test_ill_typed_guards_do_not_hold_anywhere() -> None:
    """The one defined result for a guard the checker refuses."""
    config = {"ifName": "net1", "vlanId": 100, "up": True, "mode": "a"}
    for text in ["call.config.mode and true", "call.config.count > 1", "call.config.(", "1 < null"]:
        assert holds(text, config) is False, text
