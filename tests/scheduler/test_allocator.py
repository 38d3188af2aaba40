"""Lab allocator semantics in isolation: CEL, constraints, counters, groups, capacity, pools."""

from __future__ import annotations

from typing import Any

import pytest

from dmn.lab.allocator import AllocationError, Allocator
from tests.fixtures.policies import claim, request

pytestmark = pytest.mark.scheduler

DRV = "net.example.com"
NODE = "n1"


def slice_(name: str, body: dict[str, Any], generation: int = 1, count: int = 1,
           node: str = NODE, pool: str = NODE) -> dict[str, Any]:  # fmt: skip
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceSlice",
        "metadata": {"name": name},
        "spec": {
            "driver": DRV,
            "nodeName": node,
            "pool": {"name": pool, "generation": generation, "resourceSliceCount": count},
            **body,
        },
    }


def dev(name: str, *, groups: dict[str, list[str]] | None = None, shared: int | None = None,
        **attrs: Any) -> dict[str, Any]:  # fmt: skip
    d: dict[str, Any] = {"name": name, "attributes": {}}
    for k, v in attrs.items():
        key = {bool: "bool", int: "int", str: "string"}[type(v)]
        d["attributes"][f"{DRV}/{k}"] = {key: v}
    if groups is not None:
        d["consumesCounters"] = [
            {"counterSet": cs, "counters": {"members": {"value": "1"}}, "compatibilityGroups": g}
            for cs, g in groups.items()
        ]
    if shared is not None:
        d["allowMultipleAllocations"] = True
        d["capacity"] = {
            f"{DRV}/children": {
                "value": str(shared),
                "requestPolicy": {"default": "1", "validValues": ["1", "2", "4"]},
            }
        }
    return d


def klass(name: str, expression: str) -> dict[str, Any]:
    return {
        "metadata": {"name": name},
        "spec": {"selectors": [{"cel": {"expression": expression}}]},
    }


ANY = klass("any", f'device.driver == "{DRV}"')


def counters(*names: str, total: int = 10) -> dict[str, Any]:
    return {
        "sharedCounters": [
            {"name": n, "counters": {"members": {"value": str(total)}}} for n in names
        ]
    }


def alloc(slices: list[dict[str, Any]], *classes: dict[str, Any]) -> Allocator:
    return Allocator(NODE, slices=slices, classes=[ANY, *classes])


def test_missing_attribute_is_a_cel_runtime_error_where_the_search_reaches_it() -> None:
    """Upstream evaluates selectors lazily in search order (allocateOne → isSelectable):
    a runtime error fails the attempt only on a device the search actually reaches."""
    red = klass("red", f'device.attributes["{DRV}"].color == "red"')
    first_ok = alloc([slice_("s", {"devices": [dev("d0", color="red"), dev("d1")]})], red)
    (r,) = first_ok.allocate([claim("c", request("r", "red"))])  # d1 never evaluated
    assert r["devices"]["results"][0]["device"] == "d0"
    with pytest.raises(AllocationError) as err:  # d0 in use: skipped before CEL; d1 errors
        first_ok.allocate_one(claim("c2", request("r", "red")))
    assert err.value.reason == "CELRuntimeError"
    assert "class red: selector #0: device d1" in str(err.value)
    assert set(first_ok.allocations) == {"c"}

    first_bad = alloc([slice_("s", {"devices": [dev("d1"), dev("d0", color="red")]})], red)
    with pytest.raises(AllocationError) as err:  # d1 comes first: the attempt fails
        first_bad.allocate_one(claim("c", request("r", "red")))
    assert err.value.reason == "CELRuntimeError"
    assert first_bad.allocations == {}


def test_request_selector_error_after_a_class_mismatch_is_never_reached() -> None:
    """Class selectors run first; a false class result stops before the request's."""
    only_red = klass("only-red", f'"color" in device.attributes["{DRV}"]')
    a = alloc([slice_("s", {"devices": [dev("d1"), dev("d0", color="red")]})], only_red)
    picky = request("r", "only-red", selectors=[f'device.attributes["{DRV}"].color == "red"'])
    (r,) = a.allocate([claim("c", picky)])
    assert r["devices"]["results"][0]["device"] == "d0"


def test_compile_error_surfaces_only_when_a_device_is_evaluated() -> None:
    broken = klass("broken", "device.driver ==")
    a = alloc([slice_("s", {"devices": [dev("d0")]})], broken)
    a.allocate_one(claim("taken", request("r", "any")))
    with pytest.raises(AllocationError) as err:  # no free device: nothing is evaluated
        a.allocate_one(claim("c", request("r", "broken")))
    assert err.value.reason == "Unschedulable"
    a.release("taken")
    with pytest.raises(AllocationError) as err:
        a.allocate_one(claim("c", request("r", "broken")))
    assert err.value.reason == "CELCompileError"


