"""Template resolution: device attribute vs class configuration, Pod-relative namespaces."""

from __future__ import annotations

import pytest

from dmn.api.multus import errors
from dmn.api.multus.errors import MultusError
from dmn.api.multus.resolution import TEMPLATE_ATTRIBUTE, resolve_template
from dmn.api.multus.template import TemplateRef

POD_NS = "ai-workloads"


def resolve(attribute: object = None, class_ref: TemplateRef | None = None, given: bool = True):  # type: ignore[no-untyped-def]
    attributes = {} if attribute is None else {TEMPLATE_ATTRIBUTE: attribute}
    attributes["dra-multi-network.schseba.github.io/rail"] = {"string": "a"}
    return resolve_template(attributes, class_ref, given, POD_NS)


def refused(*args: object, **kw: object) -> MultusError:
    with pytest.raises(MultusError) as info:
        resolve(*args, **kw)  # type: ignore[arg-type]
    return info.value


def test_attribute_lives_under_the_driver_attribute_domain() -> None:
    domain, _, name = TEMPLATE_ATTRIBUTE.partition("/")
    assert domain == "dra-multi-network.schseba.github.io" and name == "multusTemplate"


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ("rail-a", TemplateRef(POD_NS, "rail-a")),
        ("infra/rail-a", TemplateRef("infra", "rail-a")),
        ({"string": "rail-a.v2"}, TemplateRef(POD_NS, "rail-a.v2")),
        ({"string": "infra/rail-a"}, TemplateRef("infra", "rail-a")),
    ],
)
def test_a_device_reference_resolves_against_the_pod_namespace(
    value: object, expected: TemplateRef
) -> None:
    assert resolve(value) == expected


def test_the_class_reference_alone() -> None:
    assert resolve(None, TemplateRef("infra", "net")) == TemplateRef("infra", "net")
    assert resolve(None, TemplateRef("", "net")) == TemplateRef(POD_NS, "net")
    # a namespace the class did not give is never used, whatever the field holds
    assert resolve(None, TemplateRef("infra", "net"), given=False) == TemplateRef(POD_NS, "net")


def test_both_agreeing_after_resolution() -> None:
    assert resolve("net", TemplateRef("", "net")) == TemplateRef(POD_NS, "net")
    assert resolve("net", TemplateRef(POD_NS, "net")) == TemplateRef(POD_NS, "net")
    assert resolve(f"{POD_NS}/net", TemplateRef("", "net"), given=False) == TemplateRef(
        POD_NS, "net"
    )


@pytest.mark.parametrize(
    ("attribute", "class_ref"),
    [
        ("net", TemplateRef("", "other")),
        ("infra/net", TemplateRef("", "net")),
        ("net", TemplateRef("infra", "net")),
    ],
)
def test_disagreement_is_a_conflict_not_an_override(attribute: str, class_ref: TemplateRef) -> None:
    e = refused(attribute, class_ref)
    assert e.reason == errors.TEMPLATE_CONFLICT and TEMPLATE_ATTRIBUTE in e.field


def test_none_is_missing() -> None:
    assert refused(None, None).reason == errors.TEMPLATE_MISSING


@pytest.mark.parametrize(
    "value",
    [
        "",
        "/net",
        "infra/",
        "a/b/c",
        "Net",
        "net_1",
        "x" * 65,
        "infra/" + "n" * 59,
        5,
        True,
        None,
        {"int": 5},
        {"string": 5},
        {"string": "net", "version": "1"},
        ["net"],
    ],
)
def test_a_malformed_attribute_is_an_error_never_a_fallback(value: object) -> None:
    with pytest.raises(MultusError) as info:
        resolve_template({TEMPLATE_ATTRIBUTE: value}, TemplateRef("", "net"), True, POD_NS)
    assert info.value.reason == errors.TEMPLATE_INVALID


def test_attribute_at_the_64_character_limit() -> None:
    value = "infra/" + "n" * 58
    assert resolve(value) == TemplateRef("infra", "n" * 58)


@pytest.mark.parametrize(
    ("class_ref", "field"),
    [(TemplateRef("Infra", "net"), "class.namespace"), (TemplateRef("", "Net"), "class.name")],
)
def test_a_malformed_class_reference_is_invalid(class_ref: TemplateRef, field: str) -> None:
    e = refused(None, class_ref)
    assert (e.reason, e.field) == (errors.TEMPLATE_INVALID, field)


def test_the_pod_namespace_must_be_a_namespace() -> None:
    with pytest.raises(MultusError) as info:
        resolve_template({}, TemplateRef("", "net"), False, "")
    assert (info.value.reason, info.value.field) == (errors.TEMPLATE_INVALID, "pod.namespace")
