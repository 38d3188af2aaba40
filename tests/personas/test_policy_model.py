"""The strict DeviceExposurePolicy model (design §5.2)."""

from __future__ import annotations

from typing import Any

import pytest
from pydantic import BaseModel, ValidationError

from dmn.agent.personas.build import bridge_grant
from dmn.api import policy as policy_module
from dmn.api.policy import DeviceExposurePolicy

SEED_EXAMPLE: dict[str, Any] = {
    "apiVersion": "networking.dra-multi-network.schseba.github.io/v1alpha1",
    "kind": "DeviceExposurePolicy",
    "metadata": {"name": "pf-macvlan"},
    "spec": {
        "nodeSelector": {
            "matchLabels": {"dra-multi-network.schseba.github.io/node-pool": "secondary"}
        },
        "priority": 200,
        "selector": {"kind": "PF", "pciAddresses": ["0000:18:00.0"]},
        "action": "Expose",
        "exposure": {
            "persona": "macvlan",
            "plugin": "macvlan-cni",
            "mode": "bridge",
            "allowMultipleAllocations": True,
            "capacity": {"children": {"value": "64", "default": "1", "validValues": ["1"]}},
            "compatibility": [
                {"scope": "Interface", "domain": "interface-mode", "groups": ["macvlan"]},
                {"scope": "SriovFamily", "domain": "pf-access", "groups": ["host-retained"]},
            ],
            "effectPermissions": ["linux/create-macvlan/v1"],
        },
    },
}


def with_spec(**changes: Any) -> dict[str, Any]:
    doc = {**SEED_EXAMPLE, "spec": {**SEED_EXAMPLE["spec"], **changes}}
    return doc


def test_seed_example_round_trips() -> None:
    p = DeviceExposurePolicy.model_validate(SEED_EXAMPLE)
    assert p.to_api()["spec"] == SEED_EXAMPLE["spec"]


@pytest.mark.parametrize(
    ("doc", "where"),
    [
        (with_spec(surprise=1), "surprise"),
        (with_spec(selector={"kind": "PF", "pciAddresses": ["18:00.0"]}), "pciAddresses"),
        (with_spec(priority="200"), "priority"),  # strict: no coercion
        (with_spec(selector={"kind": "Bond"}), "kind"),
        (with_spec(selector={"vendors": ["15b3"]}), "vendors"),
    ],
)
def test_strict_rejections_point_at_the_field(doc: dict[str, Any], where: str) -> None:
    with pytest.raises(ValidationError) as err:
        DeviceExposurePolicy.model_validate(doc)
    assert where in str(err.value)


def test_more_than_two_groups_per_domain_is_rejected() -> None:
    exposure = dict(SEED_EXAMPLE["spec"]["exposure"])
    exposure["compatibility"] = [{"scope": "Interface", "domain": "d", "groups": ["a", "b", "c"]}]
    with pytest.raises(ValidationError):
        DeviceExposurePolicy.model_validate(with_spec(exposure=exposure))


def test_every_field_is_documented() -> None:
    """The CRD generator copies these descriptions; none may be missing."""
    for value in vars(policy_module).values():
        if (
            isinstance(value, type)
            and issubclass(value, BaseModel)
            and value.__module__ == policy_module.__name__
        ):
            assert value.__doc__, value.__name__
            for name, field in value.model_fields.items():
                assert field.description, f"{value.__name__}.{name}"


# ---------------------------------------------------------------- bridge grants (design §6.7)

BRIDGES: dict[str, Any] = {
    "allowedHostBridges": [
        {
            "name": "tenantbr0",
            "alias": "tenant-br",
            "mac": "02:00:00:00:be:01",
            "vlans": [{"first": 100, "last": 199}, {"first": 300}],
            "uplinks": [
                {
                    "name": "uplink0",
                    "alias": "fabric",
                    "pciAddress": "0000:18:00.0",
                    "vlans": [{"first": 100, "last": 110}],
                }
            ],
        }
    ],
    "allowedOvsBridges": [{"name": "brovs0", "alias": "tenant-ovs", "vlans": [{"first": 100}]}],
}


