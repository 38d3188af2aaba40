"""List and watch: resume from a resourceVersion, 410 Expired, selectors, bookmarks."""

from __future__ import annotations

import threading
from typing import Any

import pytest
from kubernetes import client, watch
from kubernetes.client.exceptions import ApiException

from dmn.lab.apiserver import LabApiServer

from .conftest import make_client


def collect(func, count: int, **kwargs) -> list[tuple[str, str, str]]:
    events = []
    w = watch.Watch()
    for event in w.stream(func, timeout_seconds=60, **kwargs):
        obj = event["object"]
        events.append((event["type"], obj.metadata.name, obj.metadata.resource_version))
        if len(events) >= count:
            w.stop()
    return events


def test_watch_from_resource_version_replays_in_order(core: client.CoreV1Api, ns: str) -> None:
    listed = core.list_namespaced_config_map(ns)
    start = listed.metadata.resource_version
    core.create_namespaced_config_map(ns, {"metadata": {"name": "a"}, "data": {"v": "1"}})
    core.patch_namespaced_config_map("a", ns, {"data": {"v": "2"}})
    core.delete_namespaced_config_map("a", ns)
    events = collect(core.list_namespaced_config_map, 3, namespace=ns, resource_version=start)
    assert [(t, n) for t, n, _ in events] == [("ADDED", "a"), ("MODIFIED", "a"), ("DELETED", "a")]
    versions = [int(rv) for _, _, rv in events]
    assert versions == sorted(versions) and len(set(versions)) == 3
    # resume from the middle: only what came after
    resumed = collect(
        core.list_namespaced_config_map, 1, namespace=ns, resource_version=events[0][2]
    )
    assert resumed[0][:2] == ("MODIFIED", "a")


def test_watch_without_version_starts_with_current_state(core: client.CoreV1Api, ns: str) -> None:
    core.create_namespaced_config_map(ns, {"metadata": {"name": "x"}})
    events = collect(core.list_namespaced_config_map, 1, namespace=ns)
    assert events[0][:2] == ("ADDED", "x")


def test_watch_sees_live_changes(core: client.CoreV1Api, ns: str) -> None:
    start = core.list_namespaced_config_map(ns).metadata.resource_version
    timer = threading.Timer(
        0.2, lambda: core.create_namespaced_config_map(ns, {"metadata": {"name": "live"}})
    )
    timer.start()
    events = collect(core.list_namespaced_config_map, 1, namespace=ns, resource_version=start)
    timer.join()
    assert events[0][:2] == ("ADDED", "live")


def test_watch_timeout_ends_stream(core: client.CoreV1Api, ns: str) -> None:
    start = core.list_namespaced_config_map(ns).metadata.resource_version
    result: list[Any] = []

    def consume() -> None:
        result.append(
            list(
                watch.Watch().stream(
                    core.list_namespaced_config_map,
                    namespace=ns,
                    resource_version=start,
                    timeout_seconds=1,
                )
            )
        )

    # the stream must end by itself; a generous deadline (no wall-clock assert) tells an
    # honoured timeoutSeconds from a stream left open
    consumer = threading.Thread(target=consume, daemon=True)
    consumer.start()
    consumer.join(60)
    assert not consumer.is_alive(), "watch did not end at timeoutSeconds"
    assert result == [[]]


def test_label_selector_watch_reports_entering_and_leaving(core: client.CoreV1Api, ns: str) -> None:
    start = core.list_namespaced_config_map(ns).metadata.resource_version
    core.create_namespaced_config_map(ns, {"metadata": {"name": "s", "labels": {"app": "no"}}})
    core.patch_namespaced_config_map("s", ns, {"metadata": {"labels": {"app": "yes"}}})
    core.patch_namespaced_config_map("s", ns, {"data": {"k": "v"}})
    core.patch_namespaced_config_map("s", ns, {"metadata": {"labels": {"app": "no"}}})
    events = collect(
        core.list_namespaced_config_map,
        3,
        namespace=ns,
        resource_version=start,
        label_selector="app=yes",
    )
    assert [t for t, _, _ in events] == ["ADDED", "MODIFIED", "DELETED"]


def test_too_old_resource_version_is_410() -> None:
    with LabApiServer(history_limit=3) as server, make_client(server.url) as api:
        core = client.CoreV1Api(api)
        start = core.list_namespace().metadata.resource_version
        for i in range(6):
            core.create_namespaced_config_map("default", {"metadata": {"name": f"c{i}"}})
        with pytest.raises(ApiException) as err:
            list(
                watch.Watch().stream(
                    core.list_namespaced_config_map,
                    namespace="default",
                    resource_version=start,
                    timeout_seconds=2,
                )
            )
        assert err.value.status == 410
        assert "too old resource version" in err.value.reason
        # a version still inside the history works
        recent = core.list_namespaced_config_map("default").metadata.resource_version
        assert (
            list(
                watch.Watch().stream(
                    core.list_namespaced_config_map,
                    namespace="default",
                    resource_version=recent,
                    timeout_seconds=1,
                )
            )
            == []
        )


def test_bookmarks_and_initial_events(
    api: client.ApiClient, core: client.CoreV1Api, ns: str
) -> None:
    core.create_namespaced_config_map(ns, {"metadata": {"name": "b"}})
    stream = watch.Watch().stream(
        core.list_namespaced_config_map,
        namespace=ns,
        allow_watch_bookmarks=True,
        send_initial_events=True,
        resource_version_match="NotOlderThan",
        timeout_seconds=30,
    )
    kinds = []
    for event in stream:
        kinds.append(event["type"])
        if event["type"] == "BOOKMARK":
            annotations = event["raw_object"]["metadata"].get("annotations") or {}
            assert annotations.get("k8s.io/initial-events-end") == "true"
            break
    assert kinds == ["ADDED", "BOOKMARK"]


def test_periodic_bookmark_carries_latest_version(core: client.CoreV1Api, ns: str) -> None:
    start = core.list_namespaced_config_map(ns).metadata.resource_version
    core.create_namespace({"metadata": {"name": ns + "-other"}})  # bumps the global version
    for event in watch.Watch().stream(
        core.list_namespaced_config_map,
        namespace=ns,
        resource_version=start,
        allow_watch_bookmarks=True,
        timeout_seconds=30,
    ):
        assert event["type"] == "BOOKMARK"
        assert int(event["raw_object"]["metadata"]["resourceVersion"]) > int(start)
        break
    else:
        pytest.fail("no bookmark")
