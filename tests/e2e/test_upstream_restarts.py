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
from dmn.lab.upstream.cluster import UpstreamLab, node_ready
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
