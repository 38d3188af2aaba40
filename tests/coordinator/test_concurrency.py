"""Per-claim and per-sandbox serialisation in the node agent (issue 13, deliverable 7).

On the lab node with the real agent, kubelet gRPC, the lab NRI runtime and real namespaces.
An executor is made slow by a test executor table: the runner's table with one opcode
wrapped so that the apply of one chosen operation waits until the test releases it (the
agent has no knob for this). Every claim is proved by order — events recorded inside the
executors and the lock's own list of waiters — never by how long anything took.

Reproduced first: with one node-wide lock, a NodePrepare held in its executor stalled every
other Pod's NodePrepare, RunPodSandbox and StopPodSandbox until it finished (they waited
for the one lock). Now only what shares a key waits: the same claim, the same sandbox, the
same device or shared parent.
"""

from __future__ import annotations

import itertools
import threading
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from typing import Any

import pytest

from dmn.agent.coordinator import Refusal
from dmn.agent.coordinator.operations import short_digest
from dmn.agent.coordinator.verify import driver_results, fingerprint
from dmn.agent.journal.records import AttachmentState
from dmn.agent.protos import dra_v1_pb2
from dmn.api.cluster import resources as r
from dmn.engine.runner import Runner
from dmn.lab.allocator.service import ClaimService
from dmn.lab.node import NODE_NAME
from dmn.lab.runtime.nri_runtime import LabPod
from dmn.opcodes.executor import EffectContext, Executor
from tests.coordinator.lab_node import WAIT, LabNode, lab_node
from tests.coordinator.test_attach import names
from tests.coordinator.test_end_to_end import dra, other_end
from tests.kernel.scratch import netns_path, scratch_netns
from tests.waiting import wait_for

pytestmark = [pytest.mark.netns, pytest.mark.adversarial]

HOLD_PARENT = "share/hold-parent/v1"  # the macvlan prepare's one effect
CREATE_MACVLAN = "linux/create-macvlan/v2"  # the macvlan connect's child

_n = itertools.count()
_made: list[tuple[str, str]] = []


@pytest.fixture(scope="module")
def node() -> Iterator[LabNode]:
    with lab_node() as n:
        yield n


@pytest.fixture(autouse=True)
def _drop_claims(node: LabNode) -> Iterator[None]:
    """Each test's claims are deleted after it (their allocations would take the links)."""
    yield
    while _made:
        name, namespace = _made.pop()
        node.cluster.delete(r.RESOURCE_CLAIMS, name, namespace)


class SlowExecutor:
    """One opcode's real executor, with the apply of the operations ``slow`` names held
    until :attr:`release` is set; records ``<label> apply in/out`` and ``<label> undo``
    (``label`` names the operation's claim) in ``order``."""

    def __init__(
        self, inner: Executor, order: list[str], label: Callable[[str], str], slow: str
    ) -> None:
        self._inner = inner
        self.spec = inner.spec
        self.order = order
        self.label = label
        self.slow = slow  # the label whose apply waits
        self.entered = threading.Event()
        self.release = threading.Event()

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)

    def apply(self, ctx: EffectContext, before: Any) -> None:
        who = self.label(ctx.operation_id)
        self.order.append(f"{who} apply in")
        if who == self.slow:
            self.entered.set()
            assert self.release.wait(WAIT * 2), "the test never released the slow apply"
        self._inner.apply(ctx, before)
        self.order.append(f"{who} apply out")

    def undo(self, ctx: EffectContext, before: Any, outputs: Mapping[str, Any]) -> None:
        self._inner.undo(ctx, before, outputs)
        self.order.append(f"{self.label(ctx.operation_id)} undo")


def _runner(node: LabNode) -> Runner:
    return node.services.preparation.operations.runner


@contextmanager
def slow_executor(
    node: LabNode, kind: str, claims: Mapping[str, dict[str, Any]], slow: str
) -> Iterator[tuple[SlowExecutor, list[str]]]:
    """Install a test executor table with ``kind`` wrapped; ``claims`` maps a label to its
    claim (an operation is labelled by the claim its id derives from)."""
    driver = node.services.config.driver
    prefixes: dict[str, str] = {}
    for label, claim in claims.items():
        uid = claim["metadata"]["uid"]
        fp = fingerprint(uid, driver_results(claim, driver))
        prefixes[f"prep-{short_digest(uid + fp)}-"] = label
        prefixes[f"-{short_digest(uid)[:8]}-"] = label  # conn-<att>-<claim>-<step>

    def label(operation_id: str) -> str:
        for fragment, who in prefixes.items():
            if fragment in operation_id:
                return who
        return "?"

    order: list[str] = []
    runner = _runner(node)
    saved = runner.executors
    wrapped = SlowExecutor(saved[kind], order, label, slow)
    runner.executors = {**saved, kind: wrapped}
    try:
        yield wrapped, order
    finally:
        wrapped.release.set()
        runner.executors = saved


