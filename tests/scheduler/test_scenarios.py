"""Design §11.1: the twelve scheduler scenarios, plus pcieRoot pairing, children
exhaustion and policy change while allocated.

Each test publishes its own slices from the reference fixture node through the node
agent's persona/slice code, creates its own classes and claims, and allocates them with
the lab allocator (structured-parameters semantics, see lab/allocator/README.md).
"""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pytest

from dmn.agent.inventory import ScanConfig, scan
from dmn.agent.personas import FindingCode
from dmn.agent.slices import NodePublication, node_allocation_check
from dmn.lab.allocator import AllocationError, Allocator
from tests.fixtures.policies import (
    STANDARD_CLASSES,
    D,
    claim,
    family,
    iface,
    on_pci,
    policy,
    request,
    standard_policies,
)
from tests.fixtures.sysfs_layouts import (
    MLX_PF0,
    MLX_PF1,
    SHARED_UNBOUND,
    VFIO_ALONE,
    X710_PF,
    SysfsBuilder,
    add_shared_group,
    build_reference_node,
    mlx_vf_address,
)
from tests.scheduler.harness import NODE, Harness, make_harness

pytestmark = pytest.mark.scheduler

VF0_0 = mlx_vf_address(0, 0)
VF0_1 = mlx_vf_address(0, 1)


@pytest.fixture
def h(tmp_path: Path) -> Harness:
    return make_harness(tmp_path, standard_policies(children=4))


def on_pf0(cls: str, name: str = "r") -> dict[str, Any]:
    return request(name, cls, selectors=[on_pci(MLX_PF0)])


def vf_of(pf: str, name: str = "v", count: int = 1) -> dict[str, Any]:
    return request(
        name,
        "vf-kernel",
        count=count,
        selectors=[f'device.attributes["{D}"].pfPciAddress == "{pf}"'],
    )


def blocked(h: Harness, c: dict[str, Any]) -> bool:
    try:
        h.allocate(c)
    except AllocationError as exc:
        assert exc.reason == "Unschedulable"
        return True
    return False


def devices_of(allocation: dict[str, Any]) -> list[str]:
    return [r["device"] for r in allocation["devices"]["results"]]


# 1 ---------------------------------------------------------------------------------------


def test_01_pf_handoff_blocks_child_vfs_and_shared_users_across_claims(h: Harness) -> None:
    h.allocate(claim("pf", on_pf0("pf-kernel")))
    assert blocked(h, claim("vf", request("v", "vf-kernel", selectors=[on_pci(VF0_0)])))
    assert blocked(h, claim("mac", on_pf0("pf-macvlan")))
    assert blocked(h, claim("ipv", on_pf0("pf-ipvlan")))
    h.allocate(claim("other-family", vf_of(MLX_PF1)))  # PF1's family is independent


def test_01_child_vf_blocks_pf_handoff_across_claims(h: Harness) -> None:
    h.allocate(claim("vf", request("v", "vf-kernel", selectors=[on_pci(VF0_1)])))
    assert blocked(h, claim("pf", on_pf0("pf-kernel")))
    assert blocked(h, claim("pf-vfio", on_pf0("pf-vfio")))


def test_01_pf_handoff_and_child_vf_within_one_claim(h: Harness) -> None:
    assert blocked(h, claim("both", on_pf0("pf-kernel", "pf"), vf_of(MLX_PF0)))
    assert blocked(h, claim("both2", on_pf0("pf-kernel", "pf"), on_pf0("pf-macvlan", "mac")))
    assert h.allocator.allocations == {}


# 2 ---------------------------------------------------------------------------------------


def test_02_distinct_vfs_coexist_and_families_are_independent(h: Harness) -> None:
    (a,) = h.allocate(claim("vfs", vf_of(MLX_PF0, count=8)))
    assert len(set(devices_of(a))) == 8
    assert blocked(h, claim("ninth", vf_of(MLX_PF0)))  # all 8 VFs in use
    h.allocate(claim("mac", on_pf0("pf-macvlan")))  # shared PF use coexists with VFs
    h.allocate(claim("pf1", request("p", "pf-kernel", selectors=[on_pci(MLX_PF1)])))


