"""End to end on real Kubernetes: kube-apiserver, kube-scheduler, kubelet and containerd.

One upstream lab per session (``conftest.py``), shared with the other ``test_upstream*``
modules; each test cleans up its own Pods, claims and templates. Runs as root (kubelet,
containerd, links in the host namespace). ``test_upstream_zz_down.py`` brings the lab down
last and compares the host with before.
"""

from __future__ import annotations

import contextlib
import functools
import ipaddress
import json
import subprocess
import sys
from typing import Any

import pytest

from dmn.api.builtin_plugins import plugin_object
from dmn.api.cluster import AlreadyExists, Cluster, NotFound
from dmn.api.cluster import resources as r
from dmn.api.identity import DRIVER
from dmn.interpreter.loader import load_plugins
from dmn.interpreter.source import load_yaml_documents
from dmn.lab import manifests
from dmn.lab.demo import POOLS, wait_settled
from dmn.lab.pod_demo import NAMESPACE, claim_template
from dmn.lab.pod_network import ReportedNetwork, network_status, wait_reported
from dmn.lab.upstream import build
from dmn.lab.upstream.cluster import UpstreamLab
from dmn.lab.upstream.configs import NODE_NAME
from dmn.lab.upstream.demo import (
    Kubectl,
    pod,
    pod_events,
    pod_phase,
    wait_for,
)
from dmn.lab.upstream.driver import LAB_LINKS
from tests import waiting
from tests.e2e import installed_driver, lab_pods
from tests.fixtures.forged_revision import forged_class, forged_revision, ready_status
from tests.lab.test_admin_plugin import ADMIN as ADMIN_PLUGINS
from tests.lab.test_admin_plugin import POLICY as ADMIN_POLICY

pytestmark = [pytest.mark.e2e]
WAIT = 120.0


# the fixtures ``classes`` and ``pods`` are the session's (conftest.py)


def _run(admin: Cluster, pods: list[str], name: str, template: str) -> None:
    admin.create(r.PODS, pod(name, template), NAMESPACE)
    pods.append(name)


def _running(admin: Cluster, names: list[str]) -> bool:
    return wait_for(lambda: all(pod_phase(admin, n) == "Running" for n in names), WAIT)


def _unschedulable(admin: Cluster, name: str) -> str:
    """The scheduler's message when it keeps the Pod Pending, else ''."""
    status = admin.get(r.PODS, name, NAMESPACE).get("status") or {}
    for cond in status.get("conditions") or []:
        if cond.get("type") == "PodScheduled" and cond.get("reason") == "Unschedulable":
            return str(cond.get("message", ""))
    return ""


