"""The checker: every static rule of DESIGN §3.4, one entry point for every caller.

``dmn lint``, the admission webhook, the topology compiler and the node agent all call
:func:`check_plugin` (a whole plugin: descriptor and programs) or
:func:`check_program` (one hook). Both return *all* diagnostics found, never raise,
and never stop at the first error. Given ``config`` (a step's config), guards are
decided for that config; without it, the checker enumerates every combination of the
enum/boolean config fields the guards read (bounded), so conditional exports and
references to guarded effects are proven for every config the schema admits.

Rules and their reason codes:

* shape, unknown fields, duplicate keys — ``E_SCHEMA``, ``E_UNKNOWN_FIELD``,
  ``E_DUPLICATE_KEY`` (loader and document models), ``E_SYNTAX`` (expressions);
* opcode exists — ``E_UNKNOWN_OPCODE``; listed in ``allowedEffects`` —
  ``E_EFFECT_DENIED``; legal in this hook (and prepare only for Allocation plugins) —
  ``E_WRONG_HOOK``;
* references resolve in the hook's closed environment (``call.allocation`` only in
  prepare, ``call.sandbox``/``call.prepared`` only in connect, ``forEach`` variables
  only in their effect, guarded effects only where they ran) — ``E_REF_UNRESOLVED``;
  point backwards — ``E_REF_FORWARD``;
* input handle type, linkType and scope vs the opcode port — ``E_PORT_TYPE``; item
  counts and indexes — ``E_CARDINALITY``; accesses — ``E_ACCESS``, or
  ``E_SHARED_PARENT_MUTATION`` when a shared-parent (CreateChild-only) grant would be
  configured, mastered or mutated;
* parameters (literals, and config field types substituted for bindings) vs the
  opcode parameter model — ``E_PARAM_TYPE``; interface names — ``E_IFNAME``; a field
  in both ``parameters`` and ``parameterBindings`` — ``E_PARAM_CONFLICT``;
* ids unique — ``E_DUPLICATE_ID``; predicates supported by the opcode — ``E_PREDICATE``;
  guard operand types — ``E_GUARD_TYPE``;
* exports vs descriptor outputs, including conditional (``when``) outputs —
  ``E_EXPORT_MISSING``, ``E_EXPORT_TYPE``, ``E_EXPORT_UNDECLARED``;
* cleanup/recovery contract (``unprepare``/``remove`` undo entries; an irreversible
  opcode declares a supported recovery strategy) — ``E_NO_RECOVERY``;
* at most :data:`MAX_EFFECTS` effects per hook after ``forEach`` expansion — ``E_BUDGET``.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from dmn.interpreter.config_schema import (
    AnyProperty,
    ObjectSchema,
    StringSchema,
    enumerable_values,
    validate_config,
)
from dmn.interpreter.diagnostics import Code, Diagnostic, SourceSpan
from dmn.interpreter.documents import Effect, InputPort, OutputPort, Ref
from dmn.interpreter.expressions import (
    REFERENCE_TYPES,
    AllocationRef,
    BoolOp,
    Compare,
    ConfigRef,
    EffectRef,
    Expr,
    GuardError,
    InputRef,
    ListLiteral,
    Literal,
    Not,
    PreparedRef,
    Reference,
    SandboxRef,
    SpanFn,
    VarRef,
    evaluate,
    parse_guard,
    parse_reference,
    references,
)
from dmn.interpreter.handles import Access, HandleType, LinkType, ScopeKind
from dmn.interpreter.ifname import ifname_problem, is_ifname_field
from dmn.interpreter.loader import Plugin, ProgramSource
from dmn.interpreter.parameters import (
    config_samples,
    describe,
    field_error,
    model_error,
    model_fields,
)
from dmn.interpreter.source import Path, path_text
from dmn.opcodes.spec import OpcodeRegistry, OpcodeSpec, PortSpec, Reversibility

#: Effects per hook program after ``forEach`` expansion (seed 000 §5.1).
MAX_EFFECTS = 256
#: Config scenarios enumerated for conditional checks when no config is given.
MAX_SCENARIOS = 256

#: Accesses a shared-parent grant must never be used for.
_MUTATING_ACCESSES = frozenset(
    {Access.EXCLUSIVE_CONFIGURE, Access.EXCLUSIVE_MASTER, Access.ATTACH_MEMBER}
)


@dataclass(frozen=True, slots=True)
class ValueType:
    """The static type of a reference: what handles it denotes and how many."""

    type: HandleType
    link_types: frozenset[LinkType] | None
    accesses: frozenset[Access]
    min_items: int = 1
    max_items: int = 1
    scope: ScopeKind | None = None

    def one(self) -> ValueType:
        return replace(self, min_items=1, max_items=1)

    @property
    def shared(self) -> bool:
        """A shared-parent grant: CreateChild is the only mutation it permits."""
        return self.type is HandleType.SHARED_PARENT or (
            Access.CREATE_CHILD in self.accesses and not (self.accesses & _MUTATING_ACCESSES)
        )

    def describe(self) -> str:
        links = "/".join(sorted(lt.value for lt in self.link_types)) if self.link_types else ""
        return f"{self.type.value}" + (f" ({links})" if links else "")


def port_value_type(port: InputPort) -> ValueType:
    """What a descriptor input/allocation port grants the program."""
    return ValueType(
        type=HandleType(port.type),
        link_types=frozenset({LinkType(port.link_type)}) if port.link_type else None,
        accesses=frozenset({Access.READ, *(Access(a) for a in port.accesses())}),
        min_items=port.min_items,
        max_items=port.max_items,
    )


# --------------------------------------------------------------------------- context


Scenario = Mapping[str, Any]
Presence = Callable[[Scenario], bool]


def _always(scenario: Scenario) -> bool:
    return True


@dataclass(slots=True)
class _Guard:
    expr: Expr | None
    path: Path  # absolute document path of the `when` scalar


@dataclass(slots=True)
class _PluginContext:
    plugin: Plugin
    registry: OpcodeRegistry
    config: dict[str, Any] | None
    diagnostics: list[Diagnostic] = field(default_factory=list)
    prepared: dict[str, ValueType] = field(default_factory=dict)
    output_guards: dict[str, _Guard] = field(default_factory=dict)
    port_guards: dict[tuple[str, str], Expr | None] = field(default_factory=dict)
    guards: list[Expr] = field(default_factory=list)
    prepared_presence: dict[str, Presence] = field(default_factory=dict)
    #: Parsed ``requiredWhen`` / ``forbiddenWhen`` of root config fields.
    required_when: dict[str, Expr] = field(default_factory=dict)
    forbidden_when: dict[str, Expr] = field(default_factory=dict)

    @property
    def schema(self) -> ObjectSchema:
        return self.plugin.descriptor.spec.config_schema

    def prop(self, name: str) -> AnyProperty | None:
        return self.schema.properties.get(name)

    def optional(self, name: str) -> bool:
        """May this config field be absent at bind time for some valid config?"""
        prop = self.prop(name)
        if prop is None or name in self.schema.required:
            return False
        if prop.forbidden_when is not None:
            return True
        return not self.defaulted(name)

    def defaulted(self, name: str) -> bool:
        prop = self.prop(name)
        return prop is not None and prop.type != "object" and prop.default is not None

    def present(self, name: str, scenario: Scenario) -> bool:
        """Is config field ``name`` certainly present in every valid config of ``scenario``?"""
        if self.prop(name) is None:
            return False
        if _decided(self.forbidden_when.get(name), scenario):
            return False
        if name in self.schema.required or name in scenario or self.defaulted(name):
            return True
        return _decided(self.required_when.get(name), scenario)

    def possible(self, scenario: Scenario, enumerated: Iterable[str]) -> bool:
        """Could a config that validates have these values of the ``enumerated`` fields
        (those absent from ``scenario`` are enumerated as absent)?"""
        for name in enumerated:
            forbidden = _decided(self.forbidden_when.get(name), scenario)
            if name in scenario:
                if forbidden:
                    return False
            elif not forbidden and (
                (name in self.forbidden_when and self.defaulted(name))  # default filled in
                or _decided(self.required_when.get(name), scenario)  # validation refuses
            ):
                return False
        return True

    def error(
        self, code: Code, message: str, span: SourceSpan | None, path: Path | str = ""
    ) -> None:
        text = path if isinstance(path, str) else path_text(path)
        self.diagnostics.append(Diagnostic.at(code, message, span, text))

    @property
    def step_kinds(self) -> set[str]:
        return set(self.plugin.descriptor.spec.step_kinds)


# --------------------------------------------------------------------------- guards


def _literal_type(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int):
        return "integer"
    return "string"


class _GuardTyper:
    """Static typing of a guard over the config schema (``E_GUARD_TYPE``)."""

    def __init__(self, ctx: _PluginContext, path: Path) -> None:
        self.ctx = ctx
        self.path = path

    def error(self, message: str, node: Any) -> None:
        self.ctx.error(Code.E_GUARD_TYPE, message, node.span, self.path)

    def types(self, expr: Expr) -> set[str]:
        if isinstance(expr, Literal):
            return {_literal_type(expr.value)}
        if isinstance(expr, ListLiteral):
            return {"array"}
        if isinstance(expr, ConfigRef):
            prop = self.ctx.prop(expr.field)
            if prop is None:
                return {"any"}
            out: set[str] = {prop.type}
            if self.ctx.optional(expr.field):
                out.add("null")
            return out
        if isinstance(expr, REFERENCE_TYPES):
            return {"any"}
        if isinstance(expr, Not):
            self.boolean(expr.operand, "'not'")
            return {"boolean"}
        if isinstance(expr, BoolOp):
            self.boolean(expr.left, f"'{expr.op}'")
            self.boolean(expr.right, f"'{expr.op}'")
            return {"boolean"}
        assert isinstance(expr, Compare)
        left = self.types(expr.left)
        right = self.types(expr.right)
        if expr.op in ("==", "!="):
            if (
                "any" not in left | right
                and not ((left & right) - {"null"})
                and not ("null" in left and "null" in right)
            ):
                self.error(
                    f"'{expr.op}' compares {'/'.join(sorted(left))} with "
                    f"{'/'.join(sorted(right))}; the result never changes",
                    expr,
                )
            else:
                self.enum_member(expr.left, expr.right)
                self.enum_member(expr.right, expr.left)
        elif expr.op in ("in", "not in"):
            if not isinstance(expr.right, ListLiteral):
                self.error(f"'{expr.op}' needs a list literal on its right", expr.right)
            else:
                for item in expr.right.items:
                    self.enum_member(expr.left, item)
        else:
            for side, kinds in ((expr.left, left), (expr.right, right)):
                if "any" not in kinds and kinds - {"null"} != {"integer"}:
                    self.error(f"'{expr.op}' compares integers only", side)
        return {"boolean"}

    def enum_member(self, ref: Expr, lit: Expr) -> None:
        if not isinstance(ref, ConfigRef) or not isinstance(lit, Literal):
            return
        prop = self.ctx.prop(ref.field)
        if prop is None or lit.value is None:
            return
        values = enumerable_values(prop)
        if values is not None and not any(
            type(v) is type(lit.value) and v == lit.value for v in values
        ):
            self.error(
                f"{lit.value!r} is never a value of call.config.{ref.field} (one of {values})",
                lit,
            )

    def boolean(self, expr: Expr, what: str) -> None:
        kinds = self.types(expr)
        if "any" not in kinds and kinds - {"null"} != {"boolean"}:
            self.error(f"{what} needs a boolean, not {'/'.join(sorted(kinds))}", expr)


def _check_guard(ctx: _PluginContext, text: str, span_of: SpanFn, path: Path) -> Expr | None:
    expr, diags = parse_guard(text, span_of, path_text(path))
    ctx.diagnostics.extend(diags)
    if expr is None:
        return None
    ok = True
    for ref in references(expr):
        if not isinstance(ref, ConfigRef):
            ctx.error(
                Code.E_REF_UNRESOLVED,
                f"{ref.text()}: a guard may only read call.config fields",
                ref.span,
                path,
            )
            ok = False
        elif ctx.prop(ref.field) is None:
            ctx.error(
                Code.E_REF_UNRESOLVED,
                f"{ref.text()}: configSchema has no field {ref.field!r}",
                ref.span,
                path,
            )
            ok = False
    if not ok:
        return None
    typer = _GuardTyper(ctx, path)
    typer.boolean(expr, "a guard")
    return expr


def _decided(expr: Expr | None, config: Mapping[str, Any]) -> bool:
    """A conditional-presence guard: holds only if it evaluates to true (None: never)."""
    if expr is None:
        return False
    try:
        return evaluate(expr, config) is True
    except GuardError:
        return False


def _guard_holds(expr: Expr | None, config: Mapping[str, Any]) -> bool:
    if expr is None:
        return True
    try:
        value = evaluate(expr, config)
    except GuardError:
        return True
    return value is True


def _scenarios(ctx: _PluginContext, guards: Iterable[Expr]) -> list[dict[str, Any]] | None:
    """Config scenarios to decide guards in: the given config, or every combination of
    the enum/boolean fields guards read (None if that is not finite or too many)."""
    if ctx.config is not None:
        return [ctx.config]
    fields: list[str] = []
    for expr in guards:
        for ref in references(expr):
            if isinstance(ref, ConfigRef) and ref.field not in fields:
                fields.append(ref.field)
    choices: list[list[Any]] = []
    for name in fields:
        prop = ctx.prop(name)
        values = enumerable_values(prop) if prop is not None else None
        if values is None:
            return None
        if ctx.optional(name):
            values = [*values, None]
        choices.append(values)
    total = 1
    for c in choices:
        total *= len(c)
        if total > MAX_SCENARIOS:
            return None
    out = []
    for combo in itertools.product(*choices):
        scenario = {k: v for k, v in zip(fields, combo, strict=True) if v is not None}
        if ctx.possible(scenario, fields):
            out.append(scenario)
    return out


def _scenario_text(scenario: Mapping[str, Any]) -> str:
    if not scenario:
        return "for every config"
    return "when " + ", ".join(f"{k}={v!r}" for k, v in sorted(scenario.items()))


# --------------------------------------------------------------------------- programs


@dataclass(frozen=True, slots=True)
class _Obligation:
    """effects[index] binds required parameter ``parameter`` to optional ``field``."""

    index: int
    parameter: str
    field: str
    span: SourceSpan | None
    path: Path


@dataclass(slots=True)
class _EffectInfo:
    index: int
    effect: Effect
    spec: OpcodeSpec | None
    guard: Expr | None
    bound: int  # items of its forEach list (1 without forEach)
    min_bound: int
    outputs: dict[str, ValueType] = field(default_factory=dict)


class _ProgramChecker:
    def __init__(self, ctx: _PluginContext, prog: ProgramSource) -> None:
        self.ctx = ctx
        self.prog = prog
        self.hook = prog.hook
        self.infos: dict[str, _EffectInfo] = {}
        self.order: list[str] = []
        self.exports: dict[str, ValueType] = {}
        self.obligations: list[_Obligation] = []
        self.guard_at: dict[int, Expr | None] = {}  # effects[i] -> its parsed guard

    # ---- helpers
    def path(self, *parts: str | int) -> Path:
        return (*self.prog.base, *parts)

    def error(self, code: Code, message: str, *parts: str | int, key: bool = False) -> None:
        span = self.prog.key_span(*parts) if key else self.prog.span(*parts)
        self.ctx.error(code, message, span, self.path(*parts))

    def span_of(self, *parts: str | int) -> SpanFn:
        rel: Path = tuple(parts)

        def at(line: int, column: int) -> SourceSpan | None:
            return self.prog.expression_span(rel, column, line)

        return at

    # ---- main
    def run(self) -> None:
        effects = self.prog.body.effects
        seen: dict[str, int] = {}
        for i, effect in enumerate(effects):
            if seen.setdefault(effect.id, i) != i:
                self.error(
                    Code.E_DUPLICATE_ID,
                    f"effect id {effect.id!r} is already used by effects[{seen[effect.id]}]",
                    "effects",
                    i,
                    "id",
                )
        ids_in_order = [e.id for e in effects]
        total = 0
        for i, effect in enumerate(effects):
            info = self.check_effect(i, effect, ids_in_order)
            total += info.bound
            if effect.id not in self.infos:
                self.infos[effect.id] = info
                self.order.append(effect.id)
        if total > MAX_EFFECTS:
            self.error(
                Code.E_BUDGET,
                f"hook {self.hook!r} expands to up to {total} effects (the limit is {MAX_EFFECTS})",
                "effects",
            )
        self.check_exports()

    # ---- effects
    def check_effect(self, i: int, effect: Effect, ids: list[str]) -> _EffectInfo:
        ctx = self.ctx
        spec = ctx.registry.get(effect.kind)
        if spec is None:
            self.error(
                Code.E_UNKNOWN_OPCODE, f"unknown opcode {effect.kind!r}", "effects", i, "kind"
            )
        else:
            if effect.kind not in ctx.plugin.descriptor.spec.allowed_effects:
                self.error(
                    Code.E_EFFECT_DENIED,
                    f"opcode {effect.kind!r} is not in the plugin's allowedEffects",
                    "effects",
                    i,
                    "kind",
                )
            if self.hook not in {h.value for h in spec.hooks}:
                legal = ", ".join(sorted(h.value for h in spec.hooks))
                self.error(
                    Code.E_WRONG_HOOK,
                    f"opcode {effect.kind!r} may not run in {self.hook} (only in {legal})",
                    "effects",
                    i,
                    "kind",
                )
        guard: Expr | None = None
        if effect.when is not None:
            guard = _check_guard(
                ctx,
                effect.when,
                self.span_of("effects", i, "when"),
                self.path("effects", i, "when"),
            )
        if guard is not None:
            ctx.guards.append(guard)
        self.guard_at[i] = guard
        info = _EffectInfo(i, effect, spec, guard, 1, 1)
        element: ValueType | None = None
        if effect.for_each is not None:
            element = self.check_for_each(i, effect, info, ids)
        if spec is not None:
            self.check_inputs(i, effect, spec, info, element, ids)
            self.check_parameters(i, effect, spec)
            self.check_predicates(i, effect, spec)
            self.check_recovery(i, effect, spec)
        else:
            # Still resolve references so their own errors are reported.
            for port, value in (effect.inputs or {}).items():
                for parts, ref in self._refs(port, value):
                    self.resolve(ref.from_, i, ids, element, *parts)
        return info

    def _refs(self, port: str, value: Ref | list[Ref]) -> list[tuple[tuple[str | int, ...], Ref]]:
        if isinstance(value, list):
            return [(("inputs", port, j, "from"), ref) for j, ref in enumerate(value)]
        return [(("inputs", port, "from"), value)]

    def check_for_each(
        self, i: int, effect: Effect, info: _EffectInfo, ids: list[str]
    ) -> ValueType | None:
        fe = effect.for_each
        assert fe is not None
        if fe.as_ in ("call", "effects"):
            self.error(
                Code.E_SCHEMA,
                f"forEach variable may not be named {fe.as_!r}",
                "effects",
                i,
                "forEach",
                "as",
            )
        vt = self.resolve(fe.in_, i, ids, None, "forEach", "in")
        if vt is None:
            return None
        if vt.max_items <= 1:
            self.error(
                Code.E_CARDINALITY,
                f"forEach needs a list of handles; {fe.in_!r} denotes one",
                "effects",
                i,
                "forEach",
                "in",
            )
        info.bound = vt.max_items
        info.min_bound = vt.min_items
        return vt.one()

    def resolve(
        self,
        text: str,
        i: int,
        ids: list[str],
        element: ValueType | None,
        *parts: str | int,
    ) -> ValueType | None:
        """Parse and resolve a handle reference at effects[i].<parts>; None on error."""
        rel = ("effects", i, *parts)
        ref, diags = parse_reference(text, self.span_of(*rel), path_text(self.path(*rel)))
        self.ctx.diagnostics.extend(diags)
        if ref is None:
            return None
        return self.resolve_ref(ref, i, ids, element, rel)

    def resolve_ref(
        self,
        ref: Reference,
        i: int | None,
        ids: list[str],
        element: ValueType | None,
        rel: Path,
    ) -> ValueType | None:
        ctx = self.ctx
        path = self.path(*rel)

        def err(code: Code, message: str) -> None:
            ctx.error(code, f"{ref.text()}: {message}", ref.span, path)

        spec = ctx.plugin.descriptor.spec
        vt: ValueType | None = None
        if isinstance(ref, ConfigRef):
            err(Code.E_PORT_TYPE, "call.config is a value, not a handle")
            return None
        if isinstance(ref, SandboxRef):
            if self.hook != "connect":
                err(Code.E_REF_UNRESOLVED, "call.sandbox is only available in connect")
            else:
                err(Code.E_PORT_TYPE, "call.sandbox is a scope, not a handle")
            return None
        if isinstance(ref, VarRef):
            fe = self.prog.body.effects[i].for_each if i is not None else None
            if fe is None or fe.as_ != ref.name or element is None:
                if fe is not None and fe.as_ == ref.name:
                    return None  # the forEach list itself failed to resolve
                err(Code.E_REF_UNRESOLVED, "not a forEach variable of this effect")
                return None
            return element
        if isinstance(ref, InputRef):
            port = (spec.inputs or {}).get(ref.port)
            if port is None:
                err(Code.E_REF_UNRESOLVED, f"the descriptor has no input port {ref.port!r}")
                return None
            vt = port_value_type(port)
            index = ref.index
        elif isinstance(ref, AllocationRef):
            if self.hook != "prepare":
                err(Code.E_REF_UNRESOLVED, "call.allocation is only available in prepare")
                return None
            ports = spec.allocation or {}
            if ref.port is None:
                if len(ports) != 1:
                    err(
                        Code.E_REF_UNRESOLVED,
                        "name the allocation port (the descriptor declares "
                        f"{len(ports)} allocation ports)",
                    )
                    return None
                alloc = next(iter(ports.values()))
            else:
                found = ports.get(ref.port)
                if found is None:
                    err(
                        Code.E_REF_UNRESOLVED, f"the descriptor has no allocation port {ref.port!r}"
                    )
                    return None
                alloc = found
            vt = port_value_type(alloc)
            index = ref.index
        elif isinstance(ref, PreparedRef):
            if self.hook != "connect":
                err(Code.E_REF_UNRESOLVED, "call.prepared is only available in connect")
                return None
            prepared = ctx.prepared.get(ref.port)
            if prepared is None:
                err(Code.E_REF_UNRESOLVED, f"the prepare hook exports no {ref.port!r}")
                return None
            vt = prepared
            index = ref.index
        else:
            assert isinstance(ref, EffectRef)
            target = self.infos.get(ref.effect)
            if target is None:
                if ref.effect in ids and (i is None or ids.index(ref.effect) >= i):
                    err(Code.E_REF_FORWARD, f"effect {ref.effect!r} does not run before this one")
                else:
                    err(Code.E_REF_UNRESOLVED, f"no effect {ref.effect!r} in this program")
                return None
            if i is not None and target.index >= i:
                err(Code.E_REF_FORWARD, f"effect {ref.effect!r} does not run before this one")
                return None
            if target.spec is None:
                return None
            if ref.port not in target.spec.outputs:
                outs = ", ".join(sorted(target.spec.outputs)) or "none"
                err(
                    Code.E_REF_UNRESOLVED,
                    f"opcode {target.effect.kind} has no output {ref.port!r} (outputs: {outs})",
                )
                return None
            found_vt = target.outputs.get(ref.port)
            if found_vt is None:
                return None
            vt = found_vt
            index = ref.index
        if index is not None:
            if index >= vt.max_items:
                err(Code.E_CARDINALITY, f"index {index} is out of range (at most {vt.max_items})")
                return None
            if index >= vt.min_items:
                err(
                    Code.E_CARDINALITY,
                    f"index {index} may be absent (at least {vt.min_items} guaranteed)",
                )
                return None
            return vt.one()
        return vt

    def check_inputs(
        self,
        i: int,
        effect: Effect,
        spec: OpcodeSpec,
        info: _EffectInfo,
        element: ValueType | None,
        ids: list[str],
    ) -> None:
        bound: dict[str, ValueType] = {}
        for port, value in (effect.inputs or {}).items():
            port_spec = spec.inputs.get(port)
            refs = self._refs(port, value)
            if port_spec is None:
                known = ", ".join(sorted(spec.inputs)) or "none"
                self.error(
                    Code.E_UNKNOWN_FIELD,
                    f"opcode {spec.name} has no input port {port!r} (ports: {known})",
                    "effects",
                    i,
                    "inputs",
                    port,
                    key=True,
                )
                for parts, ref in refs:
                    self.resolve(ref.from_, i, ids, element, *parts)
                continue
            lo = hi = 0
            first: ValueType | None = None
            complete = True
            for parts, ref in refs:
                vt = self.resolve(ref.from_, i, ids, element, *parts)
                if vt is None:
                    complete = False
                    continue
                first = first or vt
                lo += vt.min_items
                hi += vt.max_items
                self.check_handle(i, spec, port, port_spec, vt, parts)
            if first is not None:
                bound[port] = replace(first, min_items=lo, max_items=hi)
            if complete and (hi > port_spec.max_items or lo < port_spec.min_items):
                self.error(
                    Code.E_CARDINALITY,
                    f"port {port!r} of {spec.name} takes {port_spec.min_items}.."
                    f"{port_spec.max_items} handles; this binds {lo}..{hi}",
                    "effects",
                    i,
                    "inputs",
                    port,
                )
        for port, port_spec in spec.inputs.items():
            if port_spec.min_items > 0 and port not in (effect.inputs or {}):
                self.error(
                    Code.E_CARDINALITY,
                    f"input port {port!r} of {spec.name} needs at least "
                    f"{port_spec.min_items} handle(s) and is not bound",
                    "effects",
                    i,
                    "inputs" if effect.inputs is not None else "kind",
                )
        # Outputs: types the later effects and exports will see.
        for name, out in spec.outputs.items():
            inherited = bound.get(out.inherits) if out.inherits else None
            accesses = inherited.accesses if inherited is not None else out.grants
            links = out.link_types
            if inherited is not None and inherited.link_types is not None:
                links = inherited.link_types if links is None else inherited.link_types & links
            info.outputs[name] = ValueType(
                type=out.type,
                link_types=links,
                accesses=frozenset(accesses),
                min_items=out.min_items * info.min_bound,
                max_items=out.max_items * info.bound,
                scope=out.scope,
            )

    def check_handle(
        self,
        i: int,
        spec: OpcodeSpec,
        port: str,
        port_spec: PortSpec,
        vt: ValueType,
        parts: tuple[str | int, ...],
    ) -> None:
        where = ("effects", i, *parts)
        need = port_spec.access
        mutating = (need is not None and need in _MUTATING_ACCESSES) or spec.mutates_parent
        if vt.shared and mutating:
            # Before the type check: handing a shared-parent grant (SharedParent/v1, or a
            # CreateChild-only interface) to a configuring port is a mutation attempt,
            # whatever handle type the port takes.
            self.error(
                Code.E_SHARED_PARENT_MUTATION,
                f"{spec.name} would {'configure' if need else 'mutate'} a shared-parent grant, "
                "which permits CreateChild only",
                *where,
            )
            return
        if vt.type is not port_spec.type:
            self.error(
                Code.E_PORT_TYPE,
                f"port {port!r} of {spec.name} takes {port_spec.type.value}, not {vt.type.value}",
                *where,
            )
            return
        if (
            port_spec.link_types is not None
            and vt.link_types is not None
            and not vt.link_types & port_spec.link_types
        ):
            want = "/".join(sorted(lt.value for lt in port_spec.link_types))
            have = "/".join(sorted(lt.value for lt in vt.link_types))
            self.error(
                Code.E_PORT_TYPE,
                f"port {port!r} of {spec.name} takes linkType {want}, not {have}",
                *where,
            )
        if port_spec.scope is not None and vt.scope is not None and port_spec.scope != vt.scope:
            self.error(
                Code.E_PORT_TYPE,
                f"port {port!r} of {spec.name} takes a {port_spec.scope.value} handle, "
                f"this one lives in the {vt.scope.value}",
                *where,
            )
        if need is not None and need not in vt.accesses:
            have = ", ".join(sorted(a.value for a in vt.accesses)) or "nothing"
            self.error(
                Code.E_ACCESS,
                f"port {port!r} of {spec.name} needs {need.value}; the handle grants {have}",
                *where,
            )

    # ---- parameters
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

    def check_recovery(self, i: int, effect: Effect, spec: OpcodeSpec) -> None:
        supported = ", ".join(sorted(s.value for s in spec.recovery)) or "none"
        if not spec.recovery:
            self.error(
                Code.E_NO_RECOVERY,
                f"{spec.name} declares no recovery strategy; it cannot be run safely",
                "effects",
                i,
                "kind",
            )
            return
        if effect.recovery is None:
            if spec.reversibility is Reversibility.IRREVERSIBLE:
                self.error(
                    Code.E_NO_RECOVERY,
                    f"{spec.name} is irreversible: declare recovery.strategy "
                    f"(supported: {supported})",
                    "effects",
                    i,
                    "kind",
                )
            return
        if effect.recovery.strategy not in {s.value for s in spec.recovery}:
            self.error(
                Code.E_NO_RECOVERY,
                f"{spec.name} does not support recovery {effect.recovery.strategy!r} "
                f"(supported: {supported})",
                "effects",
                i,
                "recovery",
                "strategy",
            )

    # ---- exports
    def check_exports(self) -> None:
        ctx = self.ctx
        spec = ctx.plugin.descriptor.spec
        exports = self.prog.body.exports or {}
        ids = [e.id for e in self.prog.body.effects]
        export_types: dict[str, ValueType] = {}
        presence: dict[str, Presence] = {}
        for name, ref in exports.items():
            rel = ("exports", name, "from")
            parsed, diags = parse_reference(
                ref.from_, self.span_of(*rel), path_text(self.path(*rel))
            )
            ctx.diagnostics.extend(diags)
            if parsed is None:
                continue
            presence[name] = self.presence(parsed)
            vt = self.resolve_ref(parsed, None, ids, None, rel)
            if vt is not None:
                export_types[name] = vt
        self.exports = export_types
        terminal = self.hook == "connect" or ctx.plugin.program("connect") is None
        if not terminal:
            # prepare's exports become call.prepared.* for connect
            ctx.prepared_presence = presence
            self.check_scenarios({}, {})
            return
        outputs: dict[str, OutputPort] = spec.outputs or {}
        for name in exports:
            if name not in outputs:
                declared = ", ".join(sorted(outputs)) or "none"
                self.error(
                    Code.E_EXPORT_UNDECLARED,
                    f"export {name!r} is not a descriptor output (outputs: {declared})",
                    "exports",
                    name,
                    key=True,
                )
        for name, out in outputs.items():
            vt = export_types.get(name)
            if vt is None:
                continue
            want_links = {out.link_type} if out.link_type else None
            have_links = {lt.value for lt in vt.link_types} if vt.link_types else None
            if vt.type.value != out.type or (
                want_links is not None and have_links is not None and not have_links & want_links
            ):
                self.error(
                    Code.E_EXPORT_TYPE,
                    f"output {name!r} is {out.type}"
                    + (f" ({out.link_type})" if out.link_type else "")
                    + f" but the export is {vt.describe()}",
                    "exports",
                    name,
                    "from",
                )
            elif vt.max_items > out.max_items or vt.min_items < out.min_items:
                self.error(
                    Code.E_CARDINALITY,
                    f"output {name!r} carries {out.min_items}..{out.max_items} handles; "
                    f"the export yields {vt.min_items}..{vt.max_items}",
                    "exports",
                    name,
                    "from",
                )
        self.check_scenarios(outputs, presence)

    def presence(self, ref: Reference) -> Presence:
        """When the handle(s) ``ref`` denotes exist, as a function of config."""
        ctx = self.ctx
        if isinstance(ref, EffectRef):
            target = self.infos.get(ref.effect)
            if target is None or target.guard is None:
                return _always
            guard = target.guard
            return lambda s: _guard_holds(guard, s)
        if isinstance(ref, AllocationRef | InputRef):
            group = "allocation" if isinstance(ref, AllocationRef) else "inputs"
            port = ref.port
            if port is None:
                ports = list(ctx.plugin.descriptor.spec.allocation or {})
                port = ports[0] if len(ports) == 1 else None
            port_guard = ctx.port_guards.get((group, port or ""))
            if port_guard is None:
                return _always
            return lambda s: _guard_holds(port_guard, s)
        if isinstance(ref, PreparedRef):
            return ctx.prepared_presence.get(ref.port, _always)
        return _always

    def check_scenarios(
        self, outputs: Mapping[str, OutputPort], presence: Mapping[str, Presence]
    ) -> None:
        """Conditional outputs and guarded effects, decided per config scenario."""
        ctx = self.ctx
        out_guards = {n: g.expr for n, g in ctx.output_guards.items()}
        scenarios = _scenarios(ctx, ctx.guards)
        if scenarios == [] and ctx.config is None:
            # Every combination was pruned: no config can pass validation, and every
            # conditional check below would hold vacuously.
            ctx.error(
                Code.E_SCHEMA,
                "no config satisfies configSchema: its requiredWhen/forbiddenWhen rules "
                "contradict each other for every value of the fields they read",
                ctx.plugin.source.span(("spec", "configSchema")),
                ("spec", "configSchema"),
            )
        self.check_obligations(scenarios)
        exports = self.prog.body.exports or {}
        missing_at = "exports" if self.prog.body.exports is not None else "effects"
        reported: set[tuple[Code, str]] = set()
        if scenarios is None:
            for name, out in outputs.items():
                if out.when is None and name not in exports:
                    self.error(
                        Code.E_EXPORT_MISSING,
                        f"descriptor output {name!r} is not exported",
                        missing_at,
                    )
            return
        for scenario in scenarios:
            for name in outputs:
                on = _guard_holds(out_guards.get(name), scenario)
                present = presence.get(name)
                problem: tuple[Code, str, tuple[str, ...]] | None = None
                if on and name not in exports:
                    problem = (
                        Code.E_EXPORT_MISSING,
                        f"descriptor output {name!r} is not exported ({_scenario_text(scenario)})",
                        (missing_at,),
                    )
                elif on and present is not None and not present(scenario):
                    problem = (
                        Code.E_EXPORT_MISSING,
                        f"output {name!r} is declared but {exports[name].from_!r} does not "
                        f"exist {_scenario_text(scenario)}",
                        ("exports", name, "from"),
                    )
                elif not on and present is not None and present(scenario):
                    problem = (
                        Code.E_EXPORT_UNDECLARED,
                        f"export {name!r} is produced although the descriptor output is "
                        f"off {_scenario_text(scenario)}",
                        ("exports", name, "from"),
                    )
                if problem is not None and (problem[0], name) not in reported:
                    reported.add((problem[0], name))
                    self.error(problem[0], problem[1], *problem[2])
            self.check_guarded_refs(scenario, reported)

    def check_obligations(self, scenarios: list[dict[str, Any]] | None) -> None:
        """A required opcode parameter bound to a config field that may be absent.

        A field that declares ``requiredWhen`` opts into the proof: in every config
        scenario where the effect runs, the field must be present (``required``, a
        default, or ``requiredWhen`` holding) — ``E_PARAM_TYPE`` otherwise. For a field
        without ``requiredWhen`` the checker reports what is certain to fail: an unguarded
        effect binding it, or an effect that runs where ``forbiddenWhen`` removes it; a
        guarded effect is otherwise left to the config validation at bind time.
        """
        ctx = self.ctx
        for ob in self.obligations:
            guard = self.guard_at.get(ob.index)
            unguarded = self.prog.body.effects[ob.index].when is None
            proven = ob.field in ctx.required_when
            if scenarios is None:
                if not unguarded or proven:
                    continue
                where = ""
            else:
                running = [s for s in scenarios if _guard_holds(guard, s)]
                if proven or unguarded:
                    bad = [s for s in running if not ctx.present(ob.field, s)]
                else:
                    forbidden = ctx.forbidden_when.get(ob.field)
                    bad = [s for s in running if _decided(forbidden, s)]
                if not bad:
                    continue
                where = f" {self.scenario_text(bad[0], ob)}" if bad[0] else ""
            ctx.error(
                Code.E_PARAM_TYPE,
                f"parameter {ob.parameter!r} is required but call.config.{ob.field} may be "
                f"absent{where} (make the field required, give it a default, or declare "
                "requiredWhen)",
                ob.span,
                ob.path,
            )

    def scenario_text(self, scenario: Scenario, ob: _Obligation) -> str:
        """The scenario, narrowed to the fields the effect's guard and the field's
        presence guards read."""
        ctx = self.ctx
        exprs = [self.guard_at.get(ob.index)]
        exprs += [ctx.required_when.get(ob.field), ctx.forbidden_when.get(ob.field)]
        read = {
            r.field
            for e in exprs
            if e is not None
            for r in references(e)
            if isinstance(r, ConfigRef)
        }
        return _scenario_text({k: v for k, v in scenario.items() if k in read} or scenario)

    def check_guarded_refs(self, scenario: Scenario, reported: set[tuple[Code, str]]) -> None:
        """An effect that runs may only read handles that exist in the same scenario."""
        for eid in self.order:
            info = self.infos[eid]
            if not _guard_holds(info.guard, scenario):
                continue
            texts: list[tuple[str, tuple[str | int, ...]]] = []
            for port, value in (info.effect.inputs or {}).items():
                texts += [(ref.from_, parts) for parts, ref in self._refs(port, value)]
            if info.effect.for_each is not None:
                texts.append((info.effect.for_each.in_, ("forEach", "in")))
            for text, parts in texts:
                ref, _ = parse_reference(text)
                if ref is None or self.presence(ref)(scenario):
                    continue
                key = (Code.E_REF_UNRESOLVED, f"{eid}:{'.'.join(map(str, parts))}")
                if key in reported:
                    continue
                reported.add(key)
                self.error(
                    Code.E_REF_UNRESOLVED,
                    f"{text}: does not exist {_scenario_text(scenario)}, but effect {eid!r} runs",
                    "effects",
                    info.index,
                    *parts,
                )


_PREDICATE_WORD = {"requires": "precondition", "postconditions": "postcondition"}


def _short(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 24 else text[:21] + "..."


# --------------------------------------------------------------------------- descriptor


def _check_descriptor(ctx: _PluginContext) -> None:
    plugin = ctx.plugin
    spec = plugin.descriptor.spec

    def err(code: Code, message: str, *path: str | int, key: bool = False) -> None:
        span = plugin.source.key_span(path) if key else plugin.source.span(path)
        ctx.error(code, message, span, path)

    kinds = ctx.step_kinds
    if len(kinds) != len(spec.step_kinds):
        err(Code.E_SCHEMA, "stepKinds lists a kind twice", "spec", "stepKinds")
    if "Allocation" in kinds and spec.inputs:
        err(
            Code.E_SCHEMA,
            "an Allocation plugin takes no input ports: its authority is the DRA allocation",
            "spec",
            "inputs",
        )
    if "Allocation" in kinds and not spec.allocation:
        err(Code.E_SCHEMA, "an Allocation plugin declares its allocation ports", "spec")
    if "Allocation" not in kinds and spec.allocation:
        err(
            Code.E_SCHEMA,
            "only Allocation plugins declare allocation ports",
            "spec",
            "allocation",
            key=True,
        )
    for j, name in enumerate(spec.allowed_effects):
        if name not in ctx.registry:
            err(Code.E_UNKNOWN_OPCODE, f"unknown opcode {name!r}", "spec", "allowedEffects", j)
    for name, prop in ctx.schema.properties.items():
        if isinstance(prop, StringSchema) and is_ifname_field(name):
            where = ("spec", "configSchema", "properties", name)
            if prop.max_length is None or prop.max_length > 15:
                err(
                    Code.E_IFNAME,
                    f"config field {name!r} is an interface name: maxLength must be at most 15",
                    *where,
                )
            if not prop.min_length:
                err(
                    Code.E_IFNAME,
                    f"config field {name!r} is an interface name: minLength must be at least 1",
                    *where,
                )
            for value in [*(prop.enum or []), *([prop.default] if prop.default else [])]:
                problem = ifname_problem(value)
                if problem is not None:
                    err(Code.E_IFNAME, problem, *where)
    _check_conditional_presence(ctx)
    for group in ("allocation", "inputs", "outputs"):
        ports: Mapping[str, InputPort | OutputPort] = getattr(spec, group) or {}
        for name, port in ports.items():
            if port.when is None:
                continue
            path: Path = ("spec", group, name, "when")

            def span_of(line: int, column: int, path: Path = path) -> SourceSpan | None:
                return plugin.source.expression_span(path, column, line)

            expr = _check_guard(ctx, port.when, span_of, path)
            if expr is not None:
                ctx.guards.append(expr)
            if group == "outputs":
                ctx.output_guards[name] = _Guard(expr, path)
            else:
                ctx.port_guards[(group, name)] = expr
    # Hooks and their cleanup contracts.
    hooks = spec.hooks
    if not plugin.programs:
        err(Code.E_SCHEMA, "the plugin defines no hook program (prepare or connect)", "spec")
    prepare = plugin.program("prepare")
    if prepare is not None and "Allocation" not in kinds:
        ctx.error(
            Code.E_WRONG_HOOK,
            "only Allocation plugins implement prepare (Operation steps have no root preparation)",
            prepare.key_span() if prepare.base else prepare.span("hook"),
            path_text(prepare.base or ("hook",)),
        )
    for program_hook, undo_hook in (("prepare", "unprepare"), ("connect", "remove")):
        has_program = plugin.program(program_hook) is not None
        has_undo = hooks is not None and getattr(hooks, undo_hook) is not None
        if has_program and not has_undo:
            err(
                Code.E_NO_RECOVERY,
                f"hook {program_hook!r} has no cleanup: add "
                f"'{undo_hook}: {{undo: {program_hook}}}' to spec.hooks",
                "spec",
                "hooks" if hooks is not None else "stateContract",
            )
        if has_undo and not has_program:
            err(
                Code.E_SCHEMA,
                f"{undo_hook} undoes {program_hook!r}, which the plugin does not define",
                "spec",
                "hooks",
                undo_hook,
            )


def _check_conditional_presence(ctx: _PluginContext) -> None:
    """``requiredWhen`` / ``forbiddenWhen`` of configSchema properties (root level only)."""
    source = ctx.plugin.source
    root: Path = ("spec", "configSchema", "properties")
    for name, prop in ctx.schema.properties.items():
        for key, text, table in (
            ("requiredWhen", prop.required_when, ctx.required_when),
            ("forbiddenWhen", prop.forbidden_when, ctx.forbidden_when),
        ):
            if text is None:
                continue
            path: Path = (*root, name, key)
            if name in ctx.schema.required:
                ctx.error(
                    Code.E_SCHEMA,
                    f"{key} on {name!r}, which is listed in required"
                    + (" (it is always required)" if key == "requiredWhen" else ""),
                    source.key_span(path),
                    path,
                )
                continue

            def span_of(line: int, column: int, path: Path = path) -> SourceSpan | None:
                return source.expression_span(path, column, line)

            expr = _check_guard(ctx, text, span_of, path)
            if expr is not None:
                table[name] = expr
                ctx.guards.append(expr)
        if isinstance(prop, ObjectSchema):
            _no_nested_presence(ctx, prop, (*root, name))


def _no_nested_presence(ctx: _PluginContext, schema: ObjectSchema, base: Path) -> None:
    for name, prop in schema.properties.items():
        for key, text in (
            ("requiredWhen", prop.required_when),
            ("forbiddenWhen", prop.forbidden_when),
        ):
            if text is not None:
                path: Path = (*base, "properties", name, key)
                ctx.error(
                    Code.E_SCHEMA,
                    f"{key} is allowed on top-level config fields only (guards read "
                    "call.config.<field>)",
                    ctx.plugin.source.key_span(path),
                    path,
                )
        if isinstance(prop, ObjectSchema):
            _no_nested_presence(ctx, prop, (*base, "properties", name))


# --------------------------------------------------------------------------- API


def _context(
    plugin: Plugin, registry: OpcodeRegistry, config: Mapping[str, Any] | None
) -> _PluginContext:
    ctx = _PluginContext(plugin=plugin, registry=registry, config=None)
    if config is not None:
        normalised, diags = validate_config(plugin.descriptor.spec.config_schema, config)
        ctx.diagnostics.extend(diags)
        ctx.config = normalised
        for name, value in normalised.items():
            if is_ifname_field(name):
                problem = ifname_problem(value)
                if problem is not None:
                    ctx.error(Code.E_IFNAME, problem, None, f"config.{name}")
    return ctx


def _run_programs(ctx: _PluginContext, hooks: Iterable[str], report: set[str]) -> None:
    for hook in ("prepare", "connect"):
        prog = ctx.plugin.program(hook)
        if prog is None or hook not in hooks:
            continue
        before = len(ctx.diagnostics)
        checker = _ProgramChecker(ctx, prog)
        checker.run()
        if hook == "prepare":
            ctx.prepared = dict(checker.exports)
        if hook not in report:
            del ctx.diagnostics[before:]


def check_plugin(
    plugin: Plugin, registry: OpcodeRegistry, config: Mapping[str, Any] | None = None
) -> list[Diagnostic]:
    """Check a whole plugin: descriptor, every hook program and their contracts.

    With ``config``, the config is validated against ``configSchema`` (diagnostics with
    paths ``config.<field>``, no file position) and guards are decided for it.
    """
    try:
        ctx = _context(plugin, registry, config)
        _check_descriptor(ctx)
        _run_programs(ctx, ("prepare", "connect"), {"prepare", "connect"})
        return _dedupe(ctx.diagnostics)
    except RecursionError:
        return [Diagnostic.at(Code.E_SCHEMA, "document nests too deeply", plugin.span())]


def check_program(
    plugin: Plugin,
    hook: str,
    registry: OpcodeRegistry,
    config: Mapping[str, Any] | None = None,
) -> list[Diagnostic]:
    """Check one hook program of ``plugin`` (descriptor-level errors excluded).

    ``connect`` is checked with the exports of ``prepare`` in scope (``call.prepared``).
    """
    try:
        ctx = _context(plugin, registry, config)
        # Output guards are descriptor facts the program checker needs.
        sink = _PluginContext(plugin=plugin, registry=registry, config=ctx.config)
        _check_descriptor(sink)
        ctx.output_guards = sink.output_guards
        ctx.port_guards = sink.port_guards
        ctx.guards = sink.guards
        ctx.required_when = sink.required_when
        ctx.forbidden_when = sink.forbidden_when
        if plugin.program(hook) is None:
            return [*ctx.diagnostics, missing_program(plugin, hook)]
        _run_programs(ctx, ("prepare", "connect") if hook == "connect" else (hook,), {hook})
        return _dedupe(ctx.diagnostics)
    except RecursionError:
        return [Diagnostic.at(Code.E_SCHEMA, "document nests too deeply", plugin.span())]


def missing_program(plugin: Plugin, hook: str) -> Diagnostic:
    """The diagnostic for checking or binding a hook the plugin does not define."""
    return Diagnostic.at(
        Code.E_SCHEMA,
        f"plugin {plugin.name!r} has no {hook!r} program",
        plugin.span("spec", "hooks"),
        "spec.hooks",
    )


def _dedupe(diagnostics: list[Diagnostic]) -> list[Diagnostic]:
    seen: set[Diagnostic] = set()
    out: list[Diagnostic] = []
    for d in diagnostics:
        if d not in seen:
            seen.add(d)
            out.append(d)
    return out


def resolve_outputs(plugin: Plugin, config: Mapping[str, Any]) -> dict[str, OutputPort]:
    """The descriptor outputs that are on for ``config`` (conditional ``when`` decided).

    The topology compiler records this resolved port contract in the revision.
    """
    out: dict[str, OutputPort] = {}
    for name, port in (plugin.descriptor.spec.outputs or {}).items():
        if port.when is None:
            out[name] = port
            continue
        expr, diags = parse_guard(port.when)
        if expr is not None and not diags and _guard_holds(expr, config):
            out[name] = port
    return out


__all__ = [
    "MAX_EFFECTS",
    "ValueType",
    "check_plugin",
    "check_program",
    "missing_program",
    "port_value_type",
    "resolve_outputs",
]
