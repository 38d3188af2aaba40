"""One lab API server per module with CRDs and builtin plugins; a running controller."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from dmn.api.cluster import Cluster
from dmn.controller.manager import Controller
from dmn.lab.apiserver import LabApiServer
from dmn.opcodes.registry import default_registry
from tests.controller.support import client_for, install


@pytest.fixture(scope="module")
def lab() -> Iterator[LabApiServer]:
    with LabApiServer(bookmark_interval=0.5) as server:
        with client_for(server.url) as cluster:
            install(cluster)
        yield server


@pytest.fixture(scope="module")
def cluster(lab: LabApiServer) -> Iterator[Cluster]:
    with client_for(lab.url) as c:
        yield c


@pytest.fixture(scope="module")
def controller(lab: LabApiServer) -> Iterator[Controller]:
    with client_for(lab.url) as c:
        ctl = Controller(c, default_registry(), resync=1.0)
        ctl.start()
        yield ctl
        ctl.stop()
