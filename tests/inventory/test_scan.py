"""Inventory scan over sysfs trees built from documented real layouts (tests/fixtures)."""

from __future__ import annotations

import re
import shutil
from dataclasses import replace
from pathlib import Path

import pytest

from dmn.agent.inventory import (
    IdentityRegistry,
    Inventory,
    ItemKind,
    RecordedDevlink,
    RecordedLinks,
    ScanConfig,
    Unknown,
    scan,
)
from dmn.agent.inventory.facts import Binding, ProtectionReason
from dmn.host.rtnetlink.links import LinkState
from dmn.host.sysfs import SysfsTree
from tests.fixtures.sysfs_layouts import (
    IB_HCA,
    MGMT,
    MGMT_PEER,
    MLX_PF0,
    MLX_PF1,
    SHARED_KERNEL,
    SHARED_UNBOUND,
    VFIO_ALONE,
    X710_PF,
    FixtureNode,
    SysfsBuilder,
    add_connectx5_switchdev,
    build_reference_node,
    mlx_vf_address,
)

NODE_UID = "3f0c5b8e-0000-4000-8000-000000000001"


def run(node: FixtureNode, **overrides: object) -> Inventory:
    config = ScanConfig(
        sysfs_root=node.sysfs,
        node_uid=NODE_UID,
        links=node.links,
        devlink=node.devlink,
        node_ips=node.node_ips,
    )
    for key, value in overrides.items():
        setattr(config, key, value)
    return scan(config)


@pytest.fixture
def node(tmp_path: Path) -> FixtureNode:
    return build_reference_node(tmp_path)


def item(inv: Inventory, address: str):  # type: ignore[no-untyped-def]
    found = inv.by_pci(address)
    assert found is not None, address
    return found


def test_pci_first_covers_kernel_vfio_and_unbound_functions(node: FixtureNode) -> None:
    inv = run(node)
    assert item(inv, MLX_PF0).binding is Binding.KERNEL
    assert item(inv, VFIO_ALONE).binding is Binding.VFIO
    assert item(inv, SHARED_UNBOUND).binding is Binding.UNBOUND
    assert item(inv, "0000:5e:02.3").binding is Binding.VFIO  # a VF left on vfio-pci
    # 2 mgmt + 2 mlx PF + 16 mlx VF + X710 PF + 4 VFs + vfio + 2 shared + IB HCA
    assert len(inv.items) == 29


def test_pf_vf_parentage_and_vf_index(node: FixtureNode) -> None:
    inv = run(node)
    pf = item(inv, MLX_PF1)
    assert pf.kind is ItemKind.PF and pf.sriov_total_vfs == 8 and pf.sriov_num_vfs == 8
    for i in range(8):
        vf = item(inv, mlx_vf_address(1, i))
        assert vf.kind is ItemKind.VF
        assert vf.pf_pci_address == MLX_PF1
        assert vf.vf_index == i


def test_netdevs_joined_by_pci_with_live_state(node: FixtureNode) -> None:
    inv = run(node)
    vf = item(inv, mlx_vf_address(0, 3))
    assert [n.ifname for n in vf.netdevs] == ["enp59s0f0v3"]
    state = vf.netdevs[0].state
    assert isinstance(state, LinkState)
    assert state.mac == "06:00:00:00:00:03" and state.mtu == 1500 and state.operstate == "UP"
    mgmt = item(inv, MGMT).netdevs[0].state
    assert isinstance(mgmt, LinkState) and [a.cidr for a in mgmt.addresses] == ["10.0.0.11/24"]
    assert inv.default_route_ifnames == frozenset({"eno1"})


