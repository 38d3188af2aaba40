"""The Pod networks annotation merge and release, one test group per rule of the module."""

from __future__ import annotations

import json

import pytest

from dmn.api.multus import errors
from dmn.api.multus.errors import MultusError
from dmn.api.multus.names import BindingIdentity, binding_key, shadow_name
from dmn.api.multus.selections import (
    MAX_ANNOTATIONS_BYTES,
    NETWORKS_ANNOTATION,
    REGISTRY_ANNOTATION,
    ManagedSelection,
    annotations_size,
    merge_selections,
    parse_networks,
    release_selections,
    selected_interfaces,
)
from dmn.api.multus.template import TemplateRef

NS = "ai-workloads"
NET = NETWORKS_ANNOTATION
REG = REGISTRY_ANNOTATION
RAIL_A = TemplateRef(NS, "rail-a")


def managed(
    claim: str = "claim-1", device: str = "dev-a", interface: str = "net1", source=RAIL_A
) -> ManagedSelection:  # type: ignore[no-untyped-def]
    identity = BindingIdentity("pod-1", claim, "net", "drv", "node", device)
    return ManagedSelection(
        key=binding_key(identity),
        claim_uid=claim,
        namespace=NS,
        name=shadow_name(identity, source),
        interface=interface,
        source=source,
    )


def entries(annotations: dict[str, str]) -> list[dict]:  # type: ignore[type-arg]
    return json.loads(annotations[NET])  # type: ignore[no-any-return]


def merged(annotations: dict[str, str], *selections: ManagedSelection) -> dict[str, str]:
    result = merge_selections(annotations, list(selections))
    assert result is not None
    return {**annotations, **result}


def apply(annotations: dict[str, str], change: dict[str, str | None] | None) -> dict[str, str]:
    out = dict(annotations)
    for key, value in (change or {}).items():
        if value is None:
            del out[key]
        else:
            out[key] = value
    return out


def refused(annotations: dict[str, str], *selections: ManagedSelection) -> MultusError:
    with pytest.raises(MultusError) as info:
        merge_selections(annotations, list(selections))
    return info.value


# ---- rule 1: absent, JSON, comma notation, malformed


@pytest.mark.parametrize("value", [None, "", "  ", "[]", " [ ] "])
def test_absent_or_empty_annotation_is_an_empty_list(value: str | None) -> None:
    annotations = {} if value is None else {NET: value}
    m = managed()
    out = merged(annotations, m)
    assert entries(out) == [{"name": m.name, "namespace": NS, "interface": "net1"}]


def test_comma_notation_with_namespace_and_interface_shorthand() -> None:
    parsed = parse_networks(" other/net-a@eth5 , net-b,ns2/net-c ")
    assert [(e.namespace, e.name, e.interface) for e in parsed] == [
        ("other", "net-a", "eth5"),
        (None, "net-b", None),
        ("ns2", "net-c", None),
    ]
    m = managed(interface="net4")
    out = merged({NET: "other/net-a@eth5, net-b,ns2/net-c"}, m)
    assert entries(out) == [
        {"name": "net-a", "namespace": "other", "interface": "eth5"},
        {"name": "net-b"},
        {"name": "net-c", "namespace": "ns2"},
        {"name": m.name, "namespace": NS, "interface": "net4"},
    ]


@pytest.mark.parametrize(
    ("value", "index"),
    [
        ("a,,b", 1),
        ("a/b/c", 0),
        ("a@b@c", 0),
        ("ok,Bad", 1),
        ("ns/", 0),
        ("@eth0", 0),
        ("net_a", 0),
    ],
)
def test_malformed_comma_notation_is_refused_not_replaced(value: str, index: int) -> None:
    e = refused({NET: value}, managed())
    assert e.reason == errors.SELECTION_INVALID and e.field.endswith(f"[{index}]")


@pytest.mark.parametrize(
    "value",
    [
        "{",
        '{"name":"a"}',
        "[1]",
        "[null]",
        '[{"name":"a"},]',
        '[{"name":""}]',
        '[{"namespace":"x"}]',
        '[{"name":5}]',
        '[{"name":"a","interface":7}]',
        '[{"name":"a","name":"b"}]',
        '[{"name":"a"}] x',
        '"a"',
        "[" * 100 + "]" * 100,
    ],
)
def test_malformed_json_is_refused(value: str) -> None:
    assert refused({NET: value}, managed()).reason == errors.SELECTION_INVALID


