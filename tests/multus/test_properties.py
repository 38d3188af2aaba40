"""Properties of the Multus core over generated input: total functions (a result or a
MultusError with a registered reason, never another exception), merge/release round trips,
deterministic rendering."""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from dmn.api.multus import errors
from dmn.api.multus.errors import MultusError
from dmn.api.multus.names import BindingIdentity, binding_key, shadow_name
from dmn.api.multus.network_status import NETWORK_STATUS_ANNOTATION, attached
from dmn.api.multus.resolution import TEMPLATE_ATTRIBUTE, resolve_template
from dmn.api.multus.selections import (
    NETWORKS_ANNOTATION,
    REGISTRY_ANNOTATION,
    ManagedSelection,
    merge_selections,
    parse_networks,
    release_selections,
)
from dmn.api.multus.template import (
    AllocatedDevice,
    RenderedTemplate,
    SourceTemplate,
    TemplateRef,
    render_template,
)

pytestmark = pytest.mark.property
SETTINGS = settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
NS = "ai-workloads"

# ---- strategies

big_numbers = st.one_of(
    st.integers(min_value=-(10**40), max_value=10**40).map(str),
    st.sampled_from(["1e400", "-0.0", "0.10000000000000000555", "5E-324", "1.50", "0"]),
)
scalars = st.one_of(
    st.none(), st.booleans(), st.text(max_size=8), big_numbers.map(lambda t: _Raw(t))
)


class _Raw:
    """A number written as exact text into generated JSON."""

    def __init__(self, text: str) -> None:
        self.text = text


def to_json(value: Any, ws: str = "") -> str:
    """``value`` as JSON, numbers as their exact text, ``ws`` around every structural token."""
    if isinstance(value, _Raw):
        return value.text
    if isinstance(value, dict):
        members = (f"{json.dumps(k)}{ws}:{ws}{to_json(v, ws)}" for k, v in value.items())
        return "{" + ws + f"{ws},{ws}".join(members) + ws + "}"
    if isinstance(value, list):
        return "[" + ws + f"{ws},{ws}".join(to_json(v, ws) for v in value) + ws + "]"
    return json.dumps(value)


json_values = st.recursive(
    scalars,
    lambda inner: st.one_of(
        st.lists(inner, max_size=3), st.dictionaries(st.text(max_size=6), inner, max_size=3)
    ),
    max_leaves=8,
)
plugin_types = st.sampled_from(
    ["macvlan", "ipvlan", "host-device", "sriov", "tuning", "bridge", "multus", "", "portmap"]
)
critical = st.sampled_from(
    ["cniVersion", "name", "type", "master", "device", "deviceID", "pciBusID", "ipam", "x-ext"]
)
critical_values = st.one_of(
    st.sampled_from(["1.0.0", "0.4.0", "0.1.0", "eth1", "0000:03:00.1", "", "rail"]),
    json_values,
)
ipams = st.fixed_dictionaries(
    {"type": st.sampled_from(["whereabouts", "host-local", 5])},
    optional={
        "range": st.just("192.0.2.0/24"),
        "network_name": st.one_of(st.text(max_size=5), json_values),
        "node_slice_size": st.sampled_from(["", "/28"]),
        "x": json_values,
    },
)
plugins = st.fixed_dictionaries(
    {"type": plugin_types},
    optional={
        "master": st.sampled_from(["", "eth1", "eth9"]),
        "deviceID": st.sampled_from(["", "0000:03:00.1", "0000:03:00.2"]),
        "pciBusID": st.sampled_from(["", "0000:03:00.1"]),
        "device": st.sampled_from(["", "eth1"]),
        "ipam": ipams,
        "extra": json_values,
    },
)
roots = st.one_of(
    st.fixed_dictionaries(
        {"cniVersion": st.sampled_from(["1.0.0", "0.4.0", "1.1.0", "0.2.0"])},
        optional={
            "name": st.sampled_from(["", "rail-a", "bad name"]),
            "plugins": st.lists(plugins, max_size=3),
            "type": plugin_types,
            "master": st.sampled_from(["", "eth1", "eth9"]),
            "ipam": ipams,
            "extra": json_values,
        },
    ),
    st.dictionaries(critical, critical_values, max_size=5),
)
extras = st.dictionaries(
    st.sampled_from(["mode", "mtu", "vlan", "x-ext", "capabilities"]), json_values, max_size=3
)