def test_representors_are_not_own_netdevs_and_map_by_devlink_identity(node: FixtureNode) -> None:
    inv = run(node)
    pf = item(inv, MLX_PF0)
    assert [n.ifname for n in pf.netdevs] == ["enp59s0f0np0"]  # uplink only
    assert pf.eswitch_mode == "switchdev"
    assert [(r.controller, r.pfnum, r.vfnum) for r in pf.representors] == [
        (0, 0, i) for i in range(8)
    ]
    vf = item(inv, mlx_vf_address(0, 5))
    assert vf.representor is not None
    assert vf.representor.ifname == "enp59s0f0npf0vf5"
    assert vf.representor.source == "devlink"
    assert item(inv, X710_PF).eswitch_mode == "legacy"
    assert item(inv, mlx_vf_address(1, 2)).representor.ifname == "enp59s0f1npf1vf2"  # type: ignore[union-attr]


def test_representors_never_matched_by_interface_name(tmp_path: Path) -> None:
    """Renamed representors still map: the identity is phys_port_name, not the name."""
    b = SysfsBuilder(tmp_path / "sys")
    add_connectx5_switchdev(b, vfs_per_pf=2)
    node = b.finish()
    # devlink unavailable: the sysfs phys_port_name is the fallback authority
    node.devlink = RecordedDevlink(fail="devlink family missing")
    for name in ("enp59s0f0npf0vf1",):
        link = node.sysfs / "class" / "net" / name
        target = link.resolve()
        renamed = target.with_name("mgmt-looking-name")
        target.rename(renamed)
        link.unlink()
        link.symlink_to(renamed)
    inv = run(node)
    vf = item(inv, mlx_vf_address(0, 1))
    assert vf.representor is not None
    assert vf.representor.source == "phys_port_name"
    assert (vf.representor.pfnum, vf.representor.vfnum) == (0, 1)
    assert isinstance(item(inv, MLX_PF0).eswitch_mode, Unknown)
    assert any("devlink" in n for n in inv.notes)


def test_rdma_devices_and_char_devices(node: FixtureNode) -> None:
    inv = run(node)
    hca = item(inv, IB_HCA)
    assert hca.link_type == "infiniband"
    assert hca.rdma_capable
    (dev,) = hca.rdma
    assert dev.name == "mlx5_ib0" and dev.link_layer == "InfiniBand"
    assert {c.rsplit("/", 1)[1][:4] for c in dev.char_devices} == {"uver", "umad", "issm"}
    roce = item(inv, MLX_PF0).rdma[0]
    assert roce.link_layer == "Ethernet" and roce.char_devices == ("/dev/infiniband/uverbs0",)


def test_iommu_groups_vfio_devices_pcie_root_numa(node: FixtureNode) -> None:
    inv = run(node)
    alone = item(inv, VFIO_ALONE)
    assert alone.iommu_group == 80 and alone.iommu_peers == ()
    assert alone.vfio_devices == ("/dev/vfio/80", "/dev/vfio/devices/vfio1")
    shared = item(inv, SHARED_UNBOUND)
    assert shared.iommu_group == 90 and shared.iommu_peers == (SHARED_KERNEL,)
    # upstream resource.kubernetes.io/pcieRoot format: pci<domain>:<bus>
    assert item(inv, MLX_PF0).pcie_root == "pci0000:3a"
    assert item(inv, X710_PF).pcie_root == "pci0000:5d"
    assert all(re.fullmatch(r"pci[0-9a-f]{4}:[0-9a-f]{2}", i.pcie_root) for i in inv.items.values())
    assert item(inv, X710_PF).numa_node == 1
    assert item(inv, MLX_PF0).numa_node == 0


def test_device_serial_number_is_read_from_extended_config_space(node: FixtureNode) -> None:
    raw = SysfsTree(node.sysfs).function(MLX_PF0)
    assert raw.serial == "98-03-9b-03-00-9f-a7-10"
    assert SysfsTree(node.sysfs).function(SHARED_UNBOUND).serial == ""


