"""``format:`` in a configSchema (issue 38): network values refused at their field, by the
rules the ``ip/*`` opcodes apply, and never a traceback for any input.

The agreement tests are the point of the shared rules (``dmn/vocabulary/ip_values.py``): a
config value that validates is one the opcode accepts, and the other way round, so a config
that passes ``dmn lint`` never fails when its Pod starts."""

from __future__ import annotations

import ipaddress
import json
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pydantic import TypeAdapter, ValidationError

from dmn.interpreter.config_schema import ConfigSchema, validate_config
from dmn.interpreter.diagnostics import Code
from dmn.interpreter.parameters import config_samples
from dmn.interpreter.value_formats import STRING_FORMATS, sample, string_problem
from dmn.opcodes.ip.specs import (
    HostAddress,
    InterfaceAddress,
    IpAddressesParameters,
    IpRoutesParameters,
    RouteDestination,
    UnicastMac,
)

pytestmark = pytest.mark.property

SCHEMA = ConfigSchema.model_validate(
    {
        "type": "object",
        "additionalProperties": False,
        "properties": {
            "addresses": {
                "type": "array",
                "minItems": 1,
                "maxItems": 16,
                "uniqueItems": True,
                "items": {"type": "string", "format": "ip-interface"},
            },
            "routes": {
                "type": "array",
                "minItems": 1,
                "maxItems": 32,
                "uniqueItems": True,
                "items": {
                    "type": "object",
                    "format": "ip-route",
                    "additionalProperties": False,
                    "required": ["destination"],
                    "properties": {
                        "destination": {"type": "string", "format": "ip-route-destination"},
                        "gateway": {"type": "string", "format": "ip-address"},
                        "source": {"type": "string", "format": "ip-address"},
                        "metric": {"type": "integer", "minimum": 0, "maximum": 4294967295},
                        "table": {"type": "integer", "minimum": 1, "maximum": 65535},
                        "scope": {"type": "string", "enum": ["global", "link"]},
                    },
                },
            },
            "mac": {"type": "string", "format": "mac-address"},
            "prefix": {"type": "string", "format": "ip-prefix"},
        },
    },
    by_alias=True,
)
OPCODE_TYPES: dict[str, Any] = {
    "ip-address": HostAddress,
    "ip-interface": InterfaceAddress,
    "ip-route-destination": RouteDestination,
    "mac-address": UnicastMac,
}


def examples(n: int) -> settings:
    return settings(
        max_examples=n, deadline=None, database=None, suppress_health_check=list(HealthCheck)
    )


def opcode_accepts(kind: Any, value: Any) -> bool:
    try:
        TypeAdapter(kind).validate_json(json.dumps(value), strict=True)
    except ValidationError:
        return False
    return True


v4 = st.integers(0, 2**32 - 1).map(lambda n: str(ipaddress.IPv4Address(n)))
v6 = st.integers(0, 2**128 - 1).map(lambda n: str(ipaddress.IPv6Address(n)))
special = st.sampled_from(
    [
        *("0.0.0.0", "255.255.255.255", "127.0.0.1", "224.0.0.1", "fe80::1", "::1", "::"),
        *("ff02::1", "::ffff:10.0.0.1", "10.0.0.0", "10.0.0.255", "fd00::", "fd00::1%eth0"),
        "default",
    ]
)
address_text = st.one_of(v4, v6, special)
ip_text = st.one_of(
    address_text,
    st.tuples(address_text, st.integers(0, 130)).map(lambda t: f"{t[0]}/{t[1]}"),
    st.text(alphabet="0123456789abcdef.:/% x", max_size=70),
    st.text(max_size=70),
)


@examples(3000)
@given(st.sampled_from(sorted(OPCODE_TYPES)), ip_text)
def test_a_format_accepts_exactly_what_the_opcode_accepts(fmt: str, value: str) -> None:
    assert (string_problem(fmt, value) is None) == opcode_accepts(OPCODE_TYPES[fmt], value), value


route_fields = st.fixed_dictionaries(
    {"destination": st.one_of(ip_text, st.just("default"))},
    optional={
        "gateway": address_text,
        "source": address_text,
        "metric": st.integers(0, 2**32 - 1),
        "table": st.integers(1, 65535),
        "scope": st.sampled_from(["global", "link"]),
    },
)


@examples(3000)
@given(st.lists(route_fields, min_size=1, max_size=3))
def test_routes_validate_exactly_when_the_opcode_takes_them(routes: list[dict[str, Any]]) -> None:
    _, errs = validate_config(SCHEMA, {"routes": routes})
    assert (not errs) == opcode_accepts(IpRoutesParameters, {"routes": routes}), (routes, errs)
    assert all(e.path.startswith("config.routes") for e in errs)


