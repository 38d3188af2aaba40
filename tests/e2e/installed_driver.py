"""Our driver as the session's node lab installed it: host processes, or the chart's Pods.

``DMN_E2E_INSTALL`` picks how ``tests/e2e/conftest.py`` brings the session's node lab up:
``process`` (the default, as ``dmn lab up --backend upstream``: ``dmn node`` and ``dmn
controller`` as host processes) or ``helm`` (as ``--install helm``: ``helm install`` of the
chart with the image built for the checkout, the node agent as the DaemonSet's Pod and the
controller as the Deployment's).
Every node e2e module runs in both; what differs is only how a test restarts or stops a
component and where it reads the agent's log, which this module answers for either:

* restarting the agent: the process is stopped and started again with the same command
  line; the Pod is deleted and the DaemonSet creates a new one (a new container, a new
  mount namespace, the same hostPath state directory);
* stopping the controller: the process is stopped; the Deployment is scaled to zero and
  its Pods waited out (starting again restores the replica count and waits for rollout);
* the agent's log: the process's log file; the agent Pods' container logs that kubelet
  writes below the lab's ``podLogsDir`` (one file per container start).
"""

from __future__ import annotations

import contextlib
import os
import signal
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from dmn.api.cluster import ApiFailure, Cluster
from dmn.api.cluster import resources as r
from dmn.controller.conditions import condition_true
from dmn.lab import manifests
from dmn.lab.demo import NEGATIVE
from dmn.lab.upstream.cluster import UpstreamLab
from dmn.lab.upstream.configs import DRIVER_NAMESPACE
from dmn.lab.upstream.driver import listening
from dmn.lab.upstream.helm_driver import HelmDriver, rolled_out
from dmn.lab.upstream.workloads import DEPLOYMENTS
from tests.waiting import wait_for

INSTALL_ENV = "DMN_E2E_INSTALL"
INSTALLS = ("helm", "process")
INSTALL = os.environ.get(INSTALL_ENV, "process")
if INSTALL not in INSTALLS:
    raise ValueError(f"{INSTALL_ENV}={INSTALL!r}: expected one of {', '.join(INSTALLS)}")
HELM = INSTALL == "helm"

WAIT = 120.0
AGENT_SELECTOR = "app.kubernetes.io/name=dra-multi-network-node"
CONTROLLER_SELECTOR = "app.kubernetes.io/name=dra-multi-network-controller"
CONTROLLER_DEPLOYMENT = "dra-multi-network-controller"
SYNCHRONIZE = "event=synchronize "  # the NRI adapter's log line per Synchronize
REGISTERED = "kubelet registered driver="  # NotifyRegistrationStatus(registered)


def runs_as_pods(lab: UpstreamLab) -> bool:
    """Whether ``lab``'s driver is the chart's Pods (the session's lab when :data:`HELM`, and
    the labs a module brings up with ``--install helm`` of its own)."""
    return isinstance(lab.driver, HelmDriver)


def driver_pods(admin: Cluster, selector: str, terminating: bool = False) -> list[dict[str, Any]]:
    """The driver namespace's Pods matching ``selector`` that are not being deleted (and
    those that are, if asked)."""
    found = admin.list(r.PODS, DRIVER_NAMESPACE, label_selector=selector).items
    return [p for p in found if terminating or not p["metadata"].get("deletionTimestamp")]


def pod_ready(p: dict[str, Any]) -> bool:
    if p["metadata"].get("deletionTimestamp"):
        return False
    return condition_true(p, "Ready")


def _pod_log_files(lab: UpstreamLab, uid: str | None = None) -> list[Path]:
    """kubelet's container log files of the agent Pods (``<ns>_<pod>_<uid>/<container>/
    <restart>.log``), of one Pod if ``uid`` is given; oldest container start first."""
    pattern = f"{DRIVER_NAMESPACE}_dra-multi-network-node-*_{uid or '*'}/*/*.log"
    return sorted(lab.layout.pod_logs.glob(pattern), key=lambda p: (p.parent, int(p.stem)))


