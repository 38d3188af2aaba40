"""ResourceSlices: upstream 1.37 schema (strict), v1 limits, pools and generations."""

from __future__ import annotations

import copy
import re
from pathlib import Path
from typing import Any

import kubernetes_validate
import pytest

from dmn.agent.inventory import Inventory, ScanConfig, scan
from dmn.agent.personas import FindingCode, PersonaSet, build_personas
from dmn.agent.personas.model import Children, Consumption, Persona
from dmn.agent.slices import (
    SliceLimitError,
    SlicePublisher,
    build_slices,
    node_allocation_check,
    stripped_prerequisites,
)
from tests.fixtures.policies import standard_policies
from tests.fixtures.sysfs_layouts import build_reference_node, build_synthetic_node

K8S_VERSION = "1.37.0"
SCHEMA = (
    Path(kubernetes_validate.__file__).parent
    / "kubernetes-json-schema"
    / "v1.37.0-local-strict"
    / "_definitions.json"
)


def inventory(node: Any) -> Inventory:
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
def reference(tmp_path_factory: pytest.TempPathFactory) -> PersonaSet:
    inv = inventory(build_reference_node(tmp_path_factory.mktemp("ref")))
    return build_personas(inv, standard_policies(), {})


@pytest.fixture(scope="module")
def synthetic(tmp_path_factory: pytest.TempPathFactory) -> PersonaSet:
    inv = inventory(build_synthetic_node(tmp_path_factory.mktemp("syn")))
    return build_personas(inv, standard_policies(pf_selector={"kind": "PF"}), {})


def validate(slice_doc: dict[str, Any]) -> None:
    kubernetes_validate.validate(slice_doc, K8S_VERSION, strict=True)


def test_reference_slices_validate_against_upstream_schema(reference: PersonaSet) -> None:
    slices = build_slices(reference, "worker-a", 1)
    for s in slices:
        validate(s)