def test_the_serial_is_found_along_the_capability_chain(tmp_path: Path) -> None:
    """The DSN after other extended capabilities (as on real NICs: AER, ARI, SR-IOV come
    first), a chain that loops, and a space that ends early (only the headers are read)."""

    def header(cap: int, nxt: int) -> bytes:
        return (cap | (1 << 16) | (nxt << 20)).to_bytes(4, "little")

    chained = bytearray(4096)
    chained[0x100:0x104] = header(0x0001, 0x148)  # AER, then
    chained[0x148:0x14C] = header(0x000E, 0x1B0)  # ARI, then
    chained[0x1B0:0x1B4] = header(0x0003, 0)  # the DSN
    chained[0x1B4:0x1BC] = bytes.fromhex("10a79f00039b0398")
    looping = bytearray(4096)
    looping[0x100:0x104] = header(0x0001, 0x140)
    looping[0x140:0x144] = header(0x0010, 0x100)
    short = bytes(chained[:0x150])  # the kernel gave fewer bytes than the chain names
    tree = SysfsTree(tmp_path)
    for name, data, want in (
        ("chained", chained, "98-03-9b-03-00-9f-a7-10"),
        ("looping", looping, ""),
        ("short", short, ""),
    ):
        (tmp_path / name).write_bytes(bytes(data))
        assert tree._serial(tmp_path / name) == want, name
    assert tree._serial(tmp_path / "missing") == ""


def test_identity_is_not_the_bdf(node: FixtureNode) -> None:
    inv = run(node)
    pf0, pf1 = item(inv, MLX_PF0), item(inv, MLX_PF1)
    assert pf0.identity_strength == "serial"
    assert pf0.inventory_id != pf1.inventory_id  # one DSN, two functions
    vf = item(inv, mlx_vf_address(0, 0))
    assert vf.identity_strength == "parent" and vf.hardware_key.startswith("vf:dsn:")
    assert item(inv, MGMT).identity_strength == "permanent-mac"
    assert item(inv, SHARED_UNBOUND).identity_strength == "locator"
    again = run(node)
    assert set(again.items) == set(inv.items)  # stable across rescans
    other_node = run(node, node_uid="another-node")
    assert not set(other_node.items) & set(inv.items)  # node UID is part of identity


def test_replacement_at_same_bdf_gets_new_identity(node: FixtureNode) -> None:
    registry = IdentityRegistry()
    before = item(run(node, registry=registry), VFIO_ALONE)
    config = node.sysfs / "bus" / "pci" / "devices" / VFIO_ALONE / "config"
    data = bytearray(config.read_bytes())
    data[0x104] ^= 0xFF  # a different card's serial at the same address
    config.write_bytes(bytes(data))
    after = item(run(node, registry=registry), VFIO_ALONE)
    assert after.pci_address == before.pci_address
    assert after.inventory_id != before.inventory_id


def test_incarnation_is_verified(tmp_path: Path) -> None:
    registry = IdentityRegistry()
    seen = {"dsn:aa/fn0": "serial", "pci:0000:d8:00.0/x": "locator"}
    assert registry.assign(seen) == {k: 1 for k in seen}
    registry.assign({})  # both absent for one scan
    back = registry.assign(seen)
    assert back["dsn:aa/fn0"] == 1  # the serial proves it is the same card
    assert back["pci:0000:d8:00.0/x"] == 2  # nothing proves it: new incarnation
    restored = IdentityRegistry.from_json(registry.to_json())
    assert restored.entries == registry.entries


def test_protected_closure_default_route_node_ip_reset_domain(node: FixtureNode) -> None:
    inv = run(node)
    mgmt = item(inv, MGMT)
    assert ProtectionReason.DEFAULT_ROUTE in mgmt.protected
    assert ProtectionReason.NODE_IP in mgmt.protected
    peer = item(inv, MGMT_PEER)  # bus reset only: resets with eno1
    assert ProtectionReason.RESET_DOMAIN_PEER in peer.protected
    assert not item(inv, MLX_PF0).protected
    assert not item(inv, mlx_vf_address(0, 0)).protected


def test_configured_pf_protects_its_vfs_and_vf_protects_only_its_pf(node: FixtureNode) -> None:
    inv = run(node, protected_pci_addresses=[MLX_PF1, mlx_vf_address(0, 2)])
    for i in range(8):
        assert ProtectionReason.VF_OF_PROTECTED_PF in item(inv, mlx_vf_address(1, i)).protected
    assert ProtectionReason.PF_OF_PROTECTED_VF in item(inv, MLX_PF0).protected
    assert not item(inv, mlx_vf_address(0, 3)).protected  # siblings stay free


