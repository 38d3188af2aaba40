"""Property tests: any topology yields a revision or diagnostics, never an exception;
the digest is invariant under presentation order."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from dmn.controller.compile.compiler import compile_topology
from dmn.interpreter.diagnostics import Code
from tests.compile.support import fixture_plugins

PLUGINS = fixture_plugins()
BUDGET = [
    "linux/link-move/v1",
    "linux/link-configure/v1",
    "linux/create-vlan/v1",
    "linux/create-bond/v1",
    "linux/attach-master/v1",
]
pytestmark = pytest.mark.property


@st.composite
def topologies(draw: Any) -> dict[str, Any]:
    n_roots = draw(st.integers(1, 3))
    n_ops = draw(st.integers(0, 6))
    ids = [f"r{i}" for i in range(n_roots)] + [f"o{i}" for i in range(n_ops)]
    steps: list[dict[str, Any]] = []
    for i in range(n_roots):
        steps.append(
            {
                "id": f"r{i}",
                "kind": "Allocation",
                "pluginRef": {"name": "sriov-cni"},
                "config": {"mode": "kernel", "ifName": f"vf{i}", "mtu": 1500, "up": True},
            }
        )
    for i in range(n_ops):
        src = st.sampled_from([*ids, "ghost"])
        port = st.sampled_from(["interface", "interface", "device"])
        ref = st.builds(lambda s, p: {"from": f"{s}.{p}"}, src, port)
        if draw(st.booleans()):
            plugin, inputs = "bond-cni", {"members": draw(st.lists(ref, min_size=1, max_size=3))}
            config = {
                "ifName": f"b{i}",
                "mtu": 1500,
                "up": True,
                "mode": "active-backup",
                "monitorIntervalMs": 100,
                "failOverMac": "active",
            }
        else:
            plugin, inputs = "vlan-cni", {"parent": draw(ref)}
            vid = draw(st.integers(0, 4095))
            config = {
                "ifName": draw(st.sampled_from([f"v{i}", "vf0", "lo"])),
                "mtu": 1500,
                "up": True,
                "vlanId": vid,
            }
        steps.append(
            {
                "id": f"o{i}",
                "kind": "Operation",
                "pluginRef": {"name": plugin},
                "inputs": inputs,
                "config": config,
            }
        )
    order = draw(st.permutations(steps))
    return {
        "apiVersion": "networking.dra-multi-network.schseba.github.io/v1alpha1",
        "kind": "NetworkTopology",
        "metadata": {"name": "prop"},
        "spec": {"effectBudget": {"allow": BUDGET}, "steps": list(order)},
    }


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(topologies(), st.randoms(use_true_random=False))
def test_compile_total_and_order_invariant(topology: dict[str, Any], rnd: Any) -> None:
    result = compile_topology(topology, PLUGINS, uid="u")
    assert (result.compiled is None) == bool(result.diagnostics)
    for d in result.diagnostics:
        assert isinstance(d.code, Code) and d.path
    if result.compiled is not None:
        shuffled = dict(
            topology, spec=dict(topology["spec"], steps=list(topology["spec"]["steps"]))
        )
        rnd.shuffle(shuffled["spec"]["steps"])
        again = compile_topology(shuffled, PLUGINS, uid="u").compiled
        assert again is not None and again.digest == result.compiled.digest
        assert again.revision["spec"] == result.compiled.revision["spec"]
        assert again.device_classes("u") == result.compiled.device_classes("u")
        order = result.compiled.revision["spec"]["order"]
        position = {sid: i for i, sid in enumerate(order)}
        for step in topology["spec"]["steps"]:
            for refs in (step.get("inputs") or {}).values():
                for ref in refs if isinstance(refs, list) else [refs]:
                    assert position[ref["from"].split(".")[0]] < position[step["id"]]


json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(max_size=8),
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=6), inner, max_size=3)
    ),
    max_leaves=12,
)


@settings(max_examples=150, deadline=None)
@given(
    st.fixed_dictionaries(
        {
            "metadata": st.just({"name": "x"}),
            "spec": st.dictionaries(st.sampled_from(["steps", "effectBudget", "x"]), json_values),
        }
    )
)
def test_garbage_is_a_diagnostic(topology: dict[str, Any]) -> None:
    result = compile_topology(topology, PLUGINS)
    assert result.compiled is None and result.diagnostics


ATTRS = {
    "plugin": st.sampled_from(["sriov-cni", "host-cni", "macvlan-cni"]),
    "mode": st.sampled_from(["kernel", "vfio", "bridge"]),
    "linkType": st.sampled_from(["ethernet", "infiniband"]),
    "allocationReady": st.booleans(),
}


@settings(max_examples=200, deadline=None)
@given(
    st.fixed_dictionaries({}, optional=ATTRS),
    st.sampled_from(["dra-multi-network.schseba.github.io", "other.example.com"]),
)
def test_selector_matches_exactly_the_pinned_devices(attrs: dict[str, Any], driver: str) -> None:
    """Real CEL: a device matches iff driver and every pinned attribute match; a missing
    attribute never raises (allocation would abort on a CEL runtime error)."""
    import cel

    from dmn.controller.compile.classes import RootSelector, selector_expression

    sel = RootSelector("left", "sriov-cni", "kernel", "ethernet")
    device = {
        "device": {"driver": driver, "attributes": {"dra-multi-network.schseba.github.io": attrs}}
    }
    got = cel.compile(selector_expression(sel)).execute(device)
    want = (
        driver == "dra-multi-network.schseba.github.io"
        and attrs.get("plugin") == "sriov-cni"
        and attrs.get("mode") == "kernel"
        and attrs.get("linkType") == "ethernet"
        and attrs.get("allocationReady") is True
    )
    assert got is want