@st.composite
def valid_roots(draw: st.DrawFn) -> tuple[dict[str, Any], AllocatedDevice]:
    """A template most likely accepted, and a device that fits its plugin."""
    kind = draw(st.sampled_from(["macvlan", "ipvlan", "host-device", "sriov"]))
    device = (
        AllocatedDevice("pci", None, "0000:03:00.1")
        if kind == "sriov" or (kind == "host-device" and draw(st.booleans()))
        else AllocatedDevice("link", "eth1", None)
    )
    entry: dict[str, Any] = {"type": kind, **draw(extras)}
    if draw(st.booleans()):
        entry["ipam"] = {"type": "whereabouts", "range": "192.0.2.0/24", **draw(extras)}
    root: dict[str, Any] = {"cniVersion": draw(st.sampled_from(["0.3.1", "0.4.0", "1.0.0"]))}
    if draw(st.booleans()):
        root["name"] = draw(st.sampled_from(["", "rail-a", "Net.1_x"]))
    if draw(st.booleans()):
        tuning = [{"type": "tuning", **draw(extras)} for _ in range(draw(st.integers(0, 2)))]
        root["plugins"] = [entry, *tuning]
    else:
        root.update(entry)
    root.update(draw(st.dictionaries(st.sampled_from(["x-a", "x-b"]), json_values, max_size=2)))
    return root, device


devices = st.sampled_from(
    [
        AllocatedDevice("link", "eth1", None),
        AllocatedDevice("link", "ens1f0v3", "0000:03:00.1"),
        AllocatedDevice("pci", None, "0000:03:00.1"),
        AllocatedDevice("pci", None, "bad"),
        AllocatedDevice("link", None, None),
    ]
)


def _texts_of(doc: Any) -> st.SearchStrategy[str]:
    text = to_json(doc)
    return st.one_of(
        st.just(text),
        st.integers(0, max(0, len(text) - 1)).map(lambda i: text[:i]),
        st.tuples(st.integers(0, len(text)), st.text(max_size=3)).map(
            lambda t: text[: t[0]] + t[1] + text[t[0] :]
        ),
    )


configs = st.one_of(
    st.text(max_size=60),
    roots.flatmap(_texts_of),
    valid_roots().flatmap(lambda pair: _texts_of(pair[0])),
    json_values.map(to_json),
)


def _render(config: str, device: AllocatedDevice) -> RenderedTemplate | None:
    try:
        return render_template(SourceTemplate(NS, "rail-a", "uid", {}, config), device)
    except MultusError as exc:
        assert exc.reason in errors.REASONS
        assert exc.field.startswith(("spec.config", "metadata.name", "device."))
        return None


# ---- totality


@SETTINGS
@given(configs, devices)
def test_any_text_as_a_template_is_a_result_or_a_multus_error(
    config: str, device: AllocatedDevice
) -> None:
    rendered = _render(config, device)
    if rendered is not None:
        again = _render(config, device)
        assert again == rendered
        reparsed = json.loads(rendered.config)
        assert isinstance(reparsed, dict)


@SETTINGS
@given(
    st.one_of(st.tuples(roots, devices), valid_roots()),
    st.sampled_from([" ", "\n  ", "\t", "\r\n"]),
)
def test_rendering_is_deterministic_whitespace_blind_and_idempotent(
    pair: tuple[dict[str, Any], AllocatedDevice], ws: str
) -> None:
    doc, device = pair
    compact = to_json(doc)
    first = _render(compact, device)
    if first is None:
        return
    assert _render(to_json(doc, ws), device) == first
    assert _render(first.config.decode(), device) == first


annotation_texts = st.one_of(
    st.text(max_size=40),
    json_values.map(to_json),
    st.lists(json_values, max_size=4).map(to_json),
    st.lists(
        st.fixed_dictionaries(
            {"name": st.sampled_from(["rail-a", "x", "", 5])},
            optional={
                "namespace": st.sampled_from([NS, "", "o"]),
                "interface": st.text(max_size=4),
            },
        ),
        max_size=3,
    ).map(json.dumps),
)


def _managed(claim: str, device: str, interface: str, source: TemplateRef) -> ManagedSelection:
    identity = BindingIdentity("pod", claim, "req", "drv", "pool", device)
    return ManagedSelection(
        binding_key(identity), claim, NS, shadow_name(identity, source), interface, source
    )


@SETTINGS
@given(annotation_texts, annotation_texts, st.text(max_size=10))
def test_any_annotation_text_is_a_result_or_a_multus_error(
    networks: str, registry: str, status: str
) -> None:
    annotations = {NETWORKS_ANNOTATION: networks, REGISTRY_ANNOTATION: registry}
    m = _managed("claim", "dev", "net1", TemplateRef(NS, "rail-a"))
    for call in (
        lambda: merge_selections(annotations, [m]),
        lambda: merge_selections({NETWORKS_ANNOTATION: networks}, [m]),
        lambda: release_selections(annotations, "claim"),
    ):
        try:
            call()
        except MultusError as exc:
            assert exc.reason in errors.REASONS
    for text in (networks, registry, status):
        assert attached({NETWORK_STATUS_ANNOTATION: text}, TemplateRef(NS, "x"), "net1") in (
            True,
            False,
        )


