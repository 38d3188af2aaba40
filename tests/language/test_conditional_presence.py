"""configSchema ``requiredWhen`` / ``forbiddenWhen``: conditional presence of config fields,
validated per config and proven by the checker for every effect that binds them."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from dmn.engine.binder import Call, bind_program
from dmn.engine.bound import BoundProgram
from dmn.interpreter.checker import check_plugin
from dmn.interpreter.config_schema import ObjectSchema, validate_config
from dmn.interpreter.diagnostics import Code
from dmn.vocabulary.handles import Handle, NamespaceIdentity, Scope
from dmn.vocabulary.terms import Access, HandleType, LinkType, ScopeKind

from .support import OPERATION, codes, load_plugin, plugin, registry, variant

SCHEMA = ObjectSchema.model_validate(
    {
        "type": "object",
        "additionalProperties": False,
        "required": ["mode"],
        "properties": {
            "mode": {"type": "string", "enum": ["kernel", "vfio"]},
            "ifName": {
                "type": "string",
                "requiredWhen": 'call.config.mode == "kernel"',
                "forbiddenWhen": 'call.config.mode == "vfio"',
            },
            "linkType": {
                "type": "string",
                "enum": ["ethernet", "infiniband"],
                "default": "ethernet",
                "forbiddenWhen": 'call.config.mode == "vfio"',
            },
            "pkey": {"type": "integer", "requiredWhen": 'call.config.linkType == "infiniband"'},
        },
    }
)


@pytest.mark.parametrize(
    ("config", "errors", "normalised"),
    [
        (
            {"mode": "kernel", "ifName": "n"},
            [],
            {"mode": "kernel", "ifName": "n", "linkType": "ethernet"},
        ),
        ({"mode": "kernel"}, [("config.ifName", "is required when")], None),
        ({"mode": "vfio"}, [], {"mode": "vfio"}),  # the forbidden default is not filled in
        ({"mode": "vfio", "ifName": "n"}, [("config.ifName", "must be absent")], None),
        ({"mode": "vfio", "linkType": "ethernet"}, [("config.linkType", "must be absent")], None),
        # guards read the defaulted config: linkType defaults to ethernet, so no pkey needed
        ({"mode": "kernel", "ifName": "n"}, [], None),
        (
            {"mode": "kernel", "ifName": "n", "linkType": "infiniband"},
            [("config.pkey", "is required when")],
            None,
        ),
    ],
)
def test_validation(
    config: dict[str, Any], errors: list[tuple[str, str]], normalised: dict[str, Any] | None
) -> None:
    out, diags = validate_config(SCHEMA, config)
    assert [d.code for d in diags] == [Code.E_SCHEMA] * len(errors)
    for d, (path, words) in zip(diags, errors, strict=True):
        assert d.path == path and words in d.message
    if normalised is not None:
        assert out == normalised


def test_nested_objects_do_not_apply_them() -> None:
    schema = ObjectSchema.model_validate(
        {
            "type": "object",
            "additionalProperties": False,
            "properties": {
                "inner": {
                    "type": "object",
                    "additionalProperties": False,
                    "properties": {"x": {"type": "integer", "requiredWhen": "true"}},
                }
            },
        }
    )
    assert validate_config(schema, {"inner": {}})[1] == []


# ----------------------------------------------------------------------------- checker

# An optional `tag` bound to make's required `vlanId`, with make guarded by `when`.
GUARDED = variant(
    variant(
        OPERATION,
        "      mtu: {type: integer, minimum: 576, maximum: 9000}\n",
        "      mtu: {type: integer, minimum: 576, maximum: 9000}\n"
        "      tagged: {type: boolean, default: false}\n"
        "      tag: {type: integer, minimum: 1, maximum: 4094}\n",
    ),
    "          kind: t/make/v1\n          inputs:\n            parent: {from: call.inputs.parent}\n"
    "          parameterBindings:\n            ifName: {from: call.config.ifName}\n"
    "            vlanId: {from: call.config.vlanId}\n",
    "          kind: t/make/v1\n          when: call.config.tagged\n"
    "          inputs:\n            parent: {from: call.inputs.parent}\n"
    "          parameterBindings:\n            ifName: {from: call.config.ifName}\n"
    "            vlanId: {from: call.config.tag}\n",
)
TAG = "      tag: {type: integer, minimum: 1, maximum: 4094}\n"


def with_tag(extra: str) -> str:
    return variant(
        GUARDED, TAG, f"      tag: {{type: integer, minimum: 1, maximum: 4094, {extra}}}\n"
    )


def checked(text: str, config: dict[str, Any] | None = None) -> list[Any]:
    """Check ``text`` with make's output, and tune, on the same guard as make."""
    text = variant(
        text,
        "    interface: {type: KernelInterface/v1, linkType: ethernet, ownership: Created}\n",
        "    interface: {type: KernelInterface/v1, linkType: ethernet, ownership: Created,\n"
        "                when: call.config.tagged}\n",
    )
    text = variant(
        text,
        "          kind: t/tune/v1\n",
        "          kind: t/tune/v1\n          when: call.config.tagged\n",
    )
    return check_plugin(plugin(text), registry(), config)


