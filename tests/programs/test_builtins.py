"""The builtin plugins (``programs/<plugin>/v1``) load with the real loader, check clean with
the real checker against the default opcode registry, and say what design §6 says."""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import pytest

from dmn.engine.config_plan import ConfigPlan, plan_for_config
from dmn.interpreter.checker import check_plugin
from dmn.interpreter.config_schema import validate_config
from dmn.interpreter.diagnostics import Code
from dmn.interpreter.documents import Effect
from dmn.interpreter.loader import Plugin, load_plugin_dir, load_plugins
from dmn.opcodes.registry import default_registry
from dmn.programs import PROGRAMS_DIR
from dmn.vocabulary.terms import Hook

ALLOCATION_ROOTS = {"host-cni", "sriov-cni", "macvlan-cni", "ipvlan-cni"}
OPERATIONS = {
    "bond-cni",
    "vlan-cni",
    "accelerated-bridge-cni",
    "accelerated-bridge-cni-uplink",
    "ovs-cni",
}
# Multus automatic mode (design §6.8): prepare only; Multus owns the sandbox's ADD and DEL
MULTUS_ROOTS = {"multus-cni", "multus-cni-shared"}
BUILTINS = sorted(ALLOCATION_ROOTS | OPERATIONS | MULTUS_ROOTS)
REGISTRY = default_registry()


@pytest.fixture(scope="module")
def plugins() -> dict[str, Plugin]:
    loaded, diagnostics = load_plugins(PROGRAMS_DIR)
    assert diagnostics == []
    return loaded


def _effects(plugin: Plugin, hook: str) -> list[Effect]:
    program = plugin.program(hook)
    return list(program.body.effects) if program is not None else []


def test_programs_dir_holds_exactly_the_builtins() -> None:
    dirs = sorted(p.parent.parent.name for p in PROGRAMS_DIR.glob("*/v1/plugin.yaml"))
    assert dirs == BUILTINS
    for name in BUILTINS:
        files = {p.name for p in (PROGRAMS_DIR / name / "v1").iterdir()}
        expected = {"plugin.yaml", "prepare.yaml"} if name in MULTUS_ROOTS else {"plugin.yaml"}
        if name not in MULTUS_ROOTS:
            expected.add("connect.yaml")
        if name in ALLOCATION_ROOTS:
            expected.add("prepare.yaml")
        assert files == expected, name


@pytest.mark.parametrize("name", BUILTINS)
def test_builtin_checks_clean(name: str, plugins: dict[str, Plugin]) -> None:
    diagnostics = check_plugin(plugins[name], REGISTRY)
    assert [f"{d.code}: {d.path}: {d.message}" for d in diagnostics] == []


@pytest.mark.parametrize("name", BUILTINS)
def test_descriptor_identity_and_cleanup(name: str, plugins: dict[str, Plugin]) -> None:
    plugin = plugins[name]
    spec = plugin.descriptor.spec
    assert plugin.descriptor.metadata.name == name
    assert spec.implementation.type == "Builtin" and spec.implementation.handler == name
    assert spec.contract_version == "v1"
    assert spec.state_contract.cleanup == "RecordedEffects"
    hooks = spec.hooks
    assert hooks is not None
    # plugin.yaml carries only the cleanup entries; the programs are the sibling files
    assert hooks.prepare is None and hooks.connect is None
    if name in MULTUS_ROOTS:
        assert spec.step_kinds == ["Allocation"] and hooks.remove is None
        assert hooks.unprepare is not None and hooks.unprepare.undo == "prepare"
        assert plugin.program("prepare") is not None and plugin.program("connect") is None
        return
    assert hooks.remove is not None and hooks.remove.undo == "connect"
    if name in ALLOCATION_ROOTS:
        assert spec.step_kinds == ["Allocation"]
        assert hooks.unprepare is not None and hooks.unprepare.undo == "prepare"
        assert spec.allocation and not spec.inputs
        assert plugin.program("prepare") is not None
    else:
        assert spec.step_kinds == ["Operation"]
        assert hooks.unprepare is None and spec.allocation is None and spec.inputs
        assert plugin.program("prepare") is None
    assert plugin.program("connect") is not None