def _claim(node: LabNode, prefix: str, device_class: str = "") -> tuple[dict[str, Any], Any]:
    i = next(_n)
    claim = node.claim(f"{prefix}-claim-{i}", device_class=device_class)
    _made.append((claim["metadata"]["name"], "default"))
    pod = node.pod(f"{prefix}-pod-{i}", f"{prefix}-claim-{i}")
    scheduler = ClaimService(node.cluster, NODE_NAME)
    scheduler.refresh()
    scheduler.restore()  # the allocations of the claims that exist, like a real scheduler
    (claim,) = scheduler.allocate([claim], pod=pod)
    return claim, pod


def _claim_where(
    node: LabNode, prefix: str, want: Callable[[str], bool], device_class: str = ""
) -> tuple[dict[str, Any], Any]:
    """A claim allocated on a parent link ``want`` accepts (the lab allocator takes the
    first free device: claims that land elsewhere stay allocated, taking those devices)."""
    for _ in range(4):
        claim, pod = _claim(node, prefix, device_class)
        if want(_parent(node, claim)):
            return claim, pod
    raise AssertionError(f"no {prefix} claim landed where wanted")


def _parent(node: LabNode, claim: dict[str, Any]) -> str:
    (result,) = claim["status"]["allocation"]["devices"]["results"]
    return other_end(node, result["device"])[0]


def _ref(claim: dict[str, Any]) -> Any:
    m = claim["metadata"]
    return dra_v1_pb2.Claim(namespace=m["namespace"], uid=m["uid"], name=m["name"])


def _prepare(node: LabNode, claim: dict[str, Any]) -> str:
    """NodePrepareResources through the kubelet plugin's gRPC socket; the claim's error."""
    channel, stub = dra(node)
    with channel:
        req = dra_v1_pb2.NodePrepareResourcesRequest(claims=[_ref(claim)])
        resp = stub.NodePrepareResources(req, timeout=WAIT * 2)
        return str(resp.claims[claim["metadata"]["uid"]].error)


def _unprepare(node: LabNode, claim: dict[str, Any]) -> str:
    channel, stub = dra(node)
    with channel:
        req = dra_v1_pb2.NodeUnprepareResourcesRequest(claims=[_ref(claim)])
        resp = stub.NodeUnprepareResources(req, timeout=WAIT * 2)
        return str(resp.claims[claim["metadata"]["uid"]].error)


def _waiting(node: LabNode) -> str:
    return node.services.lock.lock.waiting


def _in_thread(target: Callable[[], None]) -> threading.Thread:
    t = threading.Thread(target=target, daemon=True)
    t.start()
    return t


def test_a_slow_prepare_does_not_delay_another_pods_sandbox(node: LabNode) -> None:
    """A's NodePrepare is held inside its executor (holding A's claim, its parent link and
    its operation); meanwhile B — another Pod, a claim on the other link — is prepared,
    attached by the runtime's RunPodSandbox, stopped, removed and unprepared, all through
    the real kubelet and NRI paths. Only then is A let go, and it completes."""
    a, _ = _claim(node, "slow")
    b, b_pod = _claim_where(node, "fast", lambda p: p != _parent(node, a), node.kernel_class())
    with slow_executor(node, HOLD_PARENT, {"A": a, "B": b}, slow="A") as (gate, order):
        a_error: list[str] = []
        ta = _in_thread(lambda: a_error.append(_prepare(node, a)))
        assert gate.entered.wait(WAIT), "A's prepare never reached its executor"

        assert _prepare(node, b) == ""
        order.append("B prepared")
        meta = b_pod["metadata"]
        with scratch_netns("dmcc") as sandbox:
            sb = LabPod("sb-fast", meta["uid"], meta["name"], "default", netns_path(sandbox))
            node.runtime.run_pod_sandbox(sb)
            assert "net2" in names(sandbox)
            order.append("B ready")
            node.runtime.stop_pod_sandbox("sb-fast")
            node.runtime.remove_pod_sandbox("sb-fast")
            assert names(sandbox) == ["lo"]
            order.append("B stopped")
        assert _unprepare(node, b) == ""
        order.append("B unprepared")
        assert ta.is_alive() and not a_error, "A's prepare did not wait in its executor"

        gate.release.set()
        ta.join(WAIT * 2)
    assert a_error == [""]
    assert order == [
        "A apply in",
        "B prepared",
        "B ready",
        "B stopped",
        "B unprepared",
        "A apply out",
    ]
    assert _unprepare(node, a) == ""


def test_prepares_sharing_a_parent_serialise(node: LabNode) -> None:
    """C's share of the same parent link waits for A's prepare (the share count both
    read), and gets in only after A's apply finished."""
    a, _ = _claim(node, "par-a")
    c, _ = _claim_where(node, "par-c", lambda p: p == _parent(node, a))
    c_uid = c["metadata"]["uid"]
    with slow_executor(node, HOLD_PARENT, {"A": a, "C": c}, slow="A") as (gate, order):
        errors: list[str] = []
        ta = _in_thread(lambda: errors.append(_prepare(node, a)))
        assert gate.entered.wait(WAIT)
        tc = _in_thread(lambda: errors.append(_prepare(node, c)))
        wait_for(lambda: f"prepare {c_uid}" in _waiting(node), timeout=WAIT, what="C to wait")
        assert order == ["A apply in"]
        gate.release.set()
        ta.join(WAIT * 2)
        tc.join(WAIT * 2)
    assert errors == ["", ""]
    assert order == ["A apply in", "A apply out", "C apply in", "C apply out"]
    assert _unprepare(node, a) == "" and _unprepare(node, c) == ""


