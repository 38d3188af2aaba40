"""The controller as two replicas with leader election: the leader killed mid-apply.

The lab's controller runs alone (``--no-leader-election``). Here it is replaced by two
replicas electing a leader through the real Lease API — ``replica-b`` first (it takes the
Lease), then ``replica-a`` in the lab's own controller process (it waits) — both serving
the admission webhook, as every replica of the chart's Deployment does (the lab has no
Service in front of them, so the webhook configuration names replica-a's port: the
replica killed is the leader, replica-b). While topologies are being applied the leader
is killed with SIGKILL (no release of the Lease); replica-a must take the Lease once it
has expired, and then every topology must be reconciled exactly as one controller does
it: each Ready, with one revision, its DeviceClasses bound to that revision, nothing
duplicated, and no object left for a topology that does not exist. The lab's single
controller is restored afterwards.
"""

from __future__ import annotations

import contextlib
import copy
import os
import signal
import socket
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from dmn.api.cluster import Cluster, NotFound
from dmn.api.cluster import resources as r
from dmn.api.identity import LABEL_TOPOLOGY
from dmn.controller.stable_classes import bound_revision
from dmn.lab import manifests
from dmn.lab.demo import TOPOLOGIES, wait_settled
from dmn.lab.upstream.cluster import UpstreamLab
from dmn.lab.upstream.configs import DRIVER_NAMESPACE
from dmn.lab.upstream.driver import listening
from tests.e2e.lab_pods import WAIT
from tests.waiting import wait_for

pytestmark = [pytest.mark.e2e]

LEASE = "dra-multi-network-controller"
CONTROLLER = "dmn-controller"  # the lab's controller process, replica-a here
REPLICA_B = "dmn-controller-b"
#: the leader elector's lease duration (controller/leader.py's default)
LEASE_DURATION_S = 15.0
BATCH = 8  # topologies applied before the kill, and as many after


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _option(argv: list[str], flag: str) -> str:
    return argv[argv.index(flag) + 1]


def _with_option(argv: list[str], flag: str, value: str) -> list[str]:
    out = list(argv)
    out[out.index(flag) + 1] = value
    return out


def holder(admin: Cluster) -> str:
    try:
        lease = admin.get(r.LEASES, LEASE, DRIVER_NAMESPACE)
    except NotFound:
        return ""
    return str((lease.get("spec") or {}).get("holderIdentity") or "")


@pytest.fixture
def replicas(upstream_lab: UpstreamLab, admin: Cluster) -> Iterator[UpstreamLab]:
    """replica-b leading, replica-a waiting (in the lab controller's place); afterwards
    the lab's own controller again, alone."""
    procs = upstream_lab.procs
    original = procs.get(CONTROLLER)
    assert original is not None and original.alive()
    single = list(original.argv)
    elected = [a for a in single if a != "--no-leader-election"]
    webhook_port = int(_option(single, "--webhook-port"))
    try:
        procs.stop(CONTROLLER)
        b_argv = _with_option(elected, "--webhook-port", str(_free_port()))
        procs.start(REPLICA_B, [*b_argv, "--identity", "replica-b"], original.env)
        wait_for(lambda: holder(admin) == "replica-b", timeout=WAIT, what="replica-b leads")
        procs.start(CONTROLLER, [*elected, "--identity", "replica-a"], original.env)
        wait_for(lambda: listening(webhook_port), timeout=WAIT, what="replica-a's webhook")
        yield upstream_lab
    finally:
        procs.stop(REPLICA_B)
        procs.stop(CONTROLLER)
        with contextlib.suppress(NotFound):
            admin.delete(r.LEASES, LEASE, DRIVER_NAMESPACE)
        procs.start(CONTROLLER, single, original.env)
        wait_for(lambda: listening(webhook_port), timeout=WAIT, what="the lab's controller back")


def _topology(name: str) -> dict[str, Any]:
    (doc,) = [d.doc for d in manifests.load(TOPOLOGIES / "shared-ipvlan.yaml")]
    out = copy.deepcopy(doc)
    out["metadata"] = {"name": name}
    return out


def shape(admin: Cluster, name: str) -> tuple[int, int, frozenset[str]]:
    """(revisions of the topology, its DeviceClasses, the revisions those are bound to)."""
    selector = f"{LABEL_TOPOLOGY}={name}"
    revisions = admin.list(r.NETWORK_TOPOLOGY_REVISIONS, label_selector=selector).items
    classes = admin.list(r.DEVICE_CLASSES, label_selector=selector).items
    bound = frozenset(str(bound_revision(c).get("name", "")) for c in classes)
    return len(revisions), len(classes), bound


def test_the_other_replica_takes_over_and_nothing_is_lost_or_doubled(
    replicas: UpstreamLab, admin: Cluster, record_property: Callable[[str, object], None]
) -> None:
    names = [f"failover-{i}" for i in range(2 * BATCH)]
    control = "failover-control"
    try:
        admin.apply(_topology(control))
        (settled,) = wait_settled(admin, [control], WAIT)
        assert settled.ready == "True", settled
        expected = shape(admin, control)
        assert expected[0] == 1 and expected[2] == {settled.revision}, expected

        for name in names[:BATCH]:
            admin.apply(_topology(name))
        leader = replicas.procs.get(REPLICA_B)
        assert leader is not None and holder(admin) == "replica-b"
        os.kill(leader.pid, signal.SIGKILL)
        killed = time.monotonic()
        for name in names[BATCH:]:
            admin.apply(_topology(name))  # admitted by replica-a's webhook meanwhile
        wait_for(
            lambda: holder(admin) == "replica-a",
            timeout=3 * LEASE_DURATION_S,
            interval=0.2,
            what="replica-a takes the Lease",
        )
        takeover = time.monotonic() - killed
        record_property("takeover_s", round(takeover, 1))
        # the Lease is taken only after it expired unrenewed: never before one duration
        assert takeover >= LEASE_DURATION_S - 2.0, takeover

        results = wait_settled(admin, names, WAIT)
        assert all(t.ready == "True" for t in results), results
        record_property("all_ready_after_kill_s", round(time.monotonic() - killed, 1))
        for result in results:
            got = shape(admin, result.name)
            assert got == (expected[0], expected[1], frozenset({result.revision})), (
                result.name,
                got,
                expected,
            )
            assert all(
                any(c["metadata"]["name"] == dc for c in admin.list(r.DEVICE_CLASSES).items)
                for dc in result.device_classes
            ), result
        existing = {t["metadata"]["name"] for t in admin.list(r.NETWORK_TOPOLOGIES).items}
        for kind in (r.NETWORK_TOPOLOGY_REVISIONS, r.DEVICE_CLASSES):
            orphans = [
                o["metadata"]["name"]
                for o in admin.list(kind).items
                if (o["metadata"].get("labels") or {}).get(LABEL_TOPOLOGY)
                and o["metadata"]["labels"][LABEL_TOPOLOGY] not in existing
            ]
            assert not orphans, (kind.plural, orphans)
    finally:
        for name in [control, *names]:
            with contextlib.suppress(NotFound):
                admin.delete(r.NETWORK_TOPOLOGIES, name)

        def left() -> list[str]:
            return [
                c["metadata"]["name"]
                for c in admin.list(r.DEVICE_CLASSES).items
                if (c["metadata"].get("labels") or {})
                .get(LABEL_TOPOLOGY, "")
                .startswith("failover-")
            ]

        wait_for(lambda: left() == [], timeout=WAIT, what="the test topologies' classes gone")
