"""Fail closed on the real runtime: no container of a Pod with our claims starts without its
network while the node agent is dead or hung, and the Pod gets it when the agent is back.

The upstream lab's containerd 2.3.7 runs as the operator guide configures it: NRI with the
default validator on and the chart's tolerate key, and *no* node-wide required plugin. Our
Pod admission puts ``dra-multi-network`` into each Pod's
``required-plugins.noderesource.dev/pod`` when (and only when) the Pod uses one of our
classes. Two layers can hold a container:

* **containerd's validator** refuses CreateContainer while our plugin is not registered
  (kubelet reports ``validation error: required plugin "dra-multi-network" not present``);
* **the agent's CreateContainer gate** refuses it while the sandbox's attachment is not
  Ready (``E_NOT_READY``), and attaches a sandbox whose RunPodSandbox attached nothing
  before the first container (the agent was dead, or hung past containerd's NRI timeout:
  containerd then starts the sandbox anyway and never asks again).

Each test says which layer held. Cases: the agent SIGKILLed inside RunPodSandbox (a Pod
without our claims starts meanwhile; ours waits and gets ``net1`` once the agent is
restarted); the agent SIGSTOPped inside RunPodSandbox for longer than containerd's NRI
request timeout, then continued. The fault point is the test-only
``coordinator:before-run-pod`` (``dmn.agent.coordinator.fault_points``): the process
install only.
"""

from __future__ import annotations

import json
import os
import signal
import time
from collections.abc import Iterator
from typing import Any

import pytest

from dmn.agent.coordinator.fault_points import FAULT_ACTION_ENV, FAULT_POINT_ENV, TRIGGER_FILE
from dmn.api.cluster import Cluster
from dmn.api.cluster import resources as r
from dmn.lab.pod_demo import NAMESPACE
from dmn.lab.upstream.cluster import UpstreamLab
from dmn.lab.upstream.configs import NRI_REQUEST_TIMEOUT_S
from dmn.lab.upstream.demo import Kubectl
from tests.e2e import installed_driver, lab_pods
from tests.waiting import wait_for

pytestmark = [
    pytest.mark.e2e,
    pytest.mark.adversarial,
    pytest.mark.usefixtures("classes"),  # the shared-macvlan claim template, Ready
    pytest.mark.timeout(600),
    pytest.mark.skipif(
        installed_driver.HELM,
        reason="the chart's DaemonSet gives a test no way to set the node agent's environment: "
        "the test-only fault point DMN_TEST_FAULT_POINT is deliberately no chart value",
    ),
]

POINT = "coordinator:before-run-pod"
TEMPLATE = "shared-macvlan"
REQUIRED = "required-plugins.noderesource.dev/pod"
#: containerd's validator's refusal, as kubelet reports it (``required plugin "<name>" not
#: present``, quoted as Go's %q does, within kubelet's and containerd's wrapping)
VALIDATOR = ("required plugin", "dra-multi-network", "not present")
#: how long a held Pod is watched for a container that should not start
HOLD_S = 3 * NRI_REQUEST_TIMEOUT_S + 4


@pytest.fixture
def disarmed(upstream_lab: UpstreamLab, pods: list[str]) -> Iterator[None]:
    """After the test (before its Pods are deleted): the agent runs, continued if stopped,
    without the fault point's variables, and no trigger file is left."""
    yield
    installed_driver.disarm_agent(upstream_lab)


def _hold(admin: Cluster, name: str) -> None:
    """For :data:`HOLD_S` seconds, check every half second that no container of ``name``
    has started."""
    deadline = time.monotonic() + HOLD_S
    while time.monotonic() < deadline:
        _never_started(admin, name)
        time.sleep(0.5)


def _arm(lab: UpstreamLab, action: str) -> None:
    installed_driver.restart_agent_process(lab, {FAULT_POINT_ENV: POINT, FAULT_ACTION_ENV: action})
    (lab.layout.agent_state / TRIGGER_FILE).touch()


def _plain_pod(name: str) -> dict[str, Any]:
    """A busybox Pod with no claim at all (never held by our plugin)."""
    doc = lab_pods.pod(name, TEMPLATE)
    doc["spec"].pop("resourceClaims")
    for c in doc["spec"]["containers"]:
        c.pop("resources", None)
    return doc


