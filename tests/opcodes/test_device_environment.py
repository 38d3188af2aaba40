"""Node facts of the device environment survive the JSON a crash child or a record carries."""

from __future__ import annotations

from dmn.opcodes.device_environment import BridgeGrant, UplinkGrant


def test_bridge_grant_with_uplinks_round_trips_and_finds_an_uplink_by_alias() -> None:
    uplink = UplinkGrant("rack-uplink", "ens1f0", "0000:3b:00.0", frozenset({100, 200}))
    grant = BridgeGrant("tenant-br", "br0", frozenset({100}), "02:00:00:00:be:01", (uplink,))
    assert BridgeGrant.from_json(grant.to_json()) == grant
    assert grant.uplink("rack-uplink") == uplink
    assert grant.uplink("other") is None


def test_a_grant_recorded_before_uplinks_existed_has_none() -> None:
    old = {"alias": "a", "name": "br0", "vlans": [5], "mac": "02:00:00:00:BE:01"}
    grant = BridgeGrant.from_json(old)
    assert grant.uplinks == () and grant.mac == "02:00:00:00:be:01"
