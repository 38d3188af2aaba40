"""The checker: every static rule of design §3.4, one entry point for every caller.

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

from collections.abc import Iterable, Mapping
from typing import Any

from dmn.interpreter.checker.clean_verdicts import CleanVerdicts
from dmn.interpreter.checker.context import _PluginContext
from dmn.interpreter.checker.descriptor_checks import _check_descriptor
from dmn.interpreter.checker.limits import MAX_EFFECTS
from dmn.interpreter.checker.program_checks import _ProgramChecker
from dmn.interpreter.checker.values import ValueType, port_value_type
from dmn.interpreter.config_schema import validate_config
from dmn.interpreter.diagnostics import Code, Diagnostic
from dmn.interpreter.loader import Plugin
from dmn.opcodes.spec import OpcodeRegistry


def _context(
    plugin: Plugin, registry: OpcodeRegistry, config: Mapping[str, Any] | None
) -> _PluginContext:
    ctx = _PluginContext(plugin=plugin, registry=registry, config=None)
    if config is not None:
        normalised, diags = validate_config(plugin.descriptor.spec.config_schema, config)
        ctx.diagnostics.extend(diags)
        ctx.config = normalised  # interface names are checked by validate_config
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


def check_validated(
    plugin: Plugin, registry: OpcodeRegistry, config: Mapping[str, Any]
) -> list[Diagnostic]:
    """:func:`check_plugin` for a config already validated against this plugin's
    ``configSchema`` with no diagnostics (``config`` is ``validate_config``'s normalised
    output): the same answer, without validating it again. The topology compiler has just
    validated each step's config, and :class:`CleanVerdicts` records what this reads.
    """
    try:
        ctx = _PluginContext(plugin=plugin, registry=registry, config=config)
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
    *,
    descriptor: bool = False,
) -> list[Diagnostic]:
    """Check one hook program of ``plugin``.

    ``connect`` is checked with the exports of ``prepare`` in scope (``call.prepared``).
    Descriptor-level errors are excluded (``dmn lint`` of a standalone program file reports
    its own errors; the plugin.yaml's are reported there) unless ``descriptor`` is true:
    the binder asks for them, because it decides the descriptor's guards (ports,
    ``requiredWhen``/``forbiddenWhen``) and a plugin that does not check never binds.
    """
    try:
        ctx = _context(plugin, registry, config)
        # Output guards are descriptor facts the program checker needs.
        sink = _PluginContext(plugin=plugin, registry=registry, config=ctx.config)
        _check_descriptor(sink)
        if descriptor:
            ctx.diagnostics.extend(sink.diagnostics)
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


__all__ = [
    "MAX_EFFECTS",
    "CleanVerdicts",
    "ValueType",
    "check_plugin",
    "check_program",
    "check_validated",
    "missing_program",
    "port_value_type",
]
