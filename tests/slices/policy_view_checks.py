"""What the node agent's policy reads rely on from the API server, as checks any server must
pass: run against the lab API server (``tests/slices/test_policy_reader.py``) and against
the real kube-apiserver of the upstream lab (``tests/e2e/test_control_plane.py``).

* a metadata-only list (``as=PartialObjectMetadataList``) of DeviceExposurePolicies gives
  each policy's name, UID, generation and resourceVersion, and no spec or status;
* a metadata-only watch gives a status write as a MODIFIED whose generation did not move,
  and a spec change as one whose generation did, neither carrying spec or status;
* a JSON patch whose ``test`` fails is refused with 422 Invalid and changes nothing (the
  status writer's guard of its own entry's index).
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Callable
from typing import Any

import pytest

from dmn.api.cluster import Cluster, Invalid, NotFound, WatchEvent
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


def metadata_list(cluster: Cluster, prefix: str) -> None:
    name = f"{prefix}-meta-list"
    with _created(cluster, name) as created:
        cluster.replace(
            r.DEVICE_EXPOSURE_POLICIES,
            {**created, "status": {"nodes": [_entry("n1")]}},
            status=True,
        )
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
    name = f"{prefix}-meta-watch"
    with _created(cluster, name) as created:
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
                if (event.object.get("metadata") or {}).get("name") == name:
                    events.append(event)
                    if len(events) == 2:
                        done.set()
                        return

        reader = threading.Thread(target=collect, daemon=True)
        reader.start()
        stored = cluster.replace(
            r.DEVICE_EXPOSURE_POLICIES,
            {**created, "status": {"nodes": [_entry("n1")]}},
            status=True,
        )
        cluster.patch(r.DEVICE_EXPOSURE_POLICIES, name, {"spec": {"priority": 11}})
        done.wait(20)
        stream.stop()
        assert [e.type for e in events] == ["MODIFIED", "MODIFIED"], events
        status_write, spec_change = (e.object for e in events)
        for obj in (status_write, spec_change):
            assert obj["kind"] == "PartialObjectMetadata" and "spec" not in obj, obj
            assert "status" not in obj, obj
        generation = stored["metadata"]["generation"]
        assert status_write["metadata"]["generation"] == generation
        assert spec_change["metadata"]["generation"] == generation + 1


def failed_test_refused(cluster: Cluster, prefix: str) -> None:
    name = f"{prefix}-patch-test"
    with _created(cluster, name) as created:
        stored = cluster.replace(
            r.DEVICE_EXPOSURE_POLICIES,
            {**created, "status": {"nodes": [_entry("n1")]}},
            status=True,
        )
        patch = [
            {"op": "test", "path": "/status/nodes/0/nodeName", "value": "n2"},
            {"op": "replace", "path": "/status/nodes/0", "value": _entry("n2")},
        ]
        with pytest.raises(Invalid):
            cluster.patch(r.DEVICE_EXPOSURE_POLICIES, name, patch, patch_type="json", status=True)
        after = cluster.get(r.DEVICE_EXPOSURE_POLICIES, name)
        assert after["metadata"]["resourceVersion"] == stored["metadata"]["resourceVersion"]
        assert after["status"]["nodes"] == [_entry("n1")]


ALL: list[Callable[[Cluster, str], None]] = [metadata_list, metadata_watch, failed_test_refused]