def test_missing_domain_is_an_empty_map_like_upstream() -> None:
    a = alloc(
        [slice_("s", {"devices": [dev("d0")]})],
        klass("guarded", '!("model" in device.attributes["gpu.example.com"])'),
    )
    (result,) = a.allocate([claim("c", request("r", "guarded"))])
    assert result["devices"]["results"][0]["device"] == "d0"


def test_guarded_selectors_and_compile_errors() -> None:
    a = alloc(
        [slice_("s", {"devices": [dev("d0", color="red"), dev("d1")]})],
        klass(
            "red",
            f'"color" in device.attributes["{DRV}"] && device.attributes["{DRV}"].color == "red"',
        ),
        klass("broken", "device.driver =="),
    )
    (r,) = a.allocate([claim("c", request("r", "red"))])
    assert r["devices"]["results"][0]["device"] == "d0"
    with pytest.raises(AllocationError) as err:
        a.allocate_one(claim("c2", request("r", "broken")))
    assert err.value.reason == "CELCompileError"
    with pytest.raises(AllocationError) as err:
        a.allocate_one(claim("c3", request("r", "missing-class")))
    assert err.value.reason == "DeviceClassNotFound"


def test_request_selectors_and_capacity_in_cel() -> None:
    a = alloc([slice_("s", {"devices": [dev("big", shared=8), dev("small", shared=2)]})])
    big = request(
        "r",
        "any",
        selectors=[f'device.capacity["{DRV}"].children >= 4', "device.allowMultipleAllocations"],
    )
    (r,) = a.allocate([claim("c", big)])
    assert r["devices"]["results"][0]["device"] == "big"


def test_exclusive_devices_are_allocated_once() -> None:
    a = alloc([slice_("s", {"devices": [dev("d0"), dev("d1")]})])
    a.allocate_one(claim("a", request("r", "any", count=2)))
    with pytest.raises(AllocationError):
        a.allocate_one(claim("b", request("r", "any")))
    a.release("a")
    a.allocate_one(claim("b", request("r", "any")))


def test_match_and_distinct_attribute_constraints() -> None:
    devices = [dev("a0", root="A"), dev("a1", root="A"), dev("b0", root="B"), dev("x")]
    a = alloc([slice_("s", {"devices": devices})])
    same = claim(
        "same",
        request("p", "any"),
        request("q", "any"),
        constraints=[{"matchAttribute": f"{DRV}/root"}],
    )
    (r,) = a.allocate([same])
    picked = [x["device"] for x in r["devices"]["results"]]
    assert picked == ["a0", "a1"]
    distinct = claim(
        "distinct", request("p", "any", count=2), constraints=[{"distinctAttribute": f"{DRV}/root"}]
    )
    with pytest.raises(AllocationError):  # b0 is the only device left with a root
        a.allocate_one(distinct)


def test_counters_are_bounded() -> None:
    a = alloc([
        slice_("c", counters("set", total=2), count=2),
        slice_("d", {"devices": [dev(f"d{i}", groups={"set": []}) for i in range(3)]}, count=2),
    ])  # fmt: skip
    a.allocate_one(claim("a", request("r", "any", count=2)))
    with pytest.raises(AllocationError):
        a.allocate_one(claim("b", request("r", "any")))


def test_compatibility_groups_intersection_over_all_co_allocated() -> None:
    groups = {"ab": ["a", "b"], "bc": ["b", "c"], "ca": ["c", "a"], "none": []}
    devices = [dev(n, groups={"s": g}, label=n) for n, g in groups.items()]
    b = alloc([slice_("c", counters("s"), count=2), slice_("d", {"devices": devices}, count=2)])

    def by_name(n: str) -> dict[str, Any]:
        return request("r", "any", selectors=[f'device.attributes["{DRV}"].label == "{n}"'])

    b.allocate_one(claim("1", by_name("ab")))
    b.allocate_one(claim("2", by_name("bc")))  # {a,b} ∩ {b,c} = {b}
    with pytest.raises(AllocationError):
        b.allocate_one(claim("3", by_name("ca")))  # {b} ∩ {c,a} = ∅
    with pytest.raises(AllocationError):
        b.allocate_one(claim("4", by_name("none")))  # no groups never meets grouped devices
    b.release("1")
    b.release("2")
    b.allocate_one(claim("5", by_name("none")))
    with pytest.raises(AllocationError):
        b.allocate_one(claim("6", by_name("ab")))


