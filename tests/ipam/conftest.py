"""One lab API server per module with the project's CRDs installed."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from dmn.api.cluster import Cluster, connect
from dmn.api.cluster import resources as r
from dmn.lab.apiserver import LabApiServer

CRD_DIR = Path(__file__).resolve().parents[2] / "charts" / "dra-multi-network" / "crds"


@pytest.fixture(scope="module")
def lab() -> Iterator[LabApiServer]:
    with LabApiServer(bookmark_interval=0.5) as server:
        with Cluster(connect(url=server.url)) as cluster:
            for path in sorted(CRD_DIR.glob("*.yaml")):
                cluster.create(r.CUSTOM_RESOURCE_DEFINITIONS, yaml.safe_load(path.read_text()))
        yield server


@pytest.fixture(scope="module")
def cluster(lab: LabApiServer) -> Iterator[Cluster]:
    with Cluster(connect(url=lab.url)) as c:
        yield c
