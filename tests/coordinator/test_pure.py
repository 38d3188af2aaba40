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
        (
            {"name": "net1", "firstAvailable": [{"name": "a", "deviceClassName": "x", "count": 2}]},
            "net1/a",
        ),
        ({"name": "net1", "firstAvailable": [{"name": "a", "deviceClassName": "x"}]}, "net1/b"),
        ({"name": "net1", "firstAvailable": [{"name": "a", "deviceClassName": "x"}]}, "net1"),
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


GROUP = "networking.dra-multi-network.schseba.github.io/v1alpha1"


def _configured(*claim_configs: dict[str, object]) -> dict[str, object]:
    driver = "dra-multi-network.schseba.github.io"
    claim = claim_with({"name": "net1", "exactly": {"deviceClassName": "x"}})
    root = {"apiVersion": GROUP, "kind": "TopologyRootConfiguration", **ROOT.to_api()}
    configs = [{"source": "FromClass", "opaque": {"driver": driver, "parameters": root}}]
    configs += [
        {"source": "FromClaim", "requests": ["net1"], "opaque": {"driver": driver, "parameters": p}}
        for p in claim_configs
    ]
    claim["status"]["allocation"]["devices"]["config"] = configs  # type: ignore[index]
    return claim


def _workload(**config: object) -> dict[str, object]:
    return {"apiVersion": GROUP, "kind": "WorkloadParameters", "config": config}


def test_a_claims_workload_parameters_reach_its_result() -> None:
    (got,) = driver_results(
        _configured(_workload(address="10.56.0.240", ifName="fast0")),
        "dra-multi-network.schseba.github.io",
    )
    assert dict(got.workload) == {"address": "10.56.0.240", "ifName": "fast0"}


def test_the_chosen_firstavailable_subrequest_gets_its_own_class_binding() -> None:
    """The scheduler chose ``net1/b``: the root binding of b's class (requests ["net1/b"])
    applies, a's does not, and the claim's own config for ``net1`` reaches the result."""
    driver = "dra-multi-network.schseba.github.io"
    claim = claim_with(
        {
            "name": "net1",
            "firstAvailable": [
                {"name": "a", "deviceClassName": "sriov"},
                {"name": "b", "deviceClassName": "macvlan"},
            ],
        },
        "net1/b",
    )
    chosen = ROOT.to_api()
    other = {**chosen, "rootStep": "other"}
    configs = [
        {"source": "FromClass", "requests": [f"net1/{sub}"],
         "opaque": {"driver": driver, "parameters": {"apiVersion": GROUP,
                    "kind": "TopologyRootConfiguration", **root}}}
        for sub, root in (("a", other), ("b", chosen))
    ]  # fmt: skip
    configs.append(
        {"source": "FromClaim", "requests": ["net1"],
         "opaque": {"driver": driver, "parameters": _workload(ifName="fast0")}}
    )  # fmt: skip
    claim["status"]["allocation"]["devices"]["config"] = configs  # type: ignore[index]
    (got,) = driver_results(claim, driver)
    assert (got.request, got.root.root_step, dict(got.workload)) == (
        "net1/b",
        "net1",
        {"ifName": "fast0"},
    )


@pytest.mark.parametrize(
    ("configs", "message"),
    [
        ([{"kind": "SomethingElse", "mtu": 9000}], "not 'SomethingElse'"),
        ([_workload(pool={"x": 1})], "invalid WorkloadParameters"),
        ([_workload(ifName="a"), _workload(ifName="b")], "set by two"),
        ([_workload()], "invalid WorkloadParameters"),
    ],
)
@pytest.mark.adversarial
def test_any_other_claim_configuration_is_refused(
    configs: list[dict[str, object]], message: str
) -> None:
    with pytest.raises(Refusal) as info:
        driver_results(_configured(*configs), "dra-multi-network.schseba.github.io")
    assert info.value.code == "E_CLAIM_CONFIG" and message in info.value.message, info.value
    assert info.value.field == "spec.devices.config"


@pytest.mark.adversarial
def test_only_declared_fields_with_valid_values_are_merged() -> None:
    from dmn.agent.coordinator.verify import check_workload_config, with_workload
    from dmn.interpreter.loader import load_builtin_plugins

    macvlan = load_builtin_plugins()["macvlan-cni"]
    base = {"mode": "bridge", "ifName": "net1", "mtu": 1500, "up": True, "pool": "p"}
    merged = with_workload(base, macvlan, {"address": "10.56.0.240", "ifName": "fast0"}, "r")
    assert merged == {**base, "address": "10.56.0.240", "ifName": "fast0"}
    check_workload_config(macvlan, merged)
    for key, value in (("mtu", 9000), ("pool", "other")):  # the administrator's
        with pytest.raises(Refusal) as info:
            with_workload(base, macvlan, {key: value}, "r")
        assert info.value.code == "E_WORKLOAD_PARAMETER" and key in info.value.field
    for bad in ({"address": "not-an-ip"}, {"ifName": "eth0"}, {"address": "fd00::1/64"}):
        with pytest.raises(Refusal) as info:
            check_workload_config(macvlan, with_workload(base, macvlan, bad, "r"))
        assert info.value.code == "E_WORKLOAD_PARAMETER", bad
    no_pool = {k: v for k, v in base.items() if k != "pool"}
    with pytest.raises(Refusal):
        check_workload_config(
            macvlan, with_workload(no_pool, macvlan, {"address": "10.0.0.9"}, "r")
        )