def test_shared_device_capacity_share_ids_and_valid_values() -> None:
    a = alloc([slice_("s", {"devices": [dev("p", shared=4)]})])
    (r,) = a.allocate([claim("a", request("r", "any", capacity={f"{DRV}/children": "3"}))])
    result = r["devices"]["results"][0]
    assert result["consumedCapacity"] == {f"{DRV}/children": "4"}  # rounded up to validValues
    assert result["shareID"]
    with pytest.raises(AllocationError):
        a.allocate_one(claim("b", request("r", "any")))
    a.release("a")
    shares = a.allocate([claim("b", request("r", "any", count=4))])[0]["devices"]["results"]
    assert len({s["shareID"] for s in shares}) == 4
    with pytest.raises(AllocationError):  # more than the largest valid value
        alloc([slice_("s", {"devices": [dev("p", shared=16)]})]).allocate_one(
            claim("c", request("r", "any", capacity={f"{DRV}/children": "8"}))
        )


def test_shared_device_draws_counters_once() -> None:
    """Four shares of ``p`` fit a counter set of one member (drawn once for the device, not
    per share); the member is drawn, so ``q``, which needs it too, stays free and a fifth
    claim finds nothing."""
    a = alloc([
        slice_("c", counters("s", total=1), count=2),
        slice_("d", {"devices": [dev("p", shared=4, groups={"s": ["g"]}),
                                 dev("q", groups={"s": ["g"]})]}, count=2),
    ])  # fmt: skip
    shares = [a.allocate_one(claim(uid, request("r", "any"))) for uid in "abcd"]
    results = [s["devices"]["results"][0] for s in shares]
    assert [r["device"] for r in results] == ["p"] * 4
    assert len({r["shareID"] for r in results}) == 4
    with pytest.raises(AllocationError):
        a.allocate_one(claim("e", request("r", "any")))


def test_only_newest_generation_and_own_node_count() -> None:
    a = alloc([
        slice_("old", {"devices": [dev("old")]}, generation=1),
        slice_("new", {"devices": [dev("new")]}, generation=2),
        slice_("other", {"devices": [dev("elsewhere")]}, node="n2", pool="n2"),
    ])  # fmt: skip
    (r,) = a.allocate([claim("a", request("r", "any"))])
    assert r["devices"]["results"][0]["device"] == "new"
    with pytest.raises(AllocationError):
        a.allocate_one(claim("b", request("r", "any")))


def test_claims_of_one_pod_are_all_or_nothing() -> None:
    a = alloc([slice_("s", {"devices": [dev("d0")]})])
    with pytest.raises(AllocationError):
        a.allocate([claim("a", request("r", "any")), claim("b", request("r", "any"))])
    assert a.allocations == {}


def test_unsupported_features_are_explicit() -> None:
    a = alloc([slice_("s", {"devices": [dev("d0")]})])
    all_mode = {"name": "r", "exactly": {"deviceClassName": "any", "allocationMode": "All"}}
    with pytest.raises(AllocationError) as err:
        a.allocate_one(claim("a", all_mode))
    assert err.value.reason == "Unsupported"


def test_class_config_is_carried_into_the_allocation() -> None:
    config = [{"opaque": {"driver": DRV, "parameters": {"x": 1}}}]
    cls = {**ANY, "metadata": {"name": "cfg"}, "spec": {**ANY["spec"], "config": config}}
    a = alloc([slice_("s", {"devices": [dev("d0")]})], cls)
    (r,) = a.allocate([claim("a", request("r", "cfg"))])
    assert r["devices"]["config"] == [
        {
            "source": "FromClass",
            "requests": ["r"],
            "opaque": {"driver": DRV, "parameters": {"x": 1}},
        }
    ]


def first_available(name: str, *alternatives: tuple[str, str]) -> dict[str, Any]:
    return {
        "name": name,
        "firstAvailable": [{"name": sub, "deviceClassName": cls} for sub, cls in alternatives],
    }


def _with_config(name: str, expression: str, marker: int) -> dict[str, Any]:
    config = [{"opaque": {"driver": DRV, "parameters": {"x": marker}}}]
    cls = klass(name, expression)
    return {**cls, "spec": {**cls["spec"], "config": config}}


