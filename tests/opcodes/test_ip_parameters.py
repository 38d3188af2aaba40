"""The ``ip/*`` parameter models: typed CIDRs, prefixes and routes, refused with a message
that names the value (``E_PARAM_TYPE`` at the parameter from the checker), never a
traceback."""

from __future__ import annotations

import ipaddress
import json
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic import ValidationError

from dmn.interpreter import lint
from dmn.interpreter.diagnostics import Code
from dmn.opcodes.ip.specs import (
    MAX_ADDRESSES,
    MAX_ROUTES,
    IpAddressesParameters,
    IpNeighboursParameters,
    IpRoutesParameters,
    IpRulesParameters,
)

PLUGIN = Path(__file__).resolve().parents[1] / "kernel/plugins/macvlan-l3/v1"


def _problem(model: type[Any], payload: dict[str, Any]) -> str | None:
    """The model's refusal of ``payload`` as JSON (the checker's and binder's path)."""
    try:
        model.model_validate_json(json.dumps(payload), strict=True)
    except ValidationError as exc:
        return "; ".join(e["msg"] for e in exc.errors(include_url=False))
    return None


@pytest.mark.parametrize(
    ("addresses", "nodad", "why"),
    [
        (["10.0.0.0/24"], False, "network address"),
        (["10.0.0.255/24"], False, "broadcast address"),
        (["fd00::/64"], False, "network address"),
        (["10.0.0.2"], False, "prefix length"),
        (["10.0.0.2/33"], False, "not an IPv4 or IPv6 address"),
        (["10.0.0.2/ 24"], False, "prefix length"),
        (["fe80::2/64"], False, "link-local"),
        (["127.0.0.2/8"], False, "loopback"),
        (["224.0.0.5/24"], False, "multicast"),
        (["0.0.0.0/8"], False, "unspecified"),
        (["::ffff:10.0.0.2/120"], False, "IPv4-mapped"),
        (["10.0.0.2/24", "10.0.0.2/16"], False, "listed twice"),
        (["10.0.0.2/24"], True, "nodad applies to IPv6"),
        (["a" * 65], False, "at most 64"),
    ],
)
def test_bad_addresses_are_refused_with_the_reason(
    addresses: list[str], nodad: bool, why: str
) -> None:
    problem = _problem(IpAddressesParameters, {"addresses": addresses, "nodad": nodad})
    assert problem is not None and why in problem, problem


@pytest.mark.parametrize(
    "addresses",
    [["10.0.0.1/31"], ["10.0.0.0/31"], ["10.0.0.5/32"], ["fd00::/127"], ["fd00::1/128"]],
)
def test_point_to_point_prefixes_have_no_network_address_to_avoid(addresses: list[str]) -> None:
    assert _problem(IpAddressesParameters, {"addresses": addresses}) is None


@pytest.mark.parametrize(
    ("route", "why"),
    [
        ({"destination": "10.2.0.1/16"}, "host bits"),
        ({"destination": "10.2.0.0"}, "write a prefix"),
        ({"destination": "default"}, "needs a gateway"),
        ({"destination": "10.2.0.0/16", "gateway": "fd00::1"}, "one family"),
        ({"destination": "10.2.0.0/16", "source": "fd00::1"}, "one family"),
        ({"destination": "fd02::/64", "scope": "link"}, "IPv4 routes only"),
        ({"destination": "10.2.0.0/16", "gateway": "10.0.0.1", "scope": "link"}, "link scope"),
        ({"destination": "10.2.0.0/16", "table": 255}, "kernel's own"),
        ({"destination": "10.2.0.0/16", "table": 253}, "kernel's own"),
        ({"destination": "10.2.0.0/16", "table": 0}, "greater than or equal to 1"),
        ({"destination": "10.2.0.0/16", "table": 65536}, "less than or equal to 65535"),
        ({"destination": "10.2.0.0/16", "metric": -1}, "greater than or equal to 0"),
        ({"destination": "10.2.0.0/16", "metric": 2**32}, "less than or equal"),
        ({"destination": "10.2.0.0/16", "gateway": "10.0.0.1/24"}, "takes no prefix"),
        ({"destination": "10.2.0.0/16", "gateway": "224.0.0.1"}, "multicast"),
        ({"destination": "224.0.0.0/4"}, "multicast"),
        ({"destination": "10.2.0.0/16", "scope": "host"}, "Input should be"),
        ({"destination": "10.2.0.0/16", "dev": "eth0"}, "Extra inputs"),
        ({"destination": "10.2.0.0/16", "metric": "10"}, "valid integer"),
    ],
)
def test_bad_routes_are_refused_with_the_reason(route: dict[str, Any], why: str) -> None:
    problem = _problem(IpRoutesParameters, {"routes": [route]})
    assert problem is not None and why in problem, problem