@SETTINGS
@given(st.dictionaries(st.text(max_size=60), json_values, max_size=3), st.text(max_size=12))
def test_any_attribute_is_a_reference_or_a_multus_error(
    attributes: dict[str, Any], value: str
) -> None:
    for candidate in (attributes, {TEMPLATE_ATTRIBUTE: value}, {TEMPLATE_ATTRIBUTE: attributes}):
        try:
            ref = resolve_template(candidate, None, False, NS)
        except MultusError as exc:
            assert exc.reason in errors.REASONS
        else:
            assert ref.name and ref.namespace


# ---- merge then release


names = st.sampled_from(["macvlan-a", "net-b", "rail-a", "sriov-c", "x"])
unrelated = st.fixed_dictionaries(
    {"name": names},
    optional={
        "namespace": st.sampled_from(["other", NS, ""]),
        "interface": st.sampled_from(["eth5", "eth6", "net7", "net1"]),
        "ips": st.just(["10.0.0.5/24"]),
        "x-future": json_values,
    },
)
whitespace = st.sampled_from(["", " ", "\n  ", "\t"])


@st.composite
def original_annotations(draw: st.DrawFn) -> dict[str, str]:
    annotations: dict[str, str] = {}
    items = draw(st.lists(unrelated, max_size=4))
    style = draw(st.sampled_from(["absent", "json", "comma", "empty"]))
    if style == "json" or (style == "comma" and not items):
        ws = draw(whitespace)
        annotations[NETWORKS_ANNOTATION] = (
            "[" + ws + ("," + ws).join(to_json(i) for i in items) + ws + "]"
        )
    elif style == "comma":
        parts = []
        for item in items:
            ns = item.get("namespace")
            part = (f"{ns}/" if ns else "") + item["name"]
            if item.get("interface"):
                part += "@" + item["interface"]
            parts.append(draw(whitespace) + part)
        annotations[NETWORKS_ANNOTATION] = ",".join(parts)
    elif style == "empty":
        annotations[NETWORKS_ANNOTATION] = draw(st.sampled_from(["", "[]", " "]))
    others = draw(st.dictionaries(st.sampled_from(["a", "team", "k8s.io/x"]), st.text(max_size=8)))
    annotations.update(others)
    return annotations


@st.composite
def managed_sets(draw: st.DrawFn, claim: str, numbers: list[int]) -> list[ManagedSelection]:
    count = draw(st.integers(1, 3))
    chosen = draw(st.lists(st.sampled_from(numbers), min_size=count, max_size=count, unique=True))
    sources = st.sampled_from([TemplateRef(NS, "rail-a"), TemplateRef("infra", "rail-b")])
    return [_managed(claim, f"dev-{n}", f"net{n}", draw(sources)) for n in chosen]


def _apply(annotations: dict[str, str], change: dict[str, Any] | None) -> dict[str, str]:
    out = dict(annotations)
    for key, value in (change or {}).items():
        if value is None:
            out.pop(key, None)
        else:
            out[key] = value
    return out


def _semantic(annotations: dict[str, str]) -> tuple[dict[str, str], list[str]]:
    rest = {k: v for k, v in annotations.items() if k != NETWORKS_ANNOTATION}
    return rest, [e.text for e in parse_networks(annotations.get(NETWORKS_ANNOTATION))]


@SETTINGS
@given(
    original_annotations(),
    managed_sets("claim-1", [2, 3, 8]),
    managed_sets("claim-2", [4, 5, 9]),
)
def test_merge_then_release_restores_the_original(
    original: dict[str, str], first: list[ManagedSelection], second: list[ManagedSelection]
) -> None:
    try:
        once = merge_selections(original, first)
    except MultusError as exc:
        assert exc.reason in (errors.MANUAL_SELECTION, errors.INTERFACE_CONFLICT)
        return
    assert once is not None
    after_first = _apply(original, once)
    assert merge_selections(after_first, first) is None
    try:
        twice = merge_selections(after_first, second)
    except MultusError as exc:
        assert exc.reason in (errors.MANUAL_SELECTION, errors.INTERFACE_CONFLICT)
        return
    after_both = _apply(after_first, twice)

    # releasing the second claim gives back the state after the first, entry texts exactly
    back = _apply(after_both, release_selections(after_both, "claim-2"))
    assert _semantic(back) == _semantic(after_first)
    assert json.loads(back[REGISTRY_ANNOTATION]) == json.loads(after_first[REGISTRY_ANNOTATION])

    # releasing both in either order gives back the original semantically, unrelated entries
    # byte for byte
    for order in (("claim-1", "claim-2"), ("claim-2", "claim-1")):
        state = after_both
        for claim in order:
            state = _apply(state, release_selections(state, claim))
            assert release_selections(state, claim) is None
        assert REGISTRY_ANNOTATION not in state
        assert _semantic(state) == _semantic(original)
        original_json = original.get(NETWORKS_ANNOTATION, "").strip().startswith("[")
        if original_json and parse_networks(original[NETWORKS_ANNOTATION]):
            assert state[NETWORKS_ANNOTATION] == (
                "[" + ",".join(e.text for e in parse_networks(original[NETWORKS_ANNOTATION])) + "]"
            )
