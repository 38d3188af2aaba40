"""Names in request paths are validated and escaped (issue 39, item 5): before, deleting
the NetworkTopology ``../networkplugins/vlan-cni`` deleted the NetworkPlugin ``vlan-cni``,
in the lab client and in the controller's and agent's own API access (one path builder)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from dmn.api.cluster import Cluster, NotFound, connect
from dmn.api.cluster import resources as r
from dmn.api.cluster.errors import InvalidName
from dmn.lab.apiserver import LabApiServer
from tests.controller.support import install

pytestmark = pytest.mark.adversarial


@pytest.fixture(scope="module")
def cluster() -> Iterator[Cluster]:
    with LabApiServer() as server, Cluster(connect(url=server.url)) as c:
        install(c)
        yield c


@pytest.mark.parametrize(
    "name",
    [
        "../networkplugins/vlan-cni",
        "..",
        ".",
        "vlan-cni/status",
        "%2e%2e",
        "a\nb",
        "a\x00b",
        "x" * 254,
        "",  # not the collection: DELETE on it would delete every topology
    ],
)
def test_a_name_that_is_not_a_path_segment_is_refused_before_any_request(
    cluster: Cluster, name: str
) -> None:
    with pytest.raises(InvalidName) as err:
        cluster.delete(r.NETWORK_TOPOLOGIES, name)
    assert err.value.message.startswith("E_NAME_INVALID")
    assert cluster.get(r.NETWORK_PLUGINS, "vlan-cni")["metadata"]["name"] == "vlan-cni"


def test_namespaces_and_api_versions_are_checked_too(cluster: Cluster) -> None:
    with pytest.raises(InvalidName):
        cluster.get(r.PODS, "p", "../../apis")
    with pytest.raises(InvalidName):
        cluster.resource_for("../networking.x/v1", "NetworkPlugin")
    with pytest.raises(InvalidName):
        cluster.resource_for("v1/..", "Pod")


def test_other_characters_are_escaped_not_sent_raw(cluster: Cluster) -> None:
    """``?`` and ``#`` would end the path; escaped, the name is looked up as given."""
    assert r.NETWORK_TOPOLOGIES.path(None, "a?b#c").endswith("/networktopologies/a%3Fb%23c")
    with pytest.raises(NotFound):
        cluster.get(r.NETWORK_PLUGINS, "vlan-cni?dryRun=All")
    assert cluster.get(r.NETWORK_PLUGINS, "vlan-cni")["metadata"]["name"] == "vlan-cni"
