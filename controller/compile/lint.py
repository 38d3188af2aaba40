"""``dmn lint`` support for NetworkTopology documents: the compiler's diagnostics.

Registered with the language core's lint through the ``dmn.lint_kinds`` entry point
(the interpreter must not import the controller).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from dmn.controller.compile.compiler import compile_topology
from dmn.interpreter.diagnostics import Code, Diagnostic
from dmn.interpreter.source import YamlDocument

if TYPE_CHECKING:
    from dmn.interpreter.lint import LintContext


def check_topology_document(doc: YamlDocument, ctx: LintContext) -> list[Diagnostic]:
    if not isinstance(doc.data, dict):
        return []
    missing = [
        Diagnostic.at(
            Code.E_SCHEMA,
            f"{key} is required in a NetworkTopology document",
            doc.source.key_span(("kind",)),
            key,
        )
        for key in ("apiVersion",)
        if key not in doc.data
    ]
    result = compile_topology(doc.data, ctx.plugins, ctx.registry, source=doc.source)
    return missing + list(result.diagnostics)
