"""``dmn lab run -f POD.yaml`` and ``dmn lab exec POD -- CMD``: a user's own Pods on a lab.

``run`` reads Pod manifests (every document must be a ``v1`` Pod with containers; other
objects go through ``dmn lab apply``), creates them and waits until each is ``Running`` —
on the embedded backend the lab's Pod runner (:mod:`dmn.lab.pod_runner`, ``dmn lab up
--links netns`` as root) brings them up; on the upstream backend the real scheduler and
kubelet do. A Pod the node could not start is reported with the reason the runner wrote
into its status.

``exec`` runs a command of the host inside the Pod's network namespace on the embedded
backend (a lab "container" has no image of its own: this is the Pod's own view of its
network), found through the runner's record — never through a name the Pod object
carries; on the upstream backend it is ``kubectl exec`` with the lab's admin kubeconfig.

Every refusal is a :class:`~dmn.lab.cluster.LabError` with a reason code and, for bad
input, the ``file:line:col`` of the field.
"""

from __future__ import annotations

import os
import subprocess
import time
from collections.abc import Callable
from pathlib import Path

from dmn.api.cluster import Cluster, NotFound
from dmn.api.cluster import resources as r
from dmn.lab import manifests
from dmn.lab.cluster import LabError
from dmn.lab.pod_runner import POD_NETNS, read_record
from dmn.lab.state_dir import StateDir

#: Codes of bad input (exit 2); the others are the lab's or the Pod's failures (exit 1).
INPUT_CODES = frozenset({"E_NOT_A_POD", "E_POD_SPEC", "E_LAB_LINKS", "E_NOT_ROOT"})


def load_pods(path: Path) -> list[manifests.Manifest]:
    """The Pod manifests in ``path``; the first problem as a reason-coded LabError."""
    try:
        docs = manifests.load(path)
    except manifests.ManifestError as exc:
        raise LabError(exc.code, exc.message) from exc
    for m in docs:
        if m.doc["apiVersion"] != "v1" or m.kind != "Pod":
            raise LabError(
                "E_NOT_A_POD",
                f"{m.source}: {m.kind} in {m.doc['apiVersion']} is not a v1 Pod "
                "(create other objects with dmn lab apply -f)",
            )
        problem = _pod_problem(m)
        if problem:
            raise LabError("E_POD_SPEC", problem)
    return docs


def _pod_problem(m: manifests.Manifest) -> str | None:
    """The first field a lab node cannot run, as ``file:line:col: message``."""
    namespace = (m.doc.get("metadata") or {}).get("namespace")
    if namespace is not None and (not isinstance(namespace, str) or not namespace):
        return f"{m.at(('metadata', 'namespace'))}: metadata.namespace: must be a name"
    spec = m.doc.get("spec")
    if not isinstance(spec, dict):
        return f"{m.at(('spec',))}: spec: required mapping"
    containers = spec.get("containers")
    if not isinstance(containers, list) or not containers:
        return f"{m.at(('spec', 'containers'))}: spec.containers: at least one container"
    for i, ctr in enumerate(containers):
        if not isinstance(ctr, dict) or not isinstance(ctr.get("name"), str) or not ctr["name"]:
            where = m.at(("spec", "containers", i, "name"))
            return f"{where}: spec.containers[{i}].name: required string"
    claims = spec.get("resourceClaims", [])
    if not isinstance(claims, list):
        return f"{m.at(('spec', 'resourceClaims'))}: spec.resourceClaims: must be a list"
    for i, ref in enumerate(claims):
        field = f"spec.resourceClaims[{i}]"
        if not isinstance(ref, dict) or not isinstance(ref.get("name"), str) or not ref["name"]:
            return f"{m.at(('spec', 'resourceClaims', i))}: {field}.name: required string"
        sources = [k for k in ("resourceClaimName", "resourceClaimTemplateName") if k in ref]
        if len(sources) != 1 or not isinstance(ref[sources[0]], str) or not ref[sources[0]]:
            return (
                f"{m.at(('spec', 'resourceClaims', i))}: {field}: exactly one of "
                "resourceClaimName or resourceClaimTemplateName"
            )
    return None


