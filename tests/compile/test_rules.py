"""Compiler rules one by one, each with its reason code, plus digest semantics."""

from __future__ import annotations

import copy
from typing import Any

from dmn.controller.compile.compiler import MAX_BYTES, compile_topology
from tests.compile.support import EXAMPLES, as_object, from_object, load_text, load_topology

HEAD = """\
apiVersion: networking.dra-multi-network.schseba.github.io/v1alpha1
kind: NetworkTopology
metadata: {name: t}
spec:
  effectBudget:
    allow: [linux/link-move/v1, linux/link-configure/v1, linux/create-vlan/v1,
            share/hold-parent/v1, linux/create-macvlan/v1]
  steps:
"""
VF = """\
    - id: left
      kind: Allocation
      pluginRef: {name: sriov-cni}
      config: {mode: kernel, ifName: vfleft, mtu: 1500, up: true}
"""


def codes(text: str, plugins: dict[str, Any]) -> list[str]:
    data, source = load_text(text)
    result = compile_topology(data, plugins, source=source)
    return [d.code.value for d in result.diagnostics]


def vlan(step: str, parent: str, ifname: str, vid: int = 10) -> str:
    return f"""\
    - id: {step}
      kind: Operation
      pluginRef: {{name: vlan-cni}}
      inputs: {{parent: {{from: {parent}}}}}
      config: {{ifName: {ifname}, mtu: 1500, up: true, vlanId: {vid}}}
"""


def test_minimal_compiles(plugins: dict[str, Any]) -> None:
    assert codes(HEAD + VF, plugins) == []


def test_unknown_topology_field_is_reported(plugins: dict[str, Any]) -> None:
    text = HEAD + VF + "      shell: rm -rf /\n"
    assert codes(text, plugins) == ["E_UNKNOWN_FIELD"]


def test_allocation_with_inputs_is_schema_error(plugins: dict[str, Any]) -> None:
    text = HEAD + VF + "      inputs: {parent: {from: x.interface}}\n"
    assert "E_SCHEMA" in codes(text, plugins)


def test_step_kind_must_be_supported_by_plugin(plugins: dict[str, Any]) -> None:
    text = HEAD + VF.replace("Allocation", "Operation") + "      inputs: {}\n"
    assert "E_SCHEMA" in codes(text, plugins)


def test_explicit_false_is_kept(plugins: dict[str, Any]) -> None:
    data, _ = load_text(HEAD + VF.replace("up: true", "up: false"))
    compiled = compile_topology(data, plugins).compiled
    assert compiled is not None
    cfg = compiled.revision["spec"]["normalizedSpec"]["steps"][0]["config"]
    assert cfg["up"] is False
    assert cfg["rdmaAccess"] is False  # default filled
    assert cfg["linkType"] == "ethernet"


def test_missing_required_config(plugins: dict[str, Any]) -> None:
    assert codes(HEAD + VF.replace("mode: kernel, ", ""), plugins) == ["E_SCHEMA"]


def test_config_type_is_strict(plugins: dict[str, Any]) -> None:
    assert codes(HEAD + VF.replace("mtu: 1500", 'mtu: "1500"'), plugins) == ["E_SCHEMA"]


def test_unresolved_output_under_config(plugins: dict[str, Any]) -> None:
    # rdma output only exists when rdmaAccess is true
    text = HEAD + VF + vlan("t", "left.rdma", "t10")
    assert codes(text, plugins) == ["E_REF_UNRESOLVED"]


def test_self_reference_is_a_cycle(plugins: dict[str, Any]) -> None:
    text = HEAD + VF + vlan("t", "t.interface", "t10")
    assert codes(text, plugins) == ["E_CYCLE"]


def test_chain_order(plugins: dict[str, Any]) -> None:
    text = HEAD + VF + vlan("c", "b.interface", "c10", 3) + vlan("b", "left.interface", "b10", 2)
    data, _ = load_text(text)
    compiled = compile_topology(data, plugins).compiled
    assert compiled is not None
    assert compiled.revision["spec"]["order"] == ["left", "b", "c"]


def test_ifname_rules(plugins: dict[str, Any]) -> None:
    for bad in ["lo", "..", "a-name-longer-than-15", "bad/name", "''"]:
        assert codes(HEAD + VF.replace("vfleft", bad), plugins)[0] in {"E_IFNAME", "E_SCHEMA"}, bad
    assert codes(HEAD + VF.replace("vfleft", "lo"), plugins) == ["E_IFNAME"]


def test_step_limit(plugins: dict[str, Any]) -> None:
    steps = VF + "".join(vlan(f"s{i}", "left.interface", f"v{i}", i + 1) for i in range(32))
    assert "E_BUDGET" in codes(HEAD + steps, plugins)


def edited(plugins: dict[str, Any], name: str, edit: Any, new_name: str | None = None) -> Any:
    obj = as_object(plugins[name])
    edit(obj["spec"])
    if new_name:
        obj["metadata"]["name"] = new_name
    out = dict(plugins)
    plugin = from_object(obj)
    out[plugin.name] = plugin
    return out


def test_size_limit(plugins: dict[str, Any]) -> None:
    def grow(spec: dict[str, Any]) -> None:
        spec["configSchema"]["properties"]["ifName"]["description"] = "x" * (MAX_BYTES + 1)

    big = edited(plugins, "sriov-cni", grow)
    data, _ = load_text(HEAD + VF)
    result = compile_topology(data, big)
    assert [d.code.value for d in result.diagnostics] == ["E_BUDGET"]