# 3 ---------------------------------------------------------------------------------------


def test_03_macvlan_shares_allocate_until_capacity_is_exhausted(h: Harness) -> None:
    shares = [h.allocate(claim(f"m{i}", on_pf0("pf-macvlan")))[0] for i in range(4)]
    results = [a["devices"]["results"][0] for a in shares]
    assert len({r["device"] for r in results}) == 1
    assert len({r["shareID"] for r in results}) == 4
    assert all(r["consumedCapacity"] == {f"{D}/children": "1"} for r in results)
    assert blocked(h, claim("m4", on_pf0("pf-macvlan")))


# 4 ---------------------------------------------------------------------------------------


def test_04_active_macvlan_blocks_ipvlan_and_direct_handoff(h: Harness) -> None:
    h.allocate(claim("mac", on_pf0("pf-macvlan")))
    for cls in ("pf-ipvlan", "pf-kernel", "pf-vfio"):
        assert blocked(h, claim(cls, on_pf0(cls)))
    h.allocate(claim("pf1-ipvlan", request("i", "pf-ipvlan", selectors=[on_pci(MLX_PF1)])))


def test_04_reverse_direction(h: Harness) -> None:
    h.allocate(claim("ipv", on_pf0("pf-ipvlan")))
    assert blocked(h, claim("mac", on_pf0("pf-macvlan")))
    h.allocate(claim("pf1", request("k", "pf-kernel", selectors=[on_pci(MLX_PF1)])))
    assert blocked(h, claim("mac1", request("m", "pf-macvlan", selectors=[on_pci(MLX_PF1)])))


# 5 ---------------------------------------------------------------------------------------


def test_05_release_first_share_still_blocks_last_and_cleanup_unblocks(h: Harness) -> None:
    h.allocate(claim("m1", on_pf0("pf-macvlan")))
    (second,) = h.allocate(claim("m2", on_pf0("pf-macvlan")))
    h.release("m1")
    assert blocked(h, claim("ipv", on_pf0("pf-ipvlan")))
    h.release("m2", cleanup_done=False)  # the last share is released, cleanup still running
    assert blocked(h, claim("ipv", on_pf0("pf-ipvlan")))
    h.finish_cleanup(devices_of(second)[0])
    h.allocate(claim("ipv", on_pf0("pf-ipvlan")))


# 6 ---------------------------------------------------------------------------------------


def _restart(h: Harness, tmp: Path, persisted: str, claims: str, fresh: bool = False) -> Harness:
    """Both processes start again from what they persisted: the agent from its saved
    publication state (JSON), the scheduler from the claims' status (JSON), and the
    inventory from a new scan of a freshly built sysfs tree of the same node."""
    node = build_reference_node(tmp)
    inventory = scan(ScanConfig(node.sysfs, "uid-worker-a", node.links, node.devlink,
                                node_ips=node.node_ips))  # fmt: skip
    allocator = Allocator(NODE, classes=STANDARD_CLASSES)
    for uid, allocation in json.loads(claims).items():
        allocator.restore(uid, allocation)
    publication = (
        NodePublication(NODE) if fresh else NodePublication.from_json(json.loads(persisted))
    )
    restarted = Harness(inventory, list(h.policies), allocator, publication)
    restarted.publish()
    return restarted


