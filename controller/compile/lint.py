"""``dmn lint`` support for NetworkTopology documents: the compiler's diagnostics.

Registered with the language core's lint through the ``dmn.lint_kinds`` entry point
(the interpreter must not import the controller).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from dmn.controller.compile.compiler import compile_topology
from dmn.interpreter.diagnostics import Diagnostic
from dmn.interpreter.source import YamlDocument

if TYPE_CHECKING:
    from dmn.interpreter.lint import LintContext


def check_topology_document(doc: YamlDocument, ctx: LintContext) -> list[Diagnostic]:
    if not isinstance(doc.data, dict):
        return []
    result = compile_topology(doc.data, ctx.plugins, ctx.registry, source=doc.source)
    return list(result.diagnostics)
