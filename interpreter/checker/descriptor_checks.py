"""The descriptor: hooks, cleanup contracts, ports and their guards."""

from __future__ import annotations

from collections.abc import Callable, Mapping

from dmn.interpreter.checker.config_presence_checks import _check_conditional_presence
from dmn.interpreter.checker.context import _Guard, _PluginContext
from dmn.interpreter.checker.guard_checks import _check_guard
from dmn.interpreter.config_schema import BooleanSchema, IntegerSchema, StringSchema
from dmn.interpreter.diagnostics import Code
from dmn.interpreter.documents import InputPort, OutputPort
from dmn.interpreter.source import ExpressionSpans, Path, path_text
from dmn.vocabulary.ifname import ifname_problem, is_ifname_field


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
    if "Allocation" in kinds:
        _check_allocation_mode(ctx, err)
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
    _check_workload_settable(ctx, err)
    _check_conditional_presence(ctx)
    for group in ("allocation", "inputs", "outputs"):
        ports: Mapping[str, InputPort | OutputPort] = getattr(spec, group) or {}
        for name, port in ports.items():
            if port.when is None:
                continue
            path: Path = ("spec", group, name, "when")
            expr = _check_guard(ctx, port.when, ExpressionSpans(plugin.source, path), path)
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


def _check_allocation_mode(ctx: _PluginContext, err: Callable[..., None]) -> None:
    """An Allocation plugin's config names the persona ``mode`` its devices are exposed
    under: a DeviceExposurePolicy offers devices to ``(plugin, mode)`` and the root's
    DeviceClass selects on it, so a root whose config has no mode can never be allocated.
    Said here, at lint time, with what to add, rather than only when a topology compiles."""
    mode = ctx.schema.properties.get("mode")
    example = "mode: {type: string, enum: [bridge], default: bridge}"
    if mode is None:
        err(
            Code.E_SCHEMA,
            "an Allocation plugin's configSchema needs a string property `mode` (the persona "
            f"mode a DeviceExposurePolicy exposes devices under), e.g. `{example}`",
            "spec",
            "configSchema",
            "properties",
            key=True,
        )
    elif not isinstance(mode, StringSchema):
        err(
            Code.E_SCHEMA,
            f"config field 'mode' of an Allocation plugin must be a string, e.g. `{example}`",
            "spec",
            "configSchema",
            "properties",
            "mode",
        )
    elif mode.default is None and "mode" not in ctx.schema.required:
        err(
            Code.E_SCHEMA,
            "config field 'mode' of an Allocation plugin must be required or have a default: "
            "a step that leaves it out has no mode to be allocated under",
            "spec",
            "configSchema",
            "properties",
            "mode",
        )


def _check_workload_settable(ctx: _PluginContext, err: Callable[..., None]) -> None:
    """``workloadSettable`` names top-level scalar config fields of an Allocation plugin: a
    workload's claim configures its own root step, never an Operation's, never a structure
    (pools, routes, sysctls and budgets stay the administrator's)."""
    spec = ctx.plugin.descriptor.spec
    for j, name in enumerate(spec.workload_settable or ()):
        where = ("spec", "workloadSettable", j)
        if "Allocation" not in ctx.step_kinds:
            err(Code.E_SCHEMA, "only an Allocation plugin has workload-settable fields", *where)
            return
        prop = ctx.schema.properties.get(name)
        if prop is None:
            err(Code.E_SCHEMA, f"workloadSettable names {name!r}, no configSchema field", *where)
        elif not isinstance(prop, StringSchema | IntegerSchema | BooleanSchema):
            err(
                Code.E_SCHEMA,
                f"workloadSettable field {name!r} must be a string, integer or boolean",
                *where,
            )