def with_bridges(**changes: Any) -> dict[str, Any]:
    exposure = {**SEED_EXAMPLE["spec"]["exposure"], **BRIDGES, **changes}
    return with_spec(exposure=exposure)


def test_bridge_grants_round_trip_and_expand_their_vlan_ranges() -> None:
    p = DeviceExposurePolicy.model_validate(with_bridges())
    assert p.to_api()["spec"]["exposure"]["allowedHostBridges"] == BRIDGES["allowedHostBridges"]
    exposure = p.spec.exposure
    assert exposure is not None
    (bridge,) = exposure.allowed_host_bridges
    assert policy_module.vlan_ids(bridge.vlans) == frozenset({*range(100, 200), 300})
    assert bridge.uplinks is not None and bridge.uplinks[0].pci_address == "0000:18:00.0"
    assert policy_module.vlan_ids(exposure.allowed_ovs_bridges[0].vlans) == frozenset({100})
    # the node-side grant the bridge executors resolve aliases through carries the uplinks
    node = bridge_grant(bridge)
    uplink = node.uplink("fabric")
    assert uplink is not None and (uplink.name, uplink.device) == ("uplink0", "0000:18:00.0")
    assert uplink.vlans == frozenset(range(100, 111)) and node.mac == "02:00:00:00:be:01"


def _bridge(**changes: Any) -> list[dict[str, Any]]:
    return [{**BRIDGES["allowedHostBridges"][0], **changes}]


def _uplink(**changes: Any) -> dict[str, Any]:
    return {**BRIDGES["allowedHostBridges"][0]["uplinks"][0], **changes}


def _ovs(**changes: Any) -> dict[str, Any]:
    return {**BRIDGES["allowedOvsBridges"][0], **changes}


@pytest.mark.parametrize(
    ("doc", "where"),
    [
        (with_bridges(allowedHostBridges=_bridge(mac="02:00:00:00:BE:01")), "mac"),
        (with_bridges(allowedHostBridges=_bridge(mac="03:00:00:00:be:01")), "mac"),  # multicast
        (with_bridges(allowedHostBridges=_bridge(name="a/b")), "name"),
        (with_bridges(allowedHostBridges=_bridge(name="sixteen-chars-xx")), "name"),
        (with_bridges(allowedHostBridges=_bridge(alias="Tenant")), "alias"),
        (with_bridges(allowedHostBridges=_bridge(vlans=[])), "vlans"),
        (with_bridges(allowedHostBridges=_bridge(vlans=[{"first": 0}])), "first"),
        (with_bridges(allowedHostBridges=_bridge(vlans=[{"first": 4095}])), "first"),
        (with_bridges(allowedHostBridges=_bridge(vlans=[{"first": 9, "last": 3}])), "below"),
        (with_bridges(allowedHostBridges=_bridge(vlans=[{"first": "100"}])), "first"),
        (with_bridges(allowedHostBridges=_bridge(dbPath="/run/x")), "dbPath"),
        (with_bridges(allowedHostBridges=_bridge(uplinks=[_uplink(name="tenantbr0")])), "itself"),
        (with_bridges(allowedHostBridges=_bridge(uplinks=[_uplink(pciAddress="18:00.0")])), "pci"),
        (
            with_bridges(allowedHostBridges=[*_bridge(), *_bridge(name="otherbr")]),
            "aliases must be distinct",
        ),
        (
            with_bridges(allowedOvsBridges=[_ovs(alias="a"), _ovs(alias="b")]),
            "names must be distinct",
        ),
    ],
)
def test_bridge_grant_rejections_point_at_the_field(doc: dict[str, Any], where: str) -> None:
    with pytest.raises(ValidationError) as err:
        DeviceExposurePolicy.model_validate(doc)
    assert where in str(err.value)