def agent_log(lab: UpstreamLab, uid: str | None = None) -> str:
    """Everything the node agent logged that is still on disk: every incarnation of the
    process, or every container of the agent Pods kubelet still keeps files of (``uid``:
    that Pod's only)."""
    if not runs_as_pods(lab):
        try:
            return (lab.procs.logs / "dmn-node.log").read_text(errors="replace")
        except OSError:
            return ""
    texts = []
    for path in _pod_log_files(lab, uid):
        try:
            texts.append(path.read_text(errors="replace"))
        except OSError:
            continue  # rotated or removed meanwhile
    return "".join(texts)


def agent_log_count(lab: UpstreamLab, marker: str) -> int:
    """How often the running agent's log contains ``marker``: the process's whole log, or
    the current agent Pod's (a deleted Pod's files vanish when kubelet cleans it up, which
    would make a count over every Pod go down)."""
    if not runs_as_pods(lab):
        return agent_log(lab).count(marker)
    admin = lab.admin()
    try:
        (current,) = driver_pods(admin, AGENT_SELECTOR)
    finally:
        admin.close()
    return agent_log(lab, current["metadata"]["uid"]).count(marker)


def _wait_marker(lab: UpstreamLab, marker: str, seen: int, what: str, uid: str | None) -> None:
    wait_for(
        lambda: agent_log(lab, uid).count(marker) > seen,
        timeout=WAIT,
        interval=0.5,
        what=what,
    )


def restart_agent(lab: UpstreamLab, admin: Cluster) -> None:
    """Restart the node agent and return once the new one recovered, reconnected to NRI
    (a new Synchronize) and registered with kubelet again."""
    if not runs_as_pods(lab):
        synced = agent_log_count(lab, SYNCHRONIZE)
        registered = agent_log_count(lab, REGISTERED)
        lab.procs.restart("dmn-node")
        _wait_marker(lab, SYNCHRONIZE, synced, "the new agent's NRI Synchronize", None)
        _wait_marker(lab, REGISTERED, registered, "the new agent's kubelet registration", None)
        return
    (old,) = driver_pods(admin, AGENT_SELECTOR)
    admin.delete(r.PODS, old["metadata"]["name"], DRIVER_NAMESPACE)

    def replaced() -> dict[str, Any] | None:
        for p in driver_pods(admin, AGENT_SELECTOR):
            if p["metadata"]["uid"] != old["metadata"]["uid"] and pod_ready(p):
                return p
        return None

    new = wait_for(replaced, timeout=WAIT, interval=0.5, what="a new agent Pod Ready")
    assert new is not None  # wait_for returns only a truthy value
    uid = str(new["metadata"]["uid"])
    _wait_marker(lab, SYNCHRONIZE, 0, "the new agent Pod's NRI Synchronize", uid)
    _wait_marker(lab, REGISTERED, 0, "the new agent Pod's kubelet registration", uid)


AGENT_PROCESS = "dmn-node"


def restart_agent_process(lab: UpstreamLab, env: dict[str, str]) -> None:
    """Stop the agent process (if it still runs) and start it with the lab's command line and
    exactly ``env`` over the inherited environment (the lab starts it with none): e.g. the
    test-only fault point's variable, or ``{}`` to start it without. The process install
    only (the chart's DaemonSet gives a test no way to set the agent's environment). Returns
    once the new agent synchronized with NRI and registered with kubelet."""
    assert not runs_as_pods(lab), "the process install only"
    record = lab.procs.get(AGENT_PROCESS)
    assert record is not None
    synced = agent_log_count(lab, SYNCHRONIZE)
    registered = agent_log_count(lab, REGISTERED)
    lab.procs.stop(AGENT_PROCESS)
    lab.procs.start(AGENT_PROCESS, record.argv, dict(env) or None)
    _wait_marker(lab, SYNCHRONIZE, synced, "the new agent's NRI Synchronize", None)
    _wait_marker(lab, REGISTERED, registered, "the new agent's kubelet registration", None)