def _statuses(admin: Cluster, name: str) -> list[dict[str, Any]]:
    status = admin.get(r.PODS, name, NAMESPACE).get("status") or {}
    return list(status.get("containerStatuses") or [])


def _never_started(admin: Cluster, name: str) -> None:
    """No container of the Pod runs or ran (kubelet's view: no running or terminated state,
    no earlier state, no restart)."""
    for s in _statuses(admin, name):
        state = s.get("state") or {}
        assert "running" not in state and "terminated" not in state, (name, s)
        assert not s.get("lastState"), (name, s)
        assert not s.get("restartCount"), (name, s)


def _held_by(admin: Cluster, name: str) -> str:
    """Which layer refused the Pod's container so far: 'validator', 'gate' or ''."""
    words = [str(e.get("message") or "") for e in lab_pods.events(admin, name)]
    for s in _statuses(admin, name):
        waiting = (s.get("state") or {}).get("waiting") or {}
        words.append(str(waiting.get("message") or ""))
    text = "\n".join(words)
    if any(all(w in line for w in VALIDATOR) for line in words):
        return "validator"
    if "E_NOT_READY" in text or "E_HOOK_DEADLINE" in text:
        return "gate"
    return ""


def _has_net1(kubectl: Kubectl, name: str) -> bool:
    shown = kubectl.exec(name, "ip", "-o", "link", "show", "net1")
    return shown.returncode == 0 and "net1" in shown.stdout


def _attachments(lab: UpstreamLab, pod_uid: str) -> list[dict[str, Any]]:
    return [a for a in lab_pods.journal(lab)["attachments"] if a["identity"]["podUID"] == pod_uid]


def test_admission_requires_our_plugin_only_for_pods_with_our_claims(
    upstream_lab: UpstreamLab, admin: Cluster, pods: list[str]
) -> None:
    lab_pods.run(admin, pods, "fc-annotated", TEMPLATE)
    admin.create(r.PODS, _plain_pod("fc-unannotated"), NAMESPACE)
    pods.append("fc-unannotated")
    ours = admin.get(r.PODS, "fc-annotated", NAMESPACE)["metadata"].get("annotations") or {}
    plain = admin.get(r.PODS, "fc-unannotated", NAMESPACE)["metadata"].get("annotations") or {}
    assert "dra-multi-network" in json.loads(ours[REQUIRED]), ours
    assert REQUIRED not in plain, plain
    config = upstream_lab.layout.containerd_config.read_text()
    assert "default_validator" in config and "required_plugins" not in config


def test_agent_killed_in_run_pod_sandbox_holds_only_our_pod(
    upstream_lab: UpstreamLab, admin: Cluster, pods: list[str], disarmed: None
) -> None:
    lab, kubectl = upstream_lab, Kubectl(upstream_lab.admin_kubeconfig)
    _arm(lab, "kill")
    lab_pods.run(admin, pods, "fc-killed", TEMPLATE)
    wait_for(
        lambda: not installed_driver.agent_alive(lab),
        timeout=lab_pods.WAIT,
        interval=0.2,
        what=f"the agent killed at {POINT}",
    )
    assert f"event=fault-point-kill point={POINT} " in installed_driver.agent_log(lab)
    # while the agent is dead: a Pod without our claims starts, ours does not
    admin.create(r.PODS, _plain_pod("fc-plain"), NAMESPACE)
    pods.append("fc-plain")
    lab_pods.wait_running(admin, "fc-plain")
    wait_for(
        lambda: _held_by(admin, "fc-killed"),
        timeout=lab_pods.WAIT,
        interval=0.5,
        what="fc-killed's container refused",
    )
    _hold(admin, "fc-killed")
    held = _held_by(admin, "fc-killed")
    assert held == "validator", lab_pods.describe(admin, "fc-killed")
    pod_uid = lab_pods.uid(admin, "fc-killed")
    assert _attachments(lab, pod_uid) == []  # killed before anything was recorded
    # the agent comes back: the first container's gate attaches the sandbox
    installed_driver.restart_agent_process(lab, {})
    lab_pods.wait_running(admin, "fc-killed")
    assert _has_net1(kubectl, "fc-killed")
    (att,) = _attachments(lab, pod_uid)
    assert att["state"] == "Ready", att
    assert "event=attached-late" in installed_driver.agent_log(lab)
    (status,) = _statuses(admin, "fc-killed")
    assert not status.get("restartCount") and not status.get("lastState"), status
    print(f"\nagent killed in RunPodSandbox: held by {held}; attached late at CreateContainer")


