"""KEP-5304 device metadata on the real kubelet v1.37.2 and containerd: the node agent started
with ``--device-metadata`` returns the metadata CDI device id from NodePrepareResources, the
kubelet hands it to containerd, and containerd bind-mounts the file into the container at
the path Kubernetes defines — read here from inside the container (``/proc/<pid>/root`` of
its process), with the network data the Ready sandbox added. Deleting the Pod removes the
node's files. The agent runs as a host process here (the lab's ``process`` install, whose
CDI specs go to the host's /var/run/cdi, a directory containerd reads by default); the test
restarts it with the flag and restores its command line afterwards.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from dmn.api.cluster import Cluster
from dmn.api.identity import DRIVER
from dmn.lab.upstream.cluster import UpstreamLab
from tests.e2e import installed_driver, lab_pods
from tests.waiting import wait_for

pytestmark = [pytest.mark.e2e]

IN_CONTAINER = (
    "var/run/kubernetes.io/dra-device-attributes/resourceclaimtemplates/net/net/"
    f"{DRIVER}-metadata.json"
)


def _restart_agent(lab: UpstreamLab, argv: list[str]) -> None:
    synced = installed_driver.agent_log_count(lab, installed_driver.SYNCHRONIZE)
    registered = installed_driver.agent_log_count(lab, installed_driver.REGISTERED)
    lab.procs.stop("dmn-node")
    lab.procs.start("dmn-node", argv)
    installed_driver._wait_marker(
        lab, installed_driver.SYNCHRONIZE, synced, "the agent's NRI Synchronize", None
    )
    installed_driver._wait_marker(
        lab, installed_driver.REGISTERED, registered, "the agent's kubelet registration", None
    )


def _container_file(pod_uid: str) -> str:
    for pid in lab_pods._pids_of_pod(pod_uid):
        try:
            if Path(f"/proc/{pid}/comm").read_text().strip() != "sleep":
                continue
            return Path(f"/proc/{pid}/root/{IN_CONTAINER}").read_text()
        except OSError:
            continue
    raise AssertionError(f"no container process of Pod {pod_uid} shows {IN_CONTAINER}")


def _first(text: str) -> dict[str, Any]:
    got, _ = json.JSONDecoder().raw_decode(text)
    assert isinstance(got, dict)
    return got


def test_a_container_reads_its_device_metadata_file(
    upstream_lab: UpstreamLab, admin: Cluster, classes: dict[str, str], pods: list[str]
) -> None:
    if installed_driver.runs_as_pods(upstream_lab):
        pytest.skip("the chart install takes --device-metadata through nodeAgent.extraArgs")
    record = upstream_lab.procs.get("dmn-node")
    assert record is not None
    plain = list(record.argv)
    _restart_agent(upstream_lab, [*plain, "--device-metadata"])
    try:
        lab_pods.run(admin, pods, "md-1", "shared-macvlan")
        lab_pods.wait_running(admin, "md-1")
        pod_uid = lab_pods.uid(admin, "md-1")

        def reported() -> dict[str, Any] | None:
            (claim,) = lab_pods.claims_of(admin, pod_uid)
            entries = (claim.get("status") or {}).get("devices") or []
            return claim if entries and entries[0].get("networkData") else None

        claim = wait_for(reported, timeout=lab_pods.WAIT, interval=0.5, what="networkData")
        assert claim is not None
        meta = claim["metadata"]
        got = _container_file(pod_uid)
        first = _first(got)
        assert first["apiVersion"] == "metadata.resource.k8s.io/v1beta1", got
        assert first["metadata"]["uid"] == meta["uid"] and first["podClaimName"] == "net"
        (request,) = first["requests"]
        (device,) = request["devices"]
        assert device["driver"] == DRIVER
        assert device["attributes"][f"{DRIVER}/inventoryID"]["string"]
        network = device["networkData"]
        status = claim["status"]["devices"][0]["networkData"]
        assert network["interfaceName"] == "net1" and network["ips"] == status["ips"], got
        cdi = Path("/var/run/cdi") / f"{DRIVER}_metadata_{meta['uid']}_net.json"
        assert cdi.exists()
        lab_pods.remove(admin, "md-1")
        pods.remove("md-1")
        wait_for(lambda: not cdi.exists(), timeout=lab_pods.WAIT, interval=0.5, what="unprepare")
    finally:
        _restart_agent(upstream_lab, plain)
