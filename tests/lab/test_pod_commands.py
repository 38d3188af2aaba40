"""``dmn lab run -f POD.yaml`` and ``dmn lab exec POD -- CMD`` on the embedded backend.

Bad input is refused before any lab is looked for (reason code, ``file:line:col``, exit 2).
The round trip runs ``dmn lab up --links netns --detach`` as users do (root: the lab node's
links are a real veth pair in a namespace the lab creates), applies the example IPPools,
the shared-macvlan topology and a claim template with ``dmn lab apply``, runs two Pods, looks
at ``net1`` from inside each (addressed from the pool by the node agent) and pings between
them with ``dmn lab exec``, deletes one with ``dmn lab
delete`` (the lab's Pod runner tears it down) and brings the lab down: no namespace the lab
made is left.
"""

from __future__ import annotations

import json
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from dmn.cli import lab as cli
from dmn.controller.conditions import condition_true
from dmn.lab.pod_demo import claim_template, pod_manifest
from dmn.lab.state_dir import StateDir
from tests.lab.support import REPO, dmn_lab, ensure_stopped, no_traceback, ok
from tests.waiting import wait_for

TOPOLOGY = REPO / "examples" / "topologies" / "shared-macvlan.yaml"
POOLS = REPO / "examples" / "ipam" / "pool.yaml"  # shared-macvlan's net1 is from macvlan-v4


def _err(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str]:
    rc = cli.run(list(argv))
    return rc, capsys.readouterr().err


@pytest.mark.parametrize(
    ("text", "code", "where"),
    [
        ("apiVersion: v1\nkind: Service\nmetadata: {name: s}\n", "E_NOT_A_POD", "bad.yaml:1:1"),
        ("apiVersion: apps/v1\nkind: Pod\nmetadata: {name: p}\n", "E_NOT_A_POD", "apps/v1"),
        ("apiVersion: v1\nkind: Pod\nmetadata: {name: p}\n", "E_POD_SPEC", "spec: required"),
        (
            "apiVersion: v1\nkind: Pod\nmetadata: {name: p}\nspec:\n  containers: []\n",
            "E_POD_SPEC",
            "bad.yaml:5:15: spec.containers",
        ),
        (
            "apiVersion: v1\nkind: Pod\nmetadata: {name: p}\nspec:\n  containers:\n"
            "  - image: busybox\n",
            "E_POD_SPEC",
            "spec.containers[0].name",
        ),
        (
            "apiVersion: v1\nkind: Pod\nmetadata: {name: p}\nspec:\n  containers: [{name: c}]\n"
            "  resourceClaims:\n  - name: net\n    resourceClaimName: a\n"
            "    resourceClaimTemplateName: b\n",
            "E_POD_SPEC",
            "bad.yaml:7:5: spec.resourceClaims[0]: exactly one of",
        ),
        ("a: [\n", "E_SYNTAX", "bad.yaml:2:1"),
    ],
)
def test_run_refuses_bad_input_with_its_position(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], text: str, code: str, where: str
) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text(text)
    rc, err = _err(capsys, "run", "-f", str(bad), "--state-dir", str(tmp_path / "none"))
    assert rc == 2, err
    assert f"error[{code}]" in err and where in err, err


