"""The Pod part of ``dmn lab demo`` on the embedded backend (``--links netns``, root).

Two Pods, each with a claim from a template of the shared-macvlan class; ``net1`` shown
from each Pod's network namespace with the address the node agent gave it from the IPPool
``macvlan-v4`` (read from the claim's ``networkData``: the demo assigns none) and the pool's
route; one pings the other's pool address over the shared parent; both deleted, their
addresses released (no IPAllocation left); a Pod with a whole lab link (``lab-host-device``)
gets it as ``net1`` and gives it back; the lab node's links are as before. Lines go to
``report.pods``; anything that did not hold also goes to ``report.problems``.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

from dmn.api.cluster import ApiFailure, Cluster
from dmn.api.cluster import resources as r
from dmn.lab.cluster import LabCluster, LabError
from dmn.lab.node import HOST_DEVICE_TOPOLOGY
from dmn.lab.pod_network import ReportedNetwork, wait_reported
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
    """A one-container Pod with one claim from ``template`` (NET_ADMIN, NET_RAW: tests may
    change net1 from inside, and ping)."""
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
        _scenario(pods, cluster, check, lambda: _links(lab), before, timeout)
    except (LabError, ApiFailure, OSError) as exc:
        check(False, f"pods: {exc}")
    finally:
        pods.stop()


def _scenario(
    pods: LabPods,
    cluster: Cluster,
    check: Any,
    links: Any,
    before: dict[str, tuple[str, int]],
    timeout: float,
) -> None:
    names = ("demo-a", "demo-b")
    for name in names:
        running = pods.run(pod_manifest(name, "shared-macvlan"))
        devices = [
            res["device"]
            for c in running.claims
            for res in c["status"]["allocation"]["devices"]["results"]
        ]
        check(True, f"pod {name} Running: claim devices={devices} netns={running.netns}")
    got: dict[str, ReportedNetwork] = {}
    for name in names:
        shown = pods.exec(NAMESPACE, name, ["ip", "-o", "link", "show", "net1"])
        check(
            shown.returncode == 0,
            f"{name}: net1 inside: {shown.stdout.strip() or shown.stderr.strip()}",
        )
        # the node agent addressed net1 from the pool: the demo only reads what it reported
        net = wait_reported(cluster, NAMESPACE, name, "net1", timeout)
        if net is None:
            check(False, f"{name}: no address of net1 in its claim's networkData")
            continue
        got[name] = net
        addrs = pods.exec(NAMESPACE, name, ["ip", "-o", "-4", "addr", "show", "net1"])
        on_link = all(f" {cidr} " in addrs.stdout for cidr in net.ips)
        check(
            on_link,
            f"{name}: net1 {','.join(net.ips)} mac {net.mac} (claim {net.claim} networkData)",
        )
        route = pods.exec(NAMESPACE, name, ["ip", "route", "show", "dev", "net1"])
        lines = [x.strip() for x in route.stdout.splitlines() if " via " in x]
        check(bool(lines), f"{name}: pool route on net1: {' / '.join(lines) or route.stderr}")
    if "demo-b" in got:
        target = got["demo-b"].addresses[0]
        ping = pods.exec(NAMESPACE, "demo-a", ["ping", "-c", "2", "-W", "3", target])
        tail = (ping.stdout.strip().splitlines() or [ping.stderr.strip()])[-2:]
        check(ping.returncode == 0, f"demo-a pings demo-b over net1 ({target}): {' / '.join(tail)}")
    for name in names:
        pods.delete(NAMESPACE, name)
    check(links() == before, "shared-macvlan pods deleted; node links as before")
    held = [o["metadata"]["name"] for o in cluster.list(r.IP_ALLOCATIONS).items]
    check(not held, f"their pool addresses released: IPAllocations left {held}")
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
