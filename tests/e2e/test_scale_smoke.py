"""``benchmarks/scale.py`` end to end at a small size: its report has every key and every
claim it created was allocated by the real kube-scheduler.

A benchmark, not a timed test: no figure is asserted, only that the run is complete. The
benchmark brings up (and down) its own control-plane-only lab, so this module runs among
the modules with their own lab, before the session's node lab, under the same machine-wide
lab lock.
"""

from __future__ import annotations

import pytest

from benchmarks import scale
from tests.e2e.conftest import _lab_turn

pytestmark = [pytest.mark.e2e]

KEYS = (
    "nodes",
    "devices",
    "publish_s",
    "republish_s",
    "claims_per_s",
    "bound_p50_ms",
    "bound_p99_ms",
    "baseline_claims_per_s",
    "controller_ready_p99_ms",
)


def test_small_scale_run_reports_every_figure_and_allocates_every_claim() -> None:
    args = scale.parser().parse_args(
        ["--nodes", "10", "--pfs", "1", "--vfs", "8", "--pods", "10", "--topologies", "5",
         "--workers", "4", "--timeout", "120"]
    )  # fmt: skip
    with _lab_turn():
        result = scale.run(args)
    missing = [k for k in KEYS if result.get(k) is None]
    assert not missing, (missing, result)
    assert result["nodes"] == 10
    assert result["devices"] == 10 * (8 + 1)  # every VF kernel, the PF macvlan
    assert result["republishGenerations"] == [2]
    for phase in ("ours", "baseline"):
        assert result[phase]["allocated"] == result[phase]["bound"] == 10, result[phase]
    assert result["controller"]["ready"] == 5, result["controller"]
    assert "downProblems" not in result, result["downProblems"]
    assert "error" not in result, result["error"]
    # on the real kube-apiserver: with each node's claim watch synced, a pass that changes
    # nothing lists no claim, and its pool's metadata instead of the pool
    listed, watched = result["restPassWithClaims"], result["restPassWithClaimsWatched"]
    assert listed["requestsPerNode"]["LIST resourceclaims"] == 1.0, listed
    assert "LIST resourceclaims" not in watched["requestsPerNode"], watched
    slices = "LIST resourceslices"
    assert watched["requestsPerNode"][slices] == 1.0, watched
    assert watched["responseBytesPerNode"][slices] < listed["responseBytesPerNode"][slices] / 2
