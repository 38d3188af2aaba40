"""What the node agent's policy reads rely on from the API server, as checks any server must
pass: run against the lab API server (``tests/slices/test_policy_reader.py``) and against
the real kube-apiserver of the upstream lab (``tests/e2e/test_control_plane.py``).

* a metadata-only list (``as=PartialObjectMetadataList``) of DeviceExposurePolicies gives
  each policy's name, UID, generation and resourceVersion, and no spec or status;
* a metadata-only watch gives a status write as a MODIFIED whose generation did not move,
  and a spec change as one whose generation did, neither carrying spec or status;

On the upstream lab our controller writes each policy's status aggregate meanwhile: the
checks re-read on a conflict and pick their own events out of the watch by version.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Callable
from typing import Any

from dmn.api.cluster import Cluster, Conflict, NotFound, WatchEvent
from dmn.api.cluster import resources as r
from dmn.api.identity import API_VERSION


def _policy(name: str) -> dict[str, Any]:
    return {
        "apiVersion": API_VERSION,
        "kind": "DeviceExposurePolicy",
        "metadata": {"name": name},
        "spec": {"priority": 10, "selector": {"kind": "PF"}, "action": "Exclude"},
    }


def _entry(node: str) -> dict[str, Any]:
    return {"nodeName": node, "lastReportTime": "2026-12-07T00:00:00Z", "exposedDevices": 0}


@contextlib.contextmanager
def _created(cluster: Cluster, name: str) -> Any:
    created = cluster.create(r.DEVICE_EXPOSURE_POLICIES, _policy(name))
    try:
        yield created
    finally:
        with contextlib.suppress(NotFound):
            cluster.delete(r.DEVICE_EXPOSURE_POLICIES, name)


def _write_nodes(cluster: Cluster, name: str, nodes: list[dict[str, Any]]) -> dict[str, Any]:
    """Put ``nodes`` as the policy's ``status.nodes``, keeping what else its status holds
    (on the upstream lab our controller writes its aggregate at the same time: a conflict
    re-reads)."""
    for _ in range(10):
        current = cluster.get(r.DEVICE_EXPOSURE_POLICIES, name)
        status = {**(current.get("status") or {}), "nodes": nodes}
        with contextlib.suppress(Conflict):
            return cluster.replace(
                r.DEVICE_EXPOSURE_POLICIES, {**current, "status": status}, status=True
            )
    raise AssertionError(f"{name}: the status write kept conflicting")


def metadata_list(cluster: Cluster, prefix: str) -> None:
    name = f"{prefix}-meta-list"
    with _created(cluster, name) as created:
        _write_nodes(cluster, name, [_entry("n1")])
        listed = cluster.list(r.DEVICE_EXPOSURE_POLICIES, metadata_only=True).items
        (item,) = [i for i in listed if i["metadata"]["name"] == name]
        assert item["apiVersion"] == "meta.k8s.io/v1", item
        assert item["kind"] == "PartialObjectMetadata", item
        assert set(item) == {"apiVersion", "kind", "metadata"}, item
        meta = item["metadata"]
        assert meta["uid"] == created["metadata"]["uid"]
        assert meta["generation"] == created["metadata"]["generation"]
        assert meta["resourceVersion"]


def metadata_watch(cluster: Cluster, prefix: str) -> None:
    """Other writers may write the policy meanwhile (a controller's status aggregate): the
    events are read until the spec change, and the status write is found by its version."""
    name = f"{prefix}-meta-watch"
    with _created(cluster, name) as created:
        generation = created["metadata"]["generation"]
        events: list[WatchEvent] = []
        stream = cluster.watch(
            r.DEVICE_EXPOSURE_POLICIES,
            resource_version=created["metadata"]["resourceVersion"],
            timeout_seconds=30,
            metadata_only=True,
        )
        done = threading.Event()

        def collect() -> None:
            for event in stream:
                meta = event.object.get("metadata") or {}
                if meta.get("name") == name:
                    events.append(event)
                    if meta.get("generation") != generation:
                        done.set()
                        return

        reader = threading.Thread(target=collect, daemon=True)
        reader.start()
        stored = _write_nodes(cluster, name, [_entry("n1")])
        cluster.patch(r.DEVICE_EXPOSURE_POLICIES, name, {"spec": {"priority": 11}})
        done.wait(20)
        stream.stop()
        assert events and all(e.type == "MODIFIED" for e in events), events
        for event in events:
            obj = event.object
            assert obj["kind"] == "PartialObjectMetadata" and "spec" not in obj, obj
            assert "status" not in obj, obj
        *before, spec_change = (e.object["metadata"] for e in events)
        assert spec_change["generation"] == generation + 1, events
        assert all(m["generation"] == generation for m in before), events
        version = stored["metadata"]["resourceVersion"]
        assert any(m["resourceVersion"] == version for m in before), (version, events)


ALL: list[Callable[[Cluster, str], None]] = [metadata_list, metadata_watch]