def test_shared_parent_mutation(plugins: dict[str, Any]) -> None:
    def share(spec: dict[str, Any]) -> None:
        spec["outputs"]["parent"] = {"type": "SharedParent/v1", "ownership": "Granted"}

    def mutate(spec: dict[str, Any]) -> None:
        spec["inputs"]["parent"] = {"type": "SharedParent/v1", "access": "ExclusiveConfigure"}
        spec["hooks"] = {}
        spec["allowedEffects"] = []

    shared = edited(plugins, "macvlan-cni", share, "shared-parent")
    shared = edited(shared, "vlan-cni", mutate, "mutator")
    text = (
        HEAD
        + """\
    - id: p
      kind: Allocation
      pluginRef: {name: shared-parent}
      config: {mode: bridge, ifName: p0, mtu: 1500, up: true}
    - id: m
      kind: Operation
      pluginRef: {name: mutator}
      inputs: {parent: {from: p.parent}}
      config: {ifName: m0, mtu: 1500, up: true, vlanId: 7}
"""
    )
    data, _ = load_text(text)
    result = compile_topology(data, shared)
    # (the edited plugins' own programs no longer match their ports; only the
    # topology-level verdict matters here)
    assert next(d.code.value for d in result.diagnostics) == "E_SHARED_PARENT_MUTATION"


def test_plugin_allowed_effects_bound_programs(plugins: dict[str, Any]) -> None:
    def sneak(spec: dict[str, Any]) -> None:
        spec["hooks"]["connect"]["effects"].append(
            {
                "id": "move",
                "kind": "linux/link-move/v1",
                "inputs": {"interface": {"from": "effects.create.interface"}},
            }
        )

    sneaky = edited(plugins, "vlan-cni", sneak)
    data, _ = load_text(HEAD + VF + vlan("t", "left.interface", "t10"))
    result = compile_topology(data, sneaky)
    assert result.compiled is None
    assert "E_EFFECT_DENIED" in [d.code.value for d in result.diagnostics]


def test_diagnostics_point_into_the_file(plugins: dict[str, Any]) -> None:
    data, source = load_text(HEAD + VF.replace("mtu: 1500", "mtu: 100"), name="topo.yaml")
    (diag,) = compile_topology(data, plugins, source=source).diagnostics
    assert (diag.file, diag.line) == ("topo.yaml", 12)
    assert diag.path == "spec.steps[0].config.mtu"
    assert diag.render().startswith("topo.yaml:12:")


# --- digest semantics --------------------------------------------------------------


def _digest(data: dict[str, Any], plugins: dict[str, Any], uid: str = "u1") -> str:
    compiled = compile_topology(data, plugins, uid=uid).compiled
    assert compiled is not None
    return compiled.digest


def test_digest_ignores_presentation(plugins: dict[str, Any]) -> None:
    data, _ = load_topology(EXAMPLES / "dual-vf-bond-vlan.yaml")
    base = _digest(data, plugins)
    shuffled = copy.deepcopy(data)
    shuffled["spec"]["steps"].reverse()
    shuffled["spec"]["effectBudget"]["allow"].reverse()
    shuffled["metadata"]["resourceVersion"] = "999"
    shuffled["status"] = {"observedGeneration": 3}
    assert _digest(shuffled, plugins) == base
    # defaults written out explicitly are the same semantic content
    explicit = copy.deepcopy(data)
    for step in explicit["spec"]["steps"]:
        if step["id"] == "left":
            step["config"]["linkType"] = "ethernet"
    assert _digest(explicit, plugins) == base


def test_digest_tracks_meaning(plugins: dict[str, Any]) -> None:
    data, _ = load_topology(EXAMPLES / "dual-vf-bond-vlan.yaml")
    base = _digest(data, plugins)
    assert _digest(data, plugins, uid="u2") != base
    members = copy.deepcopy(data)
    members["spec"]["steps"][2]["inputs"]["members"].reverse()  # member order is meaningful
    assert _digest(members, plugins) != base
    vid = copy.deepcopy(data)
    vid["spec"]["steps"][3]["config"]["vlanId"] = 101
    assert _digest(vid, plugins) != base

    def widen(spec: dict[str, Any]) -> None:
        spec["configSchema"]["properties"]["mtu"]["maximum"] = 9216

    changed = edited(plugins, "vlan-cni", widen)
    assert _digest(data, changed) != base


def test_hardware_selector_must_be_boolean(plugins: dict[str, Any]) -> None:
    def with_selector(expression: str) -> str:
        return (
            HEAD + VF + f"      hardwareSelectors:\n        - cel: {{expression: '{expression}'}}\n"
        )

    # compiles as CEL but is a string: Kubernetes would refuse the DeviceClass (a type error)
    assert codes(with_selector("device.driver"), plugins) == ["E_CEL_TYPE"]
    assert codes(with_selector("1 + 2"), plugins) == ["E_CEL_TYPE"]
    # bool, or undecidable without the real device (an attribute the sample lacks): fine
    assert codes(with_selector('device.driver == "x"'), plugins) == []
    vendor = 'device.attributes["dra-multi-network.schseba.github.io"].vendor == "0x15b3"'
    assert codes(with_selector(vendor), plugins) == []
