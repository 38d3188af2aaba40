"""The checker: every rule and reason code, against small specs the test controls."""

from __future__ import annotations

import pytest

from dmn.interpreter.checker import check_plugin, check_program
from dmn.interpreter.diagnostics import Code

from .support import ALLOCATION, OPERATION, codes, plugin, registry, variant

MAKE_BINDINGS = """\
          parameterBindings:
            ifName: {from: call.config.ifName}
            vlanId: {from: call.config.vlanId}
"""
TUNE = """\
        - id: tune
          kind: t/tune/v1
          inputs: {interface: {from: effects.make.interface}}
          parameterBindings: {up: {from: call.config.up}}
"""
EXPORTS = "      exports:\n        interface: {from: effects.make.interface}\n"


def with_effect(text: str) -> str:
    """OPERATION with an extra effect appended after tune."""
    return variant(OPERATION, EXPORTS, text + EXPORTS)


def test_fixtures_are_clean() -> None:
    assert check_plugin(plugin(OPERATION), registry()) == []
    assert check_plugin(plugin(ALLOCATION), registry()) == []
    for mode in ("kernel", "vfio"):
        assert check_plugin(plugin(ALLOCATION), registry(), {"mode": mode}) == []


CASES: list[tuple[str, str, str, str]] = [
    # (name, old, new, expected code)
    ("unknown opcode", "kind: t/tune/v1", "kind: t/nope/v1", "E_UNKNOWN_OPCODE"),
    (
        "opcode not allowed",
        "[t/make/v1, t/tune/v1, t/join/v1, t/ib/v1]",
        "[t/make/v1, t/join/v1]",
        "E_EFFECT_DENIED",
    ),
    (
        "unknown allowed opcode",
        "[t/make/v1, t/tune/v1, t/join/v1, t/ib/v1]",
        "[t/make/v1, t/tune/v1, t/what/v1]",
        "E_UNKNOWN_OPCODE",
    ),
    (
        "unknown input port",
        "{from: call.inputs.parent}",
        "{from: call.inputs.lower}",
        "E_REF_UNRESOLVED",
    ),
    (
        "unknown effect",
        "{interface: {from: effects.make.interface}}",
        "{interface: {from: effects.mk.interface}}",
        "E_REF_UNRESOLVED",
    ),
    (
        "unknown output",
        "{interface: {from: effects.make.interface}}",
        "{interface: {from: effects.make.iface}}",
        "E_REF_UNRESOLVED",
    ),
    (
        "allocation in connect",
        "{from: call.inputs.parent}",
        "{from: call.allocation}",
        "E_REF_UNRESOLVED",
    ),
    (
        "prepared without prepare",
        "{from: call.inputs.parent}",
        "{from: call.prepared.parent}",
        "E_REF_UNRESOLVED",
    ),
    (
        "sandbox is not a handle",
        "{from: call.inputs.parent}",
        "{from: call.sandbox}",
        "E_PORT_TYPE",
    ),
    (
        "config is not a handle",
        "{from: call.inputs.parent}",
        "{from: call.config.ifName}",
        "E_PORT_TYPE",
    ),
    ("stray variable", "{from: call.inputs.parent}", "{from: member}", "E_REF_UNRESOLVED"),
    (
        "unknown config field",
        "ifName: {from: call.config.ifName}",
        "ifName: {from: call.config.name}",
        "E_REF_UNRESOLVED",
    ),
    ("syntax", "{from: call.inputs.parent}", "{from: 'call.inputs.parent =='}", "E_SYNTAX"),
    (
        "binding a handle",
        "ifName: {from: call.config.ifName}",
        "ifName: {from: call.inputs.parent}",
        "E_PARAM_TYPE",
    ),
    (
        "wrong port type",
        "parent: {type: KernelInterface/v1, linkType: ethernet",
        "parent: {type: RdmaDevice/v1",
        "E_PORT_TYPE",
    ),
    (
        "wrong link type",
        "parent: {type: KernelInterface/v1, linkType: ethernet",
        "parent: {type: KernelInterface/v1, linkType: infiniband",
        "E_PORT_TYPE",
    ),
    (
        "too many",
        "linkType: ethernet, access: CreateChild}",
        "linkType: ethernet, maxItems: 3, access: CreateChild}",
        "E_CARDINALITY",
    ),
    ("missing access", "access: CreateChild}", "access: Read}", "E_ACCESS"),
    (
        "param range",
        "vlanId: {type: integer, minimum: 1, maximum: 4094}",
        "vlanId: {type: integer, minimum: 0, maximum: 4094}",
        "E_PARAM_TYPE",
    ),
    (
        "param type",
        "vlanId: {type: integer, minimum: 1, maximum: 4094}",
        "vlanId: {type: string, minLength: 1, maxLength: 4}",
        "E_PARAM_TYPE",
    ),
    (
        "unknown parameter",
        "parameterBindings: {up: {from: call.config.up}}",
        "parameterBindings: {down: {from: call.config.up}}",
        "E_UNKNOWN_FIELD",
    ),
    (
        "conflict",
        "parameterBindings: {up: {from: call.config.up}}",
        "parameters: {up: true}\n          parameterBindings: {up: {from: call.config.up}}",
        "E_PARAM_CONFLICT",
    ),
    (
        "ifName literal",
        MAKE_BINDINGS,
        "          parameters: {ifName: 'a b'}\n          parameterBindings:\n"
        "            vlanId: {from: call.config.vlanId}\n",
        "E_IFNAME",
    ),
    (
        "ifName too long in schema",
        "ifName: {type: string, minLength: 1, maxLength: 15}",
        "ifName: {type: string, minLength: 1, maxLength: 16}",
        "E_IFNAME",
    ),
    (
        "ifName enum",
        "ifName: {type: string, minLength: 1, maxLength: 15}",
        "ifName: {type: string, minLength: 1, maxLength: 15, enum: [a, ..]}",
        "E_IFNAME",
    ),
    (
        "predicate",
        "requires: [{kind: same-sandbox}]",
        "requires: [{kind: host-scope}]",
        "E_PREDICATE",
    ),
    (
        "postcondition",
        "postconditions: [{kind: made}]",
        "postconditions: [{kind: gone}]",
        "E_PREDICATE",
    ),
    (
        "recovery unsupported",
        "postconditions: [{kind: made}]",
        "postconditions: [{kind: made}]\n          recovery: {strategy: Rediscover}",
        "E_NO_RECOVERY",
    ),
    ("no cleanup", "    remove: {undo: connect}\n", "", "E_NO_RECOVERY"),
    ("export missing", EXPORTS, "", "E_EXPORT_MISSING"),
    (
        "export undeclared",
        "        interface: {from: effects.make.interface}\n",
        "        interface: {from: effects.make.interface}\n"
        "        x: {from: effects.make.interface}\n",
        "E_EXPORT_UNDECLARED",
    ),
    (
        "export type",
        "interface: {type: KernelInterface/v1, linkType: ethernet, ownership",
        "interface: {type: HostRepresentor/v1, ownership",
        "E_EXPORT_TYPE",
    ),
    (
        "export cardinality",
        "linkType: ethernet, ownership: Created}",
        "linkType: ethernet, minItems: 2, maxItems: 2, ownership: Created}",
        "E_CARDINALITY",
    ),
    (
        "guard type",
        "          kind: t/tune/v1\n",
        "          kind: t/tune/v1\n          when: call.config.vlanId\n",
        "E_GUARD_TYPE",
    ),
    (
        "guard compares types",
        "          kind: t/tune/v1\n",
        "          kind: t/tune/v1\n          when: 'call.config.up == 1'\n",
        "E_GUARD_TYPE",
    ),
    (
        "guard orders strings",
        "          kind: t/tune/v1\n",
        "          kind: t/tune/v1\n          when: 'call.config.ifName > 1'\n",
        "E_GUARD_TYPE",
    ),
    (
        "guard reads a handle",
        "          kind: t/tune/v1\n",
        "          kind: t/tune/v1\n          when: 'call.inputs.parent == 1'\n",
        "E_REF_UNRESOLVED",
    ),
    (
        "guard syntax",
        "          kind: t/tune/v1\n",
        "          kind: t/tune/v1\n          when: 'call.config.up and'\n",
        "E_SYNTAX",
    ),
    (
        "prepare in an Operation plugin",
        "  hooks:\n",
        "  hooks:\n    prepare: {effects: []}\n    unprepare: {undo: prepare}\n",
        "E_WRONG_HOOK",
    ),
    ("opcode not legal in hook", "kind: t/tune/v1", "kind: t/reset/v1", "E_WRONG_HOOK"),
    (
        "allocation ports on an Operation",
        "  inputs:\n",
        "  allocation:\n    f: {type: PciFunction/v1, access: Read}\n  inputs:\n",
        "E_SCHEMA",
    ),
]


