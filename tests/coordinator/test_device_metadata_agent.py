"""KEP-5304 device metadata through the node agent (``--device-metadata``): NodePrepare
writes the claim's metadata file and CDI spec and returns the CDI device id on the request's
device, a Ready sandbox adds its network data (the pool address the connect added), the
sandbox's removal takes it back, and NodeUnprepare removes both files.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest

from dmn.agent.kubelet.handler import ClaimRef
from dmn.api.identity import DRIVER
from dmn.lab.allocator.service import ClaimService
from dmn.lab.node import NODE_NAME
from dmn.lab.runtime.nri_runtime import LabPod
from tests.coordinator.lab_node import LabNode, lab_node
from tests.device_metadata.cdi_schema import problems
from tests.kernel.scratch import netns_path, scratch_netns

pytestmark = pytest.mark.netns


@pytest.fixture
def node() -> Iterator[LabNode]:
    with lab_node(device_metadata=True) as n:
        yield n


def first(text: str) -> dict[str, Any]:
    got, _ = json.JSONDecoder().raw_decode(text)
    assert isinstance(got, dict)
    return got


def test_prepare_ready_remove_unprepare_keep_the_metadata_file_in_step(node: LabNode) -> None:
    claim = node.claim("md-claim")
    pod = node.pod("md-pod", "md-claim")
    (claim,) = ClaimService(node.cluster, NODE_NAME).allocate([claim], pod=pod)
    meta = claim["metadata"]
    ref = ClaimRef(meta["namespace"], meta["uid"], meta["name"])
    assert node.agent.dra is not None
    result = node.agent.dra.prepare([ref])[ref.uid]
    assert result.error == ""
    (device,) = result.devices
    assert device.cdi_device_ids == (f"{DRIVER}/metadata={ref.uid}_net1",)

    host = node.root / "plugins" / DRIVER / "dra-device-metadata" / "default_md-claim" / "net1"
    spec_path = node.root / "cdi" / f"{DRIVER}_metadata_{ref.uid}_net1.json"
    spec = json.loads(spec_path.read_text())
    assert problems(spec) == []
    assert spec["devices"][0]["containerEdits"]["mounts"][0]["hostPath"] == str(
        host / "metadata.json"
    )
    listed = first((host / "metadata.json").read_text())["requests"][0]["devices"][0]
    assert (listed["pool"], listed["name"]) == (device.pool_name, device.device_name)
    assert listed["attributes"][f"{DRIVER}/inventoryID"]["string"]
    assert "networkData" not in listed

    with scratch_netns("dmmd") as sandbox:
        sb = LabPod("sb-md", pod["metadata"]["uid"], "md-pod", "default", netns_path(sandbox))
        node.runtime.run_pod_sandbox(sb)
        ready = first((host / "metadata.json").read_text())
        assert ready["metadata"]["generation"] == 2
        network = ready["requests"][0]["devices"][0]["networkData"]
        assert network["interfaceName"] == "net1" and network["ips"], network
        node.runtime.stop_pod_sandbox("sb-md")
        node.runtime.remove_pod_sandbox("sb-md")
    gone = first((host / "metadata.json").read_text())
    assert gone["metadata"]["generation"] == 3
    assert "networkData" not in gone["requests"][0]["devices"][0]

    assert node.agent.dra.unprepare([ref])[ref.uid].error == ""
    assert not spec_path.exists() and not host.exists()