def _namespace(m: manifests.Manifest) -> str:
    return str((m.doc.get("metadata") or {}).get("namespace") or "default")


def _phase(cluster: Cluster, namespace: str, name: str) -> tuple[str, str]:
    status = cluster.get(r.PODS, name, namespace).get("status") or {}
    return str(status.get("phase") or ""), str(status.get("message") or "")


def run_pods(
    cluster: Cluster,
    pods: list[manifests.Manifest],
    timeout: float,
    out: Callable[[str], None],
) -> None:
    """Create every Pod, then wait for each to run; raises LabError for the first that
    does not (E_POD_START with the node's reason, or E_POD_TIMEOUT)."""
    for m in pods:
        cluster.create(r.PODS, m.doc, _namespace(m))
        out(f"pod/{m.name} created")
    for m in pods:
        namespace = _namespace(m)
        deadline = time.monotonic() + timeout
        while True:
            phase, message = _phase(cluster, namespace, m.name)
            if phase == "Running":
                out(f"pod/{m.name} running")
                break
            if phase == "Failed" or (phase == "Pending" and message):
                raise LabError("E_POD_START", f"pod {namespace}/{m.name} {phase}: {message}")
            if time.monotonic() > deadline:
                raise LabError(
                    "E_POD_TIMEOUT",
                    f"pod {namespace}/{m.name} is not Running after {timeout:.0f}s "
                    f"(phase {phase or 'unset'})",
                )
            time.sleep(0.2)


def sandbox_netns(cluster: Cluster, state: StateDir, namespace: str, name: str) -> str:
    """The network namespace of a running embedded-lab Pod, checked against the runner's
    record, the Pod's UID and phase, and the namespaces that exist."""
    from pyroute2 import netns

    if os.geteuid() != 0:
        raise LabError("E_NOT_ROOT", "entering a lab Pod's network namespace needs root")
    record = read_record(state)
    if record is None:
        raise LabError(
            "E_LAB_LINKS",
            f"the lab in {state.root} runs no Pods: start it as root with dmn lab up --links netns",
        )
    try:
        pod = cluster.get(r.PODS, name, namespace)
    except NotFound as exc:
        raise LabError("E_NOT_FOUND", f"pod {namespace}/{name} not found") from exc
    status = pod.get("status") or {}
    entry = record.get(f"{namespace}/{name}") or {}
    phase = status.get("phase") or "unset"
    if entry.get("uid") != pod["metadata"]["uid"] or phase != "Running":
        detail = f": {status['message']}" if status.get("message") else ""
        raise LabError(
            "E_POD_NOT_RUNNING", f"pod {namespace}/{name} is not running (phase {phase}){detail}"
        )
    sandbox = str(entry.get("netns", ""))
    if not POD_NETNS.match(sandbox) or sandbox not in netns.listnetns():
        raise LabError("E_POD_NOT_RUNNING", f"pod {namespace}/{name}: its sandbox is gone")
    return sandbox


def exec_in_netns(sandbox: str, argv: list[str]) -> int:
    """Run ``argv`` in the namespace with this process's stdio; its exit status."""
    try:
        return subprocess.run(["ip", "netns", "exec", sandbox, *argv], check=False).returncode
    except OSError as exc:
        raise LabError("E_IO", f"running ip netns exec: {exc.strerror}") from exc


def kubectl_exec(kubeconfig: Path, namespace: str, name: str, argv: list[str]) -> int:
    """``kubectl exec`` on the upstream lab (the built kubectl, the admin kubeconfig)."""
    from dmn.lab.upstream import build

    kubectl = build.bin_dir("kubernetes") / "kubectl"
    command = [str(kubectl), "--kubeconfig", str(kubeconfig), "exec", "-n", namespace, name]
    try:
        return subprocess.run([*command, "--", *argv], check=False).returncode
    except OSError as exc:
        raise LabError("E_IO", f"running {kubectl}: {exc.strerror}") from exc