@pytest.mark.parametrize(("name", "old", "new", "code"), CASES, ids=[c[0] for c in CASES])
def test_each_rule_reports_exactly_its_code(name: str, old: str, new: str, code: str) -> None:
    text = variant(OPERATION, old, new)
    diags = check_plugin(plugin(text), registry())
    got = codes(diags)
    if code == "E_WRONG_HOOK" and "reset" in new:
        # t/reset/v1 also takes a PCI function; the hook error must be among them.
        assert code in got, [d.render() for d in diags]
        return
    assert got == {code}, [d.render() for d in diags]
    assert all(d.file == "plugin.yaml" and d.line > 1 for d in diags), [d.render() for d in diags]


def test_forward_reference_and_duplicate_ids() -> None:
    text = variant(OPERATION, "        - id: make\n", TUNE + "        - id: make\n")
    text = "".join(text.rsplit(TUNE, 1))
    diags = check_plugin(plugin(text), registry())
    assert codes(diags) == {"E_REF_FORWARD"}
    assert diags[0].path == "spec.hooks.connect.effects[0].inputs.interface.from"
    dup = with_effect(TUNE)
    diags = check_plugin(plugin(dup), registry())
    assert [(d.code.value, d.path) for d in diags] == [
        ("E_DUPLICATE_ID", "spec.hooks.connect.effects[2].id")
    ]


