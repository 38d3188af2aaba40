"""The lab's kubelet stand-in does not drop a Pod status write that lost a race.

The node agent patches a Pod's ``k8s.v1.cni.cncf.io/network-status`` annotation right after
RunPodSandbox, while the lab still has to write ``Running``: that write is guarded by the
Pod's resourceVersion and used to be dropped on the Conflict, leaving a Pod with a working
sandbox Pending for good (seen in ``tests/lab/test_pod_commands.py``, 2 runs of 6). Here
the lab's own API server decides the Conflict: the annotation is patched between the
runner's read and its write.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from dmn.api.cluster import Cluster
from dmn.api.cluster import resources as r
from dmn.lab.cluster import LabCluster
from dmn.lab.pod_demo import NAMESPACE, pod_manifest
from dmn.lab.pods import LabPods, RunningPod
from dmn.lab.state_dir import StateDir


class _AnnotatedInBetween:
    """The lab's client, except that after each of the first ``races`` reads of the Pod
    another writer patches its annotations (the agent's network-status write)."""

    def __init__(self, cluster: Cluster, races: int) -> None:
        self.cluster = cluster
        self.races = races

    def get(self, res: Any, name: str, namespace: str | None = None) -> dict[str, Any]:
        obj = self.cluster.get(res, name, namespace)
        if self.races > 0:
            self.races -= 1
            note = {"metadata": {"annotations": {"race": str(self.races)}}}
            self.cluster.patch(res, name, note, namespace)
        return obj

    def replace(self, *args: Any, **kwargs: Any) -> Any:
        return self.cluster.replace(*args, **kwargs)


def test_running_is_written_after_a_concurrent_annotation_patch(tmp_path: Path) -> None:
    lab = LabCluster(StateDir(tmp_path / "lab"))
    lab.start()
    try:
        cluster = lab.client()
        pod = cluster.create(r.PODS, pod_manifest("raced", "none"), NAMESPACE)
        pods = LabPods.__new__(LabPods)  # only its status writer: no agent, no runtime
        pods.cluster = _AnnotatedInBetween(cluster, races=2)  # type: ignore[assignment]
        running = RunningPod("raced", NAMESPACE, pod["metadata"]["uid"], "sb", "ns")
        pods._set_phase(running, "Running")
        stored = cluster.get(r.PODS, "raced", NAMESPACE)
        assert stored["status"]["phase"] == "Running", stored["status"]
        assert stored["metadata"]["annotations"]["race"] == "0"  # both patches landed
    finally:
        lab.stop()
