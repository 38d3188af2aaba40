"""Every opcode parameter model accepts a valid payload and rejects unknown fields, wrong
JSON types and out-of-range values — both from Python values and from JSON text (the
checker and binder validate JSON)."""

from __future__ import annotations

import json
from typing import Any

import pytest
from pydantic import ValidationError

from dmn.opcodes.registry import default_registry

#: One valid payload per opcode, with every field present.
VALID: dict[str, dict[str, Any]] = {
    "linux/link-move/v1": {"ifName": "net1"},
    "linux/link-configure/v1": {"mtu": 1500, "up": True},
    "linux/create-macvlan/v1": {"mode": "bridge", "mtu": 1500},
    "linux/create-ipvlan/v1": {"mode": "l2", "mtu": 1500},
    "linux/create-macvlan/v2": {"ifName": "net1", "mode": "bridge", "mtu": 1500, "up": True},
    "linux/create-ipvlan/v2": {"ifName": "net1", "mode": "l2", "mtu": 1500, "up": False},
    "linux/create-vlan/v1": {"ifName": "tenant100", "vlanId": 100, "mtu": 1500},
    "linux/create-bond/v1": {
        "ifName": "bond0",
        "mode": "active-backup",
        "miimon": 100,
        "failOverMac": "active",
        "mtu": 1500,
    },
    "linux/attach-master/v1": {},
    "share/hold-parent/v1": {"childKind": "macvlan", "mode": "bridge"},
    "pci/driver-bind/v1": {"driver": "vfio-pci"},
    "pci/function-reset/v1": {"method": "flr"},
    "vfio/device-access/v1": {"accessBackend": "group"},
    "rdma/netns-assign/v1": {},
    "rdma/device-access/v1": {"nodes": ["uverbs", "rdma_cm"]},
    "ib/port-configure/v1": {"mode": "connected", "mtu": 65520},
    "devlink/eswitch-configure/v1": {"mode": "switchdev"},
    "representor/configure/v1": {"mtu": 9000, "up": False},
    "bridge/port-attach/v1": {"bridge": "tenant-br"},
    "bridge/port-vlan/v1": {"pvid": 100, "tagged": [200, 300]},
    "bridge/shared-uplink-vlan/v1": {"bridge": "tenant-br", "uplink": "uplink-a", "vlanId": 100},
    "ovs/port-attach/v1": {"bridge": "br-int", "tag": 100, "trunks": []},
    "sriov/vf-configure/v1": {"mac": "02:00:00:00:00:01", "vlan": 100, "qos": 3, "trust": True},
    "sysctl/interface/v1": {"ipv4RpFilter": 2, "ipv4ArpIgnore": 8, "ipv6Disable": False},
    "ethtool/features/v1": {"features": {"rx-gro": True, "tx-checksum-ip-generic": False}},
    "ip/addresses/v1": {"addresses": ["10.0.0.2/24", "fd00::2/64"], "nodad": True},
    "ip/routes/v1": {"routes": [{"destination": "10.2.0.0/16", "gateway": "10.0.0.1"}]},
    "ip/rules/v1": {"rules": [{"priority": 100, "from": "10.0.0.0/24", "table": 100}]},
    "ip/neighbours/v1": {"neighbours": [{"address": "10.0.0.9", "lladdr": "02:00:00:00:00:09"}]},
    "ip/pool-addresses/v1": {"pool": "macvlan-v4", "address": "10.56.0.240"},
    # what a multus effect binds comes from the node, never from parameters
    "multus/shadow-nad/v1": {},
    "multus/shadow-nad-shared/v1": {},
    "multus/pod-selection/v1": {},
    "multus/binding-ready/v1": {},
    "ip/carried-host-config/v1": {},
    "linux/host-link-state/v1": {},  # it records the link's own state: nothing to choose
}