# ---- rule 2, 3: unrelated entries kept byte for byte; managed entries are exact


def test_unrelated_entries_keep_their_exact_text_fields_and_order() -> None:
    first = '{ "name" : "macvlan-a", "ips": ["10.0.0.5/24"], "mac": "02:00:00:00:00:01" }'
    second = (
        '{"interface":"eth7","name":"b","namespace":"x","x-future":{"n":1.50,"big":'
        '123456789012345678901234567890},"bandwidth":{"ingressRate":1000},"default-route":["1.1.1.1"]}'
    )
    original = {NET: f"[\n  {first},\n  {second}\n]", "other": "kept"}
    m = managed(interface="net3")
    out = merged(original, m)
    assert out[NET] == (
        f"[{first},{second},"
        + json.dumps({"name": m.name, "namespace": NS, "interface": "net3"}, separators=(",", ":"))
        + "]"
    )
    assert out["other"] == "kept"


def test_a_recorded_managed_entry_that_was_edited_is_an_ownership_conflict() -> None:
    m = managed()
    out = merged({}, m)
    for edit in (
        {"interface": "net9"},
        {"ips": ["10.0.0.9/24"]},
        {"namespace": "other"},
        {"mac": "02:00:00:00:00:09"},
    ):
        entry = {"name": m.name, "namespace": NS, "interface": "net1", **edit}
        edited = {**out, NET: json.dumps([entry])}
        with pytest.raises(MultusError) as info:
            merge_selections(edited, [m])
        assert info.value.reason == errors.OWNERSHIP
        with pytest.raises(MultusError):
            release_selections(edited, m.claim_uid)


def test_a_managed_entry_without_namespace_is_not_the_exact_tuple() -> None:
    m = managed()
    out = merged({}, m)
    short = {**out, NET: json.dumps([{"name": m.name, "interface": "net1"}])}
    assert refused(short, m).reason == errors.OWNERSHIP


# ---- rule 4: ownership needs the registry


def test_a_selection_of_a_generated_name_without_provenance_is_refused() -> None:
    m = managed()
    squatter = {NET: json.dumps([{"name": m.name, "namespace": NS, "interface": "net1"}])}
    e = refused(squatter, m)
    assert e.reason == errors.OWNERSHIP and "provenance" in e.message
    assert e.field == f"metadata.annotations[{NET}][0]"


def test_a_recorded_binding_must_be_given_exactly_as_recorded() -> None:
    m = managed()
    out = merged({}, m)
    changed = ManagedSelection(m.key, m.claim_uid, NS, m.name, "net2", m.source)
    e = refused(out, changed)
    assert e.reason == errors.OWNERSHIP and e.field == "managed[0]"


@pytest.mark.parametrize(
    "registry",
    [
        "",
        "[]",
        "{}",
        '{"version":2,"entries":[]}',
        '{"version":"1","entries":[]}',
        '{"version":1.0,"entries":[]}',
        '{"version":1,"entries":{}}',
        '{"version":1,"entries":[],"extra":1}',
        '{"version":1,"version":1,"entries":[]}',
        '{"version":1,"entries":[{"key":"x"}]}',
    ],
)
def test_a_malformed_or_unknown_registry_is_refused_for_merge_and_release(registry: str) -> None:
    annotations = {REG: registry, NET: "[]"}
    assert refused(annotations, managed()).reason == errors.OWNERSHIP
    with pytest.raises(MultusError) as info:
        release_selections(annotations, "claim-1")
    assert info.value.reason == errors.OWNERSHIP


def test_registry_entries_are_validated_field_by_field() -> None:
    good = json.loads(merged({}, managed())[REG])
    for field, bad in (
        ("key", "XYZ"),
        ("interface", "a/b"),
        ("name", "Not-A-Label"),
        ("claimUID", ""),
        ("namespace", 5),
        ("source", {"namespace": NS}),
    ):
        doc = json.loads(json.dumps(good))
        doc["entries"][0][field] = bad
        with pytest.raises(MultusError) as info:
            release_selections({REG: json.dumps(doc)}, "claim-1")
        assert info.value.reason == errors.OWNERSHIP
    doc = json.loads(json.dumps(good))
    doc["entries"].append(doc["entries"][0])
    with pytest.raises(MultusError):
        release_selections({REG: json.dumps(doc)}, "claim-1")


