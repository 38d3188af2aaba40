"""Device health judged from the inventory: the real scanner and persona builder over the
lab node's links (recorded facts we vary) and the reference node's sysfs tree."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

from dmn.agent.inventory import RecordedDevlink, RecordedLinks, ScanConfig, scan
from dmn.agent.inventory.facts import Inventory
from dmn.agent.kubelet.handler import DeviceHealth, Health
from dmn.agent.personas import PersonaSet, build_personas
from dmn.agent.personas.build import Pins
from dmn.agent.slices.device_health import UNHEALTHY_TAINT_KEY, device_health
from dmn.agent.slices.publication import TAINT_GRACE_S, NodePublication
from dmn.api.policy import DeviceExposurePolicy
from dmn.host.rtnetlink.links import LinkState
from dmn.lab import node
from tests.fixtures.policies import standard_policies
from tests.fixtures.sysfs_layouts import build_reference_node
from tests.slices.test_slices import inventory as reference_inventory

POOL = node.NODE_NAME


def _states(**operstates: str) -> list[LinkState]:
    """The lab node's recorded links with some operstates replaced (absent: "gone")."""
    out = []
    for state in node.link_states():
        wanted = operstates.get(state.name, state.operstate)
        if wanted == "gone":
            continue
        out.append(replace(state, operstate=wanted))
    return out


def _scan(tmp_path: Path, links: RecordedLinks) -> Inventory:
    return scan(
        ScanConfig(
            sysfs_root=tmp_path,
            node_uid=node.NODE_UID,
            links=links,
            devlink=RecordedDevlink(),
            lab_links=list(node.LAB_LINKS),
        )
    )


def _personas(inv: Inventory, pins: Pins | None = None) -> PersonaSet:
    policies = [DeviceExposurePolicy.model_validate(p) for p in node.policies()]
    return build_personas(inv, policies, node.node_object()["metadata"]["labels"], pins)


def _by_persona(health: list[DeviceHealth]) -> dict[tuple[str, str], DeviceHealth]:
    """(link, persona) → health; lab persona names end in -kernel/-macvlan/-ipvlan."""
    return {(h.message.split()[1], h.device_name.rsplit("-", 1)[1]): h for h in health}


def test_up_links_are_healthy_and_a_down_link_is_not(tmp_path: Path) -> None:
    inv = _scan(tmp_path, RecordedLinks(states=_states()))
    personas = _personas(inv)
    health = device_health(personas.personas, inv, POOL, frozenset(), now=100)
    assert len(health) == 6
    assert {h.health for h in health} == {Health.HEALTHY}
    assert {h.pool_name for h in health} == {POOL}
    assert {h.message for h in health} == {"link lab0 is up", "link lab1 is up"}

    down = _scan(tmp_path, RecordedLinks(states=_states(lab0="DOWN", lab1="LOWERLAYERDOWN")))
    after = _by_persona(device_health(_personas(down).personas, down, POOL, frozenset(), 200))
    for persona in ("kernel", "macvlan", "ipvlan"):
        assert after[("lab0", persona)].health is Health.UNHEALTHY
        assert after[("lab0", persona)].message == "link lab0 is not usable (operstate DOWN)"
        assert after[("lab1", persona)].health is Health.UNHEALTHY
        assert "LOWERLAYERDOWN" in after[("lab1", persona)].message


def test_operstate_unknown_is_a_usable_link(tmp_path: Path) -> None:
    """Links whose driver reports no carrier (dummy, some virtual links) read UNKNOWN
    while up; the kernel says DOWN when they are down."""
    inv = _scan(tmp_path, RecordedLinks(states=_states(lab0="UNKNOWN")))
    health = _by_persona(device_health(_personas(inv).personas, inv, POOL, frozenset(), 1))
    assert health[("lab0", "macvlan")].health is Health.HEALTHY
    assert health[("lab0", "macvlan")].message == "link lab0 is unknown"


def test_a_failed_link_dump_is_unknown_never_healthy(tmp_path: Path) -> None:
    good = _scan(tmp_path, RecordedLinks(states=_states()))
    personas = _personas(good)
    failed = _scan(tmp_path, RecordedLinks(fail="netlink: EPERM"))
    health = device_health(personas.personas, failed, POOL, frozenset(), 1)
    assert len(health) == 6
    assert {h.health for h in health} == {Health.UNKNOWN}
    assert all(h.message.endswith("state unknown: netlink: EPERM") for h in health)


