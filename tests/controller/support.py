"""A lab API server with the project's CRDs and builtin plugins, plus wait helpers."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import yaml

from dmn.api.cluster import Cluster, NotFound, connect
from dmn.api.cluster import resources as r
from tests import waiting

REPO = Path(__file__).resolve().parents[2]
CRD_DIR = REPO / "charts" / "dra-multi-network" / "crds"
PLUGIN_DIR = REPO / "charts" / "dra-multi-network" / "plugins"
EXAMPLES = REPO / "examples" / "topologies"

T = TypeVar("T")


class FakeClock:
    """A clock the test moves by hand (``now`` in seconds)."""

    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def install(cluster: Cluster) -> None:
    for path in sorted(CRD_DIR.glob("*.yaml")):
        cluster.create(r.CUSTOM_RESOURCE_DEFINITIONS, yaml.safe_load(path.read_text()))
    for path in sorted(PLUGIN_DIR.glob("*.yaml")):
        cluster.create(r.NETWORK_PLUGINS, yaml.safe_load(path.read_text()))


def client_for(url: str) -> Cluster:
    return Cluster(connect(url=url))


def example(name: str) -> dict[str, Any]:
    return yaml.safe_load((EXAMPLES / f"{name}.yaml").read_text())  # type: ignore[no-any-return]


def wait_for(probe: Callable[[], T | None], timeout: float = 60.0, what: str = "") -> T:
    """:func:`tests.waiting.wait_for` where an object not existing yet means "not yet"."""
    found = waiting.wait_for(probe, timeout=timeout, what=what, tolerate=(NotFound,))
    assert found is not None
    return found


def ready(obj: dict[str, Any]) -> dict[str, Any] | None:
    for c in (obj.get("status") or {}).get("conditions") or []:
        if c["type"] == "Ready":
            return c  # type: ignore[no-any-return]
    return None


def topology_settled(
    cluster: Cluster, name: str, generation: int | None = None
) -> Callable[[], dict[str, Any] | None]:
    def probe() -> dict[str, Any] | None:
        topo = cluster.get(r.NETWORK_TOPOLOGIES, name)
        cond = ready(topo)
        gen = generation if generation is not None else topo["metadata"]["generation"]
        if cond and cond.get("observedGeneration") == gen:
            return topo
        return None

    return probe
