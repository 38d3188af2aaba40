"""A node agent killed (SIGKILL) during NodePrepare, RunPodSandbox, StopPodSandbox,
NodeUnprepare and Synchronize.

The coordinator runs in a child process against the same lab API server, journal and
pins, and kills itself at one boundary; the parent then starts a fresh coordinator on the
state dir (recovery first), and the kubelet / runtime retry: the claim is prepared once,
the sandbox ends with exactly one macvlan child, and removal plus unprepare leave the
host namespace exactly as before. Boundaries: the runner's (``before-intent``,
``after-intent``, ``after-apply:<effect>``, ``after-outcome:<effect>``, ``before-completed``,
``after-completed``; on the undo path ``after-undoing:<effect>``, ``after-undo:<effect>``,
``after-compensated``).

Some records are written without their own sync and become durable with the next synced
commit (issue 15): RunPodSandbox's Connecting record and pin intent (with the runner's first
commit), its last Completed (with Ready), StopPodSandbox's fence and Removing (with the first
undo) and its last Undone (with Removed). A SIGKILL keeps the page cache, so these cases
show that recovery and the runtime's retry finish from every one of those points; a machine
crash that loses such a record leaves the state of the boundary before it (also covered
here), or, for Connecting and the pin, takes the mount and the sandbox with it.
Also the coordinator's own commits are crash points (``coordinator:after-preparing``,
``-prepared``, ``-attachment-intent``, ``-pin-mount``, ``-ready``, ``-removing``,
``-removed``, ``-unpreparing``, ``-released``), and NodeUnprepare and Synchronize are
killed too.
"""

from __future__ import annotations

import dataclasses
import itertools
from collections.abc import Iterator
from typing import Any

import pytest
from pyroute2 import IPRoute

from dmn.agent.journal.records import AttachmentState, PreparationState
from dmn.host.rtnetlink.links import all_links
from dmn.lab.allocator.service import ClaimService
from dmn.lab.node import NODE_NAME
from dmn.lab.runtime.nri_runtime import LabPod
from tests.coordinator.lab_node import LabNode, lab_node
from tests.coordinator.test_end_to_end import snapshot
from tests.crash_fork_server import CrashForkServer, crash_fork_server
from tests.kernel.scratch import netns_path, scratch_netns

pytestmark = [pytest.mark.netns, pytest.mark.crash]

_n = itertools.count()


@pytest.fixture(scope="module")
def node() -> Iterator[LabNode]:
    with lab_node() as n:
        yield n


@pytest.fixture(scope="module")
def fork_server() -> Iterator[CrashForkServer]:
    server = crash_fork_server(("coordinator",))
    try:
        yield server
    finally:
        server.close()


def killed(
    node: LabNode,
    call: dict[str, Any],
    crash_at: str,
    server: CrashForkServer,
    expect: dict[str, int] | None = None,
) -> list[str]:
    """Run ``call`` in a child coordinator that dies at ``crash_at``; returns the
    boundaries it passed. The parent's coordinator is closed meanwhile and restarted
    (recovering) afterwards. ``expect``: the child's end (default killed; ``{"exit": 0}``
    for a survey run whose ``crash_at`` names no boundary)."""
    devices = node.services.devices
    personas = devices.personas()
    links, representors = {}, {}
    for p in personas.personas:
        facts = devices.link(p.inventory_id)
        if facts is not None:
            links[p.inventory_id] = dataclasses.asdict(facts)
        rep = devices.representor(p.inventory_id)
        if rep is not None:
            representors[p.inventory_id] = dataclasses.asdict(rep)
    out = node.root / f"boundaries-{next(_n)}.txt"
    request = {
        "child": "coordinator",
        "url": node.lab.url,
        "state_dir": str(node.agent.config.state_dir),
        "host_netns": node.agent.config.host_netns,
        "node_name": node.agent.config.node_name,
        "node_uid": node.agent.config.node_uid,
        "personas": [p.to_json() for p in personas.personas],
        "links": links,
        "representors": representors,
        "ovsdb_remote": node.agent.config.ovsdb_remote,
        "call": call,
        "crash_at": crash_at,
        "out": str(out),
    }
    node.services.close()
    try:
        reply = server.request(request)
    finally:
        node.restart_agent()
    assert reply == (expect or {"signal": 9}), reply  # a traceback would be on stderr
    return out.read_text().split()


def claimed_pod(node: LabNode) -> tuple[dict[str, Any], dict[str, Any]]:
    i = next(_n)
    claim = node.claim(f"crash-claim-{i}")
    pod = node.pod(f"crash-pod-{i}", f"crash-claim-{i}")
    (claim,) = ClaimService(node.cluster, NODE_NAME).allocate([claim], pod=pod)
    return claim, pod