def test_registry_records_version_and_every_field() -> None:
    m = managed()
    doc = json.loads(merged({}, m)[REG])
    assert doc == {
        "version": 1,
        "entries": [
            {
                "key": m.key,
                "claimUID": "claim-1",
                "namespace": NS,
                "name": m.name,
                "interface": "net1",
                "source": {"namespace": NS, "name": "rail-a"},
            }
        ],
    }


# ---- rule 5: append once, deterministic order, no dedup by template


def test_two_devices_of_one_template_are_two_entries_in_interface_order() -> None:
    a = managed(device="dev-a", interface="net2")
    b = managed(device="dev-b", interface="net10")
    c = managed(device="dev-c", interface="net1")
    out_1 = merged({}, a, b, c)
    out_2 = merged({}, b, c, a)
    assert out_1 == out_2
    assert [e["interface"] for e in entries(out_1)] == ["net1", "net2", "net10"]
    assert merge_selections(out_1, [a, b, c]) is None


def test_merging_another_claim_keeps_the_first_and_appends() -> None:
    first = managed("claim-1", interface="net2")
    second = managed("claim-2", "dev-b", interface="net3", source=TemplateRef("infra", "rail-b"))
    out = merged(merged({NET: "user-net"}, first), second)
    assert [e["name"] for e in entries(out)] == ["user-net", first.name, second.name]
    assert [e["key"] for e in json.loads(out[REG])["entries"]] == [first.key, second.key]


def test_a_missing_recorded_entry_is_restored_and_nothing_else_is_rewritten() -> None:
    m = managed(interface="net2")
    out = merged({NET: '[{"name":"user"}]'}, m)
    lost = {**out, NET: '[{"name":"user"}]'}
    repaired = merge_selections(lost, [])
    assert repaired is not None
    assert repaired[NET] == out[NET] and repaired[REG] == out[REG]


# ---- rule 6: manual selection of a managed template


@pytest.mark.parametrize(
    "manual",
    [
        "rail-a",
        f"{NS}/rail-a",
        f"{NS}/rail-a@eth3",
        json.dumps([{"name": "rail-a"}]),
        json.dumps([{"name": "rail-a", "namespace": NS, "interface": "eth3"}]),
        json.dumps([{"name": "rail-a", "namespace": ""}]),
    ],
)
def test_a_manual_selection_of_the_managed_template_is_refused_naming_it(manual: str) -> None:
    e = refused({NET: "first," + manual if "[" not in manual else manual}, managed())
    assert e.reason == errors.MANUAL_SELECTION
    assert "rail-a" in e.message and "claim-1" in e.message
    assert e.field.startswith(f"metadata.annotations[{NET}][")


def test_the_same_name_in_another_namespace_is_not_a_manual_selection() -> None:
    out = merged({NET: "other/rail-a"}, managed(interface="net2"))
    assert entries(out)[0] == {"name": "rail-a", "namespace": "other"}


def test_a_manual_selection_of_a_template_recorded_for_another_claim_is_refused() -> None:
    out = merged({}, managed("claim-1"))
    out[NET] = json.dumps([*entries(out), {"name": "rail-a"}])
    e = refused(out, managed("claim-2", "dev-b", "net3", TemplateRef(NS, "rail-z")))
    assert e.reason == errors.MANUAL_SELECTION


# ---- interfaces


def test_a_managed_interface_taken_by_another_entry_is_a_conflict() -> None:
    e = refused({NET: '[{"name":"x","interface":"net1"}]'}, managed(interface="net1"))
    assert (e.reason, e.field) == (errors.INTERFACE_CONFLICT, f"metadata.annotations[{NET}][0]")
    # positional: the first entry without interface is net1 in Multus
    e = refused({NET: "x"}, managed(interface="net1"))
    assert e.reason == errors.INTERFACE_CONFLICT
    merged({NET: "x"}, managed(interface="net2"))


def test_a_managed_selection_never_takes_the_primary_interface() -> None:
    e = refused({}, managed(interface="eth0"))
    assert e.reason == errors.INTERFACE_CONFLICT and "primary" in e.message


def test_selected_interfaces_are_explicit_or_positional() -> None:
    annotations = {NET: '[{"name":"a"},{"name":"b","interface":"eth7"},{"name":"c"}]'}
    assert selected_interfaces(annotations) == {"net1", "eth7", "net3"}
    assert selected_interfaces({}) == frozenset()


# ---- rule 7: release drops exactly one claim's entries