def test_components_report_their_pinned_versions(upstream_lab: UpstreamLab, admin: Cluster) -> None:
    binary = build.bin_dir("kubernetes") / "kube-apiserver"
    out = subprocess.run([str(binary), "--version"], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "Kubernetes v1.37.2"
    version = Kubectl(upstream_lab.admin_kubeconfig).run("version", "-o", "json")
    assert json.loads(version.stdout)["serverVersion"]["gitVersion"] == "v1.37.2"
    node = admin.get(r.NODES, NODE_NAME)
    assert node["status"]["nodeInfo"]["kubeletVersion"] == "v1.37.2"


def test_slices_are_accepted_by_real_validation(upstream_lab: UpstreamLab, admin: Cluster) -> None:
    slices = [
        s
        for s in admin.list(r.RESOURCE_SLICES).items
        if s["spec"]["driver"] == DRIVER and s["spec"].get("nodeName") == NODE_NAME
    ]
    devices = [d for s in slices for d in s["spec"].get("devices") or []]
    # two lab links, each as kernel, macvlan and ipvlan persona
    assert len(devices) == 3 * len(LAB_LINKS), [d["name"] for d in devices]
    shared = [d for d in devices if d.get("allowMultipleAllocations")]
    assert shared and all("capacity" in d for d in shared)


def _pool_range() -> tuple[ipaddress.IPv4Address, ipaddress.IPv4Address]:
    """macvlan-v4's dynamic range, read from examples/ipam/pool.yaml."""
    (pool,) = [d.doc for d in manifests.load(POOLS) if d.name == "macvlan-v4"]
    ((low, high),) = [(x["start"], x["end"]) for x in pool["spec"]["subnets"][0]["ranges"]]
    return ipaddress.IPv4Address(low), ipaddress.IPv4Address(high)


def test_pods_get_networks_and_traffic_flows(
    upstream_lab: UpstreamLab, admin: Cluster, classes: dict[str, str], pods: list[str]
) -> None:
    """Two Pods of shared-macvlan get addresses from the one example pool (the test adds
    none), the pool's route to a test subnet via its gateway on net1, and ping each other
    over it; the claims' networkData and the Pods' network-status say what they got;
    deleting them returns the pool to empty (no IPAllocation left)."""
    for name in ("e2e-a", "e2e-b"):
        _run(admin, pods, name, "shared-macvlan")
    assert _running(admin, pods), [(n, pod_phase(admin, n)) for n in pods]
    kubectl = Kubectl(upstream_lab.admin_kubeconfig)
    low, high = _pool_range()
    got: dict[str, ReportedNetwork] = {}
    for name in ("e2e-a", "e2e-b"):
        shown = kubectl.exec(name, "ip", "-o", "link", "show", "net1")
        assert shown.returncode == 0, (shown.stderr, lab_pods.describe(admin, name))
        net = wait_reported(admin, NAMESPACE, name, "net1", WAIT)
        assert net is not None, lab_pods.claims_of(admin, lab_pods.uid(admin, name))
        (cidr,) = net.ips
        address = ipaddress.IPv4Interface(cidr)
        assert low <= address.ip <= high and address.network.prefixlen == 24, cidr
        mac = shown.stdout.split("link/ether ")[1].split()[0]
        assert net.mac == mac, (net, shown.stdout)
        addrs = kubectl.exec(name, "ip", "-o", "-4", "addr", "show", "net1")
        assert f" {cidr} " in addrs.stdout, addrs.stdout
        route = kubectl.exec(name, "ip", "route")  # the pool's route to the test subnet
        assert "10.58.0.0/16 via 10.56.0.1 dev net1" in route.stdout, route.stdout + route.stderr
        # the Pod says so where tools written for Multus look
        entry = waiting.wait_for(
            functools.partial(_net1_status, admin, name),
            timeout=WAIT,
            interval=0.5,
            what=f"{name}'s network-status entry for net1",
        )
        assert (entry["name"], entry["ips"], entry["mac"]) == (
            net.claim,
            [str(address.ip)],
            mac,
        ), entry
        got[name] = net
    assert got["e2e-a"].ips != got["e2e-b"].ips, got
    # one IPAllocation per Pod, naming its claim as the owner
    claims = {
        c["metadata"]["uid"]: f"{NAMESPACE}/{c['metadata']['name']}"
        for n in pods
        for c in lab_pods.claims_of(admin, lab_pods.uid(admin, n))
    }
    held = {
        o["spec"]["address"]: claims.get(o["spec"]["owner"]["claimUID"]) for o in _pooled(admin)
    }
    assert held == {n.addresses[0]: n.claim for n in got.values()}, held
    ping = kubectl.exec("e2e-a", "ping", "-c", "2", "-W", "3", got["e2e-b"].addresses[0])
    assert ping.returncode == 0, ping.stdout + ping.stderr
    statuses = kubectl.run("get", "networkattachmentstatuses", "-A", "-o", "json")
    assert statuses.returncode == 0, statuses.stderr
    assert json.loads(statuses.stdout)["items"]
    lab_pods.remove(admin, *pods)
    released = wait_for(lambda: not _pooled(admin), WAIT)
    assert released, _pooled(admin)


def _pooled(admin: Cluster) -> list[dict[str, Any]]:
    """The IPAllocations of the example pool macvlan-v4."""
    return [o for o in admin.list(r.IP_ALLOCATIONS).items if o["spec"]["pool"] == "macvlan-v4"]


def _net1_status(admin: Cluster, pod_name: str) -> dict[str, Any] | None:
    """The Pod's network-status entry for net1, once the agent wrote it."""
    entries = network_status(admin.get(r.PODS, pod_name, NAMESPACE))
    return next((e for e in entries if e.get("interface") == "net1"), None)


def test_pod_deletion_leaves_no_link_pin_or_live_record(
    upstream_lab: UpstreamLab, admin: Cluster, classes: dict[str, str], pods: list[str]
) -> None:
    """kubelet stops the sandbox, unprepares the claim, then removes the sandbox: the Pod
    goes away, its claim with it, and the journal keeps only terminal records of both."""
    _run(admin, pods, "e2e-del", "shared-macvlan")
    assert _running(admin, ["e2e-del"]), pod_phase(admin, "e2e-del")
    pod_uid = admin.get(r.PODS, "e2e-del", NAMESPACE)["metadata"]["uid"]
    claim_uids = {
        c["metadata"]["uid"]
        for c in admin.list(r.RESOURCE_CLAIMS, NAMESPACE).items
        if any(o.get("uid") == pod_uid for o in c["metadata"].get("ownerReferences") or [])
    }
    assert claim_uids
    admin.delete(r.PODS, "e2e-del", NAMESPACE)
    assert wait_for(lambda: not _exists(admin, r.PODS, "e2e-del"), WAIT), admin.get(
        r.PODS, "e2e-del", NAMESPACE
    ).get("status")
    assert wait_for(
        lambda: (
            not any(
                c["metadata"]["uid"] in claim_uids
                for c in admin.list(r.RESOURCE_CLAIMS, NAMESPACE).items
            )
        ),
        WAIT,
    )
    journal = _journal(upstream_lab)
    attachments = [a for a in journal["attachments"] if a["identity"]["podUID"] == pod_uid]
    preparations = [p for p in journal["preparations"] if p["claimUID"] in claim_uids]
    assert attachments and {a["state"] for a in attachments} == {"Removed"}, attachments
    assert preparations and {p["state"] for p in preparations} == {"Released"}, preparations


def _claim_of(admin: Cluster, pod_name: str) -> dict[str, Any]:
    pod_uid = admin.get(r.PODS, pod_name, NAMESPACE)["metadata"]["uid"]
    (claim,) = [
        c
        for c in admin.list(r.RESOURCE_CLAIMS, NAMESPACE).items
        if any(o.get("uid") == pod_uid for o in c["metadata"].get("ownerReferences") or [])
    ]
    return claim


def _device_health(admin: Cluster, pod_name: str, resource_id: str) -> dict[str, Any]:
    """The kubelet's entry for ``resource_id`` in the Pod's allocatedResourcesStatus."""
    status = admin.get(r.PODS, pod_name, NAMESPACE).get("status") or {}
    for container in status.get("containerStatuses") or []:
        for entry in container.get("allocatedResourcesStatus") or []:
            if entry.get("name") != "claim:net":
                continue
            for res in entry.get("resources") or []:
                if res.get("resourceID") == resource_id:
                    return dict(res)
    return {}


def _dmn_lab(*argv: str) -> subprocess.CompletedProcess[str]:
    command = [sys.executable, "-m", "dmn", "lab", *argv]
    return subprocess.run(command, capture_output=True, text=True, timeout=300)


def _set_host_link(name: str, state: str) -> None:
    from pyroute2 import IPRoute

    with IPRoute() as ip:
        ip.link("set", index=ip.link_lookup(ifname=name)[0], state=state)


def test_pod_status_shows_device_health(
    upstream_lab: UpstreamLab, admin: Cluster, classes: dict[str, str], pods: list[str]
) -> None:
    """kubelet v1.37.2 watches our DRAResourceHealth stream (v1, chosen from the
    registration; gate ResourceHealthStatus on by default) and shows the allocated
    device's health in the Pod's status; the lab downs the device's link: Unhealthy, with
    our message; up again: Healthy."""
    # created with `dmn lab run -f` (which waits until it runs) and looked into with
    # `dmn lab exec` (kubectl exec on this backend)
    manifest = upstream_lab.layout.root.parent / "e2e-health.yaml"
    manifest.write_text(json.dumps(pod("e2e-health", "shared-macvlan")))
    pods.append("e2e-health")
    state = ["--state-dir", str(upstream_lab.layout.root.parent)]
    ran = _dmn_lab("run", "-f", str(manifest), *state)
    assert ran.returncode == 0, ran.stderr
    assert ran.stdout.splitlines() == ["pod/e2e-health created", "pod/e2e-health running"]
    shown = _dmn_lab(
        "exec", "e2e-health", "-n", NAMESPACE, *state, "--", "ip", "link", "show", "net1"
    )
    assert shown.returncode == 0 and "net1" in shown.stdout, shown.stderr
    (result,) = _claim_of(admin, "e2e-health")["status"]["allocation"]["devices"]["results"]
    resource_id = f"{DRIVER}/{result['pool']}/{result['device']}"
    assert wait_for(
        lambda: _device_health(admin, "e2e-health", resource_id).get("health") == "Healthy", WAIT
    ), admin.get(r.PODS, "e2e-health", NAMESPACE)["status"]
    healthy = _device_health(admin, "e2e-health", resource_id)
    link = healthy["message"].split()[1]  # "link dmnlab0 is up"
    assert healthy["message"] == f"link {link} is up" and link in LAB_LINKS, healthy
    inventory_id = next(
        d.inventory_id for d in lab_pods.devices(admin) if d.name == result["device"]
    )
    admin.apply(lab_pods.pinned_template("health-pinned", classes["shared-macvlan"], inventory_id))
    _set_host_link(link, "down")
    try:
        assert wait_for(
            lambda: _device_health(admin, "e2e-health", resource_id).get("health") == "Unhealthy",
            WAIT,
        ), _device_health(admin, "e2e-health", resource_id)
        unhealthy = _device_health(admin, "e2e-health", resource_id)
        assert unhealthy["message"] == f"link {link} is not usable (operstate DOWN)", unhealthy
        # the same verdict taints the link's devices NoSchedule in our slice: the running Pod
        # keeps its network, and a new claim pinned to the link is not allocated
        assert wait_for(lambda: _taints(admin, result["device"]), WAIT)
        (taint,) = _taints(admin, result["device"])
        assert (taint["key"], taint["effect"]) == (f"{DRIVER}/unhealthy", "NoSchedule"), taint
        assert taint.get("timeAdded"), taint
        lab_pods.run(admin, pods, "health-waits", "health-pinned")
        blocked = waiting.wait_for(
            lambda: lab_pods.unschedulable(admin, "health-waits"),
            timeout=WAIT,
            interval=0.5,
            what="a claim on the tainted link reported unschedulable",
        )
        assert "cannot allocate all claims" in blocked, blocked
        assert pod_phase(admin, "e2e-health") == "Running"
    finally:
        _set_host_link(link, "up")
    assert wait_for(
        lambda: _device_health(admin, "e2e-health", resource_id).get("health") == "Healthy", WAIT
    ), _device_health(admin, "e2e-health", resource_id)
    assert wait_for(lambda: not _taints(admin, result["device"]), WAIT)
    lab_pods.wait_running(admin, "health-waits")  # untainted: the scheduler places it now


def _taints(admin: Cluster, device: str) -> list[dict[str, Any]]:
    """The taints our published slice carries on ``device``."""
    for s in admin.list(r.RESOURCE_SLICES).items:
        if s["spec"]["driver"] != DRIVER or s["spec"].get("nodeName") != NODE_NAME:
            continue
        for d in s["spec"].get("devices") or ():
            if d["name"] == device:
                return list(d.get("taints") or ())
    return []


def _exists(admin: Cluster, resource: Any, name: str) -> bool:
    try:
        admin.get(resource, name, NAMESPACE)
    except NotFound:
        return False
    return True


def _journal(lab: UpstreamLab) -> dict[str, Any]:
    state = str(lab.layout.agent_state)
    out = subprocess.run(
        [sys.executable, "-m", "dmn", "journal", "show", "--state-dir", state, "--format", "json"],
        capture_output=True,
        text=True,
        check=True,
    )
    doc: dict[str, Any] = json.loads(out.stdout)
    return doc


def _devices_matched(admin: Cluster, name: str) -> list[dict[str, Any]] | None:
    status = admin.get(r.NETWORK_TOPOLOGIES, name).get("status") or {}
    for cond in status.get("conditions") or []:
        if cond["type"] == "DevicesMatched" and cond["status"] == "True":
            return list(status["deviceMatches"])
    return None


def _sandbox_link(lab: UpstreamLab, pod_uid: str, name: str) -> tuple[str, Any, int]:
    """(kind, macvlan mode, MTU) of ``name`` in the Pod's sandbox, read from the host
    through the namespace pin the agent holds for the Pod's Ready attachment."""
    from pyroute2 import IPRoute

    from dmn.agent.journal.keys import attachment_id
    from dmn.agent.journal.records import AttachmentIdentity

    (att,) = [
        a
        for a in _journal(lab)["attachments"]
        if a["identity"]["podUID"] == pod_uid and a["state"] == "Ready"
    ]
    pin = (
        lab.layout.agent_state
        / "netns"
        / attachment_id(AttachmentIdentity.from_json(att["identity"]))
    )
    with IPRoute(netns=str(pin)) as ip:
        (link,) = ip.get_links(ifname=name)
        info = link.get_attr("IFLA_LINKINFO")
        data = info.get_attr("IFLA_INFO_DATA")
        mode = data.get_attr("IFLA_MACVLAN_MODE") if data is not None else None
        return str(info.get_attr("IFLA_INFO_KIND")), mode, int(link.get_attr("IFLA_MTU"))


def _without_webhook_and_controller(lab: UpstreamLab, admin: Cluster) -> tuple[Any, Any]:
    """The controller bypassed: stopped (its process, or its Deployment scaled to zero: no
    revision collection) and its admission webhook unregistered; returns what
    :func:`_restore` needs."""
    saved = admin.get(r.VALIDATING_WEBHOOK_CONFIGURATIONS, "dra-multi-network")
    stopped = installed_driver.stop_controller(lab, admin)
    admin.delete(r.VALIDATING_WEBHOOK_CONFIGURATIONS, "dra-multi-network")
    # kube-apiserver drops the webhook only once its informer has seen the deletion; until
    # then a write fails calling the stopped webhook (seen once in CI: connection refused)
    verdict = wait_for(
        lambda: installed_driver.webhook_verdict(admin) == installed_driver.UNJUDGED,
        WAIT,
    )
    assert verdict, installed_driver.webhook_verdict(admin)
    return saved, stopped


def _restore(lab: UpstreamLab, admin: Cluster, saved: tuple[Any, Any]) -> None:
    webhooks, stopped = saved
    meta = webhooks["metadata"]
    # labels and annotations kept: a Helm-installed configuration stays the release's
    kept = {k: meta[k] for k in ("labels", "annotations") if meta.get(k)}
    body = {**webhooks, "metadata": {"name": meta["name"], **kept}}
    # the lab is shared by the later modules: their first write goes through the webhook
    installed_driver.start_controller(lab, admin, stopped)
    with contextlib.suppress(AlreadyExists):
        admin.create(r.VALIDATING_WEBHOOK_CONFIGURATIONS, body)
    if installed_driver.HELM:  # the API server's endpoint view of the new Pods lags behind
        assert wait_for(lambda: installed_driver.webhook_verdict(admin) == "", WAIT)


def test_admin_plugins_on_real_kubernetes_and_a_forged_one_refused_on_the_node(
    upstream_lab: UpstreamLab, admin: Cluster, pods: list[str]
) -> None:
    """Issue 12.7 on the upstream backend: an administrator's EffectProgram plugins (a root,
    macvlan-modes, and an Operation step, link-tune), a DeviceExposurePolicy and a topology
    applied to kube-apiserver; kube-scheduler allocates, kubelet prepares and containerd runs
    the Pod, whose net1 is a macvlan in mode private with the Operation step's MTU; deleting
    the Pod leaves only terminal journal records. Then the controller bypassed: a revision
    and class written by hand whose admin program moves the held parent away (outside its
    allowedEffects, digests made consistent) are refused by the node with E_EFFECT_DENIED,
    reported as an Event on the claim, with no preparation recorded."""
    plugins: dict[str, Any] = {}
    for name in ("macvlan-modes", "link-tune"):
        found, problems = load_plugins(str(ADMIN_PLUGINS / name / "v1"))
        assert problems == []
        plugins.update(found)
    (topology,), problems = load_yaml_documents(
        (ADMIN_PLUGINS / "link-tune-topology.yaml").read_bytes(), "topology.yaml"
    )
    assert problems == []
    for plugin in plugins.values():
        admin.apply(plugin_object(plugin))
    admin.apply(ADMIN_POLICY)
    admin.apply(topology.data)
    saved: tuple[Any, Any] | None = None
    try:
        (result,) = wait_settled(admin, ["tuned-macvlan"], WAIT)
        assert result.ready == "True", result
        (device_class,) = result.device_classes
        # the controller counts the agent's slices: the policy's devices are published
        # (earlier tests' shares of the links drain first)
        assert wait_for(lambda: bool(_devices_matched(admin, "tuned-macvlan")), WAIT)
        matched = _devices_matched(admin, "tuned-macvlan") or []
        assert [(m["deviceClassName"], m["nodes"]) for m in matched] == [(device_class, 1)]
        admin.apply(claim_template("tuned-macvlan", device_class))
        _run(admin, pods, "e2e-admin", "tuned-macvlan")
        assert _running(admin, ["e2e-admin"]), pod_events(admin, "e2e-admin")
        pod_uid = admin.get(r.PODS, "e2e-admin", NAMESPACE)["metadata"]["uid"]
        kind, mode, mtu = _sandbox_link(upstream_lab, pod_uid, "net1")
        assert (kind, mtu) == ("macvlan", 1300)
        assert mode in (1, "private"), mode  # MACVLAN_MODE_PRIVATE
        admin.delete(r.PODS, "e2e-admin", NAMESPACE)
        assert wait_for(lambda: not _exists(admin, r.PODS, "e2e-admin"), WAIT)
        attachments = [
            a for a in _journal(upstream_lab)["attachments"] if a["identity"]["podUID"] == pod_uid
        ]
        assert attachments and {a["state"] for a in attachments} == {"Removed"}, attachments

        saved = _without_webhook_and_controller(upstream_lab, admin)
        real = admin.get(r.NETWORK_TOPOLOGY_REVISIONS, result.revision)
        forged = admin.create(
            r.NETWORK_TOPOLOGY_REVISIONS, forged_revision(real, "macvlan-modes", "forged-tuned")
        )
        admin.patch(
            r.NETWORK_TOPOLOGY_REVISIONS,
            "forged-tuned",
            ready_status(forged["metadata"]["generation"]),
            status=True,
        )
        cls = forged_class(admin.get(r.DEVICE_CLASSES, device_class), forged, "forged-tuned")
        admin.create(r.DEVICE_CLASSES, cls)
        admin.apply(claim_template("forged-tuned", "forged-tuned"))
        _run(admin, pods, "e2e-forged", "forged-tuned")

        def refused() -> bool:
            return any(
                e["reason"] == "E_EFFECT_DENIED"
                and (e.get("involvedObject") or {}).get("kind") == "ResourceClaim"
                and "link-move" in e.get("message", "")
                for e in admin.list(r.EVENTS, NAMESPACE).items
            )

        assert wait_for(refused, WAIT), pod_events(admin, "e2e-forged")
        assert pod_phase(admin, "e2e-forged") == "Pending"
        claim_uids = {
            c["metadata"]["uid"]
            for c in admin.list(r.RESOURCE_CLAIMS, NAMESPACE).items
            if c["metadata"]["name"].startswith("e2e-forged")
        }
        assert claim_uids
        journal = _journal(upstream_lab)
        assert not [p for p in journal["preparations"] if p["claimUID"] in claim_uids]
    finally:
        for name in ("e2e-forged", "e2e-admin"):
            with contextlib.suppress(NotFound):
                admin.delete(r.PODS, name, NAMESPACE)
        wait_for(lambda: not _exists(admin, r.PODS, "e2e-forged"), WAIT)
        for res, name in (
            (r.DEVICE_CLASSES, "forged-tuned"),
            (r.NETWORK_TOPOLOGY_REVISIONS, "forged-tuned"),
            (r.NETWORK_TOPOLOGIES, "tuned-macvlan"),
            (r.DEVICE_EXPOSURE_POLICIES, ADMIN_POLICY["metadata"]["name"]),
        ):
            with contextlib.suppress(NotFound):
                admin.delete(res, name)
        for ns_name in ("forged-tuned", "tuned-macvlan"):
            with contextlib.suppress(NotFound):
                admin.delete(r.RESOURCE_CLAIM_TEMPLATES, ns_name, NAMESPACE)
        # the lab is shared: later modules see only the builtin plugins again
        for plugin in plugins.values():
            with contextlib.suppress(NotFound):
                admin.delete(r.NETWORK_PLUGINS, plugin_object(plugin)["metadata"]["name"])
        if saved is not None:
            _restore(upstream_lab, admin, saved)
