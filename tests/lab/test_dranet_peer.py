"""The dranet peer's pieces that need no upstream lab (``tests/e2e/test_upstream_dranet_peer.py``
runs the peer itself): the mount-namespace launcher, dranet's filter, the claim template.

The launcher runs for real in a child process (root: a mount namespace of its own); the
binds and the tmpfs it makes exist only there, so the test checks the host's file system is
unchanged afterwards.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from dmn.lab.upstream import dranet, mount_exec
from dmn.lab.upstream.mount_exec import SetupError, plan

needs_root = pytest.mark.skipif(os.geteuid() != 0, reason="needs root (a mount namespace)")


def _launch(*args: str) -> subprocess.CompletedProcess[str]:
    argv = [sys.executable, "-m", "dmn.lab.upstream.mount_exec", *args]
    return subprocess.run(argv, capture_output=True, text=True, timeout=60)


def test_missing_targets_get_one_tmpfs_over_their_deepest_existing_ancestor(
    tmp_path: Path,
) -> None:
    (tmp_path / "src").mkdir()
    (tmp_path / "host" / "kubelet").mkdir(parents=True)
    binds = [
        (tmp_path / "src", tmp_path / "host" / "kubelet" / "plugins"),
        (tmp_path / "src", tmp_path / "host" / "kubelet" / "plugins_registry"),
        (tmp_path / "src", tmp_path / "host" / "kubelet"),
    ]
    _, shadows = plan(binds)
    assert shadows == [tmp_path / "host" / "kubelet"]


def test_a_tmpfs_that_would_hide_a_source_or_the_root_is_refused(tmp_path: Path) -> None:
    (tmp_path / "src").mkdir()
    with pytest.raises(SetupError, match="would hide the bind source"):
        plan([(tmp_path / "src", tmp_path / "absent" / "dst")])
    with pytest.raises(SetupError, match="does not exist"):
        plan([(tmp_path / "nothing", tmp_path / "dst")])
    with pytest.raises(SetupError, match="hide the whole host"):
        plan([(tmp_path / "src", Path("/dmn-no-such-top-level-dir/x"))])


@needs_root
def test_the_program_sees_the_binds_and_the_host_gains_nothing(tmp_path: Path) -> None:
    source = tmp_path / "lab" / "nri"
    source.mkdir(parents=True)
    (source / "nri.sock").write_text("lab's\n")
    host = tmp_path / "host"
    (host / "var" / "lib" / "kubelet").mkdir(parents=True)
    (host / "var" / "lib" / "kubelet" / "device-plugins").mkdir()
    (host / "var" / "run").symlink_to(host / "run")
    (host / "run").mkdir()
    before = sorted(str(p.relative_to(tmp_path)) for p in tmp_path.rglob("*"))
    out = _launch(
        "--bind",
        f"{source}:{host / 'var' / 'run' / 'nri'}",
        "--bind",
        f"{source}:{host / 'var' / 'lib' / 'kubelet' / 'plugins'}",
        "--",
        "/bin/sh",
        "-c",
        f"cat {host}/var/run/nri/nri.sock {host}/var/lib/kubelet/plugins/nri.sock;"
        f" ls -A {host}/var/lib/kubelet",
    )
    assert out.returncode == 0, out.stderr
    # the tmpfs over kubelet/ hides what the host has there, inside the namespace only
    assert out.stdout.split() == ["lab's", "lab's", "plugins"]
    assert sorted(str(p.relative_to(tmp_path)) for p in tmp_path.rglob("*")) == before


@needs_root
def test_a_refused_plan_or_a_missing_program_exits_125_before_anything_runs(
    tmp_path: Path,
) -> None:
    (tmp_path / "src").mkdir()
    refused = _launch("--bind", f"{tmp_path}/src:{tmp_path}/gone/dst", "--", "/bin/true")
    assert refused.returncode == mount_exec.EXIT_SETUP, refused
    assert "would hide the bind source" in refused.stderr
    (tmp_path / "dst").mkdir()
    missing = _launch("--bind", f"{tmp_path}/src:{tmp_path}/dst", "--", f"{tmp_path}/no-program")
    assert missing.returncode == mount_exec.EXIT_SETUP, missing
    assert "cannot run" in missing.stderr


def test_the_filter_names_exactly_the_peers_links() -> None:
    links = dranet.link_names(2)
    assert links == ("dmnlab-dr0", "dmnlab-dr1", "dmnlab-dr2", "dmnlab-dr3")
    expression = dranet.filter_expression(links)
    assert expression.startswith('"dra.net/ifName" in attributes && ')
    assert '["dmnlab-dr0", "dmnlab-dr1", "dmnlab-dr2", "dmnlab-dr3"]' in expression


def test_a_claim_template_selects_one_link_and_may_rename_it() -> None:
    template = dranet.claim_template("t", "default", link="dmnlab-dr1", if_name="net1")
    devices = template["spec"]["spec"]["devices"]
    (request,) = devices["requests"]
    assert request["exactly"]["deviceClassName"] == dranet.DEVICE_CLASS
    assert request["exactly"]["selectors"] == [
        {"cel": {"expression": 'device.attributes["dra.net"].ifName == "dmnlab-dr1"'}}
    ]
    assert devices["config"] == [
        {
            "requests": ["net"],
            "opaque": {"driver": "dra.net", "parameters": {"interface": {"name": "net1"}}},
        }
    ]
    plain = dranet.claim_template("t", "default")["spec"]["spec"]["devices"]
    assert "config" not in plain and "selectors" not in plain["requests"][0]["exactly"]


def test_the_peers_role_grants_the_status_devices_permission_for_its_driver_only() -> None:
    (role,) = [d for d in dranet.rbac() if d["kind"] == "ClusterRole"]
    (driver_rule,) = [r for r in role["rules"] if r["resources"] == ["resourceclaims/driver"]]
    assert driver_rule["resourceNames"] == ["dra.net"]
    assert set(driver_rule["verbs"]) == {"associated-node:patch", "associated-node:update"}
