"""The client commands in-process against one lab control plane run by this module."""

from __future__ import annotations

import copy
import json
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from dmn.cli import lab as cli
from dmn.lab.cluster import LabCluster, LabError
from dmn.lab.state_dir import StateDir
from tests.lab.support import REPO
from tests.waiting import wait_for


@pytest.fixture(scope="module")
def lab(tmp_path_factory: pytest.TempPathFactory) -> Iterator[StateDir]:
    state = StateDir(tmp_path_factory.mktemp("lab"))
    with LabCluster(state, resync=2.0):
        state.write_pid(os.getpid())  # this process runs the lab
        yield state
        state.clear_runtime(os.getpid())


def _run(capsys: pytest.CaptureFixture[str], lab: StateDir, *argv: str) -> tuple[int, str, str]:
    rc = cli.run([*argv, "--state-dir", str(lab.root)])
    captured = capsys.readouterr()
    return rc, captured.out, captured.err


def test_apply_directory_and_get(lab: StateDir, capsys: pytest.CaptureFixture[str]) -> None:
    rc, out, _ = _run(capsys, lab, "apply", "-f", str(REPO / "examples" / "topologies"))
    assert rc == 0 and out.count(" applied") == len(
        list((REPO / "examples/topologies").glob("*.yaml"))
    )
    rc, out, _ = _run(capsys, lab, "get", "plugins", "-o", "name")
    assert rc == 0 and "macvlan-cni" in out.split()
    rc, out, _ = _run(capsys, lab, "get", "policies", "-o", "json")
    names = {p["metadata"]["name"] for p in json.loads(out)["items"]}
    assert names == {"lab-link-kernel", "lab-link-macvlan", "lab-link-ipvlan"}
    rc, out, _ = _run(capsys, lab, "get", "node", "lab-node", "-o", "yaml")
    assert rc == 0 and yaml.safe_load(out)["kind"] == "Node"