@pytest.mark.parametrize("name", BUILTINS)
def test_effects_are_registered_allowed_and_legal(name: str, plugins: dict[str, Plugin]) -> None:
    plugin = plugins[name]
    allowed = set(plugin.descriptor.spec.allowed_effects)
    used: set[str] = set()
    for hook in ("prepare", "connect"):
        for effect in _effects(plugin, hook):
            spec = REGISTRY.get(effect.kind)
            assert spec is not None, effect.kind
            assert effect.kind in allowed
            assert Hook(hook) in spec.hooks, (hook, effect.kind)
            assert effect.recovery is not None, f"{effect.id} declares its recovery strategy"
            assert effect.recovery.strategy in spec.recovery
            used.add(effect.kind)
    # least privilege: a builtin is granted exactly the opcodes its programs use
    assert allowed == used


def _outputs(plugin: Plugin, config: dict[str, Any]) -> set[str]:
    assert check_plugin(plugin, REGISTRY, config=config) == []
    plan = plan_for_config(plugin, config)
    assert isinstance(plan, ConfigPlan), plan
    return set(plan.outputs)


KERNEL = {"mode": "kernel", "ifName": "net1", "mtu": 1500, "up": True}


@pytest.mark.parametrize("name", ["host-cni", "sriov-cni"])
def test_mode_dependent_ports(name: str, plugins: dict[str, Plugin]) -> None:
    plugin = plugins[name]
    assert _outputs(plugin, KERNEL) == {"interface"}
    # IPoIB is its own port: Ethernet-only consumers (vlan, bond) can never take it
    assert _outputs(plugin, {**KERNEL, "linkType": "infiniband"}) == {"ibInterface"}
    assert _outputs(plugin, {**KERNEL, "linkType": "infiniband", "rdmaAccess": True}) == {
        "ibInterface",
        "rdma",
    }
    assert _outputs(plugin, {**KERNEL, "rdmaAccess": True}) == {"interface", "rdma"}
    assert _outputs(plugin, {"mode": "vfio"}) == {"device"}
    assert _outputs(plugin, {"mode": "vfio", "accessBackend": "cdev"}) == {"device"}


@pytest.mark.parametrize("name", ["host-cni", "sriov-cni"])
@pytest.mark.parametrize(
    ("config", "field"),
    [
        ({"mode": "vfio", "ifName": "net1"}, "ifName"),
        ({"mode": "vfio", "mtu": 1500}, "mtu"),
        ({"mode": "vfio", "up": True}, "up"),
        ({"mode": "vfio", "rdmaAccess": True}, "rdmaAccess"),
        ({"mode": "vfio", "linkType": "ethernet"}, "linkType"),
        ({"mode": "vfio", "ipoibMode": "connected"}, "ipoibMode"),
        ({**KERNEL, "accessBackend": "cdev"}, "accessBackend"),
        ({**KERNEL, "resetOnPrepare": True}, "resetOnPrepare"),
    ],
)
def test_each_mode_rejects_the_other_modes_config(
    name: str, config: dict[str, Any], field: str, plugins: dict[str, Plugin]
) -> None:
    """Design §6.1: VFIO configs reject interface config (ifName, MTU, up state) and
    carry no Ethernet/IPoIB/RDMA settings; kernel configs carry no VFIO settings."""
    diagnostics = check_plugin(plugins[name], REGISTRY, config=config)
    assert [(d.code, d.path) for d in diagnostics] == [(Code.E_SCHEMA, f"config.{field}")]
    assert "must be absent" in diagnostics[0].message
    # and the defaults of the other mode are not filled in
    normalised, _ = validate_config(plugins[name].descriptor.spec.config_schema, config)
    if config["mode"] == "vfio":
        assert not {"linkType", "rdmaAccess", "ipoibMode"} & normalised.keys()
    else:
        assert not {"accessBackend", "resetOnPrepare"} & normalised.keys()