#: Values each field must refuse (beyond wrong JSON types, tested generically).
OUT_OF_RANGE: dict[str, list[Any]] = {
    "ifName": ["", "a" * 16, "lo", "eth0", ".", "..", "a/b", "a:b", "a b", "tab\t", "é"],
    "mtu": [67, 65536, 0, -1],
    "vlanId": [0, 4095, -1],
    "pvid": [0, 4095],
    "miimon": [0, 10001],
    "mode": ["", "BRIDGE", "802.3ad", "balance-rr", "source"],
    "failOverMac": ["none", "follow"],
    "childKind": ["vlan", "bond"],
    "driver": ["", "../x", "a/b", "Vfio", "x" * 33],
    "method": ["reset", ""],
    "accessBackend": ["iommufd", ""],
    "nodes": [[], ["uverbs", "uverbs"], ["issm"], ["uverbs", "rdma_cm", "umad", "umad"]],
    "bridge": ["", "Br0", "-br", "br-", "br_0", "a" * 64],
    "uplink": ["", "UP", "a" * 64],
    "tagged": [[0], [4095], [1] * 65],
    "tag": [0, 4095],
    "trunks": [[0], [1, 1]],
    "ipv4RpFilter": [-1, 3],
    "ipv4ArpIgnore": [-1, 4, 7, 9],
    "features": [{}, {"gro": True}, {"../rx-gro": True}, {"rx-gro": 1}],
    "addresses": [[], ["10.0.0.0/24"], ["10.0.0.2"], ["10.0.0.2/24"] * 2, ["x"] * 17],
    "routes": [[], [{"destination": "10.2.0.1/16"}], [{"destination": "default"}]],
}

REGISTRY = default_registry()
NAMES = sorted(VALID)


def _wrong_type(value: Any) -> list[Any]:
    if isinstance(value, bool):
        return ["true", 1, None]
    if isinstance(value, int):
        return [str(value), float(value) + 0.5, True, None]
    if isinstance(value, str):
        return [1, True, [value], None]
    if isinstance(value, list):
        return ["x", {"a": 1}, None]
    return [object()]


def _accepts(name: str, payload: dict[str, Any]) -> bool:
    model = REGISTRY.get(name)
    assert model is not None
    try:
        model.parameters.model_validate(payload)
    except ValidationError:
        return False
    try:
        text = json.dumps(payload)
    except (TypeError, ValueError):
        return False
    try:
        model.parameters.model_validate_json(text, strict=True)
    except ValidationError:
        return False
    return True


def test_every_opcode_has_an_example() -> None:
    assert set(VALID) == set(REGISTRY.names())


@pytest.mark.parametrize("name", NAMES)
def test_valid_payload_accepted(name: str) -> None:
    assert _accepts(name, VALID[name])


@pytest.mark.parametrize("name", NAMES)
def test_unknown_field_rejected(name: str) -> None:
    assert not _accepts(name, {**VALID[name], "extra": 1})
    assert not _accepts(name, {**VALID[name], "IfName": "x"})


@pytest.mark.parametrize("name", NAMES)
def test_wrong_types_rejected(name: str) -> None:
    spec = REGISTRY.get(name)
    assert spec is not None
    for field, value in VALID[name].items():
        # an optional field may be given as null, meaning "leave unset"; a required one not
        required = spec.parameters.model_fields[field].is_required()
        for bad in _wrong_type(value):
            if bad is None and not required:
                continue
            assert not _accepts(name, {**VALID[name], field: bad}), (field, bad)


@pytest.mark.parametrize("name", NAMES)
def test_out_of_range_rejected(name: str) -> None:
    for field in VALID[name]:
        for bad in OUT_OF_RANGE.get(field, []):
            assert not _accepts(name, {**VALID[name], field: bad}), (field, bad)


@pytest.mark.parametrize("name", NAMES)
def test_required_fields(name: str) -> None:
    spec = REGISTRY.get(name)
    assert spec is not None
    for field, info in spec.parameters.model_fields.items():
        if info.is_required():
            payload = {k: v for k, v in VALID[name].items() if k != field}
            assert not _accepts(name, payload), field


