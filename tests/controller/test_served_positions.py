"""In-cluster diagnostics point at real lines and columns (issue 12.6): positions in the
object as the API server sent it, rendered as YAML (``dmn.api.served_yaml``), which is what
``dmn lab get KIND NAME -o yaml`` prints — never 1:1."""

from __future__ import annotations

import copy
from typing import Any

from dmn.api.builtin_plugins import plugin_object
from dmn.api.cluster import Cluster
from dmn.api.cluster import resources as r
from dmn.api.served_yaml import POSITION_NOTE, render, served_document
from dmn.controller.manager import Controller
from dmn.controller.webhook.review import ReviewContext, review
from dmn.interpreter.loader import load_builtin_plugins, load_plugins
from dmn.opcodes.registry import default_registry
from tests.controller.support import REPO, example, ready, topology_settled, wait_for

G = {"group": "networking.dra-multi-network.schseba.github.io", "version": "v1alpha1"}


def _at(text: str, line: int, column: int) -> str:
    """The rendering from ``line``:``column`` to the end of that line."""
    return text.splitlines()[line - 1][column - 1 :]


def _bad_topology(name: str) -> dict[str, Any]:
    topo = example("dual-vf-bond-vlan")
    topo["metadata"]["name"] = name
    topo["spec"]["steps"][3]["config"]["vlanId"] = 5000
    return topo


def _denied_plugin(name: str) -> dict[str, Any]:
    """The admin's macvlan-modes plugin with its create effect no longer granted."""
    found, problems = load_plugins(str(REPO / "examples" / "plugins" / "macvlan-modes" / "v1"))
    assert problems == []
    obj = plugin_object(found["macvlan-modes"])
    obj["metadata"] = {"name": name}
    obj["spec"]["allowedEffects"] = ["share/hold-parent/v1"]
    return obj


def test_the_rendering_is_fixed_and_positions_point_into_it() -> None:
    topo = _bad_topology("served")
    topo["metadata"]["managedFields"] = [{"manager": "kubectl", "operation": "Update"}]
    topo["metadata"]["annotations"] = {"note": "two\nlines\n", "long": "x " * 200}
    text = render(topo)
    assert "managedFields" not in text
    assert text == render(copy.deepcopy(topo))  # deterministic
    assert text.splitlines()[0].startswith("apiVersion:")  # keys sorted
    assert max(len(line) for line in text.splitlines()) > 400  # never folded
    source = served_document(topo, "NetworkTopology").source
    span = source.span(("spec", "steps", 3, "config", "vlanId"))
    assert span is not None and span.file == "networktopology/served"
    assert _at(text, span.line, span.column) == "5000"
    key = source.key_span(("spec", "steps", 3, "config", "vlanId"))
    assert key is not None and _at(text, key.line, key.column) == "vlanId: 5000"


def test_webhook_denials_carry_line_and_column_of_the_served_object() -> None:
    builtins = load_builtin_plugins()
    ctx = ReviewContext(default_registry(), lambda: builtins)
    topo = _bad_topology("denied")
    topo["metadata"]["uid"] = "0000-1111"
    request = {
        "uid": "r1",
        "kind": {**G, "kind": "NetworkTopology"},
        "operation": "CREATE",
        "object": topo,
    }
    resp = review(request, ctx)
    assert resp["allowed"] is False
    span = served_document(topo, "NetworkTopology").source.span(
        ("spec", "steps", 3, "config", "vlanId")
    )
    assert span is not None and span.line > 1
    where = f"(networktopology/denied:{span.line}:{span.column})"
    message = resp["status"]["message"]
    assert f"E_SCHEMA at spec.steps[3].config.vlanId {where}" in message
    assert POSITION_NOTE in message
    (cause,) = resp["status"]["details"]["causes"]
    assert cause["field"] == "spec.steps[3].config.vlanId" and where in cause["message"]

    plugin = _denied_plugin("denied-plugin")
    request = {"uid": "r2", "kind": {**G, "kind": "NetworkPlugin"}, "operation": "CREATE"}
    resp = review({**request, "object": plugin}, ctx)
    assert resp["allowed"] is False
    message = resp["status"]["message"]
    assert "E_EFFECT_DENIED at spec.hooks.connect.effects[0].kind" in message
    text = render(plugin)
    line, column = (
        int(x) for x in message.split("(networkplugin/denied-plugin:")[1].split(")")[0].split(":")
    )
    assert _at(text, line, column) == "linux/create-macvlan/v2"


