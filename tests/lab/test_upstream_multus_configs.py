"""What the upstream lab builds and writes for Multus and Whereabouts, without a lab.

The build step's stdlib readers (CRD documents of a multi-document manifest, a go.mod's
replaces) and the rendered configuration: Multus sorts ahead of the primary network and
names it as its cluster network, everything lives below the lab directory, Whereabouts'
configuration names the kubernetes datastore. ``--multus`` is refused without the upstream
backend. The real programs reading these are in ``tests/e2e/test_upstream_multus_lab.py``.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from dmn.cli import lab as cli
from dmn.lab.upstream import build
from dmn.lab.upstream.configs import PRIMARY_CONFLIST, Layout, cni_conflist
from dmn.lab.upstream.multus_configs import (
    MULTUS_CONFLIST,
    MultusPaths,
    daemon_config,
    multus_conflist,
    network_attachment_definition,
    network_status,
    rbac,
    shim_conflist,
    whereabouts_conf,
)

MANIFEST = """\
# a comment
---
apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata:
  labels:
    a: b
  name: things.example.com
spec:
  names:
    kind: Thing
---
kind: ClusterRole
apiVersion: rbac.authorization.k8s.io/v1
metadata:
  name: not-a-crd
"""


def test_only_the_crd_documents_of_a_manifest_are_kept_by_name() -> None:
    found = build.crd_documents(MANIFEST)
    assert list(found) == ["things.example.com"]
    assert "kind: Thing" in found["things.example.com"]
    assert "ClusterRole" not in found["things.example.com"]


def test_a_gomods_version_replaces_are_carried_and_local_ones_dropped() -> None:
    gomod = (
        "module m\n\nreplace a => b v1.0.0\n\nreplace (\n\tc => ../c\n"
        "\td v1.2.0 => e v2.0.0 // why\n)\n"
    )
    assert sorted(build.module_replaces(gomod)) == ["a => b v1.0.0", "d v1.2.0 => e v2.0.0"]


def test_both_components_are_pinned_and_built_by_default() -> None:
    pins = build.load_pins()
    for name in ("multus", "whereabouts"):
        assert name in build.COMPONENTS and name in build.BUILDERS
        assert pins[name]["version"] and pins[name]["crds"]


def test_multus_sorts_ahead_of_the_primary_network_and_delegates_to_it(tmp_path: Path) -> None:
    layout = Layout(tmp_path / "up")
    paths = MultusPaths(layout)
    assert sorted([PRIMARY_CONFLIST, MULTUS_CONFLIST])[0] == MULTUS_CONFLIST
    primary = cni_conflist(layout)
    doc = json.loads(multus_conflist(paths, primary))
    (plugin,) = doc["plugins"]
    assert plugin["type"] == "multus"
    assert plugin["delegates"] == [json.loads(primary)]
    assert "clusterNetwork" not in plugin
    for key in ("kubeconfig", "binDir", "cniDir", "confDir", "logFile"):
        assert Path(plugin[key]).is_relative_to(tmp_path / "up"), key
    assert plugin["logToStderr"] is False


def test_whereabouts_reads_the_kubernetes_datastore_through_its_kubeconfig(
    tmp_path: Path,
) -> None:
    conf = json.loads(whereabouts_conf(tmp_path / "wb.kubeconfig", tmp_path / "wb.log"))
    assert conf["datastore"] == "kubernetes"
    assert conf["kubernetes"] == {"kubeconfig": str(tmp_path / "wb.kubeconfig")}
    assert conf["reconciler_cron_expression"]
    assert "log_file" not in json.loads(whereabouts_conf(tmp_path / "wb.kubeconfig", None))


def test_thick_mode_puts_the_shim_in_the_path_and_the_daemon_runs_the_same_delegates(
    tmp_path: Path,
) -> None:
    layout = Layout(tmp_path / "up")
    paths = MultusPaths(layout)
    primary = cni_conflist(layout)
    shim = json.loads(shim_conflist(paths))
    (plugin,) = shim["plugins"]
    assert plugin["type"] == "multus-shim"
    assert plugin["daemonSocketDir"] == str(paths.daemon_socket_dir)
    daemon = json.loads(daemon_config(paths, primary))
    assert daemon["socketDir"] == plugin["daemonSocketDir"]
    assert daemon["multusConfigFile"] == "auto"
    assert daemon["multusMasterCNI"] == PRIMARY_CONFLIST
    assert daemon["cniConfigDir"] != str(layout.cni_conf)
    assert daemon["multusAutoconfigDir"] != str(layout.cni_conf)
    thin = json.loads(multus_conflist(paths, primary))["plugins"][0]
    for key in ("delegates", "binDir", "cniDir", "confDir"):
        assert daemon[key] == thin[key], key
    for key in ("socketDir", "multusAutoconfigDir", "cniConfigDir", "logFile"):
        assert Path(daemon[key]).is_relative_to(tmp_path / "up"), key


def test_multus_may_update_pod_status_and_read_network_attachment_definitions() -> None:
    roles = {d["metadata"]["name"]: d for d in rbac() if d["kind"] == "ClusterRole"}
    rules = roles["dmn-lab-multus"]["rules"]

    def verbs(resource: str) -> set[str]:
        return {v for rule in rules if resource in rule["resources"] for v in rule["verbs"]}

    assert verbs("pods/status") == {"update"}
    assert verbs("pods") == {"get", "list", "watch"}
    assert {"get", "list", "watch"} <= verbs("network-attachment-definitions")


def test_network_attachment_definition_and_network_status_shapes() -> None:
    nad = network_attachment_definition("n", "ns", {"type": "macvlan"})
    assert json.loads(nad["spec"]["config"]) == {"type": "macvlan"}
    assert network_attachment_definition("n", "ns", '{"a":1}')["spec"]["config"] == '{"a":1}'
    pod = {"metadata": {"annotations": {"k8s.v1.cni.cncf.io/network-status": '[{"name":"x"}]'}}}
    assert network_status(pod) == [{"name": "x"}]
    assert network_status({"metadata": {}}) == []


def test_multus_needs_the_upstream_backend(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    rc = cli.run(["up", "--multus", "--state-dir", str(tmp_path)])
    assert rc == 2 and "error[E_USAGE]" in capsys.readouterr().err
    rc = cli.run(["up", "--multus", "thick", "--state-dir", str(tmp_path)])
    assert rc == 2 and "error[E_USAGE]" in capsys.readouterr().err