def test_a_vanished_link_is_unhealthy_unless_a_pod_holds_it_whole(tmp_path: Path) -> None:
    """Allocated devices stay published after their link leaves the node's namespace: a
    shared parent that vanished is UNHEALTHY; an exclusive kernel device was moved into
    its Pod's namespace by preparation, where the node cannot see it: UNKNOWN."""
    before = _scan(tmp_path, RecordedLinks(states=_states()))
    published = _personas(before)
    link = {p.name: before.items[p.inventory_id].netdevs[0].ifname for p in published.personas}
    by = {(link[p.name], p.persona): p.name for p in published.personas}
    macvlan, kernel = by[("lab0", "macvlan")], by[("lab1", "kernel")]
    allocated = frozenset({macvlan, kernel})
    gone = _scan(tmp_path, RecordedLinks(states=_states(lab0="gone", lab1="gone")))
    pins = Pins(allocated=allocated, previous=published.by_name())
    retained = _personas(gone, pins)
    assert {p.name for p in retained.personas} == allocated
    health = {h.device_name: h for h in device_health(retained.personas, gone, POOL, allocated, 1)}
    assert health[macvlan].health is Health.UNHEALTHY
    assert health[macvlan].message.endswith("is gone from the node")
    assert health[kernel].health is Health.UNKNOWN
    assert "not in the node's network namespace" in health[kernel].message


def test_last_updated_moves_only_when_the_status_changes(tmp_path: Path) -> None:
    inv = _scan(tmp_path, RecordedLinks(states=_states()))
    personas = _personas(inv).personas
    first = device_health(personas, inv, POOL, frozenset(), now=100)
    previous = {h.device_name: h for h in first}
    again = device_health(personas, inv, POOL, frozenset(), now=200, previous=previous)
    assert {h.last_updated for h in again} == {100}
    down = _scan(tmp_path, RecordedLinks(states=_states(lab0="DOWN")))
    changed = device_health(personas, down, POOL, frozenset(), now=300, previous=previous)
    stamps = {h.message.split()[1]: h.last_updated for h in changed}
    assert stamps == {"lab0": 300, "lab1": 100}


def test_every_reference_persona_gets_a_verdict(tmp_path: Path) -> None:
    """The reference node (recorded from real hardware): kernel and shared-parent personas
    of up netdevs, VFIO personas of kernel-bound VFs (preparing rebinds them) and RDMA
    grants are all HEALTHY."""
    inv = reference_inventory(build_reference_node(tmp_path))
    personas = build_personas(inv, standard_policies(), {}).personas
    health = device_health(personas, inv, "n", frozenset(), 1)
    assert len(health) == len(personas) > 0
    assert {h.health for h in health} == {Health.HEALTHY}
    assert any("RDMA device" in h.message for h in health)
    assert all(0 < len(h.message) <= 1024 for h in health)


def test_unhealthy_devices_are_tainted_noschedule_in_the_published_slices(
    tmp_path: Path,
) -> None:
    """The slices the node publishes carry a NoSchedule taint on exactly the devices whose
    link is down (all three personas of lab0), none while it is up, and a taint that comes
    or goes moves the pool generation; an exclusive link held by a Pod (UNKNOWN) is not
    tainted."""
    policies = [DeviceExposurePolicy.model_validate(p) for p in node.policies()]
    labels = node.node_object()["metadata"]["labels"]
    publication = NodePublication(POOL)

    clock = [0.0]

    def tainted(links: RecordedLinks, allocated: frozenset[str] = frozenset()) -> set[str]:
        inv = _scan(tmp_path, links)
        first = publication.plan(inv, policies, labels, allocated, now=clock[0])
        # a device unhealthy for less than the grace is not tainted yet
        early = [d for s in first.slices for d in s["spec"].get("devices") or ()]
        assert not any(d.get("taints") for d in early)
        clock[0] += TAINT_GRACE_S
        plan = publication.plan(inv, policies, labels, allocated, now=clock[0])
        clock[0] += 100
        devices = [d for s in plan.slices for d in s["spec"].get("devices") or ()]
        for d in devices:
            for taint in d.get("taints") or ():
                assert taint == {"key": UNHEALTHY_TAINT_KEY, "effect": "NoSchedule"}, taint
        return {d["name"] for d in devices if d.get("taints")}

    assert tainted(RecordedLinks(states=_states())) == set()
    up_generation = publication.publisher.generation
    down = tainted(RecordedLinks(states=_states(lab0="DOWN")))
    assert len(down) == 3 and publication.publisher.generation == up_generation + 1
    names = {p.name for p in publication.last.personas} if publication.last else set()
    assert down < names
    assert tainted(RecordedLinks(states=_states())) == set()
    assert publication.publisher.generation == up_generation + 2
    kernel1 = next(n for n in names if n.endswith("-kernel") and n not in down)
    held = tainted(RecordedLinks(states=_states(lab1="gone")), frozenset({kernel1}))
    assert kernel1 not in held
