"""``dmn lab demo --backend upstream``'s steps on the session's lab.

The command itself brings a lab up, runs these steps and brings it down; ``up`` and
``down`` are proven by the other modules on this one lab, so only the steps run here
(no second lab): the example IPPools and every example topology Ready, the negative one
refused, two Pods with shared-macvlan claims show ``net1`` via ``kubectl exec`` with the
address the agent gave it from the pool and ping each other over it, a
host-device Pod gets a whole lab link, all are deleted and the node's links are as before.
"""

from __future__ import annotations

import pytest

from dmn.api.cluster import Cluster
from dmn.lab.upstream.cluster import UpstreamLab
from dmn.lab.upstream.demo import UpstreamDemoReport, run_pods
from tests.e2e.lab_pods import WAIT

pytestmark = [pytest.mark.e2e]


def test_the_demo_steps_hold(upstream_lab: UpstreamLab, admin: Cluster, pods: list[str]) -> None:
    pods += ["demo-a", "demo-b", "demo-host"]  # deleted by the demo; by the fixture if not
    report = UpstreamDemoReport()
    run_pods(upstream_lab, admin, report, WAIT)
    assert report.ok, "\n".join(report.lines)
    assert any(line.startswith("ok   demo-a pings demo-b over net1") for line in report.lines)
    # the addresses are the node agent's, from the example pool; none is added by the demo
    addressed = [x for x in report.lines if "networkData)" in x and " net1 10.56.0." in x]
    assert len(addressed) == 2, report.lines
    assert any("IPAllocations left []" in line for line in report.lines)
