"""Lab API server latency through the official client, beside the raw HTTP floor.

Side by side in one run against one lab API server on loopback:

* ``client``: the official ``kubernetes`` client (``CoreV1Api`` / ``CustomObjectsApi``) —
  what the controller and agent pay per call;
* ``raw``: the same requests over a bare keep-alive ``http.client`` connection — the
  server's own cost plus loopback;
* ``watch``: time from sending a write to its event arriving on an open watch stream.

Operations: get, create, merge patch of a ConfigMap, patch of a custom resource validated
against its CRD schema, list of ``--items`` ConfigMaps. Figures are medians (and p90) of
``--n`` calls in microseconds; the ratio column is client / raw.

    .venv/bin/python benchmarks/apiserver.py [--n 300] [--items 200] [--json]
"""

from __future__ import annotations

import argparse
import http.client
import json
import statistics
import threading
import time
from collections.abc import Callable
from typing import Any
from urllib.parse import urlsplit

from kubernetes import client, watch

from dmn.lab.apiserver import LabApiServer

GROUP = "bench.example.com"
CRD = {
    "metadata": {"name": f"items.{GROUP}"},
    "spec": {
        "group": GROUP,
        "scope": "Namespaced",
        "names": {"plural": "items", "kind": "Item"},
        "versions": [
            {
                "name": "v1",
                "served": True,
                "storage": True,
                "schema": {
                    "openAPIV3Schema": {
                        "type": "object",
                        "properties": {
                            "spec": {
                                "type": "object",
                                "properties": {
                                    "n": {"type": "integer", "minimum": 0},
                                    "tags": {
                                        "type": "array",
                                        "maxItems": 8,
                                        "items": {"type": "string"},
                                    },
                                },
                            }
                        },
                    }
                },
            }
        ],
    },
}


def timed(fn: Callable[[int], Any], n: int) -> list[float]:
    samples = []
    for i in range(n):
        t = time.perf_counter()
        fn(i)
        samples.append((time.perf_counter() - t) * 1e6)
    return samples


def summary(samples: list[float]) -> dict[str, float]:
    ordered = sorted(samples)
    return {"median_us": statistics.median(ordered), "p90_us": ordered[int(len(ordered) * 0.9) - 1]}


class Raw:
    def __init__(self, url: str) -> None:
        parts = urlsplit(url)
        self.conn = http.client.HTTPConnection(parts.hostname, parts.port)

    def call(
        self, method: str, path: str, body: Any = None, content_type: str = "application/json"
    ) -> Any:
        data = json.dumps(body).encode() if body is not None else None
        headers = {"Accept": "application/json"}
        if data is not None:
            headers["Content-Type"] = content_type
        self.conn.request(method, path, data, headers)
        response = self.conn.getresponse()
        payload = response.read()
        if response.status >= 300:
            raise RuntimeError(f"{method} {path}: {response.status} {payload[:200]!r}")
        return json.loads(payload)


