"""Per-plugin checking state shared by the descriptor and program checks."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from dmn.interpreter.checker.scenarios import Presence, Scenario, _decided
from dmn.interpreter.checker.values import ValueType
from dmn.interpreter.config_schema import AnyProperty, ObjectSchema
from dmn.interpreter.diagnostics import Code, Diagnostic, SourceSpan
from dmn.interpreter.expressions import Expr
from dmn.interpreter.loader import Plugin
from dmn.interpreter.source import Path, path_text
from dmn.opcodes.spec import OpcodeRegistry


@dataclass(slots=True)
class _Guard:
    expr: Expr | None
    path: Path  # absolute document path of the `when` scalar


@dataclass(slots=True)
class _PluginContext:
    plugin: Plugin
    registry: OpcodeRegistry
    config: Mapping[str, Any] | None
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