def test_controller_status_positions_match_the_served_object(
    cluster: Cluster, controller: Controller
) -> None:
    cluster.create(r.NETWORK_TOPOLOGIES, _bad_topology("positions"))
    topo = wait_for(topology_settled(cluster, "positions"), what="failure reported")
    cond = ready(topo)
    assert cond is not None and cond["status"] == "False"
    diag = topo["status"]["diagnostics"][0]
    assert (diag["code"], diag["path"]) == ("E_SCHEMA", "spec.steps[3].config.vlanId")
    # the position is in the object as served now (what `dmn lab get ... -o yaml` prints)
    assert _at(render(topo), diag["line"], diag["column"]) == "5000"
    assert f"(networktopology/positions:{diag['line']}:{diag['column']})" in cond["message"]
    assert POSITION_NOTE in cond["message"]

    cluster.create(r.NETWORK_PLUGINS, _denied_plugin("positions-plugin"))

    def reported() -> dict[str, Any] | None:
        obj = cluster.get(r.NETWORK_PLUGINS, "positions-plugin")
        return obj if (obj.get("status") or {}).get("diagnostics") else None

    plugin = wait_for(reported, what="plugin diagnostics")
    diag = plugin["status"]["diagnostics"][0]
    assert diag["code"] == "E_EFFECT_DENIED"
    assert _at(render(plugin), diag["line"], diag["column"]) == "linux/create-macvlan/v2"


def test_policy_denials_carry_line_and_column() -> None:
    from tests.lab.test_admin_plugin import POLICY

    policy = copy.deepcopy(POLICY)
    policy["spec"]["exposure"]["capacity"]["children"]["value"] = "eight"
    ctx = ReviewContext(default_registry(), dict)
    request = {"uid": "r3", "kind": {**G, "kind": "DeviceExposurePolicy"}, "operation": "CREATE"}
    resp = review({**request, "object": policy}, ctx)
    assert resp["allowed"] is False
    message = resp["status"]["message"]
    assert "E_SCHEMA at spec.exposure.capacity.children.value" in message, message
    where = message.split("(deviceexposurepolicy/lab-link-private-macvlan:")[1].split(")")[0]
    line, column = (int(x) for x in where.split(":"))
    assert _at(render(policy), line, column) == "eight"


def test_bridge_grant_denials_point_at_the_vlan_and_the_unknown_key() -> None:
    from dmn.controller.policy_validation import policy_diagnostics
    from tests.lab.test_admin_plugin import POLICY

    policy = copy.deepcopy(POLICY)
    policy["spec"]["exposure"]["allowedHostBridges"] = [
        {"name": "tenantbr0", "alias": "tenant-br", "mac": "02:00:00:00:be:01",
         "vlans": [{"first": 100}, {"first": 5000}]},
    ]  # fmt: skip
    policy["spec"]["exposure"]["allowedOvsBridges"] = [
        {"name": "brovs0", "alias": "ovs", "vlans": [{"first": 1}], "database": "/run/db"}
    ]
    text = render(policy)
    diags = {d.path: d for d in policy_diagnostics(policy)}
    bad = diags["spec.exposure.allowedHostBridges[0].vlans[1].first"]
    assert bad.code.value == "E_SCHEMA"
    assert _at(text, bad.line, bad.column) == "5000"
    unknown = diags["spec.exposure.allowedOvsBridges[0].database"]
    assert unknown.code.value == "E_UNKNOWN_FIELD"
    assert _at(text, unknown.line, unknown.column) == "database: /run/db"