def test_bond_members_and_lower_devices_are_protected(tmp_path: Path) -> None:
    b = SysfsBuilder(tmp_path / "sys")
    for i, bdf in enumerate(("0000:01:00.0", "0000:01:00.1", "0000:02:00.0")):
        b.function(
            bdf,
            root_bus="pci0000:00",
            vendor="0x8086",
            device="0x1521",
            driver="igb",
            iommu_group=i,
        )
    bond = b.virtual_link("bond0", kind="bond", mac="02:00:00:00:00:b0")
    b.netdev("eno1", "0000:01:00.0", mac="a0:00:00:00:00:01", master=bond)
    b.netdev("eno2", "0000:01:00.1", mac="a0:00:00:00:00:02", master=bond)
    lower = b.netdev("ens3", "0000:02:00.0", mac="a0:00:00:00:00:03")
    b.virtual_link(
        "ens3.100",
        kind="vlan",
        mac="a0:00:00:00:00:03",
        link_ifindex=lower,
        addresses=("192.0.2.10/24",),
    )
    b.virtual_link("br-mgmt", kind="bridge", mac="02:00:00:00:00:bb", default_route=True)
    node = b.finish(node_ips=("192.0.2.10",))
    states = list(node.links.states)
    bridge_index = next(s.index for s in states if s.name == "br-mgmt")
    states = [replace(s, master=bridge_index) if s.name == "bond0" else s for s in states]
    node.links = RecordedLinks(states, node.links.default_routes)
    inv = run(node)
    assert ProtectionReason.MEMBER_OF_PROTECTED in item(inv, "0000:01:00.0").protected
    assert ProtectionReason.MEMBER_OF_PROTECTED in item(inv, "0000:01:00.1").protected
    assert ProtectionReason.LOWER_OF_PROTECTED in item(inv, "0000:02:00.0").protected


def test_failed_link_query_is_unknown_not_free(node: FixtureNode) -> None:
    node.links = RecordedLinks(fail="netlink: ENOBUFS")
    inv = run(node)
    assert isinstance(inv.default_route_ifnames, Unknown)
    vf = item(inv, mlx_vf_address(0, 0))
    assert isinstance(vf.netdevs[0].state, Unknown)
    assert ProtectionReason.UNKNOWN_STATE in vf.protected
    # functions without a host netdev cannot carry the default route: not protected
    assert item(inv, VFIO_ALONE).protected == ()
    assert any("links unknown" in n for n in inv.notes)


def test_vanished_function_is_a_note_not_a_crash(node: FixtureNode) -> None:
    target = (node.sysfs / "bus" / "pci" / "devices" / VFIO_ALONE).resolve()
    shutil.rmtree(target)
    inv = run(node)
    assert inv.by_pci(VFIO_ALONE) is None
    assert any(VFIO_ALONE in n for n in inv.notes)


def test_inventory_serialises(node: FixtureNode) -> None:
    doc = run(node).to_json()
    assert doc["nodeUID"] == NODE_UID
    assert {i["pciAddress"] for i in doc["items"]} >= {MLX_PF0, IB_HCA}


def test_external_controller_representors_are_not_local_vfs(tmp_path: Path) -> None:
    """A DPU-style representor c1pf0vf0 belongs to another host's VF 0, not ours."""
    b = SysfsBuilder(tmp_path / "sys")
    add_connectx5_switchdev(b, vfs_per_pf=1)
    b.netdev("pf0hpf-like", MLX_PF0, mac="02:00:00:00:c1:00", phys_port_name="c1pf0vf0")
    node = b.finish()
    node.devlink = RecordedDevlink(fail="no devlink")
    inv = run(node)
    reps = item(inv, MLX_PF0).representors
    assert {(r.controller, r.vfnum) for r in reps} == {(0, 0), (1, 0)}
    local = item(inv, mlx_vf_address(0, 0)).representor
    assert local is not None and local.controller == 0 and local.ifname == "enp59s0f0npf0vf0"