def names(ns: str) -> list[str]:
    with IPRoute(netns=ns) as ipr:
        return sorted(x.name for x in all_links(ipr))


@pytest.mark.parametrize(
    "crash_at",
    [
        "coordinator:after-preparing",
        "after-intent",
        "after-outcome:hold",
        "before-completed",
        "coordinator:after-prepared",
    ],
)
def test_killed_during_prepare(node: LabNode, crash_at: str, fork_server: CrashForkServer) -> None:
    baseline = snapshot(node.host_ns)
    claim, _ = claimed_pod(node)
    meta = claim["metadata"]
    call = {"action": "prepare", "namespace": "default", "name": meta["name"], "uid": meta["uid"]}
    assert killed(node, call, crash_at, fork_server)[-1] == crash_at
    devices = node.services.preparation.prepare(
        "default", meta["name"], meta["uid"]
    )  # kubelet retry
    assert [d.device for d in devices] == [
        claim["status"]["allocation"]["devices"]["results"][0]["device"]
    ]
    (prep,) = node.services.journal.preparations(meta["uid"])
    assert prep.state is PreparationState.PREPARED
    node.services.preparation.unprepare(meta["uid"])
    assert snapshot(node.host_ns) == baseline


@pytest.mark.parametrize(
    "crash_at",
    [
        "coordinator:after-attachment-intent",
        "coordinator:after-pin-mount",
        "before-intent",  # Connecting and the pin written (not synced), the mount made
        "after-intent",
        "after-before-image:create",
        "after-apply:create",
        "after-outcome:create",
        "before-completed",
        "after-completed",
        "coordinator:after-ready",
    ],
)
def test_killed_during_run_pod_sandbox(
    node: LabNode, crash_at: str, fork_server: CrashForkServer
) -> None:
    baseline = snapshot(node.host_ns)
    claim, pod = claimed_pod(node)
    meta, pmeta = claim["metadata"], pod["metadata"]
    assert node.services.preparation.prepare("default", meta["name"], meta["uid"])
    with scratch_netns("dmc1k") as sandbox:
        sb_id = f"sb-crash-{next(_n)}"
        call = {
            "action": "run_pod",
            "namespace": "default",
            "pod_name": pmeta["name"],
            "pod_uid": pmeta["uid"],
            "sandbox": sb_id,
            "netns": netns_path(sandbox),
        }
        assert killed(node, call, crash_at, fork_server)[-1] == crash_at
        assert snapshot(node.host_ns) == baseline  # recovery left no child in the host
        # the runtime retries the same sandbox
        sb = LabPod(sb_id, pmeta["uid"], pmeta["name"], "default", netns_path(sandbox))
        node.runtime.run_pod_sandbox(sb)
        att = node.services.attachments.attachment(pmeta["uid"], sb_id)
        assert att is not None and att.state is AttachmentState.READY
        assert names(sandbox) == ["lo", "net1"]
        node.runtime.stop_pod_sandbox(sb_id)
        node.runtime.remove_pod_sandbox(sb_id)
        assert names(sandbox) == ["lo"]
    node.services.preparation.unprepare(meta["uid"])
    assert node.services.pins.list() == []
    assert snapshot(node.host_ns) == baseline


@pytest.mark.parametrize(
    "crash_at", ["after-undoing:create", "after-undo:create", "after-compensated"]
)
def test_killed_during_stop_pod_sandbox(
    node: LabNode, crash_at: str, fork_server: CrashForkServer
) -> None:
    baseline = snapshot(node.host_ns)
    claim, pod = claimed_pod(node)
    meta, pmeta = claim["metadata"], pod["metadata"]
    assert node.services.preparation.prepare("default", meta["name"], meta["uid"])
    with scratch_netns("dmc1s") as sandbox:
        sb_id = f"sb-crash-{next(_n)}"
        sb = LabPod(sb_id, pmeta["uid"], pmeta["name"], "default", netns_path(sandbox))
        node.runtime.run_pod_sandbox(sb)
        assert names(sandbox) == ["lo", "net1"]
        call = {"action": "stop_pod", "pod_uid": pmeta["uid"], "sandbox": sb_id}
        assert killed(node, call, crash_at, fork_server)[-1] == crash_at
        # recovery finished the undo; the sandbox is fenced: no container starts in it
        assert names(sandbox) == ["lo"]
        att = node.services.attachments.attachment(pmeta["uid"], sb_id)
        assert att is not None and att.state is AttachmentState.REMOVING
        # the runtime retries the stop, then removes the sandbox
        node.runtime.stop_pod_sandbox(sb_id)
        att = node.services.attachments.attachment(pmeta["uid"], sb_id)
        assert att is not None and att.state is AttachmentState.REMOVED
        node.runtime.remove_pod_sandbox(sb_id)
        assert names(sandbox) == ["lo"]
    node.services.preparation.unprepare(meta["uid"])
    assert node.services.pins.list() == []
    assert snapshot(node.host_ns) == baseline