def test_apply_refused_by_the_api_server(
    lab: StateDir, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text(
        "apiVersion: networking.dra-multi-network.schseba.github.io/v1alpha1\n"
        "kind: NetworkTopology\nmetadata: {name: structurally-bad}\nspec: {steps: nope}\n"
    )
    rc, _, err = _run(capsys, lab, "apply", "-f", str(bad))
    assert rc == 1 and "error[E_INVALID]" in err and "spec.steps" in err


def test_apply_unknown_kind(
    lab: StateDir, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text("apiVersion: example.com/v1\nkind: Widget\nmetadata: {name: w}\n")
    rc, _, err = _run(capsys, lab, "apply", "-f", str(bad))
    assert rc == 1 and "error[E_UNKNOWN_KIND]" in err


def test_get_missing_object(lab: StateDir, capsys: pytest.CaptureFixture[str]) -> None:
    rc, _, err = _run(capsys, lab, "get", "topology", "no-such-topology")
    assert rc == 1 and "error[E_NOT_FOUND]" in err


def test_second_lab_on_a_busy_state_dir_is_refused(
    lab: StateDir, capsys: pytest.CaptureFixture[str]
) -> None:
    rc, _, err = _run(capsys, lab, "up")
    assert rc == 2 and "error[E_LAB_RUNNING]" in err


def test_corrupt_state_file_is_a_start_error(tmp_path: Path) -> None:
    state = StateDir(tmp_path)
    state.apiserver_state.write_text("{not json")
    with pytest.raises(LabError) as info:
        LabCluster(state).start()
    assert info.value.code == "E_LAB_START" and "apiserver.json" in info.value.message


TOPOLOGY = """\
apiVersion: networking.dra-multi-network.schseba.github.io/v1alpha1
kind: NetworkTopology
metadata: {name: apply-semantics, namespace: default}
spec:
  effectBudget: {allow: [share/hold-parent/v1, linux/create-macvlan/v2]}
  steps:
    - id: net
      kind: Allocation
      pluginRef: {name: macvlan-cni}
      config: {mode: bridge, ifName: net1, mtu: 1500, up: true%s}
"""


def test_apply_removes_what_the_previous_apply_set(
    lab: StateDir, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    """kubectl apply semantics: a stale (here misspelt) field dropped from the manifest
    is removed from the object; a label another writer added is kept."""
    from dmn.api.cluster import Cluster, connect
    from dmn.api.cluster import resources as r

    manifest = tmp_path / "topology.yaml"
    manifest.write_text(TOPOLOGY % ", mtuu: 1500")
    rc, out, err = _run(capsys, lab, "apply", "-f", str(manifest))
    # stored, but the controller rejects it: apply says so and fails
    assert rc == 1 and "error[E_UNKNOWN_FIELD]" in err, err
    cluster = Cluster(connect(kubeconfig=str(lab.kubeconfig)))
    try:
        cluster.patch(
            r.NETWORK_TOPOLOGIES,
            "apply-semantics",
            {"metadata": {"labels": {"team": "other-writer"}}},
            "default",
        )
        manifest.write_text(TOPOLOGY % "")
        rc, out, err = _run(capsys, lab, "apply", "-f", str(manifest))
        assert rc == 0, err
        obj = cluster.get(r.NETWORK_TOPOLOGIES, "apply-semantics", "default")
        assert obj["spec"]["steps"][0]["config"] == {
            "mode": "bridge",
            "ifName": "net1",
            "mtu": 1500,
            "up": True,
        }
        assert obj["metadata"]["labels"] == {"team": "other-writer"}
    finally:
        cluster.close()
    # kubectl's argument orders, options anywhere
    for argv in (
        ["get", "topology", "apply-semantics", "-n", "default", "-o", "name"],
        ["get", "topology", "-n", "default", "apply-semantics", "-o", "name"],
        ["get", "-n", "default", "topology/apply-semantics", "-o", "name"],
    ):
        rc, out, err = _run(capsys, lab, *argv)
        assert (rc, out.strip()) == (0, "apply-semantics"), (argv, err)
    rc, out, err = _run(capsys, lab, "delete", "topology", "-n", "default", "apply-semantics")
    assert rc == 0 and "NetworkTopology/apply-semantics deleted" in out, err
    rc, _, err = _run(capsys, lab, "get", "topology", "apply-semantics")
    assert rc == 1 and "error[E_NOT_FOUND]" in err
    # delete -f: the manifest's objects; a missing one is E_NOT_FOUND unless ignored.
    # (Re-created at once, the topology may meet its predecessor's revision before the
    # collector has removed it: the controller's E_CONFLICT, retried by it until then.)
    rc, _, err = _run(capsys, lab, "apply", "-f", str(manifest))
    assert rc == 0 or "error[E_CONFLICT]" in err, err
    rc, out, err = _run(capsys, lab, "delete", "-f", str(manifest))
    assert rc == 0 and "deleted" in out, err
    rc, _, err = _run(capsys, lab, "delete", "-f", str(manifest))
    assert rc == 1 and "error[E_NOT_FOUND]" in err
    rc, _, err = _run(capsys, lab, "delete", "-f", str(manifest), "--ignore-not-found")
    assert rc == 0, err
    rc, _, err = _run(capsys, lab, "delete", "topology")
    assert rc == 2 and "error[E_USAGE]" in err


def test_offline_compile_names_are_the_controllers(
    lab: StateDir, capsys: pytest.CaptureFixture[str]
) -> None:
    """``dmn compile`` prints the revision and DeviceClass names the controller creates for
    the same documents (applied through the lab API server, CRD defaults applied)."""
    from dmn.cli import main

    sources = sorted((REPO / "examples" / "topologies").glob("*.yaml"))
    offline: dict[str, tuple[str, list[str]]] = {}
    for path in sources:
        assert main(["compile", str(path), "--format", "json"]) == 0
        objs = json.loads(capsys.readouterr().out)
        revision = next(o for o in objs if o["kind"] == "NetworkTopologyRevision")
        classes = sorted(o["metadata"]["name"] for o in objs if o["kind"] == "DeviceClass")
        topology = revision["spec"]["topologyRef"]["name"]
        offline[topology] = (revision["metadata"]["name"], classes)
    rc, _, err = _run(capsys, lab, "apply", "-f", str(REPO / "examples" / "topologies"))
    assert rc == 0, err
    in_cluster: dict[str, tuple[str, list[str]]] = {}

    def all_compiled() -> bool:
        _, out, _ = _run(capsys, lab, "get", "topologies", "-o", "json")
        for topo in json.loads(out)["items"]:
            status = topo.get("status") or {}
            revision = (status.get("revision") or {}).get("name")
            name = topo["metadata"]["name"]
            if revision and name in offline:
                classes = sorted(c["deviceClassName"] for c in status.get("roots") or [])
                in_cluster[name] = (revision, classes)
        return len(in_cluster) >= len(offline)

    wait_for(all_compiled, interval=0.2, what="every example topology compiled in the lab")
    assert in_cluster == offline


def test_policy_conflict_is_visible_on_both_policies_and_as_events(
    lab: StateDir, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    """A second policy exposing the lab links as macvlan at equal priority: both policies
    say Conflict=True with E_POLICY_CONFLICT, name each other and the devices, and a
    Warning Event with that reason is recorded on each (issue 12.3)."""
    from dmn.api.cluster import Cluster, connect
    from dmn.api.cluster import resources as r
    from dmn.lab.node import policies

    rival = copy.deepcopy(
        next(p for p in policies() if p["metadata"]["name"] == "lab-link-macvlan")
    )
    rival["metadata"]["name"] = "rival-macvlan"
    manifest = tmp_path / "rival.yaml"
    manifest.write_text(json.dumps(rival))
    rc, _, err = _run(capsys, lab, "apply", "-f", str(manifest))
    assert rc == 0, err
    cluster = Cluster(connect(kubeconfig=str(lab.kubeconfig)))
    try:
        seen: dict[str, dict[str, Any]] = {}

        def both_conflicted() -> bool:
            for name in ("lab-link-macvlan", "rival-macvlan"):
                status = cluster.get(r.DEVICE_EXPOSURE_POLICIES, name).get("status") or {}
                conds = {c["type"]: c for c in status.get("conditions") or []}
                if conds.get("Conflict", {}).get("status") == "True" and "Validated" in conds:
                    seen[name] = status
            return len(seen) >= 2

        wait_for(both_conflicted, interval=0.2, what="Conflict=True on both policies")
        assert set(seen) == {"lab-link-macvlan", "rival-macvlan"}
        for name, status in seen.items():
            conds = {c["type"]: c for c in status["conditions"]}
            assert conds["Conflict"]["reason"] == "E_POLICY_CONFLICT"
            assert conds["Ready"]["status"] == "False"
            assert conds["Validated"]["status"] == "True"  # the controller's, kept
            other = "rival-macvlan" if name == "lab-link-macvlan" else "lab-link-macvlan"
            diags = status["diagnostics"]
            assert {d["code"] for d in diags} == {"E_POLICY_CONFLICT"}
            assert all(other in d["message"] for d in diags)
            assert len({d["path"] for d in diags}) == 2  # both lab links
            # the node's own entry says the same; the top level is the controller's sum
            (entry,) = status["nodes"]
            node_conds = {c["type"]: c for c in entry["conditions"]}
            assert node_conds["Conflict"]["status"] == "True"
            assert {d["code"] for d in entry["diagnostics"]} == {"E_POLICY_CONFLICT"}
            assert status["exposedDevices"] == entry["exposedDevices"]
        events = [
            e
            for e in cluster.list(r.EVENTS, "default").items
            if e.get("reason") == "E_POLICY_CONFLICT"
        ]
        assert {e["involvedObject"]["name"] for e in events} == {
            "lab-link-macvlan",
            "rival-macvlan",
        }
        rc, _, err = _run(capsys, lab, "delete", "-f", str(manifest))
        assert rc == 0, err

        def cleared() -> bool:
            status = cluster.get(r.DEVICE_EXPOSURE_POLICIES, "lab-link-macvlan")["status"]
            conds = {c["type"]: c for c in status["conditions"]}
            return conds["Conflict"]["status"] == "False" and conds["Ready"]["status"] == "True"

        wait_for(cleared, interval=0.2, what="the conflict cleared after the rival's delete")
    finally:
        cluster.close()


def test_apply_reports_the_controllers_rejection(
    lab: StateDir, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    """Admitted by the API server, rejected by the controller afterwards: apply waits for the
    verdict and fails with its reason code instead of printing "applied"."""
    bad = tmp_path / "bad.yaml"
    bad.write_text(
        "apiVersion: networking.dra-multi-network.schseba.github.io/v1alpha1\n"
        "kind: NetworkTopology\nmetadata: {name: no-such-plugin}\n"
        "spec:\n  steps:\n    - id: net1\n      kind: Allocation\n"
        "      pluginRef: {name: no-such-plugin}\n      config: {ifName: net1}\n"
    )
    rc, out, err = _run(capsys, lab, "apply", "-f", str(bad))
    assert rc == 1, (out, err)
    assert "error[E_REF_UNRESOLVED]" in err and "rejected by the controller" in err, err
    assert "applied" not in out


def test_apply_the_shipped_workloads(lab: StateDir, capsys: pytest.CaptureFixture[str]) -> None:
    rc, out, err = _run(capsys, lab, "apply", "-f", str(REPO / "examples" / "workloads"))
    assert rc == 0, (out, err)
    assert out.count(" applied") == 5, out
