"""KEP-5304 device metadata files and their CDI specs (agent/coordinator/device_metadata.py).

The layout, names and schema checked here are those of k8s.io/dynamic-resource-allocation
v0.37.2 (the kubelet v1.37.2 the upstream lab runs): ``api/metadata`` (container paths, the
``DeviceMetadata`` fields, the stream newest version first) and ``kubeletplugin/metadata.go``
(host file and CDI spec names, the CDI device id, the read-only bind mount).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from dmn.agent.coordinator.device_metadata import (
    ClaimIdentity,
    DeviceMetadataFiles,
    MetadataDevice,
    MetadataLayout,
    from_status_entries,
    render_metadata,
)
from dmn.agent.coordinator.verify import Refusal
from tests.device_metadata.cdi_schema import problems

DRIVER = "dra-multi-network.schseba.github.io"
ATTRS = {
    f"{DRIVER}/pciAddress": {"string": "0000:3b:02.1"},
    f"{DRIVER}/rdmaCapable": {"bool": True},
}
CLAIM = ClaimIdentity("tenant-a", "net-claim", "uid-1")
TEMPLATED = ClaimIdentity("tenant-a", "pod-net-x7k2", "uid-2", pod_claim_name="net")


def stream(text: str) -> list[dict[str, Any]]:
    decoder, out, at = json.JSONDecoder(), [], 0
    while at < len(text):
        while at < len(text) and text[at].isspace():
            at += 1
        if at == len(text):
            break
        obj, at = decoder.raw_decode(text, at)
        out.append(obj)
    return out


@pytest.fixture
def files(tmp_path: Path) -> DeviceMetadataFiles:
    return DeviceMetadataFiles(
        MetadataLayout(DRIVER, tmp_path / "plugins" / DRIVER, tmp_path / "cdi")
    )


def test_the_stream_holds_v1beta1_then_v1alpha1_with_the_upstream_fields() -> None:
    text = render_metadata(
        DRIVER, TEMPLATED, "net", [MetadataDevice("node-1", "eth1-macvlan", ATTRS)], 1
    )
    objs = stream(text)
    assert [o["apiVersion"] for o in objs] == [
        "metadata.resource.k8s.io/v1beta1",
        "metadata.resource.k8s.io/v1alpha1",
    ]
    for o in objs:
        assert o["kind"] == "DeviceMetadata"
        assert o["metadata"] == {
            "name": "pod-net-x7k2",
            "namespace": "tenant-a",
            "uid": "uid-2",
            "generation": 1,
        }
        assert o["podClaimName"] == "net"
        (req,) = o["requests"]
        assert req["name"] == "net"
        (dev,) = req["devices"]
        assert set(dev) <= {"driver", "pool", "name", "attributes", "networkData"}
        assert dev == {
            "driver": DRIVER,
            "pool": "node-1",
            "name": "eth1-macvlan",
            "attributes": ATTRS,
        }
    assert {k: v for k, v in objs[0].items() if k != "apiVersion"} == {
        k: v for k, v in objs[1].items() if k != "apiVersion"
    }


def test_publish_writes_the_file_and_a_valid_cdi_spec_at_the_upstream_paths(
    files: DeviceMetadataFiles, tmp_path: Path
) -> None:
    ids = files.publish(CLAIM, {"net": [MetadataDevice("node-1", "eth1-macvlan", ATTRS)]})
    assert ids == {"net": f"{DRIVER}/metadata=uid-1_net"}
    host = (
        tmp_path
        / "plugins"
        / DRIVER
        / "dra-device-metadata"
        / "tenant-a_net-claim"
        / "net"
        / "metadata.json"
    )
    assert stream(host.read_text())[0]["requests"][0]["devices"][0]["attributes"] == ATTRS
    assert oct(host.stat().st_mode & 0o777) == "0o644"
    spec_path = tmp_path / "cdi" / f"{DRIVER}_metadata_uid-1_net.json"
    spec = json.loads(spec_path.read_text())
    assert problems(spec) == []
    assert spec["kind"] == f"{DRIVER}/metadata"
    (device,) = spec["devices"]
    assert device["name"] == "uid-1_net"
    assert device["containerEdits"] == {
        "mounts": [
            {
                "hostPath": str(host),
                "containerPath": "/var/run/kubernetes.io/dra-device-attributes/resourceclaims/"
                f"net-claim/net/{DRIVER}-metadata.json",
                "options": ["ro", "bind"],
            }
        ]
    }
    assert not list(host.parent.glob(".*.tmp")) and not list(spec_path.parent.glob(".*.tmp"))


def test_a_template_claim_is_mounted_under_its_pod_claim_name_and_subrequests_use_the_base(
    files: DeviceMetadataFiles, tmp_path: Path
) -> None:
    ids = files.publish(TEMPLATED, {"net/fast": [MetadataDevice("node-1", "vf-3", {})]})
    assert ids == {"net": f"{DRIVER}/metadata=uid-2_net"}
    spec = json.loads((tmp_path / "cdi" / f"{DRIVER}_metadata_uid-2_net.json").read_text())
    mount = spec["devices"][0]["containerEdits"]["mounts"][0]
    assert mount["containerPath"] == (
        f"/var/run/kubernetes.io/dra-device-attributes/resourceclaimtemplates/net/net/{DRIVER}-metadata.json"
    )
    assert stream(Path(mount["hostPath"]).read_text())[0]["requests"][0]["name"] == "net/fast"


def test_ready_adds_network_and_grant_data_removal_takes_them_back(
    files: DeviceMetadataFiles,
) -> None:
    files.publish(CLAIM, {"net": [MetadataDevice("node-1", "vf-3", ATTRS)]})
    host = files.layout.host_file("tenant-a", "net-claim", "net")
    entries = [
        {
            "driver": DRIVER,
            "pool": "node-1",
            "device": "vf-3",
            "networkData": {
                "interfaceName": "net1",
                "ips": ["10.56.0.7/24"],
                "hardwareAddress": "02:00:00:00:00:07",
            },
            "data": {
                "pciAddress": "0000:3b:02.1",
                "iommuGroup": "41",
                "cdiDevices": [f"{DRIVER}/vfio=gabc"],
            },
        }
    ]
    assert files.update("tenant-a", "net-claim", "uid-1", from_status_entries(DRIVER, entries)) == 1
    objs = stream(host.read_text())
    dev = objs[0]["requests"][0]["devices"][0]
    assert objs[0]["metadata"]["generation"] == 2 and objs[1]["metadata"]["generation"] == 2
    assert dev["networkData"] == entries[0]["networkData"]
    assert dev["attributes"] == {
        **ATTRS,
        f"{DRIVER}/grantPciAddress": {"string": "0000:3b:02.1"},
        f"{DRIVER}/grantIommuGroup": {"string": "41"},
        f"{DRIVER}/grantCdiDevice": {"string": f"{DRIVER}/vfio=gabc"},
    }
    # the same report again changes nothing (no generation bump)
    assert files.update("tenant-a", "net-claim", "uid-1", from_status_entries(DRIVER, entries)) == 0
    # a kubelet retry of NodePrepare keeps what the Ready sandbox added
    files.publish(CLAIM, {"net": [MetadataDevice("node-1", "vf-3", ATTRS)]})
    assert "networkData" in stream(host.read_text())[0]["requests"][0]["devices"][0]
    # the sandbox is gone: back to the prepare-time attributes, generation 3
    assert files.update("tenant-a", "net-claim", "uid-1", {("node-1", "vf-3"): None}) == 1
    objs = stream(host.read_text())
    assert objs[0]["metadata"]["generation"] == 3
    assert objs[0]["requests"][0]["devices"][0] == {
        "driver": DRIVER,
        "pool": "node-1",
        "name": "vf-3",
        "attributes": ATTRS,
    }


def test_files_of_another_claim_are_never_overwritten_updated_or_removed(
    files: DeviceMetadataFiles, tmp_path: Path
) -> None:
    files.publish(CLAIM, {"net": [MetadataDevice("node-1", "vf-3", ATTRS)]})
    host = files.layout.host_file("tenant-a", "net-claim", "net")
    before = host.read_text()
    # a new claim of the same name (another UID) while the old one's files remain
    again = ClaimIdentity("tenant-a", "net-claim", "uid-9")
    with pytest.raises(Refusal) as refused:
        files.publish(again, {"net": [MetadataDevice("node-1", "vf-3", ATTRS)]})
    assert refused.value.code == "E_DEVICE_METADATA" and refused.value.retryable
    assert files.update("tenant-a", "net-claim", "uid-9", {("node-1", "vf-3"): None}) == 0
    files.remove("tenant-a", "net-claim", "uid-9")
    assert host.read_text() == before
    # a CDI spec at our name with other bytes is not ours: refused, left alone
    spec_path = tmp_path / "cdi" / f"{DRIVER}_metadata_uid-1_net.json"
    spec_path.write_text('{"cdiVersion": "0.6.0"}\n')
    with pytest.raises(Refusal):
        files.publish(CLAIM, {"net": [MetadataDevice("node-1", "vf-3", ATTRS)]})
    files.remove("tenant-a", "net-claim", "uid-1")
    assert spec_path.read_text() == '{"cdiVersion": "0.6.0"}\n'
    assert not host.exists()  # the metadata file was ours (uid and driver)


def test_remove_leaves_nothing_and_is_idempotent(
    files: DeviceMetadataFiles, tmp_path: Path
) -> None:
    files.publish(
        TEMPLATED, {"a": [MetadataDevice("p", "d1", {})], "b": [MetadataDevice("p", "d2", {})]}
    )
    assert len(list((tmp_path / "cdi").iterdir())) == 2
    files.remove("tenant-a", "pod-net-x7k2", "uid-2")
    files.remove("tenant-a", "pod-net-x7k2", "uid-2")
    assert list((tmp_path / "cdi").iterdir()) == []
    assert list((tmp_path / "plugins" / DRIVER / "dra-device-metadata").iterdir()) == []


def test_claim_identity_reads_the_pod_claim_name_annotation() -> None:
    claim = {
        "metadata": {
            "namespace": "ns",
            "name": "p-net-1",
            "uid": "u",
            "annotations": {"resource.kubernetes.io/pod-claim-name": "net"},
        }
    }
    assert ClaimIdentity.of(claim) == ClaimIdentity("ns", "p-net-1", "u", "net")
    assert (
        ClaimIdentity.of({"metadata": {"namespace": "ns", "name": "c", "uid": "u"}}).pod_claim_name
        is None
    )