def test_first_available_takes_the_first_alternative_that_fits_with_its_class_config() -> None:
    """Like upstream: alternatives in order, the result named ``<request>/<subrequest>``,
    and only the chosen alternative's class config, for that name."""
    fast = _with_config("fast", f'device.attributes["{DRV}"].kind == "fast"', 1)
    slow = _with_config("slow", f'device.attributes["{DRV}"].kind == "slow"', 2)
    a = alloc([slice_("s", {"devices": [dev("f0", kind="fast"), dev("s0", kind="slow"),
                                        dev("s1", kind="slow")]})], fast, slow)  # fmt: skip
    net = first_available("net", ("fast", "fast"), ("slow", "slow"))
    (first,) = a.allocate([claim("a", net)])
    picked = [(x["request"], x["device"]) for x in first["devices"]["results"]]
    assert picked == [("net/fast", "f0")]
    assert first["devices"]["config"] == [
        {"source": "FromClass", "requests": ["net/fast"],
         "opaque": {"driver": DRV, "parameters": {"x": 1}}}
    ]  # fmt: skip
    (second,) = a.allocate([claim("b", net)])  # f0 is taken: the next alternative
    picked = [(x["request"], x["device"]) for x in second["devices"]["results"]]
    assert picked == [("net/slow", "s0")]
    assert [c["requests"] for c in second["devices"]["config"]] == [["net/slow"]]


def test_first_available_backtracks_when_a_later_request_needs_the_device() -> None:
    """The first alternative fits alone but leaves nothing for the next request: the search
    takes the second alternative so that every request of the claim is allocated."""
    fast = klass("fast", f'device.attributes["{DRV}"].kind == "fast"')
    a = alloc([slice_("s", {"devices": [dev("f0", kind="fast"), dev("s0", kind="slow")]})], fast)
    both = claim("a", first_available("net", ("fast", "fast"), ("any", "any")),
                 request("only-fast", "fast"))  # fmt: skip
    (r,) = a.allocate([both])
    assert [(x["request"], x["device"]) for x in r["devices"]["results"]] == [
        ("net/any", "s0"),
        ("only-fast", "f0"),
    ]


def test_a_constraint_naming_the_request_covers_its_alternatives() -> None:
    devices = [dev("a0", root="A"), dev("b0", root="B"), dev("b1", root="B")]
    a = alloc([slice_("s", {"devices": devices})])
    c = claim(
        "c",
        request("p", "any"),
        first_available("q", ("one", "any")),
        constraints=[{"matchAttribute": f"{DRV}/root"}],
    )
    (r,) = a.allocate([c])
    assert [(x["request"], x["device"]) for x in r["devices"]["results"]] == [
        ("p", "b0"),
        ("q/one", "b1"),
    ]


def test_tainted_devices_are_not_allocated_unless_tolerated() -> None:
    """NoSchedule and NoExecute taints keep a device from new claims; ``None`` is only
    information; a request's toleration (key and effect, Exists) lets it take the device."""
    sick = {"key": f"{DRV}/unhealthy", "effect": "NoSchedule"}
    devices = [
        {**dev("d0"), "taints": [sick]},
        {**dev("d1"), "taints": [{**sick, "effect": "None"}]},
    ]
    a = alloc([slice_("s", {"devices": devices})])
    (r,) = a.allocate([claim("a", request("r", "any"))])
    assert r["devices"]["results"][0]["device"] == "d1"
    with pytest.raises(AllocationError):
        a.allocate_one(claim("b", request("r", "any")))
    tolerant = request("r", "any")
    tolerant["exactly"]["tolerations"] = [
        {"key": f"{DRV}/unhealthy", "operator": "Exists", "effect": "NoSchedule"}
    ]
    (t,) = a.allocate([claim("c", tolerant)])
    assert t["devices"]["results"][0]["device"] == "d0"


def test_more_than_32_devices_in_one_claim_is_an_error() -> None:
    a = alloc([slice_("s", {"devices": [dev(f"d{i}") for i in range(40)]})])
    (r,) = a.allocate([claim("ok", request("r", "any", count=32))])
    assert len(r["devices"]["results"]) == 32
    with pytest.raises(AllocationError) as err:
        a.allocate_one(claim("big", request("p", "any", count=20), request("q", "any", count=13)))
    assert err.value.reason == "TooManyDevices"


def test_incomplete_or_invalid_pools_are_not_allocated_from() -> None:
    half = [slice_("a", {"devices": [dev("d0")]}, count=2)]  # the second slice is missing
    a = alloc(half)
    with pytest.raises(AllocationError):
        a.allocate_one(claim("c", request("r", "any")))
    a.set_slices([*half, slice_("b", {"devices": [dev("d1")]}, count=2)])
    a.allocate_one(claim("c", request("r", "any")))
    twice = [
        slice_("a", {"devices": [dev("d0")]}, count=2),
        slice_("b", {"devices": [dev("d0")]}, count=2),
    ]
    with pytest.raises(AllocationError):
        alloc(twice).allocate_one(claim("c", request("r", "any")))
