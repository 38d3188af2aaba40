"""The container image built without a container engine (``image/build.py``): the project
runs inside its root filesystem (``dmn --version``, ``dmn lint``, the agent's and the
controller's native dependencies import), as the non-root user the controller runs as,
the image carries the product only (no lab, its chart and examples, or its crypto library;
``dmn lab`` says so in one reason-coded line), and the OCI archive is self-consistent
(every digest and diff_id recomputed).

The build is cached outside the clone (``/var/cache/dmn-image``); ``.ci/run`` builds it
before the tests, so here it is normally a cache hit.
"""

from __future__ import annotations

import gzip
import hashlib
import json
import shutil
import subprocess
import sys
import tarfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

REPO = Path(__file__).resolve().parents[2]
DMN = "/opt/dmn/bin/dmn"
CHROOT = shutil.which("chroot") or "/usr/sbin/chroot"
pytestmark = [pytest.mark.image, pytest.mark.timeout(3600)]


@pytest.fixture(scope="module")
def built() -> dict[str, Any]:
    proc = subprocess.run(
        ["python3", str(REPO / "image" / "build.py"), "--python", sys.executable],
        capture_output=True,
        text=True,
        timeout=3600,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    return dict(json.loads(proc.stdout.strip().splitlines()[-1]))


@pytest.fixture
def work(built: dict[str, Any]) -> Iterator[tuple[Path, str]]:
    """A directory inside the image's rootfs (removed afterwards) and its path inside."""
    rootfs = Path(built["rootfs"])
    inside = "/tmp/dmn-image-test"
    host = rootfs / inside.lstrip("/")
    shutil.rmtree(host, ignore_errors=True)
    host.mkdir(parents=True)
    try:
        yield host, inside
    finally:
        shutil.rmtree(host, ignore_errors=True)


def _in_image(
    built: dict[str, Any], *cmd: str, user: str = "65532:65532"
) -> subprocess.CompletedProcess[str]:
    env = {"PATH": "/opt/dmn/bin:/usr/bin:/bin", "LANG": "C.UTF-8", "HOME": "/nonexistent"}
    return subprocess.run(
        [CHROOT, f"--userspec={user}", built["rootfs"], *cmd],
        capture_output=True,
        text=True,
        timeout=300,
        env=env,
    )


def test_dmn_version_inside_the_image(built: dict[str, Any]) -> None:
    proc = _in_image(built, DMN, "--version")
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "dmn 0.1.0"


def test_dmn_lint_inside_the_image(built: dict[str, Any], work: tuple[Path, str]) -> None:
    host, inside = work
    shutil.copytree(REPO / "programs", host / "programs")
    shutil.copytree(REPO / "examples" / "topologies", host / "topologies")
    shutil.copy(REPO / "examples" / "negative" / "topologies" / "effect-denied.yaml", host)
    subprocess.run(["chmod", "-R", "a+rX", str(host)], check=True)
    clean = _in_image(built, DMN, "lint", f"{inside}/programs", f"{inside}/topologies")
    assert clean.returncode == 0, clean.stdout + clean.stderr
    bad = _in_image(built, DMN, "lint", "--format", "json", f"{inside}/effect-denied.yaml")
    assert bad.returncode == 1, bad.stderr
    assert "E_EFFECT_DENIED" in {d["code"] for d in json.loads(bad.stdout)}


def test_agent_and_controller_dependencies_load_inside_the_image(built: dict[str, Any]) -> None:
    """Native wheels (rocksdict, grpcio, pydantic-core, cel, re2) load on the image's libc;
    the node agent's and the controller's entry points import."""
    code = (
        "import dmn.cli.node, dmn.cli.controller, rocksdict, grpc, pyroute2, cel, pyudev;"
        "pyudev.Context()"
    )
    proc = _in_image(built, "/opt/dmn/bin/python", "-c", code, user="0:0")
    assert proc.returncode == 0, proc.stderr
    ready = _in_image(built, DMN, "node-ready", "--state-dir", "/nonexistent")
    assert ready.returncode == 1 and "E_AGENT_NOT_READY" in ready.stderr


SITE = "opt/dmn/lib/python3.11/site-packages"


def test_the_image_carries_the_product_only(built: dict[str, Any]) -> None:
    """No lab code, no data only the lab reads, no lab-only dependency; the product's own
    data (builtin programs, grammar) is there."""
    site = Path(built["rootfs"]) / SITE
    assert (site / "dmn" / "cli" / "node.py").is_file()
    assert (site / "dmn" / "programs" / "macvlan-cni" / "v1" / "plugin.yaml").is_file()
    assert (site / "dmn" / "grammar" / "effects.lark").is_file()
    for lab_only in ("dmn/lab", "dmn/cli/lab", "dmn/charts", "dmn/examples", "cryptography"):
        assert not (site / lab_only).exists(), lab_only
    assert not list(site.glob("cryptography-*.dist-info"))


def test_dmn_lab_inside_the_image_says_the_lab_is_not_installed(built: dict[str, Any]) -> None:
    proc = _in_image(built, DMN, "lab", "up")
    assert proc.returncode == 2
    assert proc.stdout == ""
    assert proc.stderr.count("\n") == 1, proc.stderr
    assert proc.stderr.startswith("dmn lab: error[E_LAB_NOT_INSTALLED]:"), proc.stderr
    assert "Traceback" not in proc.stderr


def _member(tar: tarfile.TarFile, name: str) -> bytes:
    f = tar.extractfile(name)
    assert f is not None
    return f.read()


def test_oci_archive_is_consistent(built: dict[str, Any]) -> None:
    with tarfile.open(built["archive"]) as tar:
        assert json.loads(_member(tar, "oci-layout")) == {"imageLayoutVersion": "1.0.0"}
        index = json.loads(_member(tar, "index.json"))
        (entry,) = index["manifests"]
        assert entry["annotations"]["io.containerd.image.name"].endswith(":0.1.0")

        def blob(desc: dict[str, Any]) -> bytes:
            data = _member(tar, "blobs/sha256/" + desc["digest"].split(":")[1])
            assert len(data) == desc["size"]
            assert "sha256:" + hashlib.sha256(data).hexdigest() == desc["digest"]
            return data

        manifest = json.loads(blob(entry))
        config = json.loads(blob(manifest["config"]))
        assert config["config"]["User"] == "65532:65532"
        assert config["config"]["Entrypoint"] == [DMN]
        diff_ids = [
            "sha256:" + hashlib.sha256(gzip.decompress(blob(layer))).hexdigest()
            for layer in manifest["layers"]
        ]
        assert diff_ids == config["rootfs"]["diff_ids"]
        (docker,) = json.loads(_member(tar, "manifest.json"))
        assert docker["RepoTags"] == ["dra-multi-network:0.1.0"]
    assert built["archive_bytes"] == Path(built["archive"]).stat().st_size