def test_self_reference_is_forward() -> None:
    text = variant(
        OPERATION,
        "{interface: {from: effects.make.interface}}",
        "{interface: {from: effects.tune.interface}}",
    )
    assert codes(check_plugin(plugin(text), registry())) == {"E_REF_FORWARD"}


def test_shared_parent_grant_cannot_be_configured() -> None:
    text = with_effect(
        "        - id: bad\n          kind: t/tune/v1\n"
        "          inputs: {interface: {from: call.inputs.parent}}\n"
        "          parameters: {mtu: 1500}\n"
    )
    diags = check_plugin(plugin(text), registry())
    assert codes(diags) == {"E_SHARED_PARENT_MUTATION"}
    assert diags[0].path == "spec.hooks.connect.effects[2].inputs.interface.from"


def test_outputs_carry_grants_and_inherited_accesses() -> None:
    # make's output grants ExclusiveMaster; tune's output inherits it; join may use both.
    members = "    members: {type: KernelInterface/v1, linkType: ethernet, minItems: 2, maxItems: 8, access: AttachMember}\n"  # noqa: E501
    text = variant(OPERATION, "  inputs:\n", "  inputs:\n" + members)
    text = variant(
        text,
        EXPORTS,
        "        - id: join\n          kind: t/join/v1\n"
        "          forEach: {in: call.inputs.members, as: m}\n"
        "          inputs:\n            master: {from: effects.tune.interface}\n"
        "            member: {from: m}\n" + EXPORTS,
    )
    assert check_plugin(plugin(text), registry()) == []
    # An indexed member is one handle, too.
    one = text.replace("member: {from: m}", "member: {from: 'call.inputs.members[1]'}")
    assert check_plugin(plugin(one), registry()) == []
    # Index 2 may be absent (minItems 2), index 8 is out of range.
    for index in (2, 8):
        bad = text.replace("member: {from: m}", f"member: {{from: 'call.inputs.members[{index}]'}}")
        assert codes(check_plugin(plugin(bad), registry())) == {"E_CARDINALITY"}
    # forEach over a single handle is a cardinality error.
    bad = text.replace("forEach: {in: call.inputs.members", "forEach: {in: call.inputs.parent")
    assert "E_CARDINALITY" in codes(check_plugin(plugin(bad), registry()))
    # Members grant AttachMember, not ExclusiveMaster.
    bad = text.replace("master: {from: effects.tune.interface}", "master: {from: m}")
    assert codes(check_plugin(plugin(bad), registry())) == {"E_ACCESS"}