def _attached(node: LabNode, sandbox: str) -> tuple[dict[str, Any], dict[str, Any], str]:
    """A prepared claim whose Pod's sandbox ``sandbox`` is Ready; returns the sandbox id."""
    claim, pod = claimed_pod(node)
    meta, pmeta = claim["metadata"], pod["metadata"]
    assert node.services.preparation.prepare("default", meta["name"], meta["uid"])
    sb_id = f"sb-crash-{next(_n)}"
    node.runtime.run_pod_sandbox(
        LabPod(sb_id, pmeta["uid"], pmeta["name"], "default", netns_path(sandbox))
    )
    return claim, pod, sb_id


@pytest.mark.parametrize("crash_at", ["coordinator:after-removing", "coordinator:after-removed"])
def test_killed_at_the_coordinator_commits_of_stop_pod_sandbox(
    node: LabNode, crash_at: str, fork_server: CrashForkServer
) -> None:
    """StopPodSandbox killed right after its Removing commit (nothing undone yet) or after
    its Removed commit (before the pin is released); the runtime's retry (Stop, then
    Remove) finishes it, NodeUnprepare releases the claim, the host is as before."""
    baseline = snapshot(node.host_ns)
    with scratch_netns("dmc1k") as sandbox:
        claim, pod, sb_id = _attached(node, sandbox)
        pod_uid = pod["metadata"]["uid"]
        call = {"action": "stop_pod", "pod_uid": pod_uid, "sandbox": sb_id}
        assert killed(node, call, crash_at, fork_server)[-1] == crash_at
        node.runtime.stop_pod_sandbox(sb_id)
        node.runtime.remove_pod_sandbox(sb_id)
        att = node.services.attachments.attachment(pod_uid, sb_id)
        assert att is not None and att.state is AttachmentState.REMOVED
        assert names(sandbox) == ["lo"]
    node.services.preparation.unprepare(claim["metadata"]["uid"])
    assert node.services.pins.list() == []
    assert snapshot(node.host_ns) == baseline


@pytest.mark.parametrize(
    "crash_at",
    [
        "coordinator:after-unpreparing",
        "after-undoing:hold",
        "after-undo:hold",
        "coordinator:after-released",
    ],
)
def test_killed_during_unprepare(
    node: LabNode, crash_at: str, fork_server: CrashForkServer
) -> None:
    """NodeUnprepare killed at each commit; kubelet's retry releases the claim and its
    share exactly once."""
    baseline = snapshot(node.host_ns)
    claim, _ = claimed_pod(node)
    meta = claim["metadata"]
    assert node.services.preparation.prepare("default", meta["name"], meta["uid"])
    call = {"action": "unprepare", "uid": meta["uid"]}
    assert killed(node, call, crash_at, fork_server)[-1] == crash_at
    node.services.preparation.unprepare(meta["uid"])  # kubelet retry
    (prep,) = node.services.journal.preparations(meta["uid"])
    assert prep.state is PreparationState.RELEASED
    assert [s for s in node.services.journal.shares() if s.claim_uid == meta["uid"]] == []
    assert snapshot(node.host_ns) == baseline


@pytest.mark.parametrize(
    "crash_at", ["coordinator:after-removing", "after-undoing:create", "coordinator:after-removed"]
)
def test_killed_during_synchronize(
    node: LabNode, crash_at: str, fork_server: CrashForkServer
) -> None:
    """Synchronize (the runtime no longer lists the sandbox) killed while it removes the
    attachment; the next Synchronize finishes it."""
    baseline = snapshot(node.host_ns)
    with scratch_netns("dmc1k") as sandbox:
        claim, pod, sb_id = _attached(node, sandbox)
        pod_uid = pod["metadata"]["uid"]
        call = {"action": "synchronize", "live": []}
        assert killed(node, call, crash_at, fork_server)[-1] == crash_at
        node.services.reconcile.synchronize([])
        att = node.services.attachments.attachment(pod_uid, sb_id)
        assert att is not None and att.state is AttachmentState.REMOVED
        assert names(sandbox) == ["lo"]
    node.services.preparation.unprepare(claim["metadata"]["uid"])
    assert node.services.pins.list() == []
    assert snapshot(node.host_ns) == baseline
