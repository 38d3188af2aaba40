"""Parameters and predicates vs the opcode — ``E_PARAM_TYPE``, ``E_PARAM_CONFLICT``, ``E_IFNAME``,
``E_PREDICATE``.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel

from dmn.interpreter.checker.program_state import _Obligation, _ProgramBase
from dmn.interpreter.config_schema import ObjectSchema
from dmn.interpreter.diagnostics import Code
from dmn.interpreter.documents import Effect
from dmn.interpreter.expressions import ConfigRef, parse_reference
from dmn.interpreter.parameters import (
    config_samples,
    describe,
    field_error,
    model_error,
    model_fields,
)
from dmn.interpreter.source import Path, path_text
from dmn.opcodes.spec import OpcodeSpec
from dmn.vocabulary.ifname import ifname_problem, is_ifname_field

_PREDICATE_WORD = {"requires": "precondition", "postconditions": "postcondition"}


def _short(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 24 else text[:21] + "..."


def _model_rule(model: type[BaseModel], name: str, value: Any) -> str | None:
    """A rule of the whole parameter model (no address twice, no two routes with one key)
    that ``value`` breaks when the model is validated with this parameter alone; a missing
    other parameter stops pydantic before the model's own rules, so it is never reported.
    The caller keeps a rule only when another sample of the field passes it (a rule every
    sample breaks is about the other parameters: ``qos`` needs ``vlan``)."""
    for fname, message in model_error(model, {name: value}):
        if fname == "":
            return message
    return None


class _ParameterChecks(_ProgramBase):
    """Parameter and predicate checks of one effect against its opcode."""

    def check_parameters(self, i: int, effect: Effect, spec: OpcodeSpec) -> None:
        ctx = self.ctx
        model = spec.parameters
        fields = model_fields(model)
        literals = effect.parameters or {}
        bindings = effect.parameter_bindings or {}
        sample: dict[str, Any] = {}
        clean = True
        partial = False  # an optional config field may leave a parameter unset
        for name, value in literals.items():
            where = ("effects", i, "parameters", name)
            if name in bindings:
                continue
            if name not in fields:
                self.unknown_parameter(spec, name, where)
                clean = False
                continue
            problem = ifname_problem(value) if is_ifname_field(name) else None
            if problem is not None:
                self.error(Code.E_IFNAME, problem, *where)
                clean = False
                continue
            why = field_error(model, name, value)
            if why is not None:
                code = Code.E_IFNAME if is_ifname_field(name) else Code.E_PARAM_TYPE
                self.error(code, f"parameter {name!r}: {why}", *where)
                clean = False
                continue
            sample[name] = value
        for name, ref in bindings.items():
            where = ("effects", i, "parameterBindings", name)
            if name in literals:
                self.error(
                    Code.E_PARAM_CONFLICT,
                    f"parameter {name!r} is set in both parameters and parameterBindings",
                    *where,
                    key=True,
                )
                clean = False
                continue
            if name not in fields:
                self.unknown_parameter(spec, name, where)
                clean = False
                continue
            rel = (*where, "from")
            parsed, diags = parse_reference(
                ref.from_, self.span_of(*rel), path_text(self.path(*rel))
            )
            ctx.diagnostics.extend(diags)
            if parsed is None:
                clean = False
                continue
            if not isinstance(parsed, ConfigRef):
                ctx.error(
                    Code.E_PARAM_TYPE,
                    f"{parsed.text()}: a parameter binds a call.config field, not a handle",
                    parsed.span,
                    self.path(*rel),
                )
                clean = False
                continue
            prop = ctx.prop(parsed.field)
            member_optional = False
            if prop is not None and parsed.member is not None:
                parent = prop
                prop = parent.properties.get(parsed.member) if parent.type == "object" else None
                member_optional = (
                    isinstance(parent, ObjectSchema)
                    and parsed.member not in parent.required
                    and getattr(prop, "default", None) is None
                )
            if prop is None:
                ctx.error(
                    Code.E_REF_UNRESOLVED,
                    f"{parsed.text()}: configSchema has no field {parsed.path!r}",
                    parsed.span,
                    self.path(*rel),
                )
                clean = False
                continue
            code = Code.E_IFNAME if is_ifname_field(name) else Code.E_PARAM_TYPE
            failed = False
            samples = config_samples(prop)
            rules = [_model_rule(model, name, value) for value in samples]
            if all(rule is not None for rule in rules):
                rules = [None] * len(samples)  # a rule across parameters, not of this value
            for value, rule in zip(samples, rules, strict=True):
                why = field_error(model, name, value) or rule
                if why is not None:
                    ctx.error(
                        code,
                        f"parameter {name!r} bound to {parsed.text()} "
                        f"({describe(prop)}) would reject {_short(value)}: {why}",
                        parsed.span,
                        self.path(*rel),
                    )
                    failed = True
                    break
            if failed:
                clean = False
                continue
            if member_optional:
                partial = True
                if fields[name].is_required():
                    ctx.error(
                        Code.E_PARAM_TYPE,
                        f"parameter {name!r} is required but {parsed.text()} may be absent "
                        f"(list {parsed.member!r} in the required of {parsed.field!r})",
                        parsed.span,
                        self.path(*rel),
                    )
                    clean = False
                continue
            if ctx.optional(parsed.field):
                partial = True
                if fields[name].is_required():
                    # Decided per config scenario once every guard is known.
                    self.obligations.append(
                        _Obligation(i, name, parsed.field, parsed.span, self.path(*rel))
                    )
                continue
            sample[name] = config_samples(prop)[0]
        for name, info in fields.items():
            if info.is_required() and name not in literals and name not in bindings:
                self.error(
                    Code.E_PARAM_TYPE,
                    f"opcode {spec.name} requires parameter {name!r}",
                    "effects",
                    i,
                    "kind",
                )
                clean = False
        if clean and not partial:
            for fname, message in model_error(model, sample):
                if fname == "":
                    self.error(
                        Code.E_PARAM_TYPE, f"parameters of {spec.name}: {message}", "effects", i
                    )

    def unknown_parameter(self, spec: OpcodeSpec, name: str, where: Path) -> None:
        self.error(
            Code.E_UNKNOWN_FIELD, f"opcode {spec.name} has no parameter {name!r}", *where, key=True
        )

    def check_predicates(self, i: int, effect: Effect, spec: OpcodeSpec) -> None:
        for key, allowed in (("requires", spec.requires), ("postconditions", spec.postconditions)):
            for j, pred in enumerate(getattr(effect, key) or []):
                if pred.kind not in allowed:
                    known = ", ".join(sorted(allowed)) or "none"
                    self.error(
                        Code.E_PREDICATE,
                        f"{spec.name} does not support the {_PREDICATE_WORD[key]} "
                        f"{pred.kind!r} (supported: {known})",
                        "effects",
                        i,
                        key,
                        j,
                        "kind",
                    )