def test_06_scheduler_and_driver_restart_preserve_constraints_and_accounting(
    h: Harness, tmp_path: Path
) -> None:
    allocated = {uid: h.allocate(claim(uid, on_pf0("pf-macvlan")))[0] for uid in ("m1", "m2")}
    generation = h.slices[0]["spec"]["pool"]["generation"]
    r = _restart(h, tmp_path / "after", json.dumps(h.publication.to_json()), json.dumps(allocated))
    assert r.slices == h.slices  # the same pool at the same generation, not a fresh one
    assert {s["spec"]["pool"]["generation"] for s in r.slices} == {generation}
    assert blocked(r, claim("ipv", on_pf0("pf-ipvlan")))  # constraints survive
    assert blocked(r, claim("k", on_pf0("pf-kernel")))
    assert blocked(r, claim("vfio", on_pf0("pf-vfio")))
    r.allocate(claim("m3", on_pf0("pf-macvlan")))  # share accounting survives: 2 of 4 used
    r.allocate(claim("m4", on_pf0("pf-macvlan")))
    assert blocked(r, claim("m5", on_pf0("pf-macvlan")))
    r.release("m1")
    assert blocked(r, claim("ipv", on_pf0("pf-ipvlan")))  # three shares still active
    for uid in ("m2", "m3", "m4"):
        r.release(uid)
    r.allocate(claim("ipv", on_pf0("pf-ipvlan")))


def test_06_pinned_declarations_survive_restart_during_a_pending_drain(
    h: Harness, tmp_path: Path
) -> None:
    allocated = {uid: h.allocate(claim(uid, on_pf0("pf-macvlan")))[0] for uid in ("m1", "m2")}
    mac = devices_of(allocated["m1"])[0]
    h.policies = standard_policies(children=64)  # changed while allocated: pinned at 4
    h.publish()
    generation = h.slices[0]["spec"]["pool"]["generation"]
    r = _restart(h, tmp_path / "after", json.dumps(h.publication.to_json()), json.dumps(allocated))
    kept = r.personas.by_name()[mac]  # type: ignore[union-attr]
    assert kept.children.value == 4 and not kept.allocation_ready  # type: ignore[union-attr]
    assert {s["spec"]["pool"]["generation"] for s in r.slices} == {generation}
    assert blocked(r, claim("ipv", on_pf0("pf-ipvlan")))
    assert blocked(r, claim("m3", on_pf0("pf-macvlan")))  # pending drain: no new shares
    r.release("m1")
    r.release("m2")
    drained = r.personas.by_name()[mac]  # type: ignore[union-attr]
    assert drained.children.value == 64 and drained.allocation_ready  # type: ignore[union-attr]
    assert {s["spec"]["pool"]["generation"] for s in r.slices} == {generation + 1}
    r.allocate(claim("m3", on_pf0("pf-macvlan")))


def test_06_counterfactual_restart_without_persisted_declarations(
    h: Harness, tmp_path: Path
) -> None:
    """Why the agent persists its publication: from scratch it would redeclare the pinned
    device with the new capacity and restart the generation at 1."""
    allocated = {uid: h.allocate(claim(uid, on_pf0("pf-macvlan")))[0] for uid in ("m1", "m2")}
    mac = devices_of(allocated["m1"])[0]
    h.policies = standard_policies(children=64)
    h.publish()
    r = _restart(h, tmp_path / "after", "", json.dumps(allocated), fresh=True)
    assert r.personas.by_name()[mac].children.value == 64  # type: ignore[union-attr]
    assert {s["spec"]["pool"]["generation"] for s in r.slices} == {1}


# 7 ---------------------------------------------------------------------------------------


def test_07_allocated_but_not_prepared_claims_participate(h: Harness, tmp_path: Path) -> None:
    (allocation,) = h.allocate(claim("vfio", on_pf0("pf-vfio")))
    vfio = devices_of(allocation)[0]
    # nothing was prepared on the node: no NodePrepareResources happened at all, and the
    # node would accept the allocation if it came
    assert node_allocation_check(h.personas, [vfio], []) == []  # type: ignore[arg-type]
    assert blocked(h, claim("kernel", on_pf0("pf-kernel")))
    assert blocked(h, claim("mac", on_pf0("pf-macvlan")))
    assert blocked(h, claim("vf", vf_of(MLX_PF0)))
    # the agent pins it from the claim's status alone: a withdrawn policy keeps it declared
    h.policies = [p for p in h.policies if p.metadata["name"] != "pf-vfio"]
    h.publish()
    kept = h.personas.by_name()[vfio]  # type: ignore[union-attr]
    assert kept.retained and not kept.allocation_ready
    assert blocked(h, claim("kernel", on_pf0("pf-kernel")))
    # and across a restart of both sides it still counts (still never prepared)
    r = _restart(
        h, tmp_path / "after", json.dumps(h.publication.to_json()), json.dumps({"vfio": allocation})
    )
    assert vfio in r.personas.by_name()  # type: ignore[union-attr]
    assert blocked(r, claim("kernel", on_pf0("pf-kernel")))
    assert blocked(r, claim("vf", vf_of(MLX_PF0)))
    r.release("vfio")
    assert vfio not in r.personas.by_name()  # type: ignore[union-attr]
    r.allocate(claim("kernel", on_pf0("pf-kernel")))


