"""Diagnostics: the value every rejection becomes at a boundary.

A :class:`Diagnostic` carries a stable reason code (part of the public API: the CLI,
admission responses, topology status and attachment status all show it), a severity,
and the exact place it refers to — file, 1-based line and column, and a field path.
Inside the interpreter, code may raise :class:`DiagnosticError`; every public entry
point converts it back into a list of diagnostics so callers never see a traceback
for bad input.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from enum import StrEnum


class Severity(StrEnum):
    ERROR = "error"
    WARNING = "warning"


class Code(StrEnum):
    """Stable reason codes. Never reuse one code for two meanings; add a new one."""

    E_SCHEMA = "E_SCHEMA"
    E_DUPLICATE_KEY = "E_DUPLICATE_KEY"
    E_UNKNOWN_FIELD = "E_UNKNOWN_FIELD"
    E_SYNTAX = "E_SYNTAX"
    E_UNKNOWN_OPCODE = "E_UNKNOWN_OPCODE"
    E_EFFECT_DENIED = "E_EFFECT_DENIED"
    E_WRONG_HOOK = "E_WRONG_HOOK"
    E_REF_UNRESOLVED = "E_REF_UNRESOLVED"
    E_REF_FORWARD = "E_REF_FORWARD"
    E_PORT_TYPE = "E_PORT_TYPE"
    E_CARDINALITY = "E_CARDINALITY"
    E_ACCESS = "E_ACCESS"
    E_PARAM_TYPE = "E_PARAM_TYPE"
    E_PARAM_CONFLICT = "E_PARAM_CONFLICT"
    E_DUPLICATE_ID = "E_DUPLICATE_ID"
    E_EXPORT_MISSING = "E_EXPORT_MISSING"
    E_EXPORT_TYPE = "E_EXPORT_TYPE"
    E_NO_RECOVERY = "E_NO_RECOVERY"
    E_BUDGET = "E_BUDGET"
    E_SHARED_PARENT_MUTATION = "E_SHARED_PARENT_MUTATION"
    E_CYCLE = "E_CYCLE"
    E_ROOT_COVERAGE = "E_ROOT_COVERAGE"
    E_FAMILY_CONFLICT = "E_FAMILY_CONFLICT"
    E_RESET_DOMAIN_BUSY = "E_RESET_DOMAIN_BUSY"
    E_IFNAME = "E_IFNAME"
    E_NAME_INVALID = "E_NAME_INVALID"
    E_PREDICATE = "E_PREDICATE"
    E_GUARD_TYPE = "E_GUARD_TYPE"
    E_EXPORT_UNDECLARED = "E_EXPORT_UNDECLARED"
    E_IO = "E_IO"
    #: A pre-existing object conflicts with what would be generated (never overwritten).
    E_CONFLICT = "E_CONFLICT"
    E_USAGE = "E_USAGE"
    #: A configSchema pattern that RE2 (linear-time matching) does not accept.
    E_PATTERN = "E_PATTERN"
    #: A document over a loader bound: size, nesting depth, node count, aliases, digits.
    E_LIMIT = "E_LIMIT"
    #: An input that holds no document at all (an empty file, only comments).
    E_EMPTY = "E_EMPTY"
    #: A pinned plugin whose content does not digest to the contract digest it is pinned by.
    E_CONTRACT_MISMATCH = "E_CONTRACT_MISMATCH"
    #: A CEL selector with an unknown variable, field or function, or a type error.
    E_CEL_TYPE = "E_CEL_TYPE"
    #: A CEL selector whose estimated worst-case cost exceeds Kubernetes' limit.
    E_CEL_COST = "E_CEL_COST"
    #: An AdmissionReview the webhook does not understand (denied, never allowed).
    E_ADMISSION_MALFORMED = "E_ADMISSION_MALFORMED"
    #: The webhook failed while validating (denied; the log has the details).
    E_ADMISSION_FAILED = "E_ADMISSION_FAILED"
    #: A Pod of ours whose claims use DeviceClasses of two revisions of one topology.
    E_POD_REVISION_MIXED = "E_POD_REVISION_MIXED"
    #: A Pod of ours whose NRI required-plugins annotation does not name our plugin.
    E_POD_NRI_REQUIREMENT = "E_POD_NRI_REQUIREMENT"
    #: A Pod update that removes our plugin from a required-plugins annotation.
    E_POD_NRI_REQUIREMENT_REMOVED = "E_POD_NRI_REQUIREMENT_REMOVED"
    #: A created Pod of ours whose required node affinity admits nodes not labelled able to
    #: run its revisions' executor contracts.
    E_POD_NODE_CAPABILITY = "E_POD_NODE_CAPABILITY"
    #: A created Pod of ours whose spec.nodeName names a Node lacking those labels.
    E_POD_NODE_BYPASS = "E_POD_NODE_BYPASS"
    #: IP address management (IPPool validation and the allocator's refusals).
    E_IPPOOL_SUBNET = "E_IPPOOL_SUBNET"
    E_IPPOOL_RANGE_OUTSIDE_SUBNET = "E_IPPOOL_RANGE_OUTSIDE_SUBNET"
    E_IPPOOL_RANGE_OVERLAP = "E_IPPOOL_RANGE_OVERLAP"
    E_IPPOOL_RESERVED_EXCLUDED = "E_IPPOOL_RESERVED_EXCLUDED"
    E_IPPOOL_GATEWAY = "E_IPPOOL_GATEWAY"
    E_IPPOOL_ROUTE = "E_IPPOOL_ROUTE"
    E_IPPOOL_TOO_LARGE = "E_IPPOOL_TOO_LARGE"
    E_IPPOOL_OVERLAP = "E_IPPOOL_OVERLAP"
    E_IPPOOL_IN_USE = "E_IPPOOL_IN_USE"
    E_IPPOOL_EXHAUSTED = "E_IPPOOL_EXHAUSTED"
    E_IPAM_UNKNOWN_POOL = "E_IPAM_UNKNOWN_POOL"
    E_IPAM_POOL_INVALID = "E_IPAM_POOL_INVALID"
    E_IPAM_POOL_TERMINATING = "E_IPAM_POOL_TERMINATING"
    E_IPAM_FAMILY_MISMATCH = "E_IPAM_FAMILY_MISMATCH"
    E_IPAM_STATIC_OUTSIDE_RESERVED = "E_IPAM_STATIC_OUTSIDE_RESERVED"
    E_IPAM_ADDRESS_TAKEN = "E_IPAM_ADDRESS_TAKEN"
    E_IPAM_CONTENDED = "E_IPAM_CONTENDED"
    E_IPAM_NOT_OWNER = "E_IPAM_NOT_OWNER"


@dataclass(frozen=True, slots=True)
class SourceSpan:
    """A position in a source document; line and column are 1-based."""

    file: str
    line: int
    column: int


@dataclass(frozen=True, slots=True)
class Diagnostic:
    code: Code
    message: str
    file: str = ""
    line: int = 1
    column: int = 1
    path: str = ""
    severity: Severity = Severity.ERROR

    @classmethod
    def at(
        cls,
        code: Code,
        message: str,
        span: SourceSpan | None,
        path: str = "",
        severity: Severity = Severity.ERROR,
    ) -> Diagnostic:
        if span is None:
            return cls(code=code, message=message, path=path, severity=severity)
        return cls(
            code=code,
            message=message,
            file=span.file,
            line=span.line,
            column=span.column,
            path=path,
            severity=severity,
        )

    def to_json(self) -> dict[str, str | int]:
        """The stable JSON shape: exactly code, severity, file, line, column, path, message."""
        return {
            "code": self.code.value,
            "severity": self.severity.value,
            "file": self.file,
            "line": self.line,
            "column": self.column,
            "path": self.path,
            "message": self.message,
        }

    def render(self) -> str:
        """Compiler-style one-liner: ``file:line:col: error[E_CODE]: message``."""
        where = f"{self.file or '<input>'}:{self.line}:{self.column}"
        return f"{where}: {self.severity.value}[{self.code.value}]: {self.message}"


def has_errors(diagnostics: Iterable[Diagnostic]) -> bool:
    return any(d.severity is Severity.ERROR for d in diagnostics)


class DiagnosticError(Exception):
    """Raised inside the interpreter; public entry points turn it into diagnostics."""

    def __init__(self, diagnostics: Iterable[Diagnostic]) -> None:
        self.diagnostics: tuple[Diagnostic, ...] = tuple(diagnostics)
        super().__init__("; ".join(d.render() for d in self.diagnostics))