def test_a_retry_of_the_same_claim_waits_and_replays(node: LabNode) -> None:
    """A kubelet retry of A's NodePrepare while the first is in its executor waits for the
    claim and returns the recorded result: the effect is applied once."""
    a, _ = _claim(node, "retry")
    uid = a["metadata"]["uid"]
    m = a["metadata"]
    with slow_executor(node, HOLD_PARENT, {"A": a}, slow="A") as (gate, order):
        results: list[object] = []
        ta = _in_thread(lambda: results.append(_prepare(node, a)))
        assert gate.entered.wait(WAIT)
        tr = _in_thread(
            lambda: results.append(
                node.services.preparation.prepare(m["namespace"], m["name"], uid)
            )
        )
        wait_for(lambda: f"prepare {uid}" in _waiting(node), timeout=WAIT, what="the retry")
        gate.release.set()
        ta.join(WAIT * 2)
        tr.join(WAIT * 2)
    assert order == ["A apply in", "A apply out"]
    assert "" in results and any(isinstance(r, list) and len(r) == 1 for r in results), results
    assert _unprepare(node, a) == ""


def test_a_stop_waits_for_the_run_of_its_own_sandbox(node: LabNode) -> None:
    """StopPodSandbox of a sandbox whose RunPodSandbox is in its connect waits for the
    sandbox; it tears down what the Run finished (the undo comes after the apply)."""
    d, pod = _claim(node, "stop")
    meta, dm = pod["metadata"], d["metadata"]
    assert _prepare(node, d) == ""
    with (
        scratch_netns("dmcs") as sandbox,
        slow_executor(node, CREATE_MACVLAN, {"D": d}, slow="D") as (gate, order),
    ):
        attachments = node.services.attachments
        ran: list[object] = []

        def run() -> None:
            ran.append(
                attachments.run_pod(
                    "default", meta["name"], meta["uid"], "sb-stop", netns_path(sandbox)
                )
            )

        tr = _in_thread(run)
        assert gate.entered.wait(WAIT)
        ts = _in_thread(lambda: attachments.stop_pod(meta["uid"], "sb-stop"))
        wait_for(lambda: "stop sb-stop" in _waiting(node), timeout=WAIT, what="the stop")
        assert order == ["D apply in"]
        gate.release.set()
        tr.join(WAIT * 2)
        ts.join(WAIT * 2)
        assert ran == [True]
        assert order == ["D apply in", "D apply out", "D undo"]
        att = attachments.attachment(meta["uid"], "sb-stop")
        assert att is not None and att.state is AttachmentState.REMOVED
        assert names(sandbox) == ["lo"]
    assert _unprepare(node, d) == "", dm["uid"]


def test_a_second_sandbox_of_a_claim_waits_and_is_refused(node: LabNode) -> None:
    """ "Attached to another live sandbox" stays race-free: a RunPodSandbox of a new
    incarnation of the Pod arriving while the first one's connect runs waits for the claim
    and then sees the first one Ready (E_CLAIM_IN_USE), never a claim attached twice."""
    e, pod = _claim(node, "twice")
    meta = pod["metadata"]
    assert _prepare(node, e) == ""
    with (
        scratch_netns("dmct1") as s1,
        scratch_netns("dmct2") as s2,
        slow_executor(node, CREATE_MACVLAN, {"E": e}, slow="E") as (gate, order),
    ):
        attachments = node.services.attachments
        outcome: dict[str, object] = {}

        def run(sb: str, ns: str) -> None:
            try:
                outcome[sb] = attachments.run_pod(
                    "default", meta["name"], meta["uid"], sb, netns_path(ns)
                )
            except Refusal as exc:
                outcome[sb] = exc.code

        t1 = _in_thread(lambda: run("sb-1", s1))
        assert gate.entered.wait(WAIT)
        t2 = _in_thread(lambda: run("sb-2", s2))
        wait_for(lambda: "run sb-2" in _waiting(node), timeout=WAIT, what="the second run")
        gate.release.set()
        t1.join(WAIT * 2)
        t2.join(WAIT * 2)
        assert outcome == {"sb-1": True, "sb-2": "E_CLAIM_IN_USE"}
        assert order == ["E apply in", "E apply out"]
        assert names(s2) == ["lo"] and "net1" in names(s1)
        attachments.stop_pod(meta["uid"], "sb-1")
        attachments.remove_pod(meta["uid"], "sb-1")
        attachments.remove_pod(meta["uid"], "sb-2")
    assert _unprepare(node, e) == ""