def test_requiredwhen_proves_the_guarded_binding() -> None:
    # Without requiredWhen a guarded binding is left to bind time (nothing certain).
    assert checked(GUARDED) == []
    # requiredWhen covering the guard: proven present wherever make runs.
    assert checked(with_tag("requiredWhen: call.config.tagged")) == []
    # requiredWhen that does not cover the guard: the scenario where it fails is named.
    diags = checked(with_tag("requiredWhen: not call.config.tagged"))
    assert codes(diags) == {"E_PARAM_TYPE"}
    assert "tagged=True" in diags[0].message and "may be absent" in diags[0].message
    assert diags[0].path == "spec.hooks.connect.effects[0].parameterBindings.vlanId.from"
    # forbiddenWhen where the effect runs: certain to fail even without requiredWhen.
    diags = checked(with_tag("forbiddenWhen: call.config.tagged"))
    assert codes(diags) == {"E_PARAM_TYPE"}


def test_a_concrete_config_is_held_to_requiredwhen() -> None:
    text = with_tag("requiredWhen: call.config.tagged")
    base = {"ifName": "v1", "vlanId": 5, "up": True}
    assert checked(text, {**base, "tagged": True, "tag": 7}) == []
    assert checked(text, {**base, "tagged": False}) == []
    diags = checked(text, {**base, "tagged": True})
    assert [(d.code, d.path) for d in diags] == [(Code.E_SCHEMA, "config.tag")]


@pytest.mark.parametrize(
    ("extra", "code"),
    [
        ("requiredWhen: 'call.config.tagged =='", "E_SYNTAX"),
        ("requiredWhen: call.config.nope", "E_REF_UNRESOLVED"),
        ("requiredWhen: call.inputs.parent", "E_REF_UNRESOLVED"),
        ("requiredWhen: call.config.tag", "E_GUARD_TYPE"),
        ("forbiddenWhen: 'call.config.ifName > 3'", "E_GUARD_TYPE"),
    ],
)
def test_presence_guards_are_checked_like_when(extra: str, code: str) -> None:
    diags = checked(with_tag(extra))
    assert codes(diags) == {code}, [d.render() for d in diags]
    assert all(d.file == "plugin.yaml" and d.line > 1 for d in diags)
    assert any("configSchema.properties.tag" in d.path for d in diags)


def test_guard_spans_point_inside_the_expression() -> None:
    text = with_tag("requiredWhen: 'call.config.tagged and call.config.nope'")
    diags = checked(text)
    assert codes(diags) == {"E_REF_UNRESOLVED"}
    line = text.splitlines()[diags[0].line - 1]
    assert "requiredWhen" in line
    assert line[diags[0].column - 1 :].startswith("call.config.nope")


@pytest.mark.parametrize(
    ("old", "new"),
    [
        # requiredWhen/forbiddenWhen on a field that `required` already lists
        (
            "      up: {type: boolean}\n",
            "      up: {type: boolean, requiredWhen: call.config.tagged}\n",
        ),
        (
            "      up: {type: boolean}\n",
            "      up: {type: boolean, forbiddenWhen: call.config.tagged}\n",
        ),
        # below the root: guards read top-level call.config fields only
        (
            "      up: {type: boolean}\n",
            "      up: {type: boolean}\n      extra:\n        type: object\n"
            "        additionalProperties: false\n"
            "        properties: {x: {type: integer, requiredWhen: call.config.tagged}}\n",
        ),
    ],
)
def test_misplaced_presence_guards_are_schema_errors(old: str, new: str) -> None:
    diags = checked(variant(GUARDED, old, new))
    assert codes(diags) == {"E_SCHEMA"}, [d.render() for d in diags]
    assert diags[0].line > 1


SANDBOX = Scope(ScopeKind.SANDBOX, NamespaceIdentity(7, 4026532000, "boot-1"))