def run(n: int, items: int) -> dict[str, Any]:
    results: dict[str, Any] = {}
    with LabApiServer(history_limit=100_000) as server:
        configuration = client.Configuration()
        configuration.host = server.url
        api = client.ApiClient(configuration)
        core = client.CoreV1Api(api)
        custom = client.CustomObjectsApi(api)
        client.ApiextensionsV1Api(api).create_custom_resource_definition(CRD)
        raw = Raw(server.url)
        core.create_namespace({"metadata": {"name": "list"}})
        for i in range(items):
            core.create_namespaced_config_map(
                "list", {"metadata": {"name": f"cm{i}"}, "data": {"k": "v" * 64}}
            )
        core.create_namespaced_config_map(
            "default", {"metadata": {"name": "target"}, "data": {"n": "0"}}
        )
        custom.create_namespaced_custom_object(
            GROUP,
            "v1",
            "default",
            "items",
            {
                "apiVersion": f"{GROUP}/v1",
                "kind": "Item",
                "metadata": {"name": "it"},
                "spec": {"n": 0},
            },
        )
        cm_path = "/api/v1/namespaces/default/configmaps"
        item_path = f"/apis/{GROUP}/v1/namespaces/default/items/it"
        ops: dict[str, tuple[Callable[[int], Any], Callable[[int], Any]]] = {
            "get": (
                lambda i: core.read_namespaced_config_map("target", "default"),
                lambda i: raw.call("GET", f"{cm_path}/target"),
            ),
            "create": (
                lambda i: core.create_namespaced_config_map(
                    "default", {"metadata": {"name": f"c{i}"}}
                ),
                lambda i: raw.call("POST", cm_path, {"metadata": {"name": f"r{i}"}}),
            ),
            "patch": (
                lambda i: core.patch_namespaced_config_map(
                    "target",
                    "default",
                    {"data": {"n": str(i)}},
                    _content_type="application/merge-patch+json",
                ),
                lambda i: raw.call(
                    "PATCH",
                    f"{cm_path}/target",
                    {"data": {"n": f"r{i}"}},
                    "application/merge-patch+json",
                ),
            ),
            "patch-cr": (
                lambda i: custom.patch_namespaced_custom_object(
                    GROUP, "v1", "default", "items", "it", {"spec": {"n": i}}
                ),
                lambda i: raw.call(
                    "PATCH", item_path, {"spec": {"n": i + 1}}, "application/merge-patch+json"
                ),
            ),
            f"list-{items}": (
                lambda i: core.list_namespaced_config_map("list"),
                lambda i: raw.call("GET", "/api/v1/namespaces/list/configmaps"),
            ),
        }
        for name, (via_client, via_raw) in ops.items():
            count = max(20, n // 10) if name.startswith("list") else n
            c, r = summary(timed(via_client, count)), summary(timed(via_raw, count))
            results[name] = {"client": c, "raw": r, "ratio": c["median_us"] / r["median_us"]}
        results["watch"] = summary(watch_latency(core, server.url, max(50, n // 3)))
    return results


def watch_latency(core: client.CoreV1Api, url: str, n: int) -> list[float]:
    arrivals: dict[str, float] = {}
    ready = threading.Event()
    done = threading.Event()
    start = core.list_namespaced_config_map("default").metadata.resource_version

    def consume() -> None:
        w = watch.Watch()
        ready.set()
        for event in w.stream(
            core.list_namespaced_config_map,
            namespace="default",
            resource_version=start,
            timeout_seconds=60,
        ):
            name = event["object"].metadata.name
            if name.startswith("w"):
                arrivals[name] = time.perf_counter()
                if len(arrivals) == n:
                    w.stop()
        done.set()

    thread = threading.Thread(target=consume, daemon=True)
    thread.start()
    ready.wait()
    raw = Raw(url)
    sent: dict[str, float] = {}
    for i in range(n):
        sent[f"w{i}"] = time.perf_counter()
        raw.call("POST", "/api/v1/namespaces/default/configmaps", {"metadata": {"name": f"w{i}"}})
        time.sleep(0.002)
    done.wait(30)
    return [(arrivals[k] - sent[k]) * 1e6 for k in sent if k in arrivals]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--n", type=int, default=300)
    parser.add_argument("--items", type=int, default=200)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    results = run(args.n, args.items)
    if args.json:
        print(json.dumps(results, indent=2))
        return
    header = ("operation", "client median", "client p90", "raw median", "raw p90", "ratio")
    widths = (-10, 14, 11, 11, 9, 6)
    print(
        " ".join(
            f"{h:<{-w}}" if w < 0 else f"{h:>{w}}" for h, w in zip(header, widths, strict=True)
        )
    )
    for name, row in results.items():
        if name == "watch":
            continue
        c, r = row["client"], row["raw"]
        print(
            f"{name:<10} {c['median_us']:>12.0f}us {c['p90_us']:>9.0f}us {r['median_us']:>9.0f}us "
            f"{r['p90_us']:>7.0f}us {row['ratio']:>6.2f}"
        )
    w = results["watch"]
    print(
        "watch delivery (write sent -> event received): "
        f"median {w['median_us']:.0f}us p90 {w['p90_us']:.0f}us"
    )


if __name__ == "__main__":
    main()