# 8 ---------------------------------------------------------------------------------------


def test_08_kernel_and_vfio_personas_of_one_function_never_co_allocate(h: Harness) -> None:
    assert blocked(h, claim("pf-both", on_pf0("pf-kernel", "k"), on_pf0("pf-vfio", "v")))
    h.allocate(claim("vf-k", request("k", "vf-kernel", selectors=[on_pci(VF0_0)])))
    assert blocked(h, claim("vf-v", request("v", "vf-vfio", selectors=[on_pci(VF0_0)])))
    h.allocate(claim("vf-v2", request("v", "vf-vfio", selectors=[on_pci(VF0_1)])))


def test_08_unrepresentable_isolation_is_not_published(tmp_path: Path) -> None:
    vfio_everywhere = policy(
        "vfio", persona="vfio", plugin="host-cni", mode="vfio",
        selector={"pciAddresses": [VFIO_ALONE, SHARED_UNBOUND]},
        compatibility=[iface("vfio-handoff")],
    )  # fmt: skip
    h = make_harness(tmp_path, [vfio_everywhere])
    assert {f.code for f in h.personas.findings} == {FindingCode.E_IOMMU_GROUP_BUSY}  # type: ignore[union-attr]
    h.allocate(claim("alone", request("v", "pf-vfio", selectors=[on_pci(VFIO_ALONE)])))
    assert blocked(h, claim("shared", request("v", "pf-vfio", selectors=[on_pci(SHARED_UNBOUND)])))


def test_08_shared_group_needs_represented_domain(tmp_path: Path) -> None:
    b = SysfsBuilder(tmp_path / "sys")
    add_shared_group(b, peer_driver="")
    node = b.finish()
    inv = scan(ScanConfig(node.sysfs, "uid-b", node.links, node.devlink))
    bare = policy("v", persona="vfio", plugin="host-cni", mode="vfio", selector={})
    h = make_harness(tmp_path, [bare], inventory=inv)
    assert h.personas is not None and h.personas.personas == ()
    assert {f.code for f in h.personas.findings} == {FindingCode.E_ISOLATION_UNREPRESENTED}
    group = {"scope": "IommuGroup", "domain": "iommu", "groups": ["vfio"]}
    represented = policy(
        "v", persona="vfio", plugin="host-cni", mode="vfio", selector={}, compatibility=[group]
    )
    h = make_harness(tmp_path, [represented], inventory=inv)
    assert len(h.personas.personas) == 2  # type: ignore[union-attr]
    h.allocate(claim("g", request("v", "pf-vfio", count=2)))  # one user takes the group


# 9 ---------------------------------------------------------------------------------------


def test_09_policy_withdrawal_retains_declaration_and_requires_drain(h: Harness) -> None:
    (share,) = h.allocate(claim("mac", on_pf0("pf-macvlan")))
    mac = devices_of(share)[0]
    h.policies = [p for p in h.policies if p.metadata["name"] != "pf-macvlan"]
    h.publish()
    kept = h.personas.by_name()[mac]  # type: ignore[union-attr]
    assert kept.retained and not kept.allocation_ready
    assert blocked(h, claim("ipv", on_pf0("pf-ipvlan")))  # exclusion still declared
    assert blocked(h, claim("mac2", on_pf0("pf-macvlan")))  # no new users
    h.release("mac")
    assert mac not in h.personas.by_name()  # type: ignore[union-attr]
    h.allocate(claim("ipv", on_pf0("pf-ipvlan")))