@examples(2000)
@given(st.lists(ip_text, min_size=1, max_size=4))
def test_addresses_validate_exactly_when_the_opcode_takes_them(addresses: list[str]) -> None:
    _, errs = validate_config(SCHEMA, {"addresses": addresses})
    payload = {"addresses": addresses}
    assert (not errs) == opcode_accepts(IpAddressesParameters, payload), (addresses, errs)


json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(max_size=20) | ip_text,
    lambda inner: st.lists(inner, max_size=5) | st.dictionaries(st.text(max_size=12), inner),
    max_leaves=30,
)


# 600: three quarters of this test's time is hypothesis drawing recursive JSON (2000 took
# 28-38 s in CI); the shapes that matter (lists and objects of IP-like text at each field)
# come early, and the other format tests below draw the valid and near-valid values.
@examples(600)
@given(
    st.dictionaries(st.sampled_from(["addresses", "routes", "mac", "prefix", "other"]), json_values)
)
def test_any_config_is_refused_at_a_field_or_accepted_never_raises(config: dict[str, Any]) -> None:
    _, errs = validate_config(SCHEMA, config)
    for d in errs:
        assert d.code in (Code.E_SCHEMA, Code.E_UNKNOWN_FIELD)
        assert d.path.startswith("config.")


@pytest.mark.parametrize(
    ("config", "path", "why"),
    [
        ({"routes": [{"destination": "10.9.0.0/16", "gateway": "fd00::1"}]}, "routes[0]", "family"),
        ({"routes": [{"destination": "10.9.0.1/16"}]}, "routes[0].destination", "host bits"),
        ({"routes": [{"destination": "default"}]}, "routes[0]", "needs a gateway"),
        ({"routes": [{"destination": "10.9.0.0/16", "table": 253}]}, "routes[0]", "kernel's own"),
        (
            {"routes": [{"destination": "10.9.0.0/16"}, {"destination": "10.9.0.0/16"}]},
            "routes[1]",
            "repeats",
        ),
        ({"addresses": ["10.0.0.2/24", "10.0.0.2/16"]}, "addresses[1]", "repeats"),
        ({"addresses": ["10.0.0.2/24"] * 100_000}, "addresses", "more than 16"),
        ({"addresses": ["10.0.0.255/24"]}, "addresses[0]", "broadcast"),
        ({"addresses": ["fd00::2%eth0/64"]}, "addresses[0]", "zone index"),
        ({"mac": "03:00:00:00:00:01"}, "mac", "multicast"),
        ({"prefix": "default"}, "prefix", "prefix"),
    ],
)
def test_bad_network_values_are_refused_at_their_field(
    config: dict[str, Any], path: str, why: str
) -> None:
    _, errs = validate_config(SCHEMA, config)
    assert errs and errs[0].code is Code.E_SCHEMA, errs
    assert errs[0].path == f"config.{path}" and why in errs[0].message, errs


def test_a_huge_list_is_refused_whole_with_one_diagnostic() -> None:
    _, errs = validate_config(SCHEMA, {"routes": [{"destination": 1}] * 1_000_000})
    assert [(d.path, d.code) for d in errs] == [("config.routes", Code.E_SCHEMA)]


@pytest.mark.parametrize("fmt", sorted(STRING_FORMATS))
def test_samples_are_valid_and_distinct(fmt: str) -> None:
    for family in (4, 6):
        values = [sample(fmt, i, family) for i in range(300)]
        assert len(set(values)) == len(values)
        assert all(string_problem(fmt, v) is None for v in values)


def test_every_sample_of_the_routes_schema_is_a_valid_config() -> None:
    prop = SCHEMA.properties["routes"]
    samples = config_samples(prop)
    assert any(len(s) == 32 for s in samples)
    for value in samples:
        if value:
            _, errs = validate_config(SCHEMA, {"routes": value})
            assert not errs, (value, errs)
            assert opcode_accepts(IpRoutesParameters, {"routes": value})


@pytest.mark.parametrize(
    ("prop", "why"),
    [
        ({"type": "string", "format": "ip-address", "pattern": "^a$"}, "takes no pattern"),
        ({"type": "string", "format": "ip-mask"}, "format"),
        ({"type": "array", "items": {"type": "object", "additionalProperties": False}}, "maxItems"),
        ({"type": "string", "format": "ip-interface", "default": "10.0.0.0/24"}, "network"),
    ],
)
def test_incoherent_format_schemas_are_refused(prop: dict[str, Any], why: str) -> None:
    schema = {"type": "object", "additionalProperties": False, "properties": {"x": prop}}
    with pytest.raises(ValidationError, match=why):
        ConfigSchema.model_validate(schema, by_alias=True)
