"""Revision-capable node affinity (design §9.3) on the real API server, scheduler and kubelet.

The lab node's agent reports what it runs on its Node; our controller labels the Node with
the requirement of every revision it can run; our Pod webhook gives each Pod of ours a
required node affinity on the labels of the revisions its claims use.

* The report is there, names the node, says NRI is up; the labels are exactly the
  requirements of the live revisions, and a Pod of ours carries the affinity and runs.
* The report is overwritten with what an agent of another build would report (other
  contracts for the opcodes the revisions use): the controller takes the labels away, a
  new Pod of ours stays Pending with the real scheduler's node-affinity message (no
  sandbox is ever made for it), a Pod without claims of ours still runs, and a Pod of ours
  naming the node directly (``spec.nodeName``) is refused by admission; the agent's next
  refresh restores the report, the labels come back and the waiting Pod runs with its
  network.

The forged report lives only until the agent's next refresh, whose time depends on when the
agent last started (a module before this one may have restarted it): the test forges it
only when that refresh is far enough away for the checks that need it forged.
"""

from __future__ import annotations

import time
from typing import Any

import pytest

from dmn.api.cluster import ApiFailure, Cluster
from dmn.api.cluster import resources as r
from dmn.api.node_capability import (
    ANNOTATION,
    LABEL_PREFIX,
    capability_labels,
    parse_report,
    revision_requirement,
)
from dmn.lab.pod_demo import NAMESPACE
from dmn.lab.pod_network import wait_reported
from dmn.lab.upstream.cluster import UpstreamLab
from dmn.lab.upstream.configs import NODE_NAME
from dmn.lab.upstream.demo import pod
from tests.e2e import lab_pods
from tests.e2e.lab_pods import WAIT
from tests.waiting import wait_for

pytestmark = [pytest.mark.e2e]


def _node(admin: Cluster) -> dict[str, Any]:
    return admin.get(r.NODES, NODE_NAME)


def _wanted_keys(admin: Cluster) -> set[str]:
    keys = set()
    for rev in admin.list(r.NETWORK_TOPOLOGY_REVISIONS).items:
        req = revision_requirement(rev)
        if req is not None:
            keys.add(req.key)
    return keys


def _required_terms(admin: Cluster, name: str) -> list[dict[str, Any]]:
    spec = admin.get(r.PODS, name, NAMESPACE)["spec"]
    node_affinity = (spec.get("affinity") or {}).get("nodeAffinity") or {}
    required = node_affinity.get("requiredDuringSchedulingIgnoredDuringExecution") or {}
    return list(required.get("nodeSelectorTerms") or [])


def test_the_node_is_labelled_for_what_its_agent_runs_and_our_pod_is_held_to_it(
    upstream_lab: UpstreamLab, admin: Cluster, classes: dict[str, str], pods: list[str]
) -> None:
    report = parse_report(_node(admin)["metadata"]["annotations"][ANNOTATION])
    assert report.node == NODE_NAME and report.nri_registered and report.nri_synchronized
    wanted = _wanted_keys(admin)
    assert wanted
    wait_for(
        lambda: set(capability_labels(_node(admin))) == wanted,
        timeout=WAIT,
        what=f"the node labelled {sorted(wanted)}",
    )
    lab_pods.run(admin, pods, "capable", "shared-macvlan")
    lab_pods.wait_running(admin, "capable")
    terms = _required_terms(admin, "capable")
    assert terms, "the webhook gave the Pod no required node affinity"
    for term in terms:
        ours = [e for e in term.get("matchExpressions") or [] if e["key"].startswith(LABEL_PREFIX)]
        assert ours and all(e["operator"] == "Exists" and e["key"] in wanted for e in ours)


def _as_older_agent(admin: Cluster) -> None:
    """Overwrite the report with what an agent of another build would say: every opcode the
    live revisions use has another contract digest there."""
    value = _node(admin)["metadata"]["annotations"][ANNOTATION]
    report = parse_report(value)
    used = {
        name
        for rev in admin.list(r.NETWORK_TOPOLOGY_REVISIONS).items
        for name in (rev["spec"].get("opcodeContracts") or {})
    }
    older = value
    for name in sorted(used & set(report.opcodes)):
        older = older.replace(f'"{name}":"{report.opcodes[name]}"', f'"{name}":"{"0" * 16}"')
    assert used and older != value
    admin.patch(r.NODES, NODE_NAME, {"metadata": {"annotations": {ANNOTATION: older}}})


#: How long the forged report must outlive the forging: the labels' removal, the refused
#: direct Pod and the scheduler's first verdict on the held one (a few seconds), with margin;
#: kept short, as the test then waits for the refresh after it to bring the labels back.
FORGED_FOR_S = 12.0


def _after_a_refresh_if_due(admin: Cluster) -> None:
    """Return when the agent's next refresh of its report is at least :data:`FORGED_FOR_S`
    away: at once, or after the refresh that is due sooner."""
    report = parse_report(_node(admin)["metadata"]["annotations"][ANNOTATION])
    if report.observed_at + report.refresh_s - time.time() >= FORGED_FOR_S:
        return

    def refreshed() -> bool:
        now = parse_report(_node(admin)["metadata"]["annotations"][ANNOTATION])
        return now.observed_at != report.observed_at

    wait_for(refreshed, timeout=WAIT, interval=0.5, what="the agent's next refresh")


def test_a_node_whose_agent_runs_other_contracts_gets_no_new_pod_of_ours(
    upstream_lab: UpstreamLab, admin: Cluster, classes: dict[str, str], pods: list[str]
) -> None:
    wanted = _wanted_keys(admin)
    wait_for(lambda: set(capability_labels(_node(admin))) == wanted, timeout=WAIT, what="labels")
    _after_a_refresh_if_due(admin)
    _as_older_agent(admin)
    wait_for(lambda: capability_labels(_node(admin)) == {}, timeout=WAIT, what="labels removed")

    direct = pod("direct", "shared-macvlan")
    direct["spec"]["nodeName"] = NODE_NAME
    with pytest.raises(ApiFailure) as refused:
        admin.create(r.PODS, direct, NAMESPACE)
    assert "E_POD_NODE_BYPASS" in str(refused.value), refused.value

    lab_pods.run(admin, pods, "held", "shared-macvlan")
    message = wait_for(
        lambda: lab_pods.unschedulable(admin, "held"), timeout=WAIT, what="held Unschedulable"
    )
    assert "affinity" in message, message
    bare = pod("no-claims", "unused")
    del bare["spec"]["resourceClaims"]
    for container in bare["spec"]["containers"]:
        container.get("resources", {}).pop("claims", None)
    admin.create(r.PODS, bare, NAMESPACE)
    pods.append("no-claims")
    lab_pods.wait_running(admin, "no-claims")
    assert not _required_terms(admin, "no-claims")

    # the agent's next refresh (at most its refresh period away) restores the truth
    wait_for(
        lambda: set(capability_labels(_node(admin))) == wanted, timeout=WAIT, what="labels back"
    )
    lab_pods.wait_running(admin, "held")
    reported = wait_reported(admin, NAMESPACE, "held", "net1", WAIT)
    assert reported is not None and reported.addresses, lab_pods.describe(admin, "held")