def test_the_binder_validates_presence_before_binding() -> None:
    text = with_tag("requiredWhen: call.config.tagged")
    text = variant(
        text,
        "    interface: {type: KernelInterface/v1, linkType: ethernet, ownership: Created}\n",
        "    interface: {type: KernelInterface/v1, linkType: ethernet, ownership: Created,\n"
        "                when: call.config.tagged}\n",
    )
    text = variant(
        text,
        "          kind: t/tune/v1\n",
        "          kind: t/tune/v1\n          when: call.config.tagged\n",
    )
    parent = Handle(
        id="p",
        type=HandleType.KERNEL_INTERFACE,
        inventory_id="inv-p",
        scope=SANDBOX,
        accesses=frozenset({Access.CREATE_CHILD, Access.READ}),
        link_type=LinkType.ETHERNET,
    )
    base = {"ifName": "v1", "vlanId": 5, "up": True, "tagged": True}
    call = Call(config={**base, "tag": 9}, inputs={"parent": (parent,)}, sandbox=SANDBOX)
    bound = bind_program(plugin(text), "connect", call, registry())
    assert isinstance(bound, BoundProgram)
    assert bound.effects[0].parameters["vlanId"] == 9
    call = Call(config=base, inputs={"parent": (parent,)}, sandbox=SANDBOX)
    result = bind_program(plugin(text), "connect", call, registry())
    assert isinstance(result, list)
    assert [(d.code, d.path) for d in result] == [(Code.E_SCHEMA, "config.tag")]


GUARD_TOKENS = [
    "call.config.tagged", "call.config.tag", "call.config.mode", "call.config.nope",
    "call.inputs.parent", "==", "!=", ">", "and", "or", "not", "(", ")", "1", '"x"', "true",
    "null", "[1, 2]", "in",
]  # fmt: skip


@pytest.mark.property
@settings(max_examples=300, deadline=None, database=None)
@given(
    st.sampled_from(["requiredWhen", "forbiddenWhen"]),
    st.lists(st.sampled_from(GUARD_TOKENS), max_size=7),
    st.dictionaries(
        st.sampled_from(["ifName", "vlanId", "up", "tagged", "tag", "x"]),
        st.none() | st.booleans() | st.integers(-2, 5000) | st.text(max_size=4),
        max_size=5,
    ),
)
def test_arbitrary_presence_guards_and_configs_never_raise(
    key: str, tokens: list[str], config: dict[str, Any]
) -> None:
    guard = " ".join(tokens).replace("'", "''")
    text = with_tag(f"{key}: '{guard}'")
    loaded, diags = load_plugin(text)  # an empty guard is a document error
    assert all(d.line >= 1 and d.column >= 1 for d in diags)
    if loaded is None or diags:
        return
    for found in (checked(text), checked(text, config)):
        assert all(d.line >= 1 and d.column >= 1 for d in found)
    _, problems = validate_config(loaded.descriptor.spec.config_schema, config)
    # config validation also applies the one interface-name rule (dmn.vocabulary.ifname)
    assert all(d.code in (Code.E_SCHEMA, Code.E_UNKNOWN_FIELD, Code.E_IFNAME) for d in problems)


def test_scenarios_no_valid_config_has_are_not_enumerated() -> None:
    """tune runs when tagged and reads make's output; make runs when flag is set. With
    ``flag`` required when tagged, "tagged and flag absent" is no valid config, so the
    reference always resolves; without requiredWhen that scenario is a real error."""
    present = "'call.config.flag == true or call.config.flag == false'"
    text = variant(
        OPERATION,
        "      mtu: {type: integer, minimum: 576, maximum: 9000}\n",
        "      mtu: {type: integer, minimum: 576, maximum: 9000}\n"
        "      tagged: {type: boolean, default: false}\n"
        "      flag: {type: boolean, requiredWhen: call.config.tagged}\n",
    )
    text = variant(text, "ownership: Created}", f"ownership: Created, when: {present}}}")
    text = variant(
        text,
        "          kind: t/make/v1\n",
        f"          kind: t/make/v1\n          when: {present}\n",
    )
    text = variant(
        text,
        "          kind: t/tune/v1\n",
        "          kind: t/tune/v1\n          when: call.config.tagged\n",
    )
    assert check_plugin(plugin(text), registry()) == []
    loose = text.replace(", requiredWhen: call.config.tagged}", "}")
    diags = check_plugin(plugin(loose), registry())
    assert codes(diags) == {"E_REF_UNRESOLVED"} and "tagged=True" in diags[0].message


def test_a_schema_no_config_can_satisfy_is_an_error() -> None:
    text = variant(
        OPERATION,
        "      mtu: {type: integer, minimum: 576, maximum: 9000}\n",
        "      mtu: {type: integer, minimum: 576, maximum: 9000}\n"
        "      m:\n        type: string\n        enum: [a, b]\n"
        "        requiredWhen: call.config.m == null\n"
        "        forbiddenWhen: call.config.m != null\n",
    )
    diags = check_plugin(plugin(text), registry())
    assert [(d.code, d.path) for d in diags] == [(Code.E_SCHEMA, "spec.configSchema")]
    assert "no config satisfies" in diags[0].message