def test_budget_counts_expanded_effects() -> None:
    members = "    members: {type: KernelInterface/v1, minItems: 1, maxItems: 254, access: ExclusiveConfigure}\n"  # noqa: E501
    text = variant(OPERATION, "  inputs:\n", "  inputs:\n" + members)
    each = (
        "        - id: each\n          kind: t/tune/v1\n"
        "          forEach: {in: call.inputs.members, as: m}\n"
        "          inputs: {interface: {from: m}}\n          parameters: {up: true}\n"
    )
    assert check_plugin(plugin(variant(text, EXPORTS, each + EXPORTS)), registry()) == []
    over = variant(text.replace("maxItems: 254", "maxItems: 256"), EXPORTS, each + EXPORTS)
    diags = check_plugin(plugin(over), registry())
    assert codes(diags) == {"E_BUDGET"}
    assert "258" in diags[0].message


def test_optional_config_bound_to_required_parameter() -> None:
    text = variant(
        OPERATION, "vlanId: {from: call.config.vlanId}", "vlanId: {from: call.config.mtu}"
    )
    diags = check_plugin(plugin(text), registry())
    assert "E_PARAM_TYPE" in codes(diags)
    # Guarded by `when`, the effect is only bound when the config decides so.
    guarded = variant(
        text,
        "        - id: make\n          kind: t/make/v1\n",
        "        - id: make\n          kind: t/make/v1\n          when: call.config.up\n",
    )
    assert "required but" not in " ".join(
        d.message for d in check_plugin(plugin(guarded), registry())
    )


def test_irreversible_opcode_needs_a_recovery_strategy() -> None:
    text = variant(ALLOCATION, "          recovery: {strategy: Quarantine}\n", "")
    diags = check_plugin(plugin(text), registry())
    assert codes(diags) == {"E_NO_RECOVERY"}
    assert "irreversible" in diags[0].message


def test_conditional_outputs_are_checked_for_every_config() -> None:
    # The kernel-only interface exported unconditionally from prepare is fine, but an
    # unguarded connect effect that reads it breaks in vfio mode.
    text = variant(
        ALLOCATION,
        "          when: 'call.config.mode == \"kernel\"'\n"
        "          inputs: {interface: {from: call.prepared.interface}}",
        "          inputs: {interface: {from: call.prepared.interface}}",
    )
    diags = check_plugin(plugin(text), registry())
    assert codes(diags) == {"E_REF_UNRESOLVED", "E_EXPORT_UNDECLARED"}
    assert any("mode='vfio'" in d.message for d in diags)
    # With a config, only that config is decided.
    assert check_plugin(plugin(text), registry(), {"mode": "kernel"}) == []
    # An output that is on but whose effect does not run.
    text = variant(
        ALLOCATION,
        "when: 'call.config.mode == \"kernel\"'\n"
        "          inputs: {interface: {from: call.prepared",
        "when: 'call.config.reset'\n          inputs: {interface: {from: call.prepared",
    )
    assert "E_EXPORT_MISSING" in codes(check_plugin(plugin(text), registry()))


def test_guard_against_an_enum_value_that_cannot_occur() -> None:
    text = variant(
        ALLOCATION,
        "when: 'call.config.mode == \"kernel\"'\n          inputs",
        "when: 'call.config.mode == \"kernal\"'\n          inputs",
    )
    diags = check_plugin(plugin(text), registry())
    assert "E_GUARD_TYPE" in codes(diags)


def test_config_given_to_the_checker_is_validated() -> None:
    diags = check_plugin(plugin(ALLOCATION), registry(), {"mode": "other", "extra": 1})
    assert {(d.code.value, d.path) for d in diags} == {
        ("E_SCHEMA", "config.mode"),
        ("E_UNKNOWN_FIELD", "config.extra"),
    }
    diags = check_plugin(plugin(OPERATION), registry(), {"ifName": "a/b", "vlanId": 1, "up": True})
    assert [(d.code.value, d.path) for d in diags] == [("E_IFNAME", "config.ifName")]