def test_two_routes_with_one_kernel_key_are_refused() -> None:
    same = [
        {"destination": "fd02::/64", "gateway": "fd00::1"},
        {"destination": "fd02::/64", "gateway": "fd00::2", "metric": 1024},
    ]
    problem = _problem(IpRoutesParameters, {"routes": same})
    assert problem is not None and "metric 1024" in problem
    apart = [same[0], {**same[1], "metric": 1025}]
    assert _problem(IpRoutesParameters, {"routes": apart}) is None


def test_route_defaults_are_written_out() -> None:
    routes = IpRoutesParameters.model_validate_json(
        json.dumps(
            {
                "routes": [
                    {"destination": "default", "gateway": "fd00::1"},
                    {"destination": "10.2.0.0/16"},
                    {"destination": "10.3.0.0/16", "gateway": "10.0.0.1", "table": 100},
                ]
            }
        ),
        strict=True,
    ).routes
    assert [
        (r.version, r.resolved_metric(), r.resolved_table(), r.resolved_scope()) for r in routes
    ] == [
        (6, 1024, 254, 0),
        (4, 0, 254, 253),
        (4, 0, 100, 0),
    ]
    assert str(routes[0].network()) == "::/0"


_v4 = st.integers(min_value=0, max_value=2**32 - 1).map(ipaddress.IPv4Address)
_v6 = st.integers(min_value=0, max_value=2**128 - 1).map(ipaddress.IPv6Address)


@pytest.mark.property
@settings(max_examples=300, deadline=None)
@given(address=_v4 | _v6, prefix=st.integers(min_value=0, max_value=128))
def test_any_address_and_prefix_is_accepted_only_as_a_usable_host(
    address: ipaddress.IPv4Address | ipaddress.IPv6Address, prefix: int
) -> None:
    text = f"{address}/{prefix}"
    problem = _problem(IpAddressesParameters, {"addresses": [text]})
    try:
        iface = ipaddress.ip_interface(text)
    except ValueError:
        assert problem is not None  # a prefix longer than the family's
        return
    net = iface.network
    special = (
        iface.ip.is_unspecified
        or iface.ip.is_loopback
        or iface.ip.is_multicast
        or (iface.version == 6 and (iface.ip.is_link_local or iface.ip.ipv4_mapped is not None))
        or str(iface.ip) == "255.255.255.255"
    )
    edge = net.num_addresses > 2 and (
        iface.ip == net.network_address
        or (iface.version == 4 and iface.ip == net.broadcast_address)
    )
    assert (problem is None) == (not special and not edge), (text, problem)


@pytest.mark.property
@settings(max_examples=300, deadline=None)
@given(address=_v4 | _v6, prefix=st.integers(min_value=0, max_value=128))
def test_a_destination_with_host_bits_is_refused(
    address: ipaddress.IPv4Address | ipaddress.IPv6Address, prefix: int
) -> None:
    if prefix > address.max_prefixlen:
        return
    text = f"{address}/{prefix}"
    problem = _problem(IpRoutesParameters, {"routes": [{"destination": text}]})
    net = ipaddress.ip_network(text, strict=False)
    if net.network_address != address:
        assert problem is not None and "host bits" in problem, (text, problem)
    elif not (address.is_multicast or address.is_loopback):
        assert problem is None, (text, problem)


@pytest.mark.property
@settings(max_examples=100, deadline=None)
@given(count=st.integers(min_value=MAX_ADDRESSES + 1, max_value=3 * MAX_ADDRESSES))
def test_too_many_entries_are_refused(count: int) -> None:
    addresses = [f"10.1.{i // 250}.{i % 250 + 1}/16" for i in range(count)]
    problem = _problem(IpAddressesParameters, {"addresses": addresses})
    assert problem is not None and f"at most {MAX_ADDRESSES}" in problem
    routes = [{"destination": f"10.{i}.0.0/16"} for i in range(count + MAX_ROUTES)]
    problem = _problem(IpRoutesParameters, {"routes": routes})
    assert problem is not None and f"at most {MAX_ROUTES}" in problem


@pytest.mark.property
@settings(max_examples=300, deadline=None)
@given(text=st.text(max_size=70), nodad=st.booleans())
def test_any_string_is_a_model_or_a_validation_error(text: str, nodad: bool) -> None:
    for model, payload in (
        (IpAddressesParameters, {"addresses": [text], "nodad": nodad}),
        (IpRoutesParameters, {"routes": [{"destination": text}]}),
        (IpRoutesParameters, {"routes": [{"destination": "default", "gateway": text}]}),
    ):
        _problem(model, payload)  # raises nothing but ValidationError, which it answers


def _copy_plugin(tmp_path: Path, connect: str) -> Path:
    target = tmp_path / "macvlan-l3" / "v1"
    target.mkdir(parents=True)
    for f in PLUGIN.glob("*.yaml"):
        (target / f.name).write_text(f.read_text())
    (target / "connect.yaml").write_text(connect)
    return tmp_path


