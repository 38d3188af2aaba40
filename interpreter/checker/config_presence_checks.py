"""``requiredWhen`` / ``forbiddenWhen`` of configSchema properties."""

from __future__ import annotations

from dmn.interpreter.checker.context import _PluginContext
from dmn.interpreter.checker.guard_checks import _check_guard
from dmn.interpreter.config_schema import AnyProperty, ArraySchema, ObjectSchema
from dmn.interpreter.diagnostics import Code
from dmn.interpreter.source import ExpressionSpans, Path


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
            expr = _check_guard(ctx, text, ExpressionSpans(source, path), path)
            if expr is not None:
                table[name] = expr
                ctx.guards.append(expr)
        _nested(ctx, prop, (*root, name))


def _nested(ctx: _PluginContext, prop: AnyProperty, base: Path) -> None:
    """Objects below a property: its own properties, or an array's object items."""
    if isinstance(prop, ObjectSchema):
        _no_nested_presence(ctx, prop, base)
    elif isinstance(prop, ArraySchema) and isinstance(prop.items, ObjectSchema):
        _no_nested_presence(ctx, prop.items, (*base, "items"))


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
        _nested(ctx, prop, (*base, "properties", name))
