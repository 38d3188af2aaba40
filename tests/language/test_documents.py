"""Document models and the configSchema subset."""

from __future__ import annotations

import pytest

from dmn.interpreter.config_schema import ObjectSchema, validate_config
from dmn.interpreter.diagnostics import Code
from dmn.interpreter.documents import HookProgram, NetworkPlugin, parse_document
from dmn.interpreter.loader import load_text

from .support import OPERATION, codes, load_plugin, variant

PROGRAM = """\
apiVersion: effects.dra-multi-network.schseba.github.io/v1alpha1
kind: HookProgram
hook: connect
effects:
  - id: make
    kind: t/make/v1
    inputs:
      parent: {from: call.inputs.parent}
      extra: [{from: call.inputs.a}, {from: call.inputs.b}]
    parameters: {ifName: x, up: false}
    forEach: {in: call.inputs.members, as: member}
    when: call.config.up
exports:
  interface: {from: effects.make.interface}
"""


def test_hook_program_round_trip_keeps_explicit_false() -> None:
    docs, diags = load_text(PROGRAM, "p.yaml")
    assert not diags
    model = docs[0][0]
    assert isinstance(model, HookProgram)
    effect = model.effects[0]
    assert effect.parameters == {"ifName": "x", "up": False}
    assert effect.parameter_bindings is None  # absent, not empty
    assert effect.for_each is not None and effect.for_each.as_ == "member"
    assert isinstance(effect.inputs, dict) and isinstance(effect.inputs["extra"], list)
    dumped = model.model_dump(by_alias=True, exclude_unset=True)
    assert dumped["effects"][0]["parameters"]["up"] is False
    assert "parameterBindings" not in dumped["effects"][0]


@pytest.mark.parametrize(
    ("old", "new", "code", "line", "column"),
    [
        ("hook: connect", "hook: remove", Code.E_SCHEMA, 3, 7),
        (
            "    when: call.config.up\n",
            "    when: call.config.up\n    retries: 2\n",
            Code.E_UNKNOWN_FIELD,
            13,
            5,
        ),
        ("  - id: make", "  - id: Make_1", Code.E_SCHEMA, 5, 9),
        ("parent: {from: call.inputs.parent}", "parent: {from: 3}", Code.E_SCHEMA, 8, 22),
        ("parent: {from: call.inputs.parent}", "parent: {form: x}", Code.E_UNKNOWN_FIELD, 8, 16),
        ("kind: HookProgram", "kind: Program", Code.E_SCHEMA, 2, 7),
    ],
)
def test_program_shape_errors_point_at_the_field(
    old: str, new: str, code: Code, line: int, column: int
) -> None:
    _, diags = load_text(PROGRAM.replace(old, new, 1), "p.yaml")
    assert code in {d.code for d in diags}, [d.render() for d in diags]
    hit = next(d for d in diags if d.code is code)
    assert (hit.file, hit.line, hit.column) == ("p.yaml", line, column)


def test_missing_required_field_points_at_the_parent() -> None:
    _, diags = load_text(PROGRAM.replace("    kind: t/make/v1\n", ""), "p.yaml")
    assert [(d.code, d.path, d.line) for d in diags] == [(Code.E_SCHEMA, "effects[0].kind", 5)]


def test_network_plugin_parses_and_rejects_unknown_spec_fields() -> None:
    plugin, diags = load_plugin(OPERATION)
    assert plugin is not None and not diags
    assert isinstance(plugin.descriptor, NetworkPlugin)
    assert plugin.name == "op" and list(plugin.programs) == ["connect"]
    bad = variant(OPERATION, "  contractVersion: v1\n", "  contractVersion: v1\n  mystery: 1\n")
    _, diags = load_plugin(bad)
    assert codes(diags) == {"E_UNKNOWN_FIELD"}
    assert diags[0].path == "spec.mystery"


