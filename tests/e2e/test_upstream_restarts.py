"""Restarts with Pods running: our node agent, containerd and kubelet, each in turn.

Each test starts a Pod with a shared-macvlan claim, restarts one component (stop with
SIGTERM, start again with the same command line, as systemd would; the Helm-installed
agent: its Pod deleted, the DaemonSet's new Pod in its place), waits until the component is
back in contact with the agent (the agent's log shows a new NRI Synchronize or a new kubelet
registration), then proves: the old Pod still has ``net1``
from its own view and its attachment is still Ready, a new Pod gets a network, and deleting
the old Pod still cleans up (kubelet unprepares, the journal keeps Removed/Released).
"""

from __future__ import annotations

from collections.abc import Callable

import pytest

from dmn.api.cluster import Cluster
from dmn.api.cluster import resources as r
from dmn.api.identity import DRIVER
from dmn.lab.pod_demo import NAMESPACE
from dmn.lab.upstream.cluster import UpstreamLab, node_ready
from dmn.lab.upstream.configs import NODE_NAME
from dmn.lab.upstream.demo import Kubectl
from tests.e2e import installed_driver, lab_pods
from tests.e2e.installed_driver import REGISTERED, SYNCHRONIZE
from tests.e2e.lab_pods import WAIT
from tests.waiting import wait_for

pytestmark = [pytest.mark.e2e]


def _has_net1(lab: UpstreamLab, pod: str) -> bool:
    return Kubectl(lab.admin_kubeconfig).exec(pod, "ip", "link", "show", "net1").returncode == 0


def _restart_keeps_pods_networked(
    lab: UpstreamLab,
    admin: Cluster,
    pods: list[str],
    prefix: str,
    restart: Callable[[], None],
) -> None:
    old, new = f"{prefix}-old", f"{prefix}-new"
    lab_pods.run(admin, pods, old, "shared-macvlan")
    lab_pods.wait_running(admin, old)
    old_uid = lab_pods.uid(admin, old)
    old_claims = {c["metadata"]["uid"] for c in lab_pods.claims_of(admin, old_uid)}
    assert _has_net1(lab, old)

    restart()

    # the exec goes through kubelet's server: retried while a restarted kubelet comes up
    # (nothing would give the Pod a lost net1 back, so a retry cannot hide its loss)
    wait_for(lambda: _has_net1(lab, old), timeout=WAIT, interval=1.0, what=f"net1 in {old}")
    assert lab_pods.attachment_states(lab, old_uid) == {"Ready"}
    lab_pods.run(admin, pods, new, "shared-macvlan")
    lab_pods.wait_running(admin, new)
    assert _has_net1(lab, new)
    lab_pods.delete(admin, old)
    lab_pods.wait_gone(admin, old)
    wait_for(
        lambda: not lab_pods.claims_of(admin, old_uid),
        timeout=WAIT,
        interval=0.5,
        what=f"{old}'s claims deleted",
    )
    assert lab_pods.attachment_states(lab, old_uid) == {"Removed"}
    assert lab_pods.preparation_states(lab, old_claims) == {"Released"}


def _wait_log(lab: UpstreamLab, marker: str, seen: int, what: str) -> None:
    wait_for(
        lambda: installed_driver.agent_log_count(lab, marker) > seen,
        timeout=WAIT,
        interval=0.5,
        what=what,
    )


def test_node_agent_restart(
    upstream_lab: UpstreamLab, admin: Cluster, classes: dict[str, str], pods: list[str]
) -> None:
    """A new agent (process, or the DaemonSet's new Pod) recovers from the journal,
    registers with kubelet again and reconnects to NRI; Synchronize must keep the running
    Pod's attachment."""

    def restart() -> None:
        installed_driver.restart_agent(upstream_lab, admin)

    _restart_keeps_pods_networked(upstream_lab, admin, pods, "agent", restart)


def test_containerd_restart(
    upstream_lab: UpstreamLab, admin: Cluster, classes: dict[str, str], pods: list[str]
) -> None:
    """The runc shims keep the Pods; the agent's NRI connection drops with containerd and
    reconnects to the new one (a new Synchronize listing the running sandbox)."""

    def restart() -> None:
        synced = installed_driver.agent_log_count(upstream_lab, SYNCHRONIZE)
        upstream_lab.procs.restart("containerd")
        _wait_log(upstream_lab, SYNCHRONIZE, synced, "NRI Synchronize from the new containerd")
        wait_for(lambda: node_ready(admin), timeout=WAIT, interval=0.5, what="node Ready")

    _restart_keeps_pods_networked(upstream_lab, admin, pods, "containerd", restart)


