"""Multus automatic mode with the node agent SIGKILLed between each prepare step and each
release step, kubelet, containerd and real Multus retrying for real: exactly one shadow per
binding while the Pod runs, none after it goes, no Whereabouts reservation left.

The agent is killed by its test-only fault point (``dmn.agent.coordinator.fault_points``, as
``test_upstream_ipam_crashes.py`` does): restarted with ``DMN_TEST_FAULT_POINT`` naming the
boundary and the trigger armed, it dies there once; the test starts it again without the
variable and lets kubelet's retries finish. Prepare: the preparation's checkpoint
(``coordinator:after-preparing``), the shadow created (``after-apply:shadow``, its outcome not
yet journaled), the Pod patched (``after-apply:select``), Prepared
(``coordinator:after-prepared``). Release: the shadow's deletion requested
(``after-undo:ready``), the selection removed (``after-undo:select``), the finalizer removed
(``after-undo:shadow``), Released (``coordinator:after-released``).

The process install only (the chart gives a test no way to set the agent's environment).
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from dmn.agent.coordinator.fault_points import FAULT_POINT_ENV, TRIGGER_FILE
from dmn.api.cluster import Cluster
from dmn.api.cluster import resources as r
from dmn.engine.journal import UNFINISHED_STATES
from dmn.lab.pod_demo import NAMESPACE
from dmn.lab.upstream.cluster import UpstreamLab
from dmn.lab.upstream.multus import MultusInstall, reservations
from tests.e2e import installed_driver, lab_pods
from tests.e2e.conftest import Session
from tests.e2e.lab_pods import WAIT
from tests.e2e.multus_auto import auto_pod, automatic_mode, bound, shadows
from tests.waiting import wait_for

pytestmark = [
    pytest.mark.e2e,
    pytest.mark.crash,
    pytest.mark.timeout(1800),
    pytest.mark.skipif(
        installed_driver.HELM,
        reason="the chart's DaemonSet gives a test no way to set the node agent's environment: "
        "the test-only fault point DMN_TEST_FAULT_POINT is deliberately no chart value",
    ),
]

PREPARE_POINTS = (
    "coordinator:after-preparing",
    "after-apply:shadow",
    "after-apply:select",
    "coordinator:after-prepared",
)
RELEASE_POINTS = (
    "after-undo:ready",
    "after-undo:select",
    "after-undo:shadow",
    "coordinator:after-released",
)


@pytest.fixture(scope="module")
def auto(multus_lab: MultusInstall, upstream_session: Session) -> Iterator[str]:
    lab = upstream_session.lab
    admin = lab.admin()
    try:
        with automatic_mode(admin, multus_lab) as device_class:
            yield device_class
    finally:
        installed_driver.disarm_agent(lab)
        admin.close()


@pytest.fixture
def disarmed(upstream_lab: UpstreamLab, pods: list[str]) -> Iterator[None]:
    yield
    installed_driver.disarm_agent(upstream_lab)


def _arm(lab: UpstreamLab, point: str) -> int:
    installed_driver.restart_agent_process(lab, {FAULT_POINT_ENV: point})
    (lab.layout.agent_state / TRIGGER_FILE).touch()
    return installed_driver.agent_log(lab).count("event=fault-point-kill")


def _killed_then_restarted(lab: UpstreamLab, point: str, kills: int) -> None:
    wait_for(
        lambda: not installed_driver.agent_alive(lab),
        timeout=WAIT,
        interval=0.2,
        what=f"the agent killed at {point}",
    )
    log = installed_driver.agent_log(lab)
    assert log.count("event=fault-point-kill") == kills + 1, log[-2000:]
    assert f"event=fault-point-kill point={point} " in log, log[-2000:]
    installed_driver.restart_agent_process(lab, {})


def _settled(lab: UpstreamLab, admin: Cluster, name: str) -> None:
    wait_for(lambda: not shadows(admin), timeout=WAIT, interval=0.5, what="no shadow left")
    assert not reservations(admin, f"{NAMESPACE}/{name}")
    doc = lab_pods.journal(lab)
    assert not doc["quarantined"], doc["quarantined"]
    assert not [o for o in doc["operations"] if o["state"] in UNFINISHED_STATES]


@pytest.mark.parametrize("point", PREPARE_POINTS)
def test_killed_while_preparing_recovers_to_one_shadow_then_none(
    auto: str,
    point: str,
    upstream_lab: UpstreamLab,
    admin: Cluster,
    pods: list[str],
    disarmed: None,
) -> None:
    name = f"auto-kill-p{PREPARE_POINTS.index(point)}"
    kills = _arm(upstream_lab, point)
    admin.create(r.PODS, auto_pod(name), NAMESPACE)
    pods.append(name)
    _killed_then_restarted(upstream_lab, point, kills)
    lab_pods.wait_running(admin, name)
    bound(admin, name, lab_pods.uid(admin, name))  # exactly one shadow, ours, attached
    lab_pods.remove(admin, name)
    pods.clear()
    _settled(upstream_lab, admin, name)


@pytest.mark.parametrize("point", RELEASE_POINTS)
def test_killed_while_releasing_leaves_nothing(
    auto: str,
    point: str,
    upstream_lab: UpstreamLab,
    admin: Cluster,
    pods: list[str],
    disarmed: None,
) -> None:
    name = f"auto-kill-r{RELEASE_POINTS.index(point)}"
    admin.create(r.PODS, auto_pod(name), NAMESPACE)
    pods.append(name)
    lab_pods.wait_running(admin, name)
    bound(admin, name, lab_pods.uid(admin, name))
    kills = _arm(upstream_lab, point)
    lab_pods.delete(admin, name)
    _killed_then_restarted(upstream_lab, point, kills)
    lab_pods.remove(admin, name)
    pods.clear()
    _settled(upstream_lab, admin, name)
