"""The Pod part of ``dmn lab demo`` on the embedded backend (``--links netns``, root).

Two Pods, each with a claim from a template of the shared-macvlan class; ``net1`` shown
from each Pod's network namespace; an address given to each from inside; one pings the
other over the shared parent; both deleted; a Pod with a whole lab link (``lab-host-device``)
gets it as ``net1`` and gives it back; the lab node's links are as before. Lines go to
``report.pods``; anything that did not hold also goes to ``report.problems``.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

from dmn.api.cluster import ApiFailure
from dmn.lab.cluster import LabCluster, LabError
from dmn.lab.node import HOST_DEVICE_TOPOLOGY
from dmn.lab.pods import LabPods

if TYPE_CHECKING:
    from dmn.lab.demo import DemoReport

NAMESPACE = "default"


def claim_template(name: str, device_class: str) -> dict[str, Any]:
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaimTemplate",
        "metadata": {"name": name, "namespace": NAMESPACE},
        "spec": {
            "spec": {
                "devices": {
                    "requests": [{"name": "net", "exactly": {"deviceClassName": device_class}}]
                }
            }
        },
    }


def pod_manifest(name: str, template: str, image: str = "busybox") -> dict[str, Any]:
    """A one-container Pod with one claim from ``template`` (NET_ADMIN: it addresses net1)."""
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": NAMESPACE},
        "spec": {
            "terminationGracePeriodSeconds": 1,
            "resourceClaims": [{"name": "net", "resourceClaimTemplateName": template}],
            "containers": [
                {
                    "name": "main",
                    "image": image,
                    "imagePullPolicy": "Never",
                    "command": ["sleep", "3600"],
                    "securityContext": {"capabilities": {"add": ["NET_ADMIN", "NET_RAW"]}},
                    "resources": {"claims": [{"name": "net"}]},
                }
            ],
        },
    }


def _links(lab: LabCluster) -> dict[str, tuple[str, int]]:
    from pyroute2 import IPRoute

    with IPRoute(netns=lab.netns) as ip:
        return {
            link.get_attr("IFLA_IFNAME"): (link.get_attr("IFLA_ADDRESS"), link.get_attr("IFLA_MTU"))
            for link in ip.get_links()
        }


def run_pods(lab: LabCluster, root: Path, report: DemoReport, timeout: float) -> None:
    from dmn.lab.demo import wait_settled

    def check(ok: bool, line: str) -> bool:
        report.pods.append(("ok   " if ok else "FAIL ") + line)
        if not ok:
            report.problems.append(line)
        return ok

    cluster = lab.client()
    cluster.apply(HOST_DEVICE_TOPOLOGY)
    (host,) = wait_settled(cluster, ["lab-host-device"], timeout)
    macvlan = next((t for t in report.topologies if t.name == "shared-macvlan"), None)
    if not (host.device_classes and macvlan and macvlan.device_classes):
        check(False, "DeviceClasses of shared-macvlan and lab-host-device")
        return
    cluster.apply(claim_template("shared-macvlan", macvlan.device_classes[0]))
    cluster.apply(claim_template("lab-host-device", host.device_classes[0]))
    before = _links(lab)
    pods = LabPods(lab, root)
    try:
        pods.start()
        _scenario(pods, check, lambda: _links(lab), before)
    except (LabError, ApiFailure, OSError) as exc:
        check(False, f"pods: {exc}")
    finally:
        pods.stop()


def _scenario(pods: LabPods, check: Any, links: Any, before: dict[str, tuple[str, int]]) -> None:
    addresses = {"demo-a": "10.93.0.1", "demo-b": "10.93.0.2"}
    for name in addresses:
        running = pods.run(pod_manifest(name, "shared-macvlan"))
        devices = [
            res["device"]
            for c in running.claims
            for res in c["status"]["allocation"]["devices"]["results"]
        ]
        check(True, f"pod {name} Running: claim devices={devices} netns={running.netns}")
    for name, address in addresses.items():
        shown = pods.exec(NAMESPACE, name, ["ip", "-o", "link", "show", "net1"])
        check(
            shown.returncode == 0,
            f"{name}: net1 inside: {shown.stdout.strip() or shown.stderr.strip()}",
        )
        added = pods.exec(NAMESPACE, name, ["ip", "addr", "add", f"{address}/24", "dev", "net1"])
        check(added.returncode == 0, f"{name}: address {address}/24 on net1 {added.stderr.strip()}")
    ping = pods.exec(NAMESPACE, "demo-a", ["ping", "-c", "2", "-W", "3", addresses["demo-b"]])
    tail = (ping.stdout.strip().splitlines() or [ping.stderr.strip()])[-2:]
    check(ping.returncode == 0, f"demo-a pings demo-b over net1: {' / '.join(tail)}")
    for name in addresses:
        pods.delete(NAMESPACE, name)
    check(links() == before, "shared-macvlan pods deleted; node links as before")
    pods.run(pod_manifest("demo-host", "lab-host-device"))
    shown = pods.exec(NAMESPACE, "demo-host", ["ip", "-o", "link", "show", "net1"])
    check(
        shown.returncode == 0,
        f"demo-host: net1 inside: {shown.stdout.strip() or shown.stderr.strip()}",
    )
    moved = sorted(set(before) - set(links()))
    check(len(moved) == 1, f"demo-host: {moved} handed off whole from the node")
    pods.delete(NAMESPACE, "demo-host")
    check(links() == before, f"demo-host deleted; node links as before: {sorted(links())}")