def test_kubelet_restart(
    upstream_lab: UpstreamLab, admin: Cluster, classes: dict[str, str], pods: list[str]
) -> None:
    """The new kubelet finds our registration socket again (GetInfo, then
    NotifyRegistrationStatus) and, for the old Pod's deletion, calls NodeUnprepare on us."""

    def restart() -> None:
        registered = installed_driver.agent_log_count(upstream_lab, REGISTERED)
        upstream_lab.procs.restart("kubelet")
        _wait_log(upstream_lab, REGISTERED, registered, "registration with the new kubelet")
        wait_for(lambda: node_ready(admin), timeout=WAIT, interval=0.5, what="node Ready")

    _restart_keeps_pods_networked(upstream_lab, admin, pods, "kubelet", restart)


def _capacities(admin: Cluster) -> dict[str, str]:
    """Our macvlan devices' ``children`` capacity as the lab node's slices declare it."""
    out = {}
    for s in admin.list(r.RESOURCE_SLICES).items:
        if s["spec"]["driver"] != DRIVER or s["spec"].get("nodeName") != NODE_NAME:
            continue
        for d in s["spec"].get("devices") or ():
            value = ((d.get("capacity") or {}).get(f"{DRIVER}/children") or {}).get("value")
            if value is not None and d["name"].endswith("-macvlan"):
                out[d["name"]] = str(value)
    return out


def _set_children(admin: Cluster, value: str) -> None:
    policy = admin.get(r.DEVICE_EXPOSURE_POLICIES, "lab-link-macvlan")
    policy["spec"]["exposure"]["capacity"]["children"]["value"] = value
    admin.replace(r.DEVICE_EXPOSURE_POLICIES, policy)


def test_an_agent_restarted_between_allocation_and_preparation_keeps_its_promise(
    upstream_lab: UpstreamLab, admin: Cluster, classes: dict[str, str], pods: list[str]
) -> None:
    """The agent is down while the real scheduler allocates a macvlan share from its slices
    and kubelet cannot prepare it; meanwhile the policy's ``children`` drops from 4 to 2. The
    restarted agent restores its publication state: the allocated device keeps the capacity
    it was allocated under (the scheduler's accounting of its shares stays true), its
    unallocated sibling takes the new one, and the pool generation moves forward. A changed
    declaration is a drain (design §5.6): the allocated-but-unprepared claim is not prepared
    (kubelet's Event quotes E_NOT_READY) until the scope is drained or, as here, the policy
    is put back — then kubelet's retry prepares it and the Pod gets its network."""
    if installed_driver.runs_as_pods(upstream_lab):
        pytest.skip("the DaemonSet replaces a stopped agent Pod at once: no window to allocate in")
    agent = upstream_lab.procs.get("dmn-node")
    assert agent is not None
    generation = max(
        int(s["spec"]["pool"]["generation"])
        for s in admin.list(r.RESOURCE_SLICES).items
        if s["spec"]["driver"] == DRIVER and s["spec"].get("nodeName") == NODE_NAME
    )
    registered = installed_driver.agent_log_count(upstream_lab, REGISTERED)
    upstream_lab.procs.stop("dmn-node")
    try:
        lab_pods.run(admin, pods, "promised", "shared-macvlan")
        claim = wait_for(
            lambda: next(
                (c for c in lab_pods.claims_of(admin, lab_pods.uid(admin, "promised"))
                 if lab_pods.allocated_devices(c)),
                None,
            ),
            timeout=WAIT, interval=0.5, what="the claim allocated while the agent is down",
        )  # fmt: skip
        (device,) = lab_pods.allocated_devices(claim)
        _set_children(admin, "2")
    finally:
        upstream_lab.procs.start("dmn-node", agent.argv, agent.env)
    try:
        _wait_log(upstream_lab, REGISTERED, registered, "the restarted agent's registration")

        def republished() -> dict[str, str] | None:
            got = _capacities(admin)
            others = [v for name, v in got.items() if name != device]
            return got if others and set(others) == {"2"} else None

        got = wait_for(republished, timeout=WAIT, interval=0.5, what="the new policy published")
        assert got[device] == "4", got
        after = max(
            int(s["spec"]["pool"]["generation"])
            for s in admin.list(r.RESOURCE_SLICES).items
            if s["spec"]["driver"] == DRIVER and s["spec"].get("nodeName") == NODE_NAME
        )
        assert after > generation
        wait_for(
            lambda: any("E_NOT_READY" in str(e.get("message")) for e in
                        lab_pods.events(admin, "promised")),
            timeout=WAIT, interval=1.0, what="preparation held while the scope drains",
        )  # fmt: skip
        assert admin.get(r.PODS, "promised", NAMESPACE)["status"]["phase"] == "Pending"
    finally:
        _set_children(admin, "4")
    lab_pods.wait_running(admin, "promised")
    assert _has_net1(upstream_lab, "promised")
    lab_pods.remove(admin, "promised")
    pods.remove("promised")
    wait_for(
        lambda: set(_capacities(admin).values()) == {"4"},
        timeout=WAIT, interval=0.5, what="capacity 4 published again",
    )  # fmt: skip
