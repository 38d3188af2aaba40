"""The real Helm for chart tests: the binary ``lab/upstream/build.py`` builds from Helm's Go
module at the pinned version (built on first use if its cache stamp is missing; CI builds
it in ``.ci/run`` first), and ``helm template`` output parsed into objects."""

from __future__ import annotations

import copy
import importlib.util
import os
import subprocess
import sys
from collections.abc import Sequence
from functools import cache
from pathlib import Path
from typing import Any

import yaml

# the C (libyaml) parser when PyYAML has it: the same documents, parsed several times faster
_SAFE_LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)

REPO = Path(__file__).resolve().parents[2]
CHART = REPO / "charts" / "dra-multi-network"
VALUES = Path(__file__).with_name("values")
BUILD = REPO / "lab" / "upstream" / "build.py"


@cache
def helm_binary() -> Path:
    """``$DMN_HELM`` if set, else the pinned build (built now if absent)."""
    if os.environ.get("DMN_HELM"):
        return Path(os.environ["DMN_HELM"])
    spec = importlib.util.spec_from_file_location("dmn_upstream_build", BUILD)
    assert spec is not None and spec.loader is not None
    build = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(build)
    binary = Path(build.bin_dir("helm")) / "helm"
    if not binary.exists():
        proc = subprocess.run(
            [sys.executable, str(BUILD), "helm"], capture_output=True, text=True, timeout=3600
        )
        assert proc.returncode == 0, f"building helm failed:\n{proc.stderr[-3000:]}"
    return binary


def helm(*args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "HELM_CACHE_HOME": "/tmp/dmn-helm/cache"}
    env |= {"HELM_CONFIG_HOME": "/tmp/dmn-helm/config", "HELM_DATA_HOME": "/tmp/dmn-helm/data"}
    proc = subprocess.run(
        [str(helm_binary()), *args], capture_output=True, text=True, timeout=300, env=env
    )
    if check:
        assert proc.returncode == 0, f"helm {' '.join(args)} failed:\n{proc.stderr}"
    return proc


def render(
    values: Sequence[str] = (), sets: Sequence[str] = (), namespace: str = "dmn-system"
) -> list[dict[str, Any]]:
    """Every object ``helm template --include-crds`` renders for the given values files.

    One ``helm template`` per distinct arguments and values-file contents per session (a
    render is ~1 s of CPU, and the chart tests ask for the same few renders hundreds of
    times); each caller gets its own deep copy, so a test may change what it got. The
    chart's generated certificates are therefore the same for every caller of one render:
    no test compares two renders' certificates.
    """
    files = tuple((name, (VALUES / name).read_bytes()) for name in values)
    return copy.deepcopy(_render_once(files, tuple(sets), namespace))


@cache
def _render_once(
    files: tuple[tuple[str, bytes], ...], sets: tuple[str, ...], namespace: str
) -> list[dict[str, Any]]:
    args = ["template", "dmn", str(CHART), "--namespace", namespace, "--include-crds"]
    for name, _ in files:
        args += ["--values", str(VALUES / name)]
    for item in sets:
        args += ["--set", item]
    out = helm(*args).stdout
    return [doc for doc in yaml.load_all(out, Loader=_SAFE_LOADER) if doc]


def find(docs: list[dict[str, Any]], kind: str, name: str | None = None) -> dict[str, Any]:
    hits = [d for d in docs if d["kind"] == kind and name in (None, d["metadata"]["name"])]
    assert len(hits) == 1, f"{len(hits)} {kind} {name or ''} rendered"
    return hits[0]