def test_a_card_moved_to_another_slot_keeps_its_identity(tmp_path: Path) -> None:
    def node_with_card_at(bdf: str, root: Path) -> Inventory:
        b = SysfsBuilder(root / "sys")
        b.function(bdf, root_bus="pci0000:00", vendor="0x8086", device="0x159b",
                   driver="vfio-pci", iommu_group=5, serial="b4-96-91-ff-ff-aa-bb-01")  # fmt: skip
        return run(b.finish())

    before = node_with_card_at("0000:af:00.0", tmp_path / "a")
    after = node_with_card_at("0000:3d:00.0", tmp_path / "b")
    assert set(before.items) == set(after.items)
    (item,) = after.items.values()
    assert item.pci_address == "0000:3d:00.0"  # the locator follows, the identity stays


def test_node_ip_on_a_bridge_member_protects_the_master_and_its_other_members(
    tmp_path: Path,
) -> None:
    """eno1 carries the node IP but is enslaved to br0: br0 is its master, and eno2 — a
    member of the same bridge — can be broken by an effect on br0, so it is protected."""
    from dmn.agent.inventory.protection import protected_links

    b = SysfsBuilder(tmp_path / "sys")
    for i, bdf in enumerate(("0000:01:00.0", "0000:01:00.1", "0000:02:00.0")):
        b.function(bdf, root_bus="pci0000:00", vendor="0x8086", device="0x1521",
                   driver="igb", iommu_group=i)  # fmt: skip
    bridge = b.virtual_link("br0", kind="bridge", mac="02:00:00:00:00:b1")
    b.netdev("eno1", "0000:01:00.0", mac="a0:00:00:00:00:11", master=bridge,
             addresses=("198.51.100.7/24",))  # fmt: skip
    b.netdev("eno2", "0000:01:00.1", mac="a0:00:00:00:00:12", master=bridge)
    b.netdev("ens4", "0000:02:00.0", mac="a0:00:00:00:00:13")  # not on the bridge
    node = b.finish(node_ips=("198.51.100.7",))
    inv = run(node)
    assert ProtectionReason.NODE_IP in item(inv, "0000:01:00.0").protected
    assert ProtectionReason.MEMBER_OF_PROTECTED in item(inv, "0000:01:00.1").protected
    assert item(inv, "0000:02:00.0").protected == ()
    links = protected_links(node.links.states, frozenset(), ("198.51.100.7",))
    assert ProtectionReason.MASTER_OF_PROTECTED in links["br0"]


def test_default_route_on_a_pf_protects_every_vf(tmp_path: Path) -> None:
    b = SysfsBuilder(tmp_path / "sys")
    add_connectx5_switchdev(b, vfs_per_pf=2)
    node = b.finish()
    pf0 = next(s for s in node.links.states if s.name == "enp59s0f0np0")
    node.links = RecordedLinks(node.links.states, frozenset({pf0.index}))
    inv = run(node)
    assert ProtectionReason.DEFAULT_ROUTE in item(inv, MLX_PF0).protected
    for i in range(2):
        assert ProtectionReason.VF_OF_PROTECTED_PF in item(inv, mlx_vf_address(0, i)).protected
        assert item(inv, mlx_vf_address(1, i)).protected == ()  # the other PF's family


def test_unreadable_driver_binding_is_not_read_as_unbound(node: FixtureNode) -> None:
    """A function whose driver link cannot be read (here: not a symlink, EINVAL) is left
    out with a note — never inventoried as an unbound function free for VFIO."""
    fn = (node.sysfs / "bus" / "pci" / "devices" / SHARED_UNBOUND).resolve()
    assert not (fn / "driver").exists()
    (fn / "driver").mkdir()
    inv = run(node)
    assert inv.by_pci(SHARED_UNBOUND) is None
    assert any(SHARED_UNBOUND in n and "unreadable" in n for n in inv.notes)
    peer = item(inv, SHARED_KERNEL)  # its group peer now has an unknown member
    assert isinstance(peer.iommu_peer_details, Unknown)