@pytest.mark.parametrize(
    ("old", "new", "where"),
    [
        ("addresses: ['fd84::10/64']", "addresses: ['fd84::/64']", "network address"),
        ("addresses: ['fd84::10/64']", "addresses: ['10.9.0.2/24']", "nodad applies"),
        ("destination: 10.85.0.0/16,", "destination: 10.85.0.1/16,", "host bits"),
        ("{destination: default, gateway: 'fd84::1'}", "{destination: default}", "gateway"),
    ],
)
def test_the_checker_reports_bad_literals_as_param_type(
    tmp_path: Path, old: str, new: str, where: str
) -> None:
    connect = (PLUGIN / "connect.yaml").read_text()
    assert old in connect
    root = _copy_plugin(tmp_path, connect.replace(old, new))
    result = lint.lint_paths([str(root)], include_builtins=False)
    codes = {d.code for d in result.diagnostics}
    assert codes == {Code.E_PARAM_TYPE}, [str(d) for d in result.diagnostics]
    assert any(where in d.message for d in result.diagnostics), [
        d.message for d in result.diagnostics
    ]


def test_the_test_plugin_is_clean(tmp_path: Path) -> None:
    root = _copy_plugin(tmp_path, (PLUGIN / "connect.yaml").read_text())
    result = lint.lint_paths([str(root)], include_builtins=False)
    assert result.diagnostics == []


@pytest.mark.parametrize(
    ("entry", "why"),
    [
        ({"address": "10.0.0.9", "lladdr": "03:00:00:00:00:09"}, "multicast MAC"),
        ({"address": "10.0.0.9", "lladdr": "00:00:00:00:00:00"}, "zero MAC"),
        ({"address": "10.0.0.9", "lladdr": "02:AA:00:00:00:09"}, "should match pattern"),
        ({"address": "10.0.0.9/24", "lladdr": "02:00:00:00:00:09"}, "takes no prefix"),
        ({"address": "ff02::1", "lladdr": "02:00:00:00:00:09"}, "multicast"),
        ({"address": "10.0.0.9", "lladdr": "02:00:00:00:00:09", "dev": "x"}, "Extra inputs"),
    ],
)
def test_bad_neighbours_are_refused_with_the_reason(entry: dict[str, Any], why: str) -> None:
    problem = _problem(IpNeighboursParameters, {"neighbours": [entry]})
    assert problem is not None and why in problem, problem


def test_a_neighbour_listed_twice_or_too_many_is_refused() -> None:
    entry = {"address": "fd00::9", "lladdr": "02:00:00:00:00:09"}
    twice = [entry, {**entry, "address": "fd00:0::9"}]
    problem = _problem(IpNeighboursParameters, {"neighbours": twice})
    assert problem is not None and "listed twice" in problem
    many = [{"address": f"10.0.0.{i + 1}", "lladdr": entry["lladdr"]} for i in range(17)]
    problem = _problem(IpNeighboursParameters, {"neighbours": many})
    assert problem is not None and "at most 16" in problem


@pytest.mark.parametrize(
    ("rule", "why"),
    [
        ({"priority": 100, "table": 100}, "set from and/or to"),
        ({"priority": 100, "from": "10.0.0.1/24", "table": 100}, "host bits"),
        ({"priority": 100, "from": "10.0.0.0/24", "to": "fd00::/64", "table": 100}, "one family"),
        ({"priority": 0, "from": "10.0.0.0/24", "table": 100}, "greater than or equal to 1"),
        ({"priority": 32766, "from": "10.0.0.0/24", "table": 100}, "less than or equal"),
        ({"priority": 100, "from": "10.0.0.0/24", "table": 255}, "kernel's own"),
        ({"priority": 100, "from": "default", "table": 100}, "not 'default'"),
        ({"priority": 100, "from": "10.0.0.0/24", "table": 100, "iif": "net1"}, "valid boolean"),
    ],
)
def test_bad_rules_are_refused_with_the_reason(rule: dict[str, Any], why: str) -> None:
    problem = _problem(IpRulesParameters, {"rules": [rule]})
    assert problem is not None and why in problem, problem


def test_rules_of_one_family_need_distinct_priorities_and_round_trip_by_alias() -> None:
    rule = {"priority": 100, "from": "10.0.0.0/24", "table": 100}
    problem = _problem(IpRulesParameters, {"rules": [rule, {**rule, "table": 101}]})
    assert problem is not None and "priority 100" in problem
    both = {"rules": [rule, {"priority": 100, "to": "fd00::/64", "table": 100}]}
    model = IpRulesParameters.model_validate_json(json.dumps(both), strict=True)
    again = IpRulesParameters.model_validate_json(model.model_dump_json(), strict=True)
    assert again == model and '"from"' in model.model_dump_json()
