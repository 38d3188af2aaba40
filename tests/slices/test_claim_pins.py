"""The publisher's claim view (:class:`ClaimPins`) and the plan preview it is trusted with.

Pure: no API server. The view replaced a list of every claim in the cluster on every pass;
what it may answer, and when it must refuse, is what keeps an allocated device pinned.
"""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

from dmn.agent.slices import NodePublication
from dmn.agent.slices.pins import ClaimPins
from dmn.api.cluster.access import WatchEvent
from dmn.api.cluster.listwatch import SYNCED
from tests.fixtures.policies import standard_policies
from tests.fixtures.sysfs_layouts import build_reference_node
from tests.slices.test_slices import inventory


def _claim(uid: str, *devices: tuple[str, str]) -> dict[str, Any]:
    results = [
        {"request": "r", "driver": "d", "pool": pool, "device": dev} for pool, dev in devices
    ]
    status = {"allocation": {"devices": {"results": results}}} if results else {}
    return {"metadata": {"uid": uid, "name": uid}, "status": status}


SYNC = WatchEvent(SYNCED, {"metadata": {"resourceVersion": "1"}})


def test_the_view_serves_only_once_synced_and_confirmed_and_until_it_is_old() -> None:
    pins = ClaimPins("d", "n1", max_age=300.0)
    pins.observe(WatchEvent("ADDED", _claim("a", ("n1", "eth0-macvlan"))))
    pins.confirmed(at=100.0)
    assert pins.allocated(at=100.0) is None  # not synced: the view may miss claims
    assert pins.observe(SYNC)
    assert pins.allocated(at=100.0) == {"eth0-macvlan"}
    assert pins.allocated(at=400.0) == {"eth0-macvlan"}
    assert pins.allocated(at=400.1) is None  # a full read is due
    assert ClaimPins("d", "n1").allocated() is None  # never confirmed by a full read


def test_only_events_that_move_this_nodes_pins_count() -> None:
    pins = ClaimPins("d", "n1")
    pins.observe(SYNC)
    pins.confirmed()
    assert not pins.observe(WatchEvent("ADDED", _claim("a")))  # created unallocated
    assert not pins.observe(WatchEvent("MODIFIED", _claim("b", ("n2", "x"))))  # elsewhere
    assert pins.observe(WatchEvent("MODIFIED", _claim("a", ("n1", "eth0-macvlan"))))
    assert not pins.observe(WatchEvent("MODIFIED", _claim("a", ("n1", "eth0-macvlan"))))
    assert pins.observe(WatchEvent("ADDED", _claim("c", ("n1", "eth0-macvlan"), ("n1", "vf1"))))
    assert pins.allocated() == {"eth0-macvlan", "vf1"}
    # a shared device stays pinned while another claim holds it
    assert pins.observe(WatchEvent("DELETED", _claim("c", ("n1", "eth0-macvlan"), ("n1", "vf1"))))
    assert pins.allocated() == {"eth0-macvlan"}
    assert pins.observe(WatchEvent("MODIFIED", _claim("a")))  # deallocated, still exists
    assert pins.allocated() == frozenset()


def test_the_preview_changes_nothing_and_agrees_with_the_plan(tmp_path: Path) -> None:
    """``changes`` is asked before a lagging view is trusted; it must not move the
    generation, the digest, the declarations or the taint clock, and it must say what
    ``plan`` then finds."""
    inv = inventory(build_reference_node(tmp_path))
    pub = NodePublication("worker-a")
    policies = standard_policies()
    assert pub.changes(inv, policies, {}, now=1.0)
    assert pub.publisher.generation == 0 and pub.last is None
    first = pub.plan(inv, policies, {}, now=1.0)
    state = copy.deepcopy(pub.to_json()), dict(pub.unhealthy_since)
    assert not pub.changes(inv, policies, {}, now=2.0)
    assert not pub.plan(inv, policies, {}, now=2.0).changed
    # withdrawing a policy changes declarations (pinned devices stay, not allocationReady)
    fewer = policies[:1]
    assert pub.changes(inv, fewer, {}, now=3.0)
    assert (copy.deepcopy(pub.to_json()), dict(pub.unhealthy_since)) == state
    withdrawn = {p.name for p in first.personas.personas} - {
        p.name for p in NodePublication("x").plan(inv, fewer, {}).personas.personas
    }
    assert withdrawn
    assert pub.changes(inv, fewer, {}, allocated=withdrawn, now=3.0)
    assert pub.plan(inv, fewer, {}, allocated=withdrawn, now=3.0).changed
    assert not pub.changes(inv, fewer, {}, allocated=withdrawn, now=4.0)