def test_exec_needs_a_command_and_a_lab(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    rc, err = _err(capsys, "exec", "p", "--state-dir", str(tmp_path))
    assert rc == 2 and "error[E_USAGE]" in err, err
    rc, err = _err(capsys, "exec", "p", "--state-dir", str(tmp_path), "--", "true")
    assert rc == 2 and "error[E_LAB_NOT_RUNNING]" in err, err
    pod = tmp_path / "pod.yaml"
    pod.write_text(yaml.safe_dump(pod_manifest("p", "t")))
    rc, err = _err(capsys, "run", "-f", str(pod), "--state-dir", str(tmp_path))
    assert rc == 2 and "error[E_LAB_NOT_RUNNING]" in err, err


@pytest.fixture
def state_dir() -> Iterator[Path]:
    # short: the lab's unix sockets live under it
    root = Path(tempfile.mkdtemp(prefix="dmn-lr-", dir="/tmp"))
    try:
        yield root / "lab"
    finally:
        ensure_stopped(root / "lab")
        shutil.rmtree(root, ignore_errors=True)


def _namespaces() -> set[str]:
    from pyroute2 import netns

    return set(netns.listnetns())


def test_run_exec_delete_on_a_netns_lab(state_dir: Path) -> None:
    ok(dmn_lab("up", "--detach", "--links", "netns", "--state-dir", str(state_dir)))
    lab_netns = (state_dir / "netns").read_text().strip()
    state = ["--state-dir", str(state_dir)]
    applied = ok(dmn_lab("apply", "-f", str(POOLS), *state))
    assert "IPPool/macvlan-v4 applied" in applied.stdout, applied.stdout
    ok(dmn_lab("apply", "-f", str(TOPOLOGY), *state))
    work = state_dir.parent
    template = work / "template.yaml"
    template.write_text(yaml.safe_dump(claim_template("shared-macvlan", _device_class(state))))
    ok(dmn_lab("apply", "-f", str(template), *state))
    pods = work / "pods.yaml"
    docs = [pod_manifest(n, "shared-macvlan") for n in ("lr-a", "lr-b")]
    for doc in docs:
        doc["metadata"]["namespace"] = "default"
        doc["spec"]["resourceClaims"][0]["resourceClaimTemplateName"] = "shared-macvlan"
    pods.write_text(yaml.safe_dump_all(docs))

    # `run` waits up to 120 s per Pod by itself: the subprocess gets more than that
    run = dmn_lab("run", "-f", str(pods), *state, timeout=300)
    ok(run)
    assert run.stdout.splitlines() == [
        "pod/lr-a created",
        "pod/lr-b created",
        "pod/lr-a running",
        "pod/lr-b running",
    ], run.stdout
    # the node agent addressed each net1 from the pool: the test only reads lr-b's address
    shown = ok(dmn_lab("exec", "lr-b", *state, "--", "ip", "-o", "-4", "addr", "show", "net1"))
    (target,) = [w.split("/")[0] for w in shown.stdout.split() if w.startswith("10.56.0.")]
    ping = f"ip -o link show net1 && ping -c 1 -W 3 {target}"
    show = ok(dmn_lab("exec", "lr-a", *state, "--", "sh", "-c", ping))
    assert "net1" in show.stdout, show.stdout  # ping exits 0 only with a reply
    record = StateDir(state_dir).root / "pods.json"
    sandboxes = {e["netns"] for e in json.loads(record.read_text()).values()}
    assert len(sandboxes) == 2 and sandboxes <= _namespaces()
    # the command's own exit status comes back
    assert dmn_lab("exec", "lr-a", *state, "--", "sh", "-c", "exit 3").returncode == 3

    missing = dmn_lab("exec", "nope", *state, "--", "true")
    assert missing.returncode == 1 and "error[E_NOT_FOUND]" in missing.stderr, missing.stderr
    bad = work / "bad-claim.yaml"
    broken = pod_manifest("lr-bad", "no-such-template")
    bad.write_text(yaml.safe_dump(broken))
    failed = dmn_lab("run", "-f", str(bad), *state, timeout=300)
    no_traceback(failed)
    assert failed.returncode == 1 and "error[E_POD_START]" in failed.stderr, failed.stderr
    assert "no-such-template" in failed.stderr
    refused = dmn_lab("exec", "lr-bad", *state, "--", "true")
    assert "error[E_POD_NOT_RUNNING]" in refused.stderr, refused.stderr

    ok(dmn_lab("delete", "pod", "lr-a", *state))
    wait_for(
        lambda: "default/lr-a" not in json.loads(record.read_text()),
        timeout=60,
        what="the runner to tear lr-a down",
    )
    gone = dmn_lab("exec", "lr-a", *state, "--", "true")
    assert "error[E_NOT_FOUND]" in gone.stderr, gone.stderr

    ok(dmn_lab("down", *state))
    assert not record.exists()
    # other tests on this machine make namespaces too: only ours are compared
    assert not (sandboxes | {lab_netns}) & _namespaces()


def test_run_on_a_lab_without_real_links_says_how(state_dir: Path, tmp_path: Path) -> None:
    ok(dmn_lab("up", "--detach", "--state-dir", str(state_dir)))
    pod = tmp_path / "pod.yaml"
    pod.write_text(yaml.safe_dump(pod_manifest("p", "t")))
    got = dmn_lab("run", "-f", str(pod), "--state-dir", str(state_dir))
    assert got.returncode == 2 and "error[E_LAB_LINKS]" in got.stderr, got.stderr
    assert "--links netns" in got.stderr
    ok(dmn_lab("down", "--state-dir", str(state_dir)))


def _device_class(state: list[str]) -> str:
    """The shared-macvlan topology's DeviceClass once it is Ready."""

    def ready() -> str | None:
        got = dmn_lab("get", "topology", "shared-macvlan", "-o", "json", *state)
        if got.returncode != 0:
            return None
        topo = json.loads(got.stdout)
        if not condition_true(topo, "Ready"):
            return None
        roots = (topo.get("status") or {}).get("roots") or []
        return str(roots[0]["deviceClassName"]) if roots else None

    found: str = wait_for(ready, timeout=60, what="shared-macvlan Ready")
    return found