def test_sriov_switchdev_exports_the_representor(plugins: dict[str, Plugin]) -> None:
    plugin = plugins["sriov-cni"]
    assert _outputs(plugin, {**KERNEL, "representor": True}) == {"interface", "representor"}
    assert _outputs(plugin, {"mode": "vfio", "representor": True}) == {"device", "representor"}


@pytest.mark.parametrize("name", ["host-cni", "sriov-cni"])
def test_vfio_never_moves_a_netdevice(name: str, plugins: dict[str, Plugin]) -> None:
    prepare = {e.id: e for e in _effects(plugins[name], "prepare")}
    assert prepare["bind"].kind == "pci/driver-bind/v1"
    assert prepare["bind"].when == 'call.config.mode == "vfio"'
    connect = {e.id: e for e in _effects(plugins[name], "connect")}
    assert connect["vfio-access"].when == 'call.config.mode == "vfio"'
    for effect in connect.values():
        if effect.kind.startswith(("linux/", "ib/", "rdma/")):
            assert effect.when is not None and 'call.config.mode == "kernel"' in effect.when


@pytest.mark.parametrize(("name", "mode"), [("macvlan-cni", "bridge"), ("ipvlan-cni", "l2")])
def test_shared_parent_roots(name: str, mode: str, plugins: dict[str, Plugin]) -> None:
    plugin = plugins[name]
    spec = plugin.descriptor.spec
    assert spec.allocation is not None
    parent = spec.allocation["parent"]
    assert (parent.type, parent.access) == ("KernelInterface/v1", "CreateChild")
    schema = spec.config_schema.model_dump(by_alias=True, exclude_none=True)
    assert schema["properties"]["mode"]["enum"][0] == mode
    assert [e.kind for e in _effects(plugin, "prepare")] == ["share/hold-parent/v1"]
    kind = name.removesuffix("-cni")
    # one effect creates the child directly in the sandbox, named, sized and set up there
    plan = plan_for_config(plugin, {"ifName": "net1", "mtu": 1500, "up": False})
    assert isinstance(plan, ConfigPlan)
    assert [e.kind for e in plan.hook("connect")] == [f"linux/create-{kind}/v2"]
    assert _outputs(plugin, {"ifName": "net1", "mtu": 1500, "up": False}) == {"interface"}


def test_bond_contract(plugins: dict[str, Plugin]) -> None:
    spec = plugins["bond-cni"].descriptor.spec
    assert spec.inputs is not None
    members = spec.inputs["members"]
    assert (members.min_items, members.max_items, members.access) == (2, 8, "AttachMember")
    props = spec.config_schema.model_dump(by_alias=True, exclude_none=True)["properties"]
    assert props["mode"]["enum"] == ["active-backup"]
    assert props["failOverMac"]["enum"] == ["active"]
    assert (props["monitorIntervalMs"]["minimum"], props["monitorIntervalMs"]["maximum"]) == (
        1,
        10000,
    )
    attach = next(e for e in _effects(plugins["bond-cni"], "connect") if e.id == "attach")
    assert attach.for_each is not None and attach.for_each.in_ == "call.inputs.members"


def test_vlan_contract(plugins: dict[str, Plugin]) -> None:
    props = plugins["vlan-cni"].descriptor.spec.config_schema.model_dump(
        by_alias=True, exclude_none=True
    )["properties"]
    assert (props["vlanId"]["minimum"], props["vlanId"]["maximum"]) == (1, 4094)
    assert (props["mtu"]["minimum"], props["mtu"]["maximum"]) == (576, 9000)
    bad = check_plugin(
        plugins["vlan-cni"],
        REGISTRY,
        config={"ifName": "v", "mtu": 1500, "up": True, "vlanId": 4095},
    )
    assert [d.code for d in bad] == [Code.E_SCHEMA]