def test_release_drops_only_that_claims_entries_and_keeps_the_rest() -> None:
    user = '{"name":"user", "ips":["10.0.0.1/24"]}'
    a1 = managed("claim-1", "dev-a", "net2")
    a2 = managed("claim-1", "dev-b", "net3")
    b = managed("claim-2", "dev-c", "net4", TemplateRef("infra", "rail-b"))
    out = merged(merged({NET: f"[{user}]"}, a1, a2), b)
    change = release_selections(out, "claim-1")
    after = apply(out, change)
    assert after[NET] == (
        f"[{user},"
        + json.dumps({"name": b.name, "namespace": NS, "interface": "net4"}, separators=(",", ":"))
        + "]"
    )
    assert [e["claimUID"] for e in json.loads(after[REG])["entries"]] == ["claim-2"]
    final = apply(after, release_selections(after, "claim-2"))
    assert final == {NET: f"[{user}]"}


def test_release_removes_annotations_it_empties_and_is_idempotent() -> None:
    m = managed()
    out = merged({}, m)
    change = release_selections(out, "claim-1")
    assert change == {NET: None, REG: None}
    assert apply(out, change) == {}
    assert release_selections({}, "claim-1") is None
    assert release_selections(out, "claim-unknown") is None


def test_release_after_the_entry_is_already_gone_changes_only_the_registry() -> None:
    m = managed(interface="net2")
    out = merged({NET: "user"}, m)
    gone = {**out, NET: '[{"name":"user"}]'}
    assert release_selections(gone, "claim-1") == {REG: None}


def test_release_keeps_a_manual_selection_of_the_template() -> None:
    out = merged({}, managed())
    out[NET] = json.dumps([*entries(out), {"name": "rail-a", "interface": "eth3"}])
    after = apply(out, release_selections(out, "claim-1"))
    assert json.loads(after[NET]) == [{"name": "rail-a", "interface": "eth3"}]


# ---- rule 8: total annotation size


def test_total_annotation_size_counts_all_keys_and_values_in_bytes() -> None:
    assert annotations_size({"ab": "é"}) == 4
    m = managed()
    alone = merged({}, m)
    used = annotations_size(alone)
    fits = MAX_ANNOTATIONS_BYTES - used - len("big")
    merged({"big": "x" * fits}, m)
    e = refused({"big": "x" * (fits + 1)}, m)
    assert (e.reason, e.field) == (errors.ANNOTATION_SIZE, "metadata.annotations")
    assert "262144" in e.message


def test_too_many_devices_fail_whole_not_partially() -> None:
    many = [managed(device=f"dev-{i}", interface=f"net{i + 1}") for i in range(1200)]
    e = refused({}, *many)
    assert e.reason == errors.ANNOTATION_SIZE


# ---- rule 9: unchanged gives None


def test_unchanged_gives_none() -> None:
    m = managed(interface="net2")
    out = merged({NET: "user"}, m)
    assert merge_selections(out, [m]) is None
    assert merge_selections(out, []) is None
    assert merge_selections({NET: "user"}, []) is None


# ---- managed input checks


@pytest.mark.parametrize(
    ("selection", "field"),
    [
        (ManagedSelection("x", "c", NS, "dmn-a", "net1", RAIL_A), "managed[0].key"),
        (ManagedSelection("0" * 32, "c", NS, "dmn-a", "a/b", RAIL_A), "managed[0].interface"),
        (ManagedSelection("0" * 32, "c", "NS", "dmn-a", "net1", RAIL_A), "managed[0].namespace"),
        (ManagedSelection("0" * 32, "", NS, "dmn-a", "net1", RAIL_A), "managed[0].claimUID"),
    ],
)
def test_invalid_managed_selections_are_refused(selection: ManagedSelection, field: str) -> None:
    e = refused({}, selection)
    assert (e.reason, e.field) == (errors.OWNERSHIP, field)


def test_managed_selections_must_be_distinct_and_in_one_namespace() -> None:
    a = managed()
    assert refused({}, a, a).reason == errors.OWNERSHIP
    b = managed(device="dev-b", interface="net1")
    assert refused({}, a, b).reason == errors.OWNERSHIP
    c = ManagedSelection(
        binding_key(BindingIdentity("p", "c", "r", "d", "p", "x")),
        "c",
        "other",
        "dmn-x",
        "net5",
        RAIL_A,
    )
    assert refused({}, a, c).reason == errors.OWNERSHIP
