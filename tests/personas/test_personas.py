"""Policies → personas over the reference fixture node."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from dmn.agent.inventory import Inventory, RecordedLinks, ScanConfig, scan
from dmn.agent.personas import FindingCode, PersonaSet, Pins, build_personas
from dmn.agent.personas.model import Persona
from dmn.vocabulary.terms import Access, HandleType
from tests.fixtures.policies import D, family, iface, policy, standard_policies
from tests.fixtures.sysfs_layouts import (
    MGMT,
    MLX_PF0,
    MLX_PF1,
    SHARED_UNBOUND,
    VFIO_ALONE,
    X710_PF,
    FixtureNode,
    SysfsBuilder,
    add_shared_group,
    build_reference_node,
    mlx_vf_address,
)


def inventory_of(node: FixtureNode) -> Inventory:
    return scan(
        ScanConfig(
            sysfs_root=node.sysfs,
            node_uid="uid-1",
            links=node.links,
            devlink=node.devlink,
            node_ips=node.node_ips,
        )
    )


@pytest.fixture(scope="module")
def inv(tmp_path_factory: pytest.TempPathFactory) -> Inventory:
    """Read-only: inventories are immutable, so one scan serves the module."""
    return inventory_of(build_reference_node(tmp_path_factory.mktemp("node")))


def find(ps: PersonaSet, pci: str, persona: str) -> Persona | None:
    return next((p for p in ps.personas if p.pci_address == pci and p.persona == persona), None)


def codes(ps: PersonaSet) -> list[str]:
    return [f.code.value for f in ps.findings]


def test_standard_policies_publish_every_persona(inv: Inventory) -> None:
    ps = build_personas(inv, standard_policies(), {})
    assert ps.errors() == []
    assert len(ps.personas) == 2 * 4 + 16 * 2
    pf = find(ps, MLX_PF0, "kernel")
    assert pf is not None
    assert pf.name == f"{pf.inventory_id}-kernel"
    assert re.fullmatch(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?", pf.name) and len(pf.name) <= 63
    attrs = pf.attributes()
    for reserved in (
        "pciAddress",
        "inventoryID",
        "plugin",
        "mode",
        "linkType",
        "rdmaCapable",
        "allocationReady",
        "policyDigest",
    ):
        assert f"{D}/{reserved}" in attrs
    assert attrs["resource.kubernetes.io/pciBusID"] == {"string": MLX_PF0}
    assert attrs["resource.kubernetes.io/pcieRoot"] == {"string": "pci0000:3a"}
    assert attrs[f"{D}/rdmaCapable"] == {"bool": True}
    assert re.fullmatch(r"[0-9a-f]{64}", attrs[f"{D}/policyDigest"]["string"])
    vf = find(ps, mlx_vf_address(0, 4), "vfio")
    assert vf is not None and vf.attributes()[f"{D}/pfPciAddress"] == {"string": MLX_PF0}
    again = build_personas(inv, standard_policies(), {})
    assert [p.name for p in again.personas] == [p.name for p in ps.personas]


def test_shared_parent_capacity_and_compatibility_counters(inv: Inventory) -> None:
    ps = build_personas(inv, standard_policies(children=64), {})
    mac = find(ps, MLX_PF0, "macvlan")
    assert mac is not None
    device = mac.to_device()
    assert device["allowMultipleAllocations"] is True
    assert device["capacity"] == {
        f"{D}/children": {"value": "64", "requestPolicy": {"default": "1", "validValues": ["1"]}}
    }
    pf_iface = f"{mac.inventory_id}-interface"
    pf_family = f"{mac.inventory_id}-family"
    assert [(c.counter_set, c.groups) for c in mac.consumptions] == [
        (pf_iface, ("macvlan",)),
        (pf_family, ("host-retained",)),
    ]
    assert device["consumesCounters"][0]["counters"] == {"members": {"value": "1"}}
    # members total: every identity that references the set
    assert ps.counter_sets[pf_iface] == 4
    assert ps.counter_sets[pf_family] == 4 + 8 * 2
    vf = find(ps, mlx_vf_address(0, 0), "kernel")
    assert vf is not None and vf.consumptions[1].counter_set == pf_family


def test_grants_use_handle_types_and_accesses(inv: Inventory) -> None:
    ps = build_personas(inv, standard_policies(), {})
    mac = find(ps, MLX_PF0, "macvlan")
    assert mac is not None
    assert [(g.type, g.accesses) for g in mac.grants] == [
        (HandleType.SHARED_PARENT, frozenset({Access.CREATE_CHILD}))
    ]
    kernel = find(ps, mlx_vf_address(0, 0), "kernel")
    assert kernel is not None
    # a VF in switchdev mode carries its host representor too (design §6.7)
    assert {g.type for g in kernel.grants} == {
        HandleType.KERNEL_INTERFACE,
        HandleType.RDMA_DEVICE,
        HandleType.HOST_REPRESENTOR,
    }
    vfio = find(ps, MLX_PF0, "vfio")
    assert vfio is not None and vfio.grants[0].type is HandleType.PCI_FUNCTION
    assert Access.EXCLUSIVE_CONFIGURE in vfio.grants[0].accesses  # pci/driver-bind needs it
    assert vfio.allowed_drivers == ("vfio-pci",)  # from the policy, for pci/driver-bind


def test_equal_priority_conflict_is_an_error_with_reason(inv: Inventory) -> None:
    a = policy(
        "a",
        persona="kernel",
        plugin="sriov-cni",
        mode="kernel",
        selector={"pciAddresses": [X710_PF]},
    )
    b = policy(
        "b",
        persona="kernel",
        plugin="host-cni",
        mode="kernel",
        selector={"kind": "PF", "vendors": ["0x8086"]},
    )
    ps = build_personas(inv, [a, b], {})
    assert find(ps, X710_PF, "kernel") is None
    conflicts = [f for f in ps.findings if f.code is FindingCode.E_POLICY_CONFLICT]
    assert {f.policy for f in conflicts} == {"a", "b"}
    assert all("equal priority" in f.message for f in conflicts)


def test_higher_priority_wins(inv: Inventory) -> None:
    low = policy(
        "low",
        persona="kernel",
        plugin="host-cni",
        mode="kernel",
        selector={"kind": "PF"},
        priority=10,
    )
    high = policy(
        "high",
        persona="kernel",
        plugin="sriov-cni",
        mode="kernel",
        selector={"pciAddresses": [X710_PF]},
        priority=20,
    )
    ps = build_personas(inv, [low, high], {})
    assert ps.errors() == []
    p = find(ps, X710_PF, "kernel")
    assert p is not None and p.plugin == "sriov-cni" and p.policy == "high"


def test_exclusion_prevents_exposure_at_equal_or_higher_priority(inv: Inventory) -> None:
    expose = policy(
        "vfs",
        persona="kernel",
        plugin="sriov-cni",
        mode="kernel",
        selector={"kind": "VF"},
        priority=50,
    )
    exclude = policy(
        "no-pf1",
        persona="kernel",
        plugin="x",
        mode="x",
        action="Exclude",
        selector={"pfPciAddresses": [MLX_PF1]},
        priority=50,
    )
    ps = build_personas(inv, [expose, exclude], {})
    assert find(ps, mlx_vf_address(1, 0), "kernel") is None
    assert find(ps, mlx_vf_address(0, 0), "kernel") is not None
    weak = policy(
        "weak",
        persona="kernel",
        plugin="x",
        mode="x",
        action="Exclude",
        selector={"pfPciAddresses": [MLX_PF1]},
        priority=10,
    )
    assert find(build_personas(inv, [expose, weak], {}), mlx_vf_address(1, 0), "kernel")


def test_protected_hardware_is_never_exposed(inv: Inventory) -> None:
    greedy = policy(
        "all", persona="kernel", plugin="host-cni", mode="kernel", selector={}, priority=1000
    )
    ps = build_personas(inv, [greedy], {})
    assert find(ps, MGMT, "kernel") is None
    assert any(
        f.code is FindingCode.W_PROTECTED and "default-route" in f.message for f in ps.findings
    )
    assert find(ps, "0000:18:00.1", "kernel") is None  # reset-domain peer


def test_unknown_link_state_exposes_nothing_with_a_netdev(tmp_path: Path) -> None:
    node = build_reference_node(tmp_path)
    node.links = RecordedLinks(fail="netlink dump interrupted")
    inv = inventory_of(node)
    pols = [
        policy("k", persona="kernel", plugin="host-cni", mode="kernel", selector={}),
        policy(
            "v",
            persona="vfio",
            plugin="host-cni",
            mode="vfio",
            selector={"pciAddresses": [VFIO_ALONE]},
        ),
    ]
    ps = build_personas(inv, pols, {})
    assert [p.pci_address for p in ps.personas] == [VFIO_ALONE]


def test_third_domain_is_rejected_not_flattened(inv: Inventory) -> None:
    three = policy(
        "three",
        persona="kernel",
        plugin="sriov-cni",
        mode="kernel",
        selector={"kind": "VF", "vendors": ["0x15b3"]},
        compatibility=[
            iface("k"),
            family("host-retained"),
            {"scope": "IommuGroup", "domain": "iommu", "groups": ["k"]},
        ],
    )
    ps = build_personas(inv, [three], {})
    assert ps.personas == ()
    assert set(codes(ps)) == {"E_THIRD_DOMAIN"}


def test_vfio_alone_in_group_is_exposed(inv: Inventory) -> None:
    p = policy(
        "v", persona="vfio", plugin="host-cni", mode="vfio", selector={"pciAddresses": [VFIO_ALONE]}
    )
    ps = build_personas(inv, [p], {})
    assert find(ps, VFIO_ALONE, "vfio") is not None


def test_vfio_with_kernel_bound_group_peer_is_rejected(inv: Inventory) -> None:
    p = policy(
        "v",
        persona="vfio",
        plugin="host-cni",
        mode="vfio",
        selector={"pciAddresses": [SHARED_UNBOUND]},
        compatibility=[{"scope": "IommuGroup", "domain": "iommu", "groups": ["vfio"]}],
    )
    ps = build_personas(inv, [p], {})
    assert ps.personas == ()
    assert codes(ps) == ["E_IOMMU_GROUP_BUSY"]


def test_shared_iommu_group_needs_a_represented_domain(tmp_path: Path) -> None:
    b = SysfsBuilder(tmp_path / "sys")
    add_shared_group(b, peer_driver="")  # both functions unbound
    inv = inventory_of(b.finish())
    bare = policy(
        "v", persona="vfio", plugin="host-cni", mode="vfio", selector={"vendors": ["0x8086"]}
    )
    ps = build_personas(inv, [bare], {})
    assert ps.personas == () and set(codes(ps)) == {"E_ISOLATION_UNREPRESENTED"}
    grouped = policy(
        "v",
        persona="vfio",
        plugin="host-cni",
        mode="vfio",
        selector={"vendors": ["0x8086"]},
        compatibility=[{"scope": "IommuGroup", "domain": "iommu", "groups": ["vfio"]}],
    )
    ps = build_personas(inv, [grouped], {})
    assert len(ps.personas) == 2
    sets = {p.consumptions[0].counter_set for p in ps.personas}
    assert len(sets) == 1 and next(iter(sets)).startswith("iog-")


def test_reserved_attribute_cannot_be_overridden(inv: Inventory) -> None:
    p = policy(
        "x",
        persona="kernel",
        plugin="host-cni",
        mode="kernel",
        selector={"pciAddresses": [X710_PF]},
        attributes={"allocationReady": "true"},
    )
    ps = build_personas(inv, [p], {})
    assert ps.personas == () and codes(ps) == ["E_RESERVED_ATTRIBUTE"]
    ok = policy(
        "x",
        persona="kernel",
        plugin="host-cni",
        mode="kernel",
        selector={"pciAddresses": [X710_PF]},
        attributes={"rack": "r12"},
    )
    (persona,) = build_personas(inv, [ok], {}).personas
    assert persona.attributes()[f"{D}/rack"] == {"string": "r12"}


def test_invalid_exposures_are_reported(inv: Inventory) -> None:
    no_capacity = policy(
        "m",
        persona="macvlan",
        plugin="macvlan-cni",
        mode="bridge",
        selector={"pciAddresses": [X710_PF]},
    )
    kernel_on_vfio = policy(
        "k",
        persona="kernel",
        plugin="host-cni",
        mode="kernel",
        selector={"pciAddresses": [VFIO_ALONE]},
    )
    ps = build_personas(inv, [no_capacity, kernel_on_vfio], {})
    assert ps.personas == ()
    assert codes(ps) == ["E_POLICY_INVALID", "E_POLICY_INVALID"]


def test_node_selector(inv: Inventory) -> None:
    p = policy(
        "k",
        persona="kernel",
        plugin="host-cni",
        mode="kernel",
        selector={"pciAddresses": [X710_PF]},
        node_selector={
            "matchLabels": {"pool": "a"},
            "matchExpressions": [{"key": "zone", "operator": "NotIn", "values": ["z9"]}],
        },
    )
    assert build_personas(inv, [p], {"pool": "a"}).personas
    assert not build_personas(inv, [p], {"pool": "b"}).personas
    assert not build_personas(inv, [p], {"pool": "a", "zone": "z9"}).personas


def test_withdrawn_policy_retains_allocated_declaration_unready(inv: Inventory) -> None:
    first = build_personas(inv, standard_policies(), {})
    mac = find(first, MLX_PF0, "macvlan")
    assert mac is not None
    pins = Pins(allocated=frozenset({mac.name}), previous=first.by_name())
    without = [p for p in standard_policies() if p.metadata["name"] != "pf-macvlan"]
    ps = build_personas(inv, without, {}, pins)
    kept = ps.by_name()[mac.name]
    assert kept.retained and not kept.allocation_ready
    assert kept.consumptions == mac.consumptions
    assert ps.counter_sets[mac.consumptions[0].counter_set] == 4  # totals pinned
    assert any(f.code is FindingCode.W_PENDING_DRAIN and f.device == mac.name for f in ps.findings)
    # unpinned personas of the withdrawn policy are gone
    assert find(ps, MLX_PF1, "macvlan") is None


def test_changed_declaration_is_pinned_while_allocated(inv: Inventory) -> None:
    first = build_personas(inv, standard_policies(children=4), {})
    mac = find(first, MLX_PF0, "macvlan")
    assert mac is not None
    pins = Pins(allocated=frozenset({mac.name}), previous=first.by_name())
    ps = build_personas(inv, standard_policies(children=64), {}, pins)
    assert ps.by_name()[mac.name].children == mac.children  # still 4 until drained
    assert not ps.by_name()[mac.name].allocation_ready  # no new shares: let it drain
    assert any(f.code is FindingCode.W_PENDING_DRAIN and f.device == mac.name for f in ps.findings)
    same = build_personas(inv, standard_policies(children=4), {}, pins)
    assert same.by_name()[mac.name].allocation_ready  # unchanged declaration: still usable
    other = find(ps, MLX_PF1, "macvlan")
    assert other is not None and other.children is not None and other.children.value == 64


def test_new_persona_on_allocated_item_waits_for_drain(inv: Inventory) -> None:
    only_kernel = [p for p in standard_policies() if p.metadata["name"] == "pf-kernel"]
    first = build_personas(inv, only_kernel, {})
    kernel = find(first, MLX_PF0, "kernel")
    assert kernel is not None
    pins = Pins(allocated=frozenset({kernel.name}), previous=first.by_name())
    ps = build_personas(inv, standard_policies(), {}, pins)
    mac = find(ps, MLX_PF0, "macvlan")
    assert mac is not None and not mac.allocation_ready
    assert find(ps, MLX_PF1, "macvlan").allocation_ready  # type: ignore[union-attr]


def test_cleanup_pending_blocks_itself_and_incompatible_peers(inv: Inventory) -> None:
    first = build_personas(inv, standard_policies(), {})
    mac = find(first, MLX_PF0, "macvlan")
    assert mac is not None
    pins = Pins(cleanup_pending=frozenset({mac.name}), previous=first.by_name())
    ps = build_personas(inv, standard_policies(), {}, pins)
    ready = {p.name: p.allocation_ready for p in ps.personas}
    assert not ready[mac.name]
    assert not ready[find(ps, MLX_PF0, "ipvlan").name]  # type: ignore[union-attr]
    assert not ready[find(ps, MLX_PF0, "kernel").name]  # type: ignore[union-attr]
    assert ready[find(ps, mlx_vf_address(0, 0), "kernel").name]  # type: ignore[union-attr]
    assert ready[find(ps, MLX_PF1, "macvlan").name]  # type: ignore[union-attr]


def test_rebound_function_keeps_its_allocated_declaration(tmp_path: Path) -> None:
    node = build_reference_node(tmp_path)
    inv = inventory_of(node)
    first = build_personas(inv, standard_policies(), {})
    vf = mlx_vf_address(0, 6)
    kernel = find(first, vf, "kernel")
    assert kernel is not None
    # the VF is moved/rebound (its netdev disappears from the host namespace)
    link = node.sysfs / "class" / "net" / "enp59s0f0v6"
    link.unlink()
    inv2 = inventory_of(node)
    pins = Pins(allocated=frozenset({kernel.name}), previous=first.by_name())
    ps = build_personas(inv2, standard_policies(), {}, pins)
    assert kernel.name in ps.by_name()


def test_degraded_publication_makes_counter_personas_unready(inv: Inventory) -> None:
    ps = build_personas(inv, standard_policies(), {}, degraded=True)
    assert ps.personas and not any(p.allocation_ready for p in ps.personas)


def test_representor_persona_only_where_a_representor_exists(inv: Inventory) -> None:
    rep = policy("rep", persona="representor", plugin="accelerated-bridge-cni", mode="switchdev",
                 selector={"kind": "VF"})  # fmt: skip
    ps = build_personas(inv, [rep], {})
    exposed = {p.pci_address for p in ps.personas}
    assert mlx_vf_address(0, 0) in exposed  # switchdev VF with a representor
    assert "0000:5e:02.0" not in exposed  # legacy X710 VF: no representor
    p = find(ps, mlx_vf_address(0, 0), "representor")
    assert p is not None and p.grants[0].type is HandleType.HOST_REPRESENTOR


def test_policy_status_conditions(inv: Inventory) -> None:
    from dmn.agent.personas.status import policy_status

    a = policy("a", persona="kernel", plugin="sriov-cni", mode="kernel",
               selector={"pciAddresses": [X710_PF]})  # fmt: skip
    b = policy("b", persona="kernel", plugin="host-cni", mode="kernel",
               selector={"kind": "PF", "vendors": ["0x8086"]})  # fmt: skip
    ok = policy("ok", persona="kernel", plugin="host-cni", mode="kernel",
                selector={"pciAddresses": [MLX_PF0]})  # fmt: skip
    ps = build_personas(inv, [a, b, ok], {})
    now = "2026-11-29T08:00:00Z"
    report = policy_status("a", ps, 3, now, "n1")
    assert report.node_name == "n1" and report.last_report_time == now
    bad = {c.type: c for c in report.conditions or []}
    assert bad["Ready"].status == "False" and bad["Conflict"].status == "True"
    assert bad["Ready"].reason == "E_POLICY_CONFLICT"
    good = policy_status("ok", ps, 1, now, "n1")
    conds = {c.type: c for c in good.conditions or []}
    assert conds["Ready"].status == "True" and good.exposed_devices == 1
    assert good.diagnostics is None


@pytest.mark.parametrize(
    ("attributes", "published"),
    [
        ({"rack": "r" * 64}, True),  # exactly the 64-character limit
        ({"rack": "r" * 65}, False),
        ({"a" * 32: "x"}, True),  # an attribute ID of exactly 32 characters
        ({"a" * 33: "x"}, False),
        ({"not-an-identifier": "x"}, False),
    ],
)
def test_custom_attribute_limits(
    inv: Inventory, attributes: dict[str, str], published: bool
) -> None:
    p = policy(
        "x", persona="kernel", plugin="host-cni", mode="kernel",
        selector={"pciAddresses": [X710_PF]}, attributes=attributes,
    )  # fmt: skip
    ps = build_personas(inv, [p], {})
    if published:
        (persona,) = ps.personas
        assert persona.extra_attributes == attributes
    else:
        assert ps.personas == () and codes(ps) == ["E_ATTRIBUTE_LIMIT"]


def _group_with(tmp_path: Path, peer_class: str, peer_driver: str) -> SysfsBuilder:
    """An unbound NIC function sharing IOMMU group 95 with a non-network peer."""
    b = SysfsBuilder(tmp_path / "sys")
    for bdf, cls, driver, vendor in (
        ("0000:65:00.0", "0x020000", "", "0x8086"),
        ("0000:65:00.1", peer_class, peer_driver, "0x144d"),
    ):
        b.function(bdf, root_bus="pci0000:64", vendor=vendor, device="0x1572",
                   pci_class=cls, driver=driver, iommu_group=95)  # fmt: skip
    return b


VFIO_IN_GROUP = policy(
    "v", persona="vfio", plugin="host-cni", mode="vfio", selector={"vendors": ["0x8086"]},
    compatibility=[{"scope": "IommuGroup", "domain": "iommu", "groups": ["vfio"]}],
)  # fmt: skip


@pytest.mark.parametrize(
    ("peer_class", "peer_driver", "exposed"),
    [
        ("0x010802", "nvme", False),  # an NVMe drive on its host driver: group not viable
        ("0x010802", "", True),  # unbound
        ("0x010802", "pci-stub", True),
        ("0x010802", "nvme_vfio_pci", True),  # a vfio variant driver
        ("0x060400", "pcieport", True),  # a PCI bridge: allowed by the kernel's rule
    ],
)
def test_vfio_group_viability_counts_non_network_peers(
    tmp_path: Path, peer_class: str, peer_driver: str, exposed: bool
) -> None:
    inv = inventory_of(_group_with(tmp_path, peer_class, peer_driver).finish())
    assert inv.by_pci("0000:65:00.1") is None  # not a network function: not in inventory
    ps = build_personas(inv, [VFIO_IN_GROUP], {})
    if exposed:
        (persona,) = ps.personas
        assert persona.pci_address == "0000:65:00.0"
    else:
        assert ps.personas == () and codes(ps) == ["E_IOMMU_GROUP_BUSY"]


def test_unreadable_iommu_group_is_unknown_not_alone(tmp_path: Path) -> None:
    import shutil

    b = _group_with(tmp_path, "0x010802", "")
    node = b.finish()
    shutil.rmtree(node.sysfs / "kernel" / "iommu_groups" / "95" / "devices")
    inv = inventory_of(node)
    nic = inv.by_pci("0000:65:00.0")
    assert nic is not None and nic.iommu_group == 95
    assert not nic.iommu_peer_details and nic.iommu_peers == ()
    ps = build_personas(inv, [VFIO_IN_GROUP], {})
    assert ps.personas == () and codes(ps) == ["W_UNKNOWN_STATE"]
    assert any("iommu group 95" in n for n in inv.notes)


def test_an_ipoib_hca_is_a_kernel_persona_of_link_type_infiniband(inv: Inventory) -> None:
    """The recorded IPoIB HCA joins netdev (type 32) and RDMA device to one function and is
    published as an InfiniBand kernel persona: what host-cni's ``ibInterface`` port takes."""
    from tests.fixtures.sysfs_layouts import IB_HCA

    ib = policy(
        "ib-kernel",
        persona="kernel",
        plugin="host-cni",
        mode="kernel",
        selector={"linkTypes": ["infiniband"]},
        compatibility=[iface("kernel")],
    )
    ps = build_personas(inv, [ib], {})
    assert ps.errors() == []
    (persona,) = ps.personas
    assert persona.pci_address == IB_HCA and persona.link_type == "infiniband"
    attrs = persona.attributes()
    assert attrs[f"{D}/linkType"] == {"string": "infiniband"}
    assert attrs[f"{D}/rdmaCapable"] == {"bool": True}
