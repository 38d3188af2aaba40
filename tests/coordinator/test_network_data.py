"""networkData comes from the journal's recorded outcomes, within the API's limits."""

from __future__ import annotations

from dmn.agent.coordinator.network_data import network_data, recorded_addresses
from dmn.engine.journal import EffectRecord
from dmn.vocabulary.handles import IP_ADDRESSES, Handle, NamespaceIdentity, Scope
from dmn.vocabulary.terms import Access, HandleType, ScopeKind

SANDBOX = Scope(ScopeKind.SANDBOX, NamespaceIdentity(4, 4026532999, "boot-1"))
OTHER = Scope(ScopeKind.SANDBOX, NamespaceIdentity(4, 4026533000, "boot-1"))


def link(inventory: str = "link:a", scope: Scope = SANDBOX, **observations: object) -> Handle:
    return Handle(
        id=f"h:{inventory}",
        type=HandleType.KERNEL_INTERFACE,
        inventory_id=inventory,
        scope=scope,
        accesses=frozenset({Access.READ}),
        observations={"ifName": "net1", "mac": "02:00:00:00:00:01", **observations},  # type: ignore[dict-item]
    )


def record(index: int, *handles: Handle) -> EffectRecord:
    return EffectRecord(index=index, id=f"e{index}", kind="k", outputs={"interface": handles})


def test_interface_mac_and_every_recorded_address_in_effect_order() -> None:
    exported = link()
    records = [
        record(0, exported),
        record(1, link(**{IP_ADDRESSES: "10.0.0.2/24 fd00:0::2/64"})),
        record(2, link(**{IP_ADDRESSES: "10.0.0.2/24 10.0.1.9/16"})),
    ]
    assert network_data(exported, records) == {
        "interfaceName": "net1",
        "hardwareAddress": "02:00:00:00:00:01",
        "ips": ["10.0.0.2/24", "fd00::2/64", "10.0.1.9/16"],
    }


def test_addresses_of_another_link_or_namespace_are_not_this_devices() -> None:
    exported = link()
    records = [
        record(0, link("link:b", **{IP_ADDRESSES: "10.9.9.9/24"})),
        record(1, link(scope=OTHER, **{IP_ADDRESSES: "10.8.8.8/24"})),
        record(2, link(**{IP_ADDRESSES: "garbage 10.0.0.2/24"})),
    ]
    assert recorded_addresses(exported, records) == ["10.0.0.2/24"]


def test_the_latest_recorded_name_and_mac_win_and_limits_hold() -> None:
    exported = link()
    many = " ".join(f"10.0.{i}.1/24" for i in range(20))
    later = link(ifName="eth7", mac="02:00:00:00:00:02", **{IP_ADDRESSES: many})
    data = network_data(exported, [record(0, later)])
    assert data is not None
    assert data["interfaceName"] == "eth7" and data["hardwareAddress"] == "02:00:00:00:00:02"
    assert len(data["ips"]) == 16
    assert network_data(link(ifName=""), []) is None
    assert "hardwareAddress" not in (network_data(link(mac="x" * 129), []) or {})


def test_device_data_tells_what_a_vfio_or_rdma_grant_gave() -> None:
    from dmn.agent.coordinator.network_data import device_data

    vfio = link(
        "pci:0000:3b:02.1",
        pciAddress="0000:3b:02.1",
        iommuGroup="42",
        cdiDevice="dra-multi-network.schseba.github.io/vfio=g1",
    )
    rdma = link(
        "rdma:mlx5_3", rdmaDevice="mlx5_3", cdiDevice="dra-multi-network.schseba.github.io/rdma=g2"
    )
    assert device_data([vfio, rdma]) == {
        "pciAddress": "0000:3b:02.1",
        "iommuGroup": "42",
        "rdmaDevice": "mlx5_3",
        "cdiDevices": [
            "dra-multi-network.schseba.github.io/vfio=g1",
            "dra-multi-network.schseba.github.io/rdma=g2",
        ],
    }
    assert device_data([link()]) is None
    assert device_data([link(pciAddress="x" * 300)]) is None