def test_uplink_profile_is_the_only_shared_uplink_user(plugins: dict[str, Plugin]) -> None:
    users = {
        name
        for name, plugin in plugins.items()
        if "bridge/shared-uplink-vlan/v1" in plugin.descriptor.spec.allowed_effects
    }
    assert users == {"accelerated-bridge-cni-uplink"}
    plain = [e.kind for e in _effects(plugins["accelerated-bridge-cni"], "connect")]
    profile = [e.kind for e in _effects(plugins["accelerated-bridge-cni-uplink"], "connect")]
    assert profile == ["bridge/shared-uplink-vlan/v1", *plain]


# --- the checks above are not vacuous: broken copies of builtins are rejected -------------


def _mutated(tmp_path: Path, name: str, file: str, old: str, new: str) -> list[Code]:
    target = tmp_path / name
    shutil.copytree(PROGRAMS_DIR / name / "v1", target)
    text = (target / file).read_text()
    assert old in text
    (target / file).write_text(text.replace(old, new, 1))
    plugin, diagnostics = load_plugin_dir(target)
    if plugin is not None:
        diagnostics += check_plugin(plugin, REGISTRY)
    return sorted({d.code for d in diagnostics})


@pytest.mark.parametrize(
    ("name", "file", "old", "new", "code"),
    [
        (
            "vlan-cni",
            "plugin.yaml",
            "allowedEffects: [linux/create-vlan/v1, linux/link-configure/v1,",
            "allowedEffects: [linux/create-vlan/v1,",
            Code.E_EFFECT_DENIED,
        ),
        (
            # the host-side create of v1 is not among the plugin's allowed effects any more
            "macvlan-cni",
            "connect.yaml",
            "kind: linux/create-macvlan/v2",
            "kind: linux/create-macvlan/v1",
            Code.E_EFFECT_DENIED,
        ),
        (
            "macvlan-cni",
            "prepare.yaml",
            "kind: share/hold-parent/v1",
            "kind: linux/link-move/v1",
            Code.E_WRONG_HOOK,
        ),
        (
            "host-cni",
            "prepare.yaml",
            "recovery: {strategy: Quarantine}",
            "recovery: {strategy: RestoreBeforeImage}",
            Code.E_NO_RECOVERY,
        ),
        (
            # kernel mode has no prepared `function`: an unguarded VFIO grant cannot run
            "host-cni",
            "connect.yaml",
            "  - id: vfio-access\n    kind: vfio/device-access/v1\n"
            "    when: 'call.config.mode == \"vfio\"'\n",
            "  - id: vfio-access\n    kind: vfio/device-access/v1\n",
            Code.E_REF_UNRESOLVED,
        ),
        (
            "sriov-cni",
            "connect.yaml",
            "  - id: vfio-access\n    kind: vfio/device-access/v1\n"
            "    when: 'call.config.mode == \"vfio\"'\n",
            "  - id: vfio-access\n    kind: vfio/device-access/v1\n",
            Code.E_REF_UNRESOLVED,
        ),
        (
            "bond-cni",
            "connect.yaml",
            "member: {from: member}",
            "member: {from: effects.create.interface}",
            Code.E_ACCESS,
        ),
        # addressing (issue 38): scenarios still decided with presence guards in play — the
        # addresses effect may not read the IPoIB link, which exists only for infiniband
        (
            "host-cni",
            "connect.yaml",
            "      addresses: {from: call.config.addresses}",
            "      addresses: {from: call.config.addresses}\n"
            "  - id: wrong\n"
            "    kind: ip/routes/v1\n"
            "    when: 'call.config.routes != null'\n"
            "    inputs:\n"
            "      interface: {from: effects.ib-state.interface}\n"
            "    parameterBindings:\n"
            "      routes: {from: call.config.routes}",
            Code.E_REF_UNRESOLVED,
        ),
        # a guard reads top-level fields only
        (
            "macvlan-cni",
            "connect.yaml",
            "when: 'call.config.sysctls != null'",
            "when: 'call.config.sysctls.ipv4RpFilter == 1'",
            Code.E_REF_UNRESOLVED,
        ),
        # a list that may repeat an address binds a parameter that refuses repeats
        (
            "vlan-cni",
            "plugin.yaml",
            "        uniqueItems: true\n        items: {type: string, format: ip-interface}",
            "        items: {type: string, format: ip-interface}",
            Code.E_PARAM_TYPE,
        ),
        # a sysctl bound beyond the opcode's allowlist
        (
            "bond-cni",
            "connect.yaml",
            "ipv4RpFilter: {from: call.config.sysctls.ipv4RpFilter}",
            "rpFilter: {from: call.config.sysctls.ipv4RpFilter}",
            Code.E_UNKNOWN_FIELD,
        ),
    ],
)
def test_broken_copies_are_rejected(
    tmp_path: Path, name: str, file: str, old: str, new: str, code: Code
) -> None:
    assert code in _mutated(tmp_path, name, file, old, new)


