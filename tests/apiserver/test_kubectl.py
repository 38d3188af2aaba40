"""kubectl, a real independent client, against the lab (skipped without kubectl >= 1.27)."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

from dmn.lab.apiserver import LabApiServer

REPO = Path(__file__).resolve().parents[2]
KUBECTL = shutil.which("kubectl")


def _minor() -> int:
    if KUBECTL is None:
        return 0
    out = subprocess.run(
        [KUBECTL, "version", "--client", "-o", "json"], capture_output=True, text=True, timeout=30
    )
    try:
        return int(re.sub(r"\D", "", json.loads(out.stdout)["clientVersion"]["minor"]))
    except (ValueError, KeyError):
        return 0


pytestmark = pytest.mark.skipif(
    _minor() < 27, reason="needs kubectl >= 1.27 (server-side field validation)"
)


@pytest.fixture(scope="module")
def kubectl(tmp_path_factory: pytest.TempPathFactory):
    directory = tmp_path_factory.mktemp("kubectl")
    with LabApiServer() as server:
        config = directory / "kubeconfig"
        config.write_text(
            yaml.safe_dump(
                {
                    "apiVersion": "v1",
                    "kind": "Config",
                    "clusters": [{"name": "lab", "cluster": {"server": server.url}}],
                    "users": [{"name": "u", "user": {}}],
                    "contexts": [{"name": "lab", "context": {"cluster": "lab", "user": "u"}}],
                    "current-context": "lab",
                }
            )
        )

        def run(
            *args: str, stdin: str | None = None, check: bool = True
        ) -> subprocess.CompletedProcess[str]:
            result = subprocess.run(
                [KUBECTL, "--kubeconfig", str(config), *args],
                input=stdin,
                capture_output=True,
                text=True,
                timeout=60,
            )
            if check and result.returncode != 0:
                pytest.fail(f"kubectl {' '.join(args)}: {result.stderr}")
            return result

        yield run


def test_apply_creates_then_configures(kubectl) -> None:
    manifest = "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: applied}\ndata: {k: %s}\n"
    assert "created" in kubectl("apply", "-f", "-", stdin=manifest % "one").stdout
    assert "configured" in kubectl("apply", "-f", "-", stdin=manifest % "two").stdout
    got = json.loads(kubectl("get", "configmap", "applied", "-o", "json").stdout)
    assert got["data"] == {"k": "two"}
    assert "kubectl.kubernetes.io/last-applied-configuration" in got["metadata"]["annotations"]
    kubectl("delete", "configmap", "applied")
    assert kubectl("get", "configmap", "applied", check=False).returncode != 0


def test_apply_project_crds_and_a_topology(kubectl) -> None:
    crds = REPO / "charts" / "dra-multi-network" / "crds"
    example = REPO / "examples" / "topologies" / "host-device.yaml"
    if not any(crds.glob("*.yaml")) or not example.exists():
        pytest.skip("project CRDs or examples not present")
    kubectl("apply", "-f", str(crds))
    kubectl("apply", "-f", str(example))
    names = kubectl("get", "networktopologies", "-o", "name").stdout.split()
    assert names == ["networktopology.networking.dra-multi-network.schseba.github.io/host-device"]
    # server-side printing from the CRD's printer columns
    header = kubectl("get", "networktopologies").stdout.splitlines()[0].split()
    crd = yaml.safe_load(next(crds.glob("networktopologies.*.yaml")).read_text())
    declared = [
        c["name"].upper() for c in crd["spec"]["versions"][0].get("additionalPrinterColumns", [])
    ]
    assert header == ["NAME", *declared] or not declared
    rejected = kubectl(
        "apply",
        "-f",
        "-",
        check=False,
        stdin="apiVersion: networking.dra-multi-network.schseba.github.io/v1alpha1\n"
        "kind: NetworkTopology\nmetadata: {name: broken}\nspec: 42\n",
    )
    assert rejected.returncode != 0 and "is invalid" in rejected.stderr
