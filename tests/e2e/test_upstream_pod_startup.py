"""The Pod-startup benchmark's smoke on the session's upstream lab (issue 43, never timed).

``benchmarks/pod_startup.py`` measures Pod startup and teardown for the node's floor, this
driver, dranet and Multus + the reference macvlan plugin side by side. CI does not run the
benchmark; this runs its code with two Pods per system, one round, so the peers' start and
the benchmark's paths stay honest: every system's Pods run with their ``net1`` (ours,
dranet's link renamed by its config, Multus' macvlan), nothing is left behind after their
deletion, and the report has the keys the docs name. It asserts no time.
"""

from __future__ import annotations

import pytest

from benchmarks import pod_startup
from tests.e2e.conftest import Session

pytestmark = [pytest.mark.e2e]

KEYS = {"startup_p50_ms", "startup_p99_ms", "added_p50_ms", "added_p99_ms", "teardown_p50_ms"}


def test_each_system_gets_its_interface_and_the_report_has_its_keys(
    upstream_session: Session, classes: dict[str, str]
) -> None:
    bench = pod_startup.prepare(upstream_session.lab, pods=2)
    try:
        result = pod_startup.measure(bench, pods=2, serial=1, rounds=1, log=lambda _: None)
    finally:
        pod_startup.teardown(bench)
    systems = result["systems"]
    assert set(systems) == {"floor", "dmn", "dranet", "multus"}
    for name, entry in systems.items():
        assert set(entry) >= KEYS, (name, entry)
        assert entry["interfaces_ok"], (name, entry)
        assert entry["interfaces_checked"] == (0 if name == "floor" else 3), (name, entry)
        assert entry["left_behind"] == [], (name, entry)
    whole = result["whole_link"]["dmn_whole"]
    assert whole["interfaces_ok"] and whole["interfaces_checked"] == 1, whole
    assert whole["left_behind"] == [], whole