def test_09_without_retention_the_scheduler_would_lose_the_exclusion(h: Harness) -> None:
    """Why retention matters: compatibility is read from live slices (as upstream). With
    the macvlan persona published, an ipvlan user of the same PF is refused; with that
    device gone from the slices, the same claim gets the PF's ipvlan persona beside the
    live macvlan children."""
    h.allocate(claim("mac", on_pf0("pf-macvlan")))
    mac = h.device(MLX_PF0, "macvlan")
    assert blocked(h, claim("ipv", on_pf0("pf-ipvlan")))
    stripped = copy.deepcopy(h.slices)
    for s in stripped:
        if s["spec"].get("devices"):
            s["spec"]["devices"] = [d for d in s["spec"]["devices"] if d["name"] != mac]
    h.allocator.set_slices(stripped)
    (unsafe,) = h.allocate(claim("ipv", on_pf0("pf-ipvlan")))  # what retention prevents
    assert devices_of(unsafe) == [h.device(MLX_PF0, "ipvlan")]


# 10 --------------------------------------------------------------------------------------


def strip_compatibility_groups(slices: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """An API server with DRADeviceCompatibilityGroups disabled drops the field."""
    out = copy.deepcopy(slices)
    for s in out:
        for d in s["spec"].get("devices") or []:
            for c in d.get("consumesCounters") or []:
                c.pop("compatibilityGroups", None)
    return out


def strip_consumable_capacity(slices: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """DRAConsumableCapacity disabled: allowMultipleAllocations and requestPolicy go."""
    out = copy.deepcopy(slices)
    for s in out:
        for d in s["spec"].get("devices") or []:
            d.pop("allowMultipleAllocations", None)
            for cap in (d.get("capacity") or {}).values():
                cap.pop("requestPolicy", None)
    return out


def strip_partitionable(slices: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """DRAPartitionableDevices disabled: sharedCounters and consumesCounters go."""
    out = copy.deepcopy(slices)
    for s in out:
        s["spec"].pop("sharedCounters", None)
        for d in s["spec"].get("devices") or []:
            d.pop("consumesCounters", None)
    return out


@pytest.mark.parametrize(
    "strip", [strip_compatibility_groups, strip_consumable_capacity, strip_partitionable]
)
def test_10_stripped_prerequisite_fields_keep_publication_unavailable(
    tmp_path: Path, strip: Any
) -> None:
    h = make_harness(tmp_path, standard_policies(children=4))
    if strip is not strip_consumable_capacity:
        # counterfactual: the stripped slices alone let incompatible modes co-allocate
        raw = Allocator(NODE, slices=strip(h.slices), classes=STANDARD_CLASSES)
        raw.allocate([claim("m", on_pf0("pf-macvlan"))])
        raw.allocate([claim("i", on_pf0("pf-ipvlan"))])
    # the agent reads back, sees the loss and republishes as degraded
    h.strip = strip
    h.publish()
    assert h.degraded
    for cls in ("pf-macvlan", "pf-ipvlan", "pf-kernel", "pf-vfio", "vf-kernel", "vf-vfio"):
        assert blocked(h, claim(cls, request("r", cls)))
    # and it stays unavailable: a later publication that happens to keep the fields does
    # not silently switch back, nor does an agent restart (the state is persisted)
    h.strip = None
    h.policies = standard_policies(children=8)
    h.publish()
    assert h.degraded
    assert not any(p.allocation_ready for p in h.personas.personas)  # type: ignore[union-attr]
    assert blocked(h, claim("mac", on_pf0("pf-macvlan")))
    r = _restart(h, tmp_path / "after", json.dumps(h.publication.to_json()), "{}")
    assert r.degraded and blocked(r, claim("mac", on_pf0("pf-macvlan")))


# 11 --------------------------------------------------------------------------------------


def test_11_third_domain_is_rejected_not_flattened(tmp_path: Path) -> None:
    three = policy(
        "vf-three", persona="kernel", plugin="sriov-cni", mode="kernel",
        selector={"kind": "VF", "vendors": ["0x15b3"]}, priority=500,
        compatibility=[iface("kernel-handoff"), family("host-retained"),
                       {"scope": "IommuGroup", "domain": "iommu", "groups": ["vf"]}],
    )  # fmt: skip
    h = make_harness(tmp_path, [*standard_policies(), three])
    codes = {f.code for f in h.personas.findings}  # type: ignore[union-attr]
    assert FindingCode.E_THIRD_DOMAIN in codes
    # the higher-priority three-domain profile replaces nothing with a flattened version
    assert blocked(h, claim("vf", vf_of(MLX_PF0)))
    assert all(len(p.consumptions) <= 2 for p in h.personas.personas)  # type: ignore[union-attr]
    h.allocate(claim("mac", on_pf0("pf-macvlan")))  # unrelated personas unaffected


# 12 --------------------------------------------------------------------------------------


def test_12_cleanup_pending_is_ineligible_and_lagging_allocations_fail_on_node(
    h: Harness,
) -> None:
    (first,) = h.allocate(claim("k", on_pf0("pf-kernel")))
    stale = copy.deepcopy(h.slices)
    h.release("k", cleanup_done=False)
    kernel = devices_of(first)[0]
    assert blocked(h, claim("k2", on_pf0("pf-kernel")))
    assert blocked(h, claim("mac", on_pf0("pf-macvlan")))  # incompatible peer
    # publication lag: the scheduler still sees the old (ready) slices
    h.allocator.set_slices(stale)
    (lagging,) = h.allocate(claim("k3", on_pf0("pf-kernel")))
    assert devices_of(lagging) == [kernel]
    (finding,) = node_allocation_check(h.personas, devices_of(lagging), h.cleanup_pending)  # type: ignore[arg-type]
    assert finding.code is FindingCode.E_CLEANUP_PENDING
    h.allocator.release("k3")  # the node refused it; the claim is deallocated
    # an incompatible peer allocated from the stale view fails too (not allocationReady)
    (peer,) = h.allocate(claim("mac-lag", on_pf0("pf-macvlan")))
    (finding,) = node_allocation_check(h.personas, devices_of(peer), h.cleanup_pending)  # type: ignore[arg-type]
    assert finding.code is FindingCode.E_NOT_READY
    # a compatible device of another family is unaffected by the pending cleanup
    (other,) = h.allocate(claim("pf1", request("k", "pf-kernel", selectors=[on_pci(MLX_PF1)])))
    assert node_allocation_check(h.personas, devices_of(other), h.cleanup_pending) == []  # type: ignore[arg-type]
    # cleanup finishes: the device is allocatable again from the current publication
    for uid in ("mac-lag", "pf1"):
        h.allocator.release(uid)
    h.finish_cleanup(kernel)
    (again,) = h.allocate(claim("k4", on_pf0("pf-kernel")))
    assert node_allocation_check(h.personas, devices_of(again), h.cleanup_pending) == []  # type: ignore[arg-type]


# extras ----------------------------------------------------------------------------------

GPU_DRIVER = "gpu.example.com"


def gpu_slice() -> dict[str, Any]:
    def gpu(name: str, root: str) -> dict[str, Any]:
        return {
            "name": name,
            "attributes": {
                "resource.kubernetes.io/pcieRoot": {"string": root},
                f"{GPU_DRIVER}/model": {"string": "example-a100"},
            },
        }

    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceSlice",
        "metadata": {"name": f"{NODE}-gpus"},
        "spec": {
            "driver": GPU_DRIVER,
            "nodeName": NODE,
            "pool": {"name": NODE, "generation": 1, "resourceSliceCount": 1},
            "devices": [gpu("gpu-0", "pci0000:3a"), gpu("gpu-1", "pci0000:5d")],
        },
    }


def test_gpu_and_nic_matched_by_pcie_root_for_two_claims(tmp_path: Path) -> None:
    intel_vf = policy(
        "vf-intel",
        persona="kernel",
        plugin="sriov-cni",
        mode="kernel",
        selector={"kind": "VF", "vendors": ["0x8086"]},
        compatibility=[iface("kernel-handoff"), family("host-retained")],
    )
    gpu_class = {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "DeviceClass",
        "metadata": {"name": "gpu"},
        "spec": {"selectors": [{"cel": {"expression": f'device.driver == "{GPU_DRIVER}"'}}]},
    }
    h = make_harness(tmp_path, [*standard_policies(), intel_vf], classes=[gpu_class])
    h.extra_slices = [gpu_slice()]
    h.publish()
    pair = [{"requests": ["gpu", "nic"], "matchAttribute": "resource.kubernetes.io/pcieRoot"}]
    roots = {}
    for uid in ("train-0", "train-1"):
        (a,) = h.allocate(
            claim(uid, request("gpu", "gpu"), request("nic", "vf-kernel"), constraints=pair)
        )
        by_request = {r["request"]: r for r in a["devices"]["results"]}
        nic = h.personas.by_name()[by_request["nic"]["device"]]  # type: ignore[union-attr]
        gpu_root = {"gpu-0": "pci0000:3a", "gpu-1": "pci0000:5d"}[by_request["gpu"]["device"]]
        assert nic.pcie_root == gpu_root
        roots[uid] = gpu_root
    assert set(roots.values()) == {"pci0000:3a", "pci0000:5d"}
    assert h.personas.by_name()  # type: ignore[union-attr]
    assert blocked(
        h, claim("train-2", request("gpu", "gpu"), request("nic", "vf-kernel"), constraints=pair)
    )


def test_exhausting_children_capacity_and_policy(h: Harness) -> None:
    (two,) = h.allocate(claim("two", on_pf0("pf-macvlan", "a"), on_pf0("pf-macvlan", "b")))
    assert len({r["shareID"] for r in two["devices"]["results"]}) == 2
    over = request("r", "pf-macvlan", selectors=[on_pci(MLX_PF0)], capacity={f"{D}/children": "2"})
    assert blocked(h, claim("too-big", over))  # validValues [1]: 2 per share is not allowed
    h.allocate(claim("c", on_pf0("pf-macvlan")), claim("d", on_pf0("pf-macvlan")))
    assert blocked(h, claim("e", on_pf0("pf-macvlan")))
    h.release("c")
    h.allocate(claim("e", on_pf0("pf-macvlan")))


def test_policy_change_while_allocated_waits_for_drain(h: Harness) -> None:
    (share,) = h.allocate(claim("mac", on_pf0("pf-macvlan")))
    mac = devices_of(share)[0]
    h.policies = standard_policies(children=64)
    h.publish()
    assert h.personas.by_name()[mac].children.value == 4  # type: ignore[union-attr]
    assert blocked(h, claim("mac2", on_pf0("pf-macvlan")))  # no new shares while draining
    assert blocked(h, claim("ipv", on_pf0("pf-ipvlan")))
    # other hardware takes the new declaration at once
    h.allocate(claim("pf1", request("m", "pf-macvlan", selectors=[on_pci(MLX_PF1)])))
    h.release("mac")
    assert h.personas.by_name()[mac].children.value == 64  # type: ignore[union-attr]
    h.allocate(claim("mac2", on_pf0("pf-macvlan")))


def test_no_policy_for_x710_means_no_devices(h: Harness) -> None:
    assert all(p.pci_address != X710_PF for p in h.personas.personas)  # type: ignore[union-attr]


def test_allocation_results_validate_against_upstream_claim_schema(h: Harness) -> None:
    import kubernetes_validate

    c = claim("mac", on_pf0("pf-macvlan"), request("v", "vf-kernel"))
    (allocation,) = h.allocate(c)
    kubernetes_validate.validate({**c, "status": {"allocation": allocation}}, "1.37.0", strict=True)