def test_synthetic_slices_validate_and_respect_limits(synthetic: PersonaSet) -> None:
    slices = build_slices(synthetic, "worker-a", 7)
    assert len(synthetic.personas) == 4 * 4 + 4 * 64 * 2
    for s in slices:
        validate(s)
        spec = s["spec"]
        assert ("devices" in spec) != ("sharedCounters" in spec)  # never both
        devices = spec.get("devices") or []
        limit = 64 if any(d.get("consumesCounters") for d in devices) else 128
        assert len(devices) <= limit
        assert len(spec.get("sharedCounters") or []) <= 8
        for cs in spec.get("sharedCounters") or []:
            assert len(cs["counters"]) <= 32
        for d in devices:
            assert len(d.get("consumesCounters") or []) <= 2
            assert len(d["attributes"]) + len(d.get("capacity") or {}) <= 32
            for value in d["attributes"].values():
                for v in value.values():
                    assert not isinstance(v, str) or len(v) <= 64
            assert re.fullmatch(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?", d["name"])
            assert len(d["name"]) <= 63


def test_one_pool_with_coherent_generation_and_count(synthetic: PersonaSet) -> None:
    slices = build_slices(synthetic, "worker-a", 3)
    pools = {(s["spec"]["pool"]["name"], s["spec"]["pool"]["generation"]) for s in slices}
    assert pools == {("worker-a", 3)}
    assert {s["spec"]["pool"]["resourceSliceCount"] for s in slices} == {len(slices)}
    assert len({s["metadata"]["name"] for s in slices}) == len(slices)
    # every referenced counter set is published in the same pool
    published = {cs["name"] for s in slices for cs in s["spec"].get("sharedCounters") or []}
    referenced = {
        c["counterSet"]
        for s in slices
        for d in s["spec"].get("devices") or []
        for c in d.get("consumesCounters") or []
    }
    assert referenced == published


def test_compatibility_groups_match_the_upstream_field_schema(reference: PersonaSet) -> None:
    """Validate the field itself against the 1.37 DeviceCounterConsumption definition,
    including upstream's bound of two groups."""
    import json

    import jsonschema

    defs = json.loads(SCHEMA.read_text())["$defs"]
    name = "io.k8s.api.resource.v1.DeviceCounterConsumption"
    needed: dict[str, Any] = {}
    pending = [name]
    while pending:  # only the definitions this one references, transitively
        key = pending.pop()
        if key in needed:
            continue
        needed[key] = defs[key]
        pending += re.findall(r'"#/\$defs/([^"]+)"', json.dumps(defs[key]))
    validator = jsonschema.Draft202012Validator({"$ref": f"#/$defs/{name}", "$defs": needed})
    described = defs[name]["properties"]
    assert "compatibilityGroups" in described
    assert "maximum number of groups is 2" in described["compatibilityGroups"]["description"]
    # the published OpenAPI schema does not carry that bound (API validation does), so the
    # bound is checked here on every consumption we generate
    three = {
        "counterSet": "s",
        "counters": {"m": {"value": "1"}},
        "compatibilityGroups": list("abc"),
    }
    assert validator.is_valid(three)
    slices = build_slices(reference, "worker-a", 1)
    seen = 0
    for s in slices:
        for d in s["spec"].get("devices") or []:
            for c in d.get("consumesCounters") or []:
                validator.validate(c)
                assert 1 <= len(c["compatibilityGroups"]) <= 2
                assert len(set(c["compatibilityGroups"])) == len(c["compatibilityGroups"])
                seen += 1
    assert seen > 0


def test_publisher_bumps_generation_only_on_change(reference: PersonaSet) -> None:
    pub = SlicePublisher("worker-a")
    changed, first = pub.publish(reference)
    assert changed and first[0]["spec"]["pool"]["generation"] == 1
    changed, again = pub.publish(reference)
    assert not changed and again == first
    fewer = PersonaSet(reference.personas[1:], reference.counter_sets, ())
    changed, third = pub.publish(fewer)
    assert changed and {s["spec"]["pool"]["generation"] for s in third} == {2}


def test_device_names_are_deterministic(tmp_path: Path) -> None:
    a = inventory(build_reference_node(tmp_path / "a"))
    b = inventory(build_reference_node(tmp_path / "b"))
    names_a = [p.name for p in build_personas(a, standard_policies(), {}).personas]
    names_b = [p.name for p in build_personas(b, standard_policies(), {}).personas]
    assert names_a == names_b


def _persona(consumptions: int) -> Persona:
    return Persona(
        name="inv-000000000000-kernel", inventory_id="inv-000000000000", persona="kernel",
        plugin="host-cni", mode="kernel", link_type="ethernet", pci_address="0000:01:00.0",
        pf_pci_address="", rdma_capable=False, allocation_ready=True, policy="p",
        policy_digest="0" * 64, allow_multiple_allocations=False,
        children=Children(4, 1, (1,)) if False else None,
        consumptions=tuple(Consumption(f"s{i}", ("g",)) for i in range(consumptions)),
        grants=(), effect_permissions=(),
    )  # fmt: skip


def test_three_consumptions_cannot_be_published() -> None:
    ps = PersonaSet((_persona(3),), {"s0": 1, "s1": 1, "s2": 1}, ())
    with pytest.raises(SliceLimitError):
        build_slices(ps, "n", 1)


def test_readback_detects_stripped_compatibility_groups(reference: PersonaSet) -> None:
    written = build_slices(reference, "worker-a", 1)
    stored = copy.deepcopy(written)
    for s in stored:
        for d in s["spec"].get("devices") or []:
            for c in d.get("consumesCounters") or []:
                c.pop("compatibilityGroups", None)
    findings = stripped_prerequisites(written, stored)
    assert findings and {f.code for f in findings} == {FindingCode.E_PREREQUISITE_STRIPPED}
    assert stripped_prerequisites(written, copy.deepcopy(written)) == []


def test_readback_detects_stripped_consumable_capacity(reference: PersonaSet) -> None:
    written = build_slices(reference, "worker-a", 1)
    stored = copy.deepcopy(written)
    for s in stored:
        for d in s["spec"].get("devices") or []:
            d.pop("allowMultipleAllocations", None)
            d.pop("capacity", None)
    messages = {f.message for f in stripped_prerequisites(written, stored)}
    assert {"allowMultipleAllocations was dropped", "capacity was dropped"} <= messages


def test_node_check_refuses_cleanup_pending_and_unknown(reference: PersonaSet) -> None:
    name = reference.personas[0].name
    assert node_allocation_check(reference, [name], []) == []
    (pending,) = node_allocation_check(reference, [name], [name])
    assert pending.code is FindingCode.E_CLEANUP_PENDING
    (unknown,) = node_allocation_check(reference, ["inv-ffffffffffff-kernel"], [])
    assert unknown.code is FindingCode.E_UNKNOWN_DEVICE


def test_node_publication_plans_generations_and_obsolete_slices(
    tmp_path: Path, synthetic: PersonaSet
) -> None:
    from dmn.agent.slices import NodePublication

    inv = inventory(build_reference_node(tmp_path))
    pub = NodePublication("worker-a")
    first = pub.plan(inv, standard_policies(), {})
    again = pub.plan(inv, standard_policies(), {})
    assert first.changed and not again.changed
    assert {s["spec"]["pool"]["generation"] for s in again.slices} == {1}
    fewer = pub.plan(inv, standard_policies()[:1], {})
    assert fewer.changed and {s["spec"]["pool"]["generation"] for s in fewer.slices} == {2}
    old_names = [s["metadata"]["name"] for s in first.slices]
    assert fewer.obsolete(old_names) == sorted(
        set(old_names) - {s["metadata"]["name"] for s in fewer.slices}
    )
    assert fewer.obsolete(old_names)  # the pool shrank


def test_publication_state_round_trips_through_json(tmp_path: Path) -> None:
    """What the agent persists: generation, digest, degradation and every declaration."""
    import json

    from dmn.agent.slices import NodePublication

    inv = inventory(build_reference_node(tmp_path))
    pub = NodePublication("worker-a")
    plan = pub.plan(inv, standard_policies(), {})
    pub.degraded = True
    restored = NodePublication.from_json(json.loads(json.dumps(pub.to_json())))
    assert restored.degraded and restored.publisher.generation == 1
    assert restored.publisher.digest == pub.publisher.digest
    assert restored.last is not None and restored.last.personas == plan.personas.personas
    assert restored.last.counter_sets == plan.personas.counter_sets
    assert NodePublication.from_json(NodePublication("n").to_json()).last is None


def test_allocated_pins_come_from_claim_status_of_this_pool_only() -> None:
    from dmn.agent.slices import allocated_devices

    def result(driver: str, pool: str, device: str) -> dict[str, str]:
        return {"request": "r", "driver": driver, "pool": pool, "device": device}

    claims = [
        {"status": {"allocation": {"devices": {"results": [result("d", "n1", "a")]}}}},
        {"status": {"allocation": {"devices": {"results": [result("d", "n2", "b")]}}}},
        {"status": {"allocation": {"devices": {"results": [result("gpu", "n1", "c")]}}}},
        {"status": {}},
        {"metadata": {"name": "pending"}},
    ]
    assert allocated_devices(claims, "d", "n1") == {"a"}


def _many(
    n: int, *, consuming: bool, sets: int = 1, extra: int = 0, value: str = "x"
) -> PersonaSet:
    """n personas; consuming ones spread over ``sets`` counter sets."""
    personas = tuple(
        Persona(
            name=f"inv-{i:012x}-kernel", inventory_id=f"inv-{i:012x}", persona="kernel",
            plugin="host-cni", mode="kernel", link_type="ethernet", pci_address="0000:01:00.0",
            pf_pci_address="", rdma_capable=False, allocation_ready=True, policy="p",
            policy_digest="0" * 64, allow_multiple_allocations=False, children=None,
            consumptions=(Consumption(f"s{i % sets}", ("g",)),) if consuming else (),
            grants=(), effect_permissions=(),
            extra_attributes={f"x{k}": value for k in range(extra)},
        )
        for i in range(n)
    )  # fmt: skip
    totals: dict[str, int] = {}
    for p in personas:
        for c in p.consumptions:
            totals[c.counter_set] = totals.get(c.counter_set, 0) + 1
    return PersonaSet(personas, totals, ())


def _sizes(slices: list[dict[str, Any]], key: str) -> list[int]:
    return [len(s["spec"][key]) for s in slices if key in s["spec"]]


@pytest.mark.parametrize(
    ("n", "consuming", "expected"),
    [(128, False, [128]), (129, False, [128, 1]), (64, True, [64]), (65, True, [64, 1])],
)
def test_device_limits_are_hit_exactly(n: int, consuming: bool, expected: list[int]) -> None:
    slices = build_slices(_many(n, consuming=consuming), "n", 1)
    assert _sizes(slices, "devices") == expected
    for s in slices:
        validate(s)


@pytest.mark.parametrize(("sets", "expected"), [(8, [8]), (9, [8, 1])])
def test_counter_set_limit_is_hit_exactly(sets: int, expected: list[int]) -> None:
    slices = build_slices(_many(sets, consuming=True, sets=sets), "n", 1)
    assert _sizes(slices, "sharedCounters") == expected
    for s in slices:
        validate(s)


def test_attribute_count_and_value_length_limits() -> None:
    # 13 standard/reserved attributes at most; 32 - 13 = 19 extras fit exactly
    base = len(_many(1, consuming=False).personas[0].to_device()["attributes"])
    fits = build_slices(_many(1, consuming=False, extra=32 - base), "n", 1)
    (device,) = fits[0]["spec"]["devices"]
    assert len(device["attributes"]) == 32
    with pytest.raises(SliceLimitError, match="33 attributes and capacities"):
        build_slices(_many(1, consuming=False, extra=33 - base), "n", 1)
    build_slices(_many(1, consuming=False, extra=1, value="v" * 64), "n", 1)
    with pytest.raises(SliceLimitError, match="65 characters"):
        build_slices(_many(1, consuming=False, extra=1, value="v" * 65), "n", 1)


def test_limit_violations_names_each_broken_limit() -> None:
    from dmn.agent.slices import limit_violations

    def dev(name: str, **more: Any) -> dict[str, Any]:
        return {"name": name, "attributes": {}, **more}

    consumption = {"counterSet": "s", "counters": {"m": {"value": "1"}}}
    cases: list[tuple[dict[str, Any], str]] = [
        ({"devices": [dev(f"d{i}") for i in range(129)]}, "129 devices (limit 128)"),
        ({"devices": [dev(f"d{i}", consumesCounters=[consumption]) for i in range(65)]},
         "65 devices (limit 64)"),
        ({"sharedCounters": [{"name": f"s{i}", "counters": {"m": {"value": "1"}}}
                             for i in range(9)]}, "9 counter sets"),
        ({"sharedCounters": [{"name": "s", "counters": {f"c{i}": {"value": "1"}
                                                       for i in range(33)}}]}, "33 counters"),
        ({"devices": [dev("d", consumesCounters=[consumption] * 3)]}, "3 counter consumptions"),
        ({"devices": [dev("d", consumesCounters=[{**consumption,
                                                  "counters": {f"c{i}": {"value": "1"}
                                                               for i in range(33)}}])]},
         "33 counters consumed"),
        ({"devices": [dev("d", consumesCounters=[{**consumption,
                                                  "compatibilityGroups": ["a", "b", "c"]}])]},
         "compatibilityGroups"),
        ({"devices": [dev("d", attributes={f"a{i}": {"bool": True} for i in range(33)})]},
         "33 attributes and capacities"),
        ({"devices": [dev("d", attributes={"a": {"string": "v" * 65}})]}, "65 characters"),
        ({"devices": [dev("d", attributes={"x.io/not-an-id": {"bool": True}})]},
         "attribute name"),
        ({"devices": [dev("Not_A_Label")]}, "not a DNS label"),
        ({"devices": [dev("d")], "sharedCounters": [{"name": "s", "counters": {}}]},
         "devices and sharedCounters"),
    ]  # fmt: skip
    for spec, expected in cases:
        problems = limit_violations({"metadata": {"name": "x"}, "spec": spec})
        assert any(expected in p for p in problems), (expected, problems)
    ok = {"devices": [dev(f"d{i}") for i in range(128)]}
    assert limit_violations({"metadata": {"name": "x"}, "spec": ok}) == []
