"""Pure pieces of the coordinator: attachment ids, allocation fingerprints, input wiring."""

from __future__ import annotations

import re

import pytest

from dmn.agent.coordinator import Refusal
from dmn.agent.coordinator.handles import operation_inputs
from dmn.agent.coordinator.verify import DriverResult, driver_results, fingerprint
from dmn.agent.journal.keys import attachment_id
from dmn.agent.journal.records import AttachmentIdentity
from dmn.api.root_config import TopologyRootConfiguration
from dmn.host.pins import PIN_ID
from dmn.vocabulary.handles import Handle, Scope
from dmn.vocabulary.terms import HandleType, ScopeKind

DIGEST = "sha256:" + "0" * 64
ROOT = TopologyRootConfiguration.model_validate(
    {
        "revisionRef": {"name": "r", "uid": "u", "digest": DIGEST},
        "rootStep": "net1",
        "pluginContractDigest": DIGEST,
    }
)


def result(share: str = "s1", device: str = "d1") -> DriverResult:
    return DriverResult("net1", "pool", device, share, {"children": "1"}, ROOT, 0)


def test_attachment_id_is_pin_safe_and_per_incarnation() -> None:
    a = AttachmentIdentity("node", "boot", "pod", "../../etc sandbox")
    b = AttachmentIdentity("node", "boot", "pod", "other")
    assert PIN_ID.fullmatch(attachment_id(a)) and re.fullmatch(
        r"att-[0-9a-f]{32}", attachment_id(a)
    )
    assert attachment_id(a) != attachment_id(b)
    assert attachment_id(a) == attachment_id(
        AttachmentIdentity("node", "boot", "pod", a.sandbox_id)
    )


def test_fingerprint_keeps_share_id_and_ignores_order() -> None:
    one, two = result("s1", "d1"), result("s2", "d2")
    assert fingerprint("c", [one, two]) == fingerprint("c", [two, one])
    assert fingerprint("c", [one]) != fingerprint("c", [result("s9", "d1")])
    assert fingerprint("c", [one]) != fingerprint("other", [one])


def handle(name: str) -> Handle:
    return Handle(
        id=name,
        type=HandleType.KERNEL_INTERFACE,
        inventory_id=name,
        scope=Scope(ScopeKind.HOST),
        accesses=frozenset(),
    )


def test_operation_inputs_come_from_earlier_exports_in_order() -> None:
    exports = {"left": {"interface": (handle("l"),)}, "right": {"interface": (handle("r"),)}}
    got = operation_inputs(
        {"members": [{"from": "left.interface"}, {"from": "right.interface"}]}, exports
    )
    assert [h.id for h in got["members"]] == ["l", "r"]
    assert [
        h.id for h in operation_inputs({"parent": {"from": "right.interface"}}, exports)["parent"]
    ] == ["r"]
    with pytest.raises(Refusal) as info:
        operation_inputs({"parent": {"from": "uplink.interface"}}, exports)
    assert info.value.code == "E_REF_UNRESOLVED"


def test_other_drivers_results_are_left_alone() -> None:
    claim = {
        "metadata": {"uid": "c"},
        "status": {
            "allocation": {
                "devices": {
                    "results": [
                        {"request": "gpu", "driver": "gpu.example.com", "pool": "p", "device": "g0"}
                    ],
                    "config": [],
                }
            }
        },
    }
    assert driver_results(claim, "dra-multi-network.schseba.github.io") == []


def claim_with(request: dict[str, object], result_request: str = "net1") -> dict[str, object]:
    driver = "dra-multi-network.schseba.github.io"
    return {
        "metadata": {"uid": "c"},
        "spec": {"devices": {"requests": [request]}},
        "status": {
            "allocation": {
                "devices": {
                    "results": [
                        {"request": result_request, "driver": driver, "pool": "p", "device": "d"}
                    ],
                    "config": [],
                }
            }
        },
    }


@pytest.mark.parametrize(
    ("request_spec", "result_request"),
    [
        ({"name": "net1", "exactly": {"deviceClassName": "x", "allocationMode": "All"}}, "net1"),
        ({"name": "net1", "exactly": {"deviceClassName": "x", "count": 2}}, "net1"),
        ({"name": "net1", "firstAvailable": [{"name": "a", "deviceClassName": "x"}]}, "net1/a"),
    ],
)
def test_initial_profile_refuses_other_allocation_modes(
    request_spec: dict[str, object], result_request: str
) -> None:
    with pytest.raises(Refusal) as info:
        driver_results(
            claim_with(request_spec, result_request), "dra-multi-network.schseba.github.io"
        )
    assert info.value.code == "E_ALLOCATION_MODE"
