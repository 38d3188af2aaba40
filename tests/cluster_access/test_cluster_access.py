"""dmn.api.cluster against the lab API server: the same code path a real cluster gets."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from dmn.api.cluster import (
    AlreadyExists,
    ApiFailure,
    Cluster,
    Conflict,
    Gone,
    Invalid,
    ListWatch,
    NotFound,
    Unavailable,
    connect,
)
from dmn.api.cluster import resources as r
from dmn.lab.apiserver import LabApiServer, UserInfo
from tests.apiserver.tls_material import self_signed

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def lab() -> Iterator[LabApiServer]:
    with LabApiServer(history_limit=64) as server:
        yield server


@pytest.fixture
def cluster(lab: LabApiServer) -> Iterator[Cluster]:
    with Cluster(connect(url=lab.url)) as c:
        yield c


def cm(name: str, **data: str) -> dict:
    return {"metadata": {"name": name, "namespace": "default"}, "data": data}


def test_verbs_and_typed_failures(cluster: Cluster) -> None:
    created = cluster.create(r.CONFIG_MAPS, cm("v", a="1"))
    assert created["kind"] == "ConfigMap" and created["metadata"]["uid"]
    with pytest.raises(AlreadyExists):
        cluster.create(r.CONFIG_MAPS, cm("v"))
    assert cluster.get(r.CONFIG_MAPS, "v", "default")["data"] == {"a": "1"}
    updated = cluster.patch(r.CONFIG_MAPS, "v", {"data": {"a": "2"}}, "default")
    stale = dict(created, data={"a": "3"})
    with pytest.raises(Conflict):
        cluster.replace(r.CONFIG_MAPS, stale)
    replaced = cluster.replace(r.CONFIG_MAPS, dict(updated, data={"a": "4"}))
    assert replaced["data"] == {"a": "4"}
    patched = cluster.patch(
        r.CONFIG_MAPS,
        "v",
        [{"op": "replace", "path": "/data/a", "value": "5"}],
        "default",
        patch_type="json",
    )
    assert patched["data"] == {"a": "5"}
    cluster.delete(r.CONFIG_MAPS, "v", "default")
    with pytest.raises(NotFound) as err:
        cluster.get(r.CONFIG_MAPS, "v", "default")
    assert err.value.code == 404 and err.value.reason == "NotFound"


def test_invalid_carries_field_causes(cluster: Cluster) -> None:
    with pytest.raises(Invalid) as err:
        cluster.create(r.CONFIG_MAPS, cm("Not_Valid"))
    assert err.value.causes[0].field == "metadata.name"


def test_list_follows_pages(cluster: Cluster) -> None:
    for i in range(7):
        cluster.create(
            r.CONFIG_MAPS,
            {"metadata": {"name": f"pg{i}", "namespace": "default", "labels": {"set": "pg"}}},
        )
    listed = cluster.list(r.CONFIG_MAPS, "default", label_selector="set=pg", page_size=3)
    assert [i["metadata"]["name"] for i in listed.items] == [f"pg{i}" for i in range(7)]
    assert all(i["kind"] == "ConfigMap" for i in listed.items) and int(listed.resource_version) > 0


def test_project_custom_resources(cluster: Cluster) -> None:
    """Our Resource constants match the generated CRDs, and the CRDs serve through the lab."""
    crds = sorted((REPO / "charts" / "dra-multi-network" / "crds").glob("*.yaml"))
    if not crds:
        pytest.skip("project CRDs not generated yet")
    ours = {(res.group, res.plural): res for res in r.ALL}
    for path in crds:
        crd = yaml.safe_load(path.read_text())
        with contextlib.suppress(AlreadyExists):
            cluster.create(r.CUSTOM_RESOURCE_DEFINITIONS, crd)
        spec = crd["spec"]
        res = ours[(spec["group"], spec["names"]["plural"])]
        assert res.kind == spec["names"]["kind"]
        assert res.namespaced == (spec["scope"] == "Namespaced")
        assert res.version in [v["name"] for v in spec["versions"]]
        assert cluster.list(res, "default" if res.namespaced else None).items == []
        with pytest.raises(Invalid):
            cluster.create(res, {"metadata": {"name": "t", "namespace": "default"}, "spec": 42})


def test_watch_and_gone() -> None:
    with LabApiServer(history_limit=2) as server, Cluster(connect(url=server.url)) as cluster:
        start = cluster.list(r.CONFIG_MAPS, "default").resource_version
        cluster.create(r.CONFIG_MAPS, cm("w1"))
        events = list(
            cluster.watch(r.CONFIG_MAPS, "default", resource_version=start, timeout_seconds=1)
        )
        assert [(e.type, e.object["metadata"]["name"]) for e in events] == [("ADDED", "w1")]
        for i in range(4):
            cluster.create(r.CONFIG_MAPS, cm(f"x{i}"))
        with pytest.raises(Gone):
            list(cluster.watch(r.CONFIG_MAPS, "default", resource_version=start, timeout_seconds=1))


def test_list_watch_relists_after_gone_and_reports_the_difference() -> None:
    with LabApiServer(history_limit=2) as server, Cluster(connect(url=server.url)) as cluster:
        cluster.create(r.CONFIG_MAPS, cm("keep"))
        cluster.create(r.CONFIG_MAPS, cm("vanish"))
        lw = ListWatch(cluster, r.CONFIG_MAPS, "default", timeout_seconds=1)
        events = lw.events()
        first = [next(events) for _ in range(3)]
        assert [e.type for e in first] == ["ADDED", "ADDED", "SYNCED"]
        # while nobody watches, changes overflow the 2-event history
        cluster.delete(r.CONFIG_MAPS, "vanish", "default")
        for i in range(3):
            cluster.create(r.CONFIG_MAPS, cm(f"new{i}"))
        after = []
        for event in events:
            after.append((event.type, event.object.get("metadata", {}).get("name")))
            if event.type == "SYNCED":
                break
        lw.stop()
        assert sorted(after[:-1]) == [
            ("ADDED", "new0"),
            ("ADDED", "new1"),
            ("ADDED", "new2"),
            ("DELETED", "vanish"),
        ]
        assert set(lw.known) == {
            ("default", "keep"),
            ("default", "new0"),
            ("default", "new1"),
            ("default", "new2"),
        }


def test_kubeconfig_https_and_token(tmp_path: Path) -> None:
    cert, key, _pem = self_signed(tmp_path)
    tokens = {"s3cret": UserInfo("tester", ("system:authenticated",))}
    with LabApiServer(tls=(str(cert), str(key)), tokens=tokens) as server:
        kubeconfig = tmp_path / "kubeconfig"
        kubeconfig.write_text(
            yaml.safe_dump(
                {
                    "apiVersion": "v1",
                    "kind": "Config",
                    "clusters": [
                        {
                            "name": "lab",
                            "cluster": {"server": server.url, "certificate-authority": str(cert)},
                        }
                    ],
                    "users": [{"name": "tester", "user": {"token": "s3cret"}}],
                    "contexts": [{"name": "lab", "context": {"cluster": "lab", "user": "tester"}}],
                    "current-context": "lab",
                }
            )
        )
        with Cluster(connect(kubeconfig=str(kubeconfig))) as cluster:
            assert cluster.get(r.NAMESPACES, "default")["status"]["phase"] == "Active"
            # typed generated APIs share the same ApiClient
            assert cluster.core.read_namespace("default").metadata.name == "default"
            # watches stream over TLS too
            start = cluster.list(r.CONFIG_MAPS, "default").resource_version
            cluster.create(r.CONFIG_MAPS, cm("tls"))
            events = list(
                cluster.watch(r.CONFIG_MAPS, "default", resource_version=start, timeout_seconds=1)
            )
            assert [e.object["metadata"]["name"] for e in events if e.type == "ADDED"] == ["tls"]
        with Cluster(connect(url=server.url, ca_cert=str(cert))) as anonymous:
            with pytest.raises(ApiFailure) as err:
                anonymous.get(r.NAMESPACES, "default")
            assert err.value.code == 401


def test_unreachable_server_is_unavailable() -> None:
    with LabApiServer() as server:
        url = server.url
    with Cluster(connect(url=url), request_timeout=2) as cluster:
        cluster.api_client.configuration.retries = 0
        with pytest.raises(Unavailable):
            cluster.get(r.NAMESPACES, "default")


def test_apply_manifests_by_discovery(cluster: Cluster) -> None:
    crd = {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": "notes.example.com"},
        "spec": {
            "group": "example.com",
            "scope": "Namespaced",
            "names": {"plural": "notes", "kind": "Note"},
            "versions": [
                {
                    "name": "v1",
                    "served": True,
                    "storage": True,
                    "schema": {
                        "openAPIV3Schema": {
                            "type": "object",
                            "x-kubernetes-preserve-unknown-fields": True,
                        }
                    },
                }
            ],
        },
    }
    note = {
        "apiVersion": "example.com/v1",
        "kind": "Note",
        "metadata": {"name": "n", "labels": {"v": "1"}},
        "spec": {"text": "a"},
    }
    with pytest.raises(NotFound):
        cluster.resource_for("example.com/v1", "Note")
    cluster.apply(crd)
    assert cluster.resource_for("example.com/v1", "Note") == r.Resource(
        "example.com", "v1", "notes", "Note", True
    )
    created = cluster.apply(note)
    assert created["metadata"]["namespace"] == "default"
    updated = cluster.apply(
        {**note, "metadata": {"name": "n", "labels": {"v": "2"}}, "spec": {"text": "b"}}
    )
    assert updated["spec"] == {"text": "b"} and updated["metadata"]["labels"] == {"v": "2"}
    assert updated["metadata"]["uid"] == created["metadata"]["uid"]
    assert cluster.resource_for("v1", "ConfigMap") == r.CONFIG_MAPS


def test_list_watch_waits_for_a_crd_to_appear(cluster: Cluster) -> None:
    import threading

    res = r.Resource("late.example.com", "v1", "lates", "Late", False)
    lw = ListWatch(cluster, res, timeout_seconds=1, max_backoff=0.2)
    seen: list[str] = []

    def consume() -> None:
        for event in lw.events():
            seen.append(event.type)
            if event.type == "ADDED":
                lw.stop()

    thread = threading.Thread(target=consume)
    thread.start()
    cluster.create(
        r.CUSTOM_RESOURCE_DEFINITIONS,
        {
            "metadata": {"name": "lates.late.example.com"},
            "spec": {
                "group": "late.example.com",
                "scope": "Cluster",
                "names": {"plural": "lates", "kind": "Late"},
                "versions": [
                    {
                        "name": "v1",
                        "served": True,
                        "storage": True,
                        "schema": {"openAPIV3Schema": {"type": "object"}},
                    }
                ],
            },
        },
    )
    cluster.create(res, {"metadata": {"name": "one"}})
    thread.join(60)
    assert not thread.is_alive() and seen[-1] == "ADDED"


def test_impersonation_reaches_admission(lab: LabApiServer) -> None:
    seen = []

    class Recorder:
        def mutate(self, attrs):
            return None

        def validate(self, attrs):
            seen.append((attrs.user.username, attrs.user.groups))

    previous = lab.store.admission
    lab.store.admission = Recorder()
    try:
        api = connect(
            url=lab.url,
            impersonate_user="system:serviceaccount:dmn:controller",
            impersonate_group="system:serviceaccounts",
        )
        with Cluster(api) as cluster:
            cluster.create(r.CONFIG_MAPS, cm("who"))
    finally:
        lab.store.admission = previous
    assert seen == [("system:serviceaccount:dmn:controller", ("system:serviceaccounts",))]


def test_stop_ends_open_watches() -> None:
    import threading
    import time

    server = LabApiServer()
    server.start()
    cluster = Cluster(connect(url=server.url))
    done = threading.Event()

    def consume() -> None:
        with contextlib.suppress(Exception):
            list(cluster.watch(r.CONFIG_MAPS, "default", timeout_seconds=60))
        done.set()

    threading.Thread(target=consume, daemon=True).start()
    time.sleep(0.3)
    server.stop()
    # the watch asked for 60 s: ending well before that proves stop() ended it
    assert done.wait(30)
    cluster.close()


def test_stop_ends_a_quiet_watch_promptly(cluster: Cluster) -> None:
    import threading
    import time

    stream = cluster.watch(r.SECRETS, "kube-public", timeout_seconds=60, allow_bookmarks=False)
    stream.stop()
    assert list(stream) == []  # stopped before it started
    lw = ListWatch(cluster, r.SECRETS, "kube-public", timeout_seconds=60)
    synced = threading.Event()
    finished = threading.Event()

    def consume() -> None:
        for event in lw.events():
            if event.type == "SYNCED":
                synced.set()
        finished.set()

    threading.Thread(target=consume, daemon=True).start()
    assert synced.wait(30)
    time.sleep(0.3)  # the watch request is open and idle
    lw.stop()
    # the watch asked for 60 s: ending well before that proves stop() ended it
    assert finished.wait(30)


def test_event_recorder_correlates_repeats(cluster: Cluster) -> None:
    from dmn.api.cluster import EventRecorder

    topo_like = cluster.create(r.CONFIG_MAPS, cm("subject"))
    recorder = EventRecorder(cluster, "dra-multi-network-controller", host="node-a")
    first = recorder.record(topo_like, "Warning", "CompileFailed", "step vf: bad config")
    again = recorder.record(topo_like, "Warning", "CompileFailed", "step vf: bad config")
    other = recorder.record(topo_like, "Normal", "Ready", "revision ready")
    assert first and again and other
    assert again["metadata"]["name"] == first["metadata"]["name"] and again["count"] == 2
    listed = cluster.list(r.EVENTS, "default", field_selector="involvedObject.name=subject").items
    assert sorted((e["reason"], e["count"]) for e in listed) == [("CompileFailed", 2), ("Ready", 1)]
    assert listed[0]["source"] == {"component": "dra-multi-network-controller", "host": "node-a"}


def test_state_file_survives_a_restart(tmp_path: Path) -> None:
    state = tmp_path / "lab-state.json"
    crd = {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": "keeps.example.com"},
        "spec": {
            "group": "example.com",
            "scope": "Cluster",
            "names": {"plural": "keeps", "kind": "Keep"},
            "versions": [
                {
                    "name": "v1",
                    "served": True,
                    "storage": True,
                    "schema": {
                        "openAPIV3Schema": {
                            "type": "object",
                            "x-kubernetes-preserve-unknown-fields": True,
                        }
                    },
                }
            ],
        },
    }
    with LabApiServer(state=state) as server, Cluster(connect(url=server.url)) as cluster:
        cluster.apply(crd)
        kept = cluster.apply(
            {
                "apiVersion": "example.com/v1",
                "kind": "Keep",
                "metadata": {"name": "k"},
                "spec": {"x": 1},
            }
        )
        cm_obj = cluster.create(r.CONFIG_MAPS, cm("persisted", a="1"))
        before = cluster.list(r.CONFIG_MAPS, "default").resource_version
    assert state.exists()
    with LabApiServer(state=state) as server, Cluster(connect(url=server.url)) as cluster:
        keep = cluster.get(r.Resource("example.com", "v1", "keeps", "Keep", False), "k")
        assert keep["metadata"]["uid"] == kept["metadata"]["uid"] and keep["spec"] == {"x": 1}
        again = cluster.get(r.CONFIG_MAPS, "persisted", "default")
        assert again["metadata"]["uid"] == cm_obj["metadata"]["uid"]
        # versions continue upwards; a watch from before the restart must relist
        assert int(
            cluster.patch(r.CONFIG_MAPS, "persisted", {"data": {"a": "2"}}, "default")["metadata"][
                "resourceVersion"
            ]
        ) > int(before)
        with pytest.raises(Gone):
            list(
                cluster.watch(
                    r.CONFIG_MAPS,
                    "default",
                    resource_version=str(int(before) - 1),
                    timeout_seconds=1,
                )
            )
