"""The Pod's network-status annotation: our entries merged with other writers', guarded."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest

from dmn.agent.coordinator.pod_network_status import (
    NETWORK_STATUS,
    PodNetworkStatus,
    attached_message,
    merged,
    status_entries,
)
from dmn.api.cluster import Cluster, connect
from dmn.api.cluster import resources as r
from dmn.lab.apiserver import LabApiServer

DEVICE = {
    "driver": "d.example",
    "pool": "p",
    "device": "dev0",
    "networkData": {
        "interfaceName": "net1",
        "ips": ["10.0.0.2/24", "fd00::2/64"],
        "hardwareAddress": "02:00:00:00:00:01",
    },
}
DEFAULT = {"name": "kindnet", "interface": "eth0", "ips": ["10.244.0.5"], "default": True}


def test_entries_name_the_claim_and_carry_addresses_without_prefix() -> None:
    vfio = {"driver": "d.example", "pool": "p", "device": "vf1"}
    assert status_entries("team-a", "fast-net", [DEVICE, vfio]) == [
        {
            "name": "team-a/fast-net",
            "interface": "net1",
            "ips": ["10.0.0.2", "fd00::2"],
            "mac": "02:00:00:00:00:01",
            "dns": {},
        }
    ]


def test_merge_keeps_other_writers_and_replaces_ours() -> None:
    stale = {"name": "team-a/fast-net", "interface": "net9"}
    ours = status_entries("team-a", "fast-net", [DEVICE])
    value = json.loads(merged(json.dumps([DEFAULT, stale]), {"team-a/fast-net"}, ours))
    assert value == [DEFAULT, *ours]
    for garbage in ("not json", '{"a": 1}', "[1, 2]"):
        assert json.loads(merged(garbage, {"team-a/fast-net"}, ours)) == ours


@pytest.fixture
def cluster() -> Iterator[Cluster]:
    with LabApiServer() as srv, Cluster(connect(url=srv.url)) as c:
        yield c


def _pod(cluster: Cluster, annotations: dict[str, str] | None = None) -> dict[str, Any]:
    return cluster.create(
        r.PODS,
        {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": "p", "namespace": "default", "annotations": annotations or {}},
            "spec": {"containers": [{"name": "c", "image": "busybox"}]},
        },
        "default",
    )


def test_written_beside_the_cluster_networks_entry(cluster: Cluster) -> None:
    pod = _pod(cluster, {NETWORK_STATUS: json.dumps([DEFAULT])})
    ours = status_entries("default", "fast-net", [DEVICE])
    PodNetworkStatus(cluster).write(
        "default", "p", pod["metadata"]["uid"], ["default/fast-net"], ours
    )
    got = cluster.get(r.PODS, "p", "default")["metadata"]["annotations"][NETWORK_STATUS]
    assert json.loads(got) == [DEFAULT, *ours]


def test_a_concurrent_writer_is_re_merged_never_overwritten(cluster: Cluster) -> None:
    """Multus (or anyone) writing between our read and our patch: the guarded patch
    conflicts, the write re-reads and keeps their entry."""
    pod = _pod(cluster)
    real_get = cluster.get
    raced = []

    def get_then_race(res: Any, name: str, namespace: str | None = None) -> Any:
        got = real_get(res, name, namespace)
        if not raced:
            raced.append(True)
            patch = {"metadata": {"annotations": {NETWORK_STATUS: json.dumps([DEFAULT])}}}
            cluster.patch(r.PODS, "p", patch, "default")
        return got

    cluster.get = get_then_race  # type: ignore[method-assign]
    ours = status_entries("default", "fast-net", [DEVICE])
    PodNetworkStatus(cluster).write(
        "default", "p", pod["metadata"]["uid"], ["default/fast-net"], ours
    )
    cluster.get = real_get  # type: ignore[method-assign]
    got = cluster.get(r.PODS, "p", "default")["metadata"]["annotations"][NETWORK_STATUS]
    assert json.loads(got) == [DEFAULT, *ours]


def test_another_pod_of_the_same_name_or_a_gone_pod_is_left_alone(cluster: Cluster) -> None:
    _pod(cluster)
    ours = status_entries("default", "fast-net", [DEVICE])
    PodNetworkStatus(cluster).write("default", "p", "some-other-uid", ["default/fast-net"], ours)
    assert NETWORK_STATUS not in (
        cluster.get(r.PODS, "p", "default")["metadata"].get("annotations") or {}
    )
    PodNetworkStatus(cluster).write("default", "gone", "uid", ["default/fast-net"], ours)


def test_the_attached_message_names_each_claims_interfaces_and_addresses() -> None:
    vfio = {"driver": "d.example", "pool": "node-1", "device": "vf1"}
    message = attached_message([("a", "fast"), ("a", "dpdk")], [[DEVICE], [vfio]])
    assert message == (
        "attached claim a/fast: net1 (10.0.0.2/24, fd00::2/64) | claim a/dpdk: node-1/vf1"
    )
    long = attached_message([("a", "x" * 2000)], [[DEVICE]])
    assert len(long) == 1024 and long.endswith("…")


def test_a_vfio_grant_is_an_entry_with_its_pci_device_info() -> None:
    vfio = {
        "driver": "d",
        "pool": "p",
        "device": "vf1",
        "data": {"pciAddress": "0000:3b:02.1", "iommuGroup": "42", "rdmaDevice": "mlx5_3"},
    }
    assert status_entries("a", "dpdk", [vfio]) == [
        {
            "name": "a/dpdk",
            "dns": {},
            "device-info": {
                "type": "pci",
                "version": "1.1.0",
                "pci": {"pci-address": "0000:3b:02.1", "rdma-device": "mlx5_3"},
            },
        }
    ]
    assert "PCI 0000:3b:02.1 (IOMMU group 42)" in attached_message([("a", "dpdk")], [[vfio]])