def test_dmn_lint_programs_is_clean(capsys: pytest.CaptureFixture[str]) -> None:
    from dmn.cli.lint import run

    assert run(["--format", "json", str(PROGRAMS_DIR)]) == 0
    assert capsys.readouterr().out.strip() == "[]"


@pytest.mark.parametrize("name", ["macvlan-cni", "ipvlan-cni"])
@pytest.mark.parametrize("port", ["call.prepared.parent", "effects.create.interface"])
def test_configuring_the_shared_parent_is_a_shared_parent_mutation(
    tmp_path: Path, name: str, port: str
) -> None:
    """A program that reconfigures the held shared parent (the SharedParent/v1 grant) is
    rejected with exactly E_SHARED_PARENT_MUTATION, not a generic type error; the owned
    child (effects.create.interface, already in the sandbox) is not a shared parent, so the
    same effect on it is only rejected because the plugin does not allow that opcode."""
    extra = (
        "  - id: tune-parent\n    kind: linux/link-configure/v1\n"
        f"    inputs:\n      interface: {{from: {port}}}\n"
        "    parameters: {mtu: 9000}\n"
        "    recovery: {strategy: RestoreBeforeImage}\nexports:"
    )
    got = _mutated(tmp_path, name, "connect.yaml", "exports:", extra)
    if port == "call.prepared.parent":
        # (link-configure is no longer an allowed effect of the plugin: that is reported too)
        assert sorted(got) == [Code.E_EFFECT_DENIED, Code.E_SHARED_PARENT_MUTATION]
    else:
        assert got == [Code.E_EFFECT_DENIED]  # a sandbox link, but not an allowed effect


# ---------------------------------------------------------------- addressing (issue 38)

#: plugin -> (a config without addressing, the effect the ip/sysctl effects continue from)
ADDRESSED = {
    "macvlan-cni": ({"ifName": "net1", "mtu": 1500, "up": True}, "create"),
    "ipvlan-cni": ({"ifName": "net1", "mtu": 1500, "up": True}, "create"),
    "host-cni": ({"mode": "kernel", "ifName": "net1", "mtu": 1500, "up": True}, "state"),
    "sriov-cni": ({"mode": "kernel", "ifName": "net1", "mtu": 1500, "up": True}, "state"),
    "bond-cni": (
        {
            "ifName": "bond0",
            "mtu": 1500,
            "up": True,
            "mode": "active-backup",
            "monitorIntervalMs": 100,
            "failOverMac": "active",
        },
        "state",
    ),
    "vlan-cni": ({"ifName": "net1.10", "mtu": 1500, "up": True, "vlanId": 10}, "state"),
}
ADDRESSING = {
    "sysctls": {"ipv4RpFilter": 2, "ipv6AcceptRa": 0, "ipv4ArpNotify": True},
    "addresses": ["10.0.0.2/24", "fd00::2/64"],
    "routes": [
        {"destination": "10.9.0.0/16", "gateway": "10.0.0.1", "metric": 10},
        {"destination": "default", "gateway": "fd00::1"},
    ],
}