def test_agent_hung_past_the_nri_timeout_never_lets_the_container_start_bare(
    upstream_lab: UpstreamLab, admin: Cluster, pods: list[str], disarmed: None
) -> None:
    lab, kubectl = upstream_lab, Kubectl(upstream_lab.admin_kubeconfig)
    _arm(lab, "stop")
    record = lab.procs.get(installed_driver.AGENT_PROCESS)
    assert record is not None
    lab_pods.run(admin, pods, "fc-hung", TEMPLATE)
    wait_for(
        lambda: f"event=fault-point-stop point={POINT} " in installed_driver.agent_log(lab),
        timeout=lab_pods.WAIT,
        interval=0.2,
        what=f"the agent stopped at {POINT}",
    )
    # hung for longer than containerd waits for a hook: containerd gives up on the plugin
    # and starts the sandbox; no container may start meanwhile
    _hold(admin, "fc-hung")
    held_while_hung = _held_by(admin, "fc-hung")
    os.kill(record.pid, signal.SIGCONT)
    lab_pods.wait_running(admin, "fc-hung")
    assert _has_net1(kubectl, "fc-hung")
    held = held_while_hung or _held_by(admin, "fc-hung")
    assert held in ("validator", "gate"), lab_pods.describe(admin, "fc-hung")
    pod_uid = lab_pods.uid(admin, "fc-hung")
    ready = [a for a in _attachments(lab, pod_uid) if a["state"] == "Ready"]
    assert len(ready) == 1, _attachments(lab, pod_uid)
    (status,) = _statuses(admin, "fc-hung")
    assert not status.get("restartCount") and not status.get("lastState"), status
    log = installed_driver.agent_log(lab)
    print(
        f"\nagent hung {HOLD_S}s in RunPodSandbox (containerd's NRI timeout "
        f"{NRI_REQUEST_TIMEOUT_S}s): held while hung by {held_while_hung or 'nothing yet'}, "
        f"overall by {held}; late attachment: {'event=attached-late' in log}"
    )


def test_slow_hook_in_a_live_agent_fails_the_sandbox_and_kubelet_makes_another(
    upstream_lab: UpstreamLab, admin: Cluster, pods: list[str], disarmed: None
) -> None:
    """Only the hook is slow (its thread stalls past containerd's NRI timeout); the agent
    itself answers at its own hook deadline (0.75 x the runtime's timeout) with an error,
    so containerd fails that sandbox and kubelet creates another, which is attached in
    RunPodSandbox. The layer that held: the agent's hook deadline."""
    lab, kubectl = upstream_lab, Kubectl(upstream_lab.admin_kubeconfig)
    _arm(lab, "stall")
    late_before = installed_driver.agent_log(lab).count("event=attached-late")
    lab_pods.run(admin, pods, "fc-slow", TEMPLATE)
    wait_for(
        lambda: f"event=fault-point-stall point={POINT} " in installed_driver.agent_log(lab),
        timeout=lab_pods.WAIT,
        interval=0.2,
        what=f"the hook stalled at {POINT}",
    )
    lab_pods.wait_running(admin, "fc-slow")
    assert _has_net1(kubectl, "fc-slow")
    pod_uid = lab_pods.uid(admin, "fc-slow")
    atts = _attachments(lab, pod_uid)
    ready = [a for a in atts if a["state"] == "Ready"]
    assert len(ready) == 1, atts
    (status,) = _statuses(admin, "fc-slow")
    assert not status.get("restartCount") and not status.get("lastState"), status
    reasons = sorted({str(e.get("reason")) for e in lab_pods.events(admin, "fc-slow")})
    sandboxes = {a["identity"]["sandboxID"] for a in atts}
    print(
        f"\nhook stalled in a live agent: Pod events {reasons}; sandboxes the agent "
        f"recorded: {len(sandboxes)}; attached in RunPodSandbox: "
        f"{installed_driver.agent_log(lab).count('event=attached-late') == late_before}"
    )
    assert "FailedCreatePodSandBox" in reasons, reasons
