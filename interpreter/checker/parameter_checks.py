"""Parameters and predicates vs the opcode — ``E_PARAM_TYPE``, ``E_PARAM_CONFLICT``, ``E_IFNAME``,
``E_PREDICATE``.
"""

from __future__ import annotations

from typing import Any

from dmn.interpreter.checker.program_state import _Obligation, _ProgramBase
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
            if prop is None:
                ctx.error(
                    Code.E_REF_UNRESOLVED,
                    f"{parsed.text()}: configSchema has no field {parsed.field!r}",
                    parsed.span,
                    self.path(*rel),
                )
                clean = False
                continue
            code = Code.E_IFNAME if is_ifname_field(name) else Code.E_PARAM_TYPE
            failed = False
            for value in config_samples(prop):
                why = field_error(model, name, value)
                if why is not None:
                    ctx.error(
                        code,
                        f"parameter {name!r} bound to call.config.{parsed.field} "
                        f"({describe(prop)}) would reject {_short(value)}: {why}",
                        parsed.span,
                        self.path(*rel),
                    )
                    failed = True
                    break
            if failed:
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