def disarm_agent(lab: UpstreamLab) -> None:
    """Never leave the lab armed (the process install): the agent runs — continued if a
    test stopped it — without the test-only fault point's variables, and no trigger file is
    left in its state directory."""
    from dmn.agent.coordinator.fault_points import FAULT_POINT_ENV, TRIGGER_FILE

    (lab.layout.agent_state / TRIGGER_FILE).unlink(missing_ok=True)
    record = lab.procs.get(AGENT_PROCESS)
    if record is not None and record.alive():
        os.kill(record.pid, signal.SIGCONT)
    armed = record is not None and FAULT_POINT_ENV in (record.env or {})
    if armed or not agent_alive(lab):
        restart_agent_process(lab, {})


def agent_alive(lab: UpstreamLab) -> bool:
    """Whether the recorded agent process runs (the process install only)."""
    record = lab.procs.get(AGENT_PROCESS)
    if record is None:
        return False
    with contextlib.suppress(ChildProcessError, OSError):
        os.waitpid(record.pid, os.WNOHANG)  # our child: reap it if it died
    return record.alive()


@dataclass(frozen=True)
class StoppedController:
    """What :func:`start_controller` needs to undo :func:`stop_controller`."""

    process: Any = None  # the recorded host process (process install)
    replicas: int = 0  # the Deployment's replica count (helm install)


def stop_controller(lab: UpstreamLab, admin: Cluster) -> StoppedController:
    """No controller runs afterwards (no reconciler, no webhook server)."""
    if not runs_as_pods(lab):
        process = lab.procs.get("dmn-controller")
        assert process is not None
        lab.procs.stop("dmn-controller")
        return StoppedController(process=process)
    deployment = admin.get(DEPLOYMENTS, CONTROLLER_DEPLOYMENT, DRIVER_NAMESPACE)
    replicas = int(deployment["spec"].get("replicas", 1))
    admin.patch(DEPLOYMENTS, CONTROLLER_DEPLOYMENT, {"spec": {"replicas": 0}}, DRIVER_NAMESPACE)

    def gone() -> bool:
        found = admin.list(r.PODS, DRIVER_NAMESPACE, label_selector=CONTROLLER_SELECTOR).items
        return not found

    wait_for(gone, timeout=WAIT, interval=0.5, what="the controller's Pods gone")
    return StoppedController(replicas=replicas)


def start_controller(lab: UpstreamLab, admin: Cluster, stopped: StoppedController) -> None:
    """Undo :func:`stop_controller`; returns once the webhook serves again (the lab is
    shared: the next module's first write goes through it)."""
    if not runs_as_pods(lab):
        process = stopped.process
        lab.procs.start("dmn-controller", process.argv, process.env)
        port = int(lab.info()["ports"]["webhook"])  # type: ignore[index]
        wait_for(lambda: listening(port), timeout=WAIT, interval=0.3, what="the webhook")
        return
    with_replicas = {"spec": {"replicas": stopped.replicas}}
    admin.patch(DEPLOYMENTS, CONTROLLER_DEPLOYMENT, with_replicas, DRIVER_NAMESPACE)
    wait_for(lambda: rolled_out(admin), timeout=WAIT, interval=0.5, what="the controller back")


#: :func:`webhook_verdict` when the write went through with no webhook judging it
UNJUDGED = "accepted: no webhook judged it"


def webhook_verdict(admin: Cluster) -> str:
    """'' when our admission webhook judged a write: a server-side dry run of the negative
    example topology, refused by the webhook with its reason code (E_EFFECT_DENIED); else
    what happened instead (the API server found no endpoint or could not reach it, or the
    write was not refused at all)."""
    doc = manifests.load(NEGATIVE)[0].doc
    try:
        admin.create(r.NETWORK_TOPOLOGIES, doc, dry_run=True)
    except ApiFailure as exc:
        text = str(exc)
        judged = "E_EFFECT_DENIED" in text and "admission webhook" in text
        return "" if judged else text
    return UNJUDGED