@pytest.mark.parametrize(
    ("old", "new"),
    [
        ("  implementation: {type: EffectProgram}", "  implementation: {type: Builtin}"),
        (
            "  implementation: {type: EffectProgram}",
            "  implementation: {type: EffectProgram, handler: x}",
        ),
        ("additionalProperties: false\n    required", "additionalProperties: true\n    required"),
        ("    required: [ifName, vlanId, up]", "    required: [ifName, vlanId, up, nope]"),
        ("ifName: {type: string, minLength: 1", "ifName: {type: str, minLength: 1"),
        ("{type: integer, minimum: 1, maximum: 4094}", "{type: integer, minimum: 5, maximum: 4}"),
        ("access: CreateChild}", "access: []}"),
        ("    remove: {undo: connect}", "    remove: {undo: prepare}"),
        ("stepKinds: [Operation]", "stepKinds: []"),
    ],
)
def test_descriptor_shape_errors(old: str, new: str) -> None:
    _, diags = load_plugin(variant(OPERATION, old, new))
    assert diags and codes(diags) <= {"E_SCHEMA", "E_UNKNOWN_FIELD"}, [d.render() for d in diags]


def test_a_plugin_document_must_be_a_mapping() -> None:
    docs, diags = load_text("- 1\n- 2\n", "x.yaml")
    assert docs[0][0] is None and codes(diags) == {"E_SCHEMA"}
    assert parse_document(docs[0][1])[0] is None


SCHEMA = ObjectSchema.model_validate(
    {
        "type": "object",
        "additionalProperties": False,
        "required": ["mode", "up"],
        "properties": {
            "mode": {"type": "string", "enum": ["a", "b"]},
            "up": {"type": "boolean"},
            "mtu": {"type": "integer", "minimum": 576, "maximum": 9000, "default": 1500},
            "name": {"type": "string", "minLength": 1, "maxLength": 3, "pattern": "[a-z]+"},
            "tags": {"type": "array", "items": {"type": "integer"}, "maxItems": 2},
            "vids": {"type": "array", "items": {"type": "integer"}, "uniqueItems": True},
            "nested": {
                "type": "object",
                "additionalProperties": False,
                "properties": {"x": {"type": "boolean"}},
            },
        },
    }
)


def test_config_validation_keeps_false_and_fills_defaults_only_when_absent() -> None:
    value, diags = validate_config(SCHEMA, {"mode": "a", "up": False})
    assert not diags
    assert value == {"mode": "a", "up": False, "mtu": 1500}
    value, diags = validate_config(SCHEMA, {"mode": "a", "up": True, "mtu": 9000})
    assert value["mtu"] == 9000 and not diags


@pytest.mark.parametrize(
    ("config", "code", "path"),
    [
        ({"up": True}, Code.E_SCHEMA, "config.mode"),
        ({"mode": "c", "up": True}, Code.E_SCHEMA, "config.mode"),
        ({"mode": "a", "up": 1}, Code.E_SCHEMA, "config.up"),
        ({"mode": "a", "up": True, "mtu": "1500"}, Code.E_SCHEMA, "config.mtu"),
        ({"mode": "a", "up": True, "mtu": True}, Code.E_SCHEMA, "config.mtu"),
        ({"mode": "a", "up": True, "mtu": 100}, Code.E_SCHEMA, "config.mtu"),
        ({"mode": "a", "up": True, "name": "abcd"}, Code.E_SCHEMA, "config.name"),
        ({"mode": "a", "up": True, "name": "AB"}, Code.E_SCHEMA, "config.name"),
        ({"mode": "a", "up": True, "tags": [1, 2, 3]}, Code.E_SCHEMA, "config.tags"),
        ({"mode": "a", "up": True, "tags": ["x"]}, Code.E_SCHEMA, "config.tags[0]"),
        ({"mode": "a", "up": True, "vids": [7, 8, 7]}, Code.E_SCHEMA, "config.vids[2]"),
        ({"mode": "a", "up": True, "nested": {"y": 1}}, Code.E_UNKNOWN_FIELD, "config.nested.y"),
        ({"mode": "a", "up": True, "zzz": 1}, Code.E_UNKNOWN_FIELD, "config.zzz"),
    ],
)
def test_config_validation_errors(config: dict[str, object], code: Code, path: str) -> None:
    _, diags = validate_config(SCHEMA, config)
    assert [(d.code, d.path) for d in diags] == [(code, path)]


def test_unique_items_tells_booleans_from_integers() -> None:
    assert validate_config(SCHEMA, {"mode": "a", "up": True, "vids": [1, 2]})[1] == []
    assert validate_config(SCHEMA, {"mode": "a", "up": True, "tags": [1, 1]})[1] == []


def test_config_must_be_an_object() -> None:
    _, diags = validate_config(SCHEMA, ["x"])
    assert codes(diags) == {"E_SCHEMA"}
