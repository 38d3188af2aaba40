"""What runs under a configuration: the one answer the binder, the node agent and the
topology compiler share.

A plugin's programs and descriptor say, through ``when:`` guards and ``parameterBindings``,
what happens for each config; three callers need that answer before anything runs:

* the binder (:func:`dmn.engine.binder.bind_program`) binds exactly the planned effects of
  a hook, checks the call's handles against the planned ports and exports the planned
  outputs;
* the node agent's prepare path fills the planned allocation ports of a root
  (``dmn.agent.coordinator.handles.root_allocation``) and checks the bridge aliases and
  VLANs the planned ``connect`` effects name against the step's grants
  (``dmn.agent.coordinator.step_grants.check_step``);
* the topology compiler records the planned ports of each step in the revision and checks
  the planned opcodes against the topology's effect budget
  (``dmn.controller.compile.compiler``).

Contract of :func:`plan_for_config`: the config is validated against the plugin's
``configSchema`` (defaults filled in for absent fields; ``path`` prefixes the diagnostics'
field paths) and a config the schema refuses yields those diagnostics, never a plan. For a
config it admits, the :class:`ConfigPlan` holds

* per hook (``prepare``, ``connect``), the effects whose ``when`` holds, in document order —
  an effect without ``when`` always runs; a guard holds exactly when
  :func:`dmn.interpreter.guards.holds` says so;
* per effect, its parameters: the literal ``parameters`` plus, for each
  ``parameterBindings`` entry that reads ``call.config.<field>``, that field's value — an
  absent optional field leaves its parameter unset and is listed in ``absent_fields``; a
  binding that reads anything else is listed in ``foreign_bindings`` (a checker error);
* the descriptor's input, allocation and output ports whose ``when`` holds;
* the opcodes the plugin runs (the kinds of the planned effects of every hook; a Builtin
  plugin without programs runs its ``allowedEffects``).

``forEach`` is planned as the reference the effect expands over: how many instances run
depends on the handles of a concrete call, which the binder has and the plan does not.

Pure: no I/O, no registry, no call. :func:`plan_validated` is the same for a config that
already validated cleanly (the compiler's and the checker memo's normalised config); it
reads the config only through guard evaluation and the fields that parameters bind.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from pydantic import BaseModel

from dmn.interpreter.canonical_json import JSONValue
from dmn.interpreter.config_schema import validate_config
from dmn.interpreter.diagnostics import Code, Diagnostic, has_errors
from dmn.interpreter.documents import Effect, InputPort, OutputPort
from dmn.interpreter.expressions import ConfigRef, parse_reference
from dmn.interpreter.guards import holds
from dmn.interpreter.loader import Plugin
from dmn.interpreter.parameters import model_error, required_fields
from dmn.vocabulary.ifname import ifname_problem, is_ifname_field
from dmn.vocabulary.terms import HOOKS


@dataclass(frozen=True, slots=True)
class PlannedEffect:
    """One effect that runs under the config, with its parameters resolved.

    ``index`` is its position in the hook program (for diagnostic paths); ``bound_fields``
    maps each parameter taken from the config to the config field it came from;
    ``absent_fields`` the bindings whose config field is absent (parameter left unset);
    ``foreign_bindings`` the parameters bound to something other than ``call.config``;
    ``for_each`` the reference the effect expands over (None: runs once). ``effect`` is the
    document it was planned from (inputs, predicates and recovery are the binder's).
    """

    hook: str
    index: int
    id: str
    kind: str
    parameters: Mapping[str, JSONValue]
    bound_fields: Mapping[str, str] = field(default_factory=dict)
    absent_fields: Mapping[str, str] = field(default_factory=dict)
    foreign_bindings: tuple[str, ...] = ()
    for_each: str | None = None
    effect: Effect | None = field(default=None, compare=False, hash=False, repr=False)


@dataclass(frozen=True, slots=True)
class ConfigPlan:
    """Everything a plugin does under one validated config (see the module docstring)."""

    plugin: str
    config: Mapping[str, Any]
    effects: Mapping[str, tuple[PlannedEffect, ...]]
    inputs: Mapping[str, InputPort]
    allocation: Mapping[str, InputPort]
    outputs: Mapping[str, OutputPort]
    opcodes: frozenset[str]

    def hook(self, name: str) -> tuple[PlannedEffect, ...]:
        """The planned effects of hook ``name`` (none when the plugin has no such program)."""
        return self.effects.get(name, ())


def _on(guard: str | None, config: Mapping[str, Any]) -> bool:
    return guard is None or holds(guard, config)


def _config_value(config: Mapping[str, Any], ref: ConfigRef) -> Any:
    """The validated config's value at ``ref`` (a field, or a member of an object field);
    None when absent (validated config holds no nulls)."""
    value = config.get(ref.field)
    if ref.member is None or not isinstance(value, Mapping):
        return value if ref.member is None else None
    return value.get(ref.member)


def _planned(hook: str, index: int, effect: Effect, config: Mapping[str, Any]) -> PlannedEffect:
    parameters: dict[str, JSONValue] = dict(effect.parameters or {})
    bound: dict[str, str] = {}
    absent: dict[str, str] = {}
    foreign: list[str] = []
    for name, ref in (effect.parameter_bindings or {}).items():
        parsed, problems = parse_reference(ref.from_)
        if not isinstance(parsed, ConfigRef) or problems:
            foreign.append(name)
        elif (value := _config_value(config, parsed)) is not None:
            parameters[name] = value
            bound[name] = parsed.path
        else:
            absent[name] = parsed.path
    return PlannedEffect(
        hook=hook,
        index=index,
        id=effect.id,
        kind=effect.kind,
        parameters=parameters,
        bound_fields=bound,
        absent_fields=absent,
        foreign_bindings=tuple(foreign),
        for_each=effect.for_each.in_ if effect.for_each is not None else None,
        effect=effect,
    )


def plan_validated(plugin: Plugin, config: Mapping[str, Any]) -> ConfigPlan:
    """The plan for ``config``, the normalised output of a clean ``validate_config``
    against ``plugin``'s ``configSchema`` (see the module docstring)."""
    spec = plugin.descriptor.spec
    effects: dict[str, tuple[PlannedEffect, ...]] = {}
    for hook in HOOKS:
        program = plugin.program(hook)
        if program is None:
            continue
        effects[hook] = tuple(
            _planned(hook, i, effect, config)
            for i, effect in enumerate(program.body.effects)
            if _on(effect.when, config)
        )
    if plugin.programs:
        opcodes = frozenset(e.kind for planned in effects.values() for e in planned)
    else:
        opcodes = frozenset(spec.allowed_effects)
    return ConfigPlan(
        plugin=plugin.name,
        config=config,
        effects=effects,
        inputs={n: p for n, p in (spec.inputs or {}).items() if _on(p.when, config)},
        allocation={n: p for n, p in (spec.allocation or {}).items() if _on(p.when, config)},
        outputs={n: p for n, p in (spec.outputs or {}).items() if _on(p.when, config)},
        opcodes=opcodes,
    )


def plan_for_config(
    plugin: Plugin, config: Mapping[str, Any], *, path: str = "config"
) -> ConfigPlan | list[Diagnostic]:
    """What ``plugin`` runs under ``config``, or why its ``configSchema`` refuses it.

    Never raises for a bad config: the refusal is ``validate_config``'s diagnostics, with
    field paths under ``path``.
    """
    normalised, problems = validate_config(plugin.descriptor.spec.config_schema, config, path)
    if has_errors(problems):
        return problems
    return plan_validated(plugin, normalised)


def parameter_problems(
    opcode: str, model: type[BaseModel], parameters: Mapping[str, Any]
) -> list[tuple[Code, str]]:
    """Why ``opcode``'s parameter ``model`` refuses the concrete ``parameters`` of a planned
    effect, as ``(code, message)``; none when it accepts them.

    The binder refuses such an effect when it binds; the topology compiler asks the same
    question of each step's plan, so a config the node would refuse (``qos`` without
    ``vlan``, an interface name the kernel would not take) is refused at compile time, with
    the same codes, instead of at NodePrepare.
    """
    problems: list[tuple[Code, str]] = []
    for name, value in parameters.items():
        if is_ifname_field(name):
            problem = ifname_problem(value)
            if problem is not None:
                problems.append((Code.E_IFNAME, problem))
    for name, message in model_error(model, parameters):
        code = Code.E_IFNAME if is_ifname_field(name) and name in parameters else Code.E_PARAM_TYPE
        label = f"parameter {name!r}" if name else "parameters"
        problems.append((code, f"{label} of {opcode}: {message}"))
    return problems


def config_parameter_problems(
    planned: PlannedEffect, opcode: str, model: type[BaseModel]
) -> list[tuple[Code, str]]:
    """:func:`parameter_problems` of a planned effect that are the *config's* fault: none
    when the program itself leaves a required parameter unbound or binds something other
    than the config (those are the checker's findings, reported with the plugin), or when
    a required parameter's config field is absent (the binder's ``E_SCHEMA`` at that
    field). What remains is what the node would refuse for this config alone."""
    if planned.foreign_bindings:
        return []
    for name in required_fields(model):
        if name not in planned.parameters:
            return []
    return parameter_problems(opcode, model, planned.parameters)


__all__ = [
    "ConfigPlan",
    "PlannedEffect",
    "config_parameter_problems",
    "parameter_problems",
    "plan_for_config",
    "plan_validated",
]