def test_check_program_checks_one_hook_with_prepare_exports_in_scope() -> None:
    p = plugin(ALLOCATION)
    assert check_program(p, "connect", registry()) == []
    assert check_program(p, "prepare", registry()) == []
    bad = plugin(variant(ALLOCATION, "call.prepared.interface", "call.prepared.iface"))
    assert codes(check_program(bad, "connect", registry())) == {"E_REF_UNRESOLVED"}
    assert codes(check_program(bad, "prepare", registry())) == set()
    assert codes(check_program(plugin(OPERATION), "prepare", registry())) == {"E_SCHEMA"}


def test_all_errors_are_reported_not_just_the_first() -> None:
    text = variant(OPERATION, "kind: t/tune/v1", "kind: t/nope/v1")
    text = variant(text, "{from: call.inputs.parent}", "{from: call.inputs.lower}")
    text = variant(text, "requires: [{kind: same-sandbox}]", "requires: [{kind: x}]")
    assert codes(check_plugin(plugin(text), registry())) == {
        "E_UNKNOWN_OPCODE",
        "E_REF_UNRESOLVED",
        "E_PREDICATE",
    }


def test_reason_codes_are_distinct() -> None:
    values = [c.value for c in Code]
    assert len(values) == len(set(values))
    assert all(v == name for name, v in Code.__members__.items() for _ in [0] if v == name)


def test_diagnostics_point_inside_expressions() -> None:
    text = variant(
        OPERATION,
        "          kind: t/tune/v1\n",
        "          kind: t/tune/v1\n          when: 'call.config.up and call.config.nope'\n",
    )
    (diag,) = check_plugin(plugin(text), registry())
    line = text.splitlines()[diag.line - 1]
    assert diag.code.value == "E_REF_UNRESOLVED"
    assert line[diag.column - 1 :].startswith("call.config.nope")
    assert diag.path == "spec.hooks.connect.effects[1].when"
    text = variant(OPERATION, "{from: call.inputs.parent}", "{from: 'call.inputs.parent[7]'}")
    (diag,) = check_plugin(plugin(text), registry())
    line = text.splitlines()[diag.line - 1]
    assert diag.code.value == "E_CARDINALITY"
    assert line[diag.column - 1 :].startswith("call.inputs.parent[7]")


def test_every_error_is_reported_not_just_the_first() -> None:
    # Five independent mistakes in one plugin: all five come back, each at its own place.
    text = variant(OPERATION, "kind: t/tune/v1", "kind: t/nope/v1")
    text = variant(text, "{from: call.inputs.parent}", "{from: call.inputs.lower}")
    text = variant(text, "vlanId: {from: call.config.vlanId}", "vlanId: {from: call.config.vid}")
    text = variant(text, "requires: [{kind: same-sandbox}]", "requires: [{kind: teleport}]")
    text = variant(text, EXPORTS, EXPORTS + "        extra: {from: effects.make.interface}\n")
    diags = check_plugin(plugin(text), registry())
    assert sorted(d.code.value for d in diags) == [
        "E_EXPORT_UNDECLARED",
        "E_PREDICATE",
        "E_REF_UNRESOLVED",
        "E_REF_UNRESOLVED",
        "E_UNKNOWN_OPCODE",
    ]
    assert len({(d.line, d.column) for d in diags}) == 5
    assert all(d.file == "plugin.yaml" and d.path.startswith("spec.") for d in diags)


@pytest.mark.parametrize(
    ("text", "settable", "message"),
    [
        (ALLOCATION, "[mode, reset]", None),
        (ALLOCATION, "[nope]", "no configSchema field"),
        (OPERATION, "[ifName]", "only an Allocation plugin"),
    ],
)
def test_workload_settable_names_scalar_fields_of_an_allocation_plugin(
    text: str, settable: str, message: str | None
) -> None:
    """What a workload may set is declared by the plugin and checked: a top-level scalar
    field of an Allocation plugin (its claim configures its own root step only)."""
    changed = variant(
        text, "  configSchema:\n", f"  workloadSettable: {settable}\n  configSchema:\n"
    )
    diags = check_plugin(plugin(changed), registry())
    if message is None:
        assert diags == [], [d.render() for d in diags]
        return
    assert codes(diags) == {"E_SCHEMA"} and message in diags[0].message, [d.render() for d in diags]
    assert diags[0].path.startswith("spec.workloadSettable") and diags[0].line > 1
