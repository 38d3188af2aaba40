"""``dmn lint`` for IPPool documents: the pool plan's diagnostics at ``file:line:column``.

Registered through the ``dmn.lint_kinds`` entry point. Pools in other files are not known
here, so overlaps between pools are left to admission and the controller; pools in the same
lint run are checked against each other only by those.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from dmn.api.ipam.pool_plan import plan_pool
from dmn.interpreter.diagnostics import Diagnostic
from dmn.interpreter.source import YamlDocument

if TYPE_CHECKING:
    from dmn.interpreter.lint import LintContext


def check_ippool_document(doc: YamlDocument, ctx: LintContext) -> list[Diagnostic]:
    if not isinstance(doc.data, dict):
        return []
    return plan_pool(doc.data, doc.source)[1]
