"""Optimistic concurrency under real parallel clients; watches see every change once, in order."""

from __future__ import annotations

import threading

from kubernetes import client, watch
from kubernetes.client.exceptions import ApiException

from .conftest import make_client

WRITERS = 6
INCREMENTS = 15


def test_no_lost_updates_and_a_gapless_watch(lab, core: client.CoreV1Api, ns: str) -> None:
    core.create_namespaced_config_map(ns, {"metadata": {"name": "counter"}, "data": {"n": "0"}})
    start = core.list_namespaced_config_map(ns).metadata.resource_version
    conflicts = []

    def writer() -> None:
        with make_client(lab.url) as api:
            mine = client.CoreV1Api(api)
            done = 0
            while done < INCREMENTS:
                current = mine.read_namespaced_config_map("counter", ns)
                current.data["n"] = str(int(current.data["n"]) + 1)
                try:
                    mine.replace_namespaced_config_map("counter", ns, current)
                    done += 1
                except ApiException as exc:
                    assert exc.status == 409
                    conflicts.append(1)

    threads = [threading.Thread(target=writer) for _ in range(WRITERS)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    total = WRITERS * INCREMENTS
    assert core.read_namespaced_config_map("counter", ns).data["n"] == str(total)

    seen = []
    w = watch.Watch()
    for event in w.stream(
        core.list_namespaced_config_map, namespace=ns, resource_version=start, timeout_seconds=60
    ):
        seen.append((int(event["object"].metadata.resource_version), event["object"].data["n"]))
        if len(seen) == total:
            w.stop()
    assert [n for _, n in seen] == [str(i) for i in range(1, total + 1)]
    versions = [rv for rv, _ in seen]
    assert versions == sorted(versions) and len(set(versions)) == total