def _connect_plan(plugin: Plugin, config: dict[str, Any]) -> ConfigPlan:
    plan = plan_for_config(plugin, config)
    assert isinstance(plan, ConfigPlan), plan
    return plan


@pytest.mark.parametrize("name", sorted(ADDRESSED))
def test_a_config_without_addressing_runs_as_before(name: str, plugins: dict[str, Plugin]) -> None:
    base, _ = ADDRESSED[name]
    ids = [e.id for e in _connect_plan(plugins[name], base).hook("connect")]
    assert not {"sysctls", "addresses", "routes"} & set(ids), ids


@pytest.mark.parametrize("name", sorted(ADDRESSED))
def test_addressing_config_adds_sysctls_addresses_routes_on_the_link(
    name: str, plugins: dict[str, Plugin]
) -> None:
    base, last_link = ADDRESSED[name]
    plan = _connect_plan(plugins[name], {**base, **ADDRESSING})
    planned = {e.id: e for e in plan.hook("connect")}
    ids = list(planned)
    assert ids[-3:] == ["sysctls", "addresses", "routes"], ids
    assert ids.index(last_link) < ids.index("sysctls")
    assert planned["addresses"].parameters == {"addresses": ADDRESSING["addresses"]}
    assert planned["routes"].parameters == {"routes": ADDRESSING["routes"]}
    assert planned["sysctls"].parameters == ADDRESSING["sysctls"]
    for effect_id in ("sysctls", "addresses", "routes"):
        effect = planned[effect_id].effect
        assert effect is not None
        assert effect.inputs is not None
        ref = effect.inputs["interface"]
        assert not isinstance(ref, list) and ref.from_ == f"effects.{last_link}.interface"
    # each one alone is planned alone
    for key in ADDRESSING:
        alone = _connect_plan(plugins[name], {**base, key: ADDRESSING[key]})
        assert [e.id for e in alone.hook("connect")][-1] == key


@pytest.mark.parametrize("name", sorted(ADDRESSED))
@pytest.mark.parametrize(
    ("extra", "path", "why"),
    [
        ({"addresses": ["10.0.0.0/24"]}, "addresses[0]", "network address"),
        ({"addresses": []}, "addresses", "fewer than 1"),
        (
            {"addresses": [f"10.0.{i // 250}.{i % 250 + 1}/16" for i in range(17)]},
            "addresses",
            "more than 16",
        ),
        (
            {"routes": [{"destination": "10.9.0.0/16", "gateway": "fd00::1"}]},
            "routes[0]",
            "one family",
        ),
        ({"routes": [{"destination": "10.9.0.1/16"}]}, "routes[0].destination", "host bits"),
        (
            {"routes": [{"destination": "10.9.0.0/16", "via": "10.0.0.1"}]},
            "routes[0].via",
            "unknown",
        ),
        ({"sysctls": {}}, "sysctls", "fewer than 1"),
        ({"sysctls": {"ipv4ArpIgnore": 5}}, "sysctls.ipv4ArpIgnore", "not one of"),
        ({"sysctls": {"forwarding": 1}}, "sysctls.forwarding", "unknown"),
    ],
)
def test_bad_addressing_is_refused_at_the_field(
    name: str, extra: dict[str, Any], path: str, why: str, plugins: dict[str, Plugin]
) -> None:
    base, _ = ADDRESSED[name]
    schema = plugins[name].descriptor.spec.config_schema
    _, errs = validate_config(schema, {**base, **extra})
    assert [d.path for d in errs] == [f"config.{path}"], errs
    assert why in errs[0].message, errs


@pytest.mark.parametrize("name", ["host-cni", "sriov-cni"])
def test_addressing_is_forbidden_in_vfio_mode(name: str, plugins: dict[str, Plugin]) -> None:
    schema = plugins[name].descriptor.spec.config_schema
    _, errs = validate_config(schema, {"mode": "vfio", "addresses": ["10.0.0.2/24"]})
    assert [(d.path, "must be absent" in d.message) for d in errs] == [("config.addresses", True)]