@pytest.mark.parametrize(
    ("name", "payload"),
    [
        ("linux/link-configure/v1", {}),
        ("representor/configure/v1", {}),
        ("ib/port-configure/v1", {}),
        ("ib/port-configure/v1", {"mode": "datagram", "mtu": 4093}),
        ("share/hold-parent/v1", {"childKind": "macvlan", "mode": "l2"}),
        ("share/hold-parent/v1", {"childKind": "ipvlan", "mode": "bridge"}),
        ("bridge/port-vlan/v1", {}),
        ("bridge/port-vlan/v1", {"pvid": 100, "tagged": [100]}),
        ("ovs/port-attach/v1", {"bridge": "br", "tag": 10, "trunks": [20]}),
        ("linux/create-bond/v1", {**VALID["linux/create-bond/v1"], "mode": "802.3ad"}),
        ("sriov/vf-configure/v1", {}),
        ("sriov/vf-configure/v1", {"qos": 3}),
        ("sriov/vf-configure/v1", {"vlan": 0, "qos": 3}),
        ("sriov/vf-configure/v1", {"mac": "03:00:00:00:00:01"}),
        ("sriov/vf-configure/v1", {"mac": "00:00:00:00:00:00"}),
        ("sriov/vf-configure/v1", {"mac": "02:AA:00:00:00:01"}),
        ("sriov/vf-configure/v1", {"minTxRate": 200, "maxTxRate": 100}),
        ("sriov/vf-configure/v1", {"linkState": "up"}),
    ],
)
def test_cross_field_rules(name: str, payload: dict[str, Any]) -> None:
    assert not _accepts(name, payload)


@pytest.mark.parametrize(
    ("name", "payload"),
    [
        ("linux/link-configure/v1", {"up": False}),
        ("linux/link-configure/v1", {"mtu": 68}),
        ("linux/link-configure/v1", {"mtu": 65535}),
        ("linux/create-vlan/v1", {"ifName": "a" * 15, "vlanId": 4094, "mtu": 9000}),
        ("linux/create-vlan/v1", {"ifName": "v_1.x-y", "vlanId": 1, "mtu": 576}),
        ("linux/create-bond/v1", {**VALID["linux/create-bond/v1"], "miimon": 10000}),
        ("linux/create-bond/v1", {**VALID["linux/create-bond/v1"], "miimon": 1}),
        ("linux/create-macvlan/v1", {"mode": "passthru", "mtu": 1500}),
        ("linux/create-ipvlan/v1", {"mode": "l3s", "mtu": 1500}),
        ("share/hold-parent/v1", {"childKind": "ipvlan", "mode": "l2"}),
        ("pci/function-reset/v1", {}),
        ("ib/port-configure/v1", {"mode": "datagram", "mtu": 4092}),
        ("bridge/port-vlan/v1", {"tagged": [1, 4094]}),
        ("ovs/port-attach/v1", {"bridge": "br-int", "trunks": [10, 20]}),
        ("ovs/port-attach/v1", {"bridge": "b"}),
        ("sriov/vf-configure/v1", {"vlan": 0}),
        ("sriov/vf-configure/v1", {"vlan": 4094, "qos": 7}),
        ("sriov/vf-configure/v1", {"maxTxRate": 100}),
        ("sriov/vf-configure/v1", {"minTxRate": 0, "maxTxRate": 0, "linkState": "auto"}),
        ("sriov/vf-configure/v1", {"spoofCheck": False}),
    ],
)
def test_boundaries_accepted(name: str, payload: dict[str, Any]) -> None:
    assert _accepts(name, payload)


def test_macvlan_modes_list_bridge_first() -> None:
    spec = REGISTRY.get("linux/create-macvlan/v1")
    assert spec is not None
    schema = spec.parameters.model_json_schema()
    assert schema["properties"]["mode"]["enum"][0] == "bridge"
    ipvlan = REGISTRY.get("linux/create-ipvlan/v1")
    assert ipvlan is not None
    assert ipvlan.parameters.model_json_schema()["properties"]["mode"]["enum"][0] == "l2"
