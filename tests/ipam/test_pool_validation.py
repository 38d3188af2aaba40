"""Bad IPPools are refused with a reason code at the field (pure checks and ``dmn lint``)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from dmn.api.ipam.pool_plan import MAX_POOL_ADDRESSES, overlap_diagnostics, plan_pool
from dmn.cli import lint as lint_cli
from tests.ipam.pools import pool, subnet, v4

REPO = Path(__file__).resolve().parents[2]

CASES: list[tuple[str, dict[str, Any], str, str]] = [
    (
        "host bits",
        pool("p", subnet("10.56.0.1/24")),
        "E_IPPOOL_SUBNET",
        "spec.subnets[0].cidr",
    ),
    (
        "two v4 subnets",
        pool("p", v4(), v4("10.57.0.0/24", gateway=None, ranges=None, reserved=None)),
        "E_IPPOOL_SUBNET",
        "spec.subnets[1].cidr",
    ),
    (
        "range outside subnet",
        pool("p", v4(ranges=[("10.56.0.10", "10.56.1.5")])),
        "E_IPPOOL_RANGE_OUTSIDE_SUBNET",
        "spec.subnets[0].ranges[0].end",
    ),
    (
        "range of the other family",
        pool("p", v4(ranges=[("fd00::1", "fd00::2")])),
        "E_IPPOOL_RANGE_OUTSIDE_SUBNET",
        "spec.subnets[0].ranges[0].start",
    ),
    (
        "range start after end",
        pool("p", v4(ranges=[("10.56.0.20", "10.56.0.10")])),
        "E_IPPOOL_RANGE_OUTSIDE_SUBNET",
        "spec.subnets[0].ranges[0].end",
    ),
    (
        "gateway outside subnet",
        pool("p", v4(gateway="10.57.0.1")),
        "E_IPPOOL_GATEWAY",
        "spec.subnets[0].gateway",
    ),
    (
        "gateway in allocatable range",
        pool("p", v4(gateway="10.56.0.50")),
        "E_IPPOOL_GATEWAY",
        "spec.subnets[0].gateway",
    ),
    (
        "gateway in reserved range",
        pool("p", v4(gateway="10.56.0.210")),
        "E_IPPOOL_GATEWAY",
        "spec.subnets[0].gateway",
    ),
    (
        "route to an invalid prefix",
        pool("p", v4(routes=[{"destination": "192.168.1.1/24"}])),
        "E_IPPOOL_ROUTE",
        "spec.subnets[0].routes[0].destination",
    ),
    (
        "route of the other family",
        pool("p", v4(routes=[{"destination": "::/0"}])),
        "E_IPPOOL_ROUTE",
        "spec.subnets[0].routes[0].destination",
    ),
    (
        "route gateway off subnet",
        pool("p", v4(routes=[{"destination": "0.0.0.0/0", "gateway": "192.0.2.1"}])),
        "E_IPPOOL_ROUTE",
        "spec.subnets[0].routes[0].gateway",
    ),
    (
        "reserved overlaps exclusions",
        pool("p", v4(exclude=[("10.56.0.240", "10.56.0.245")])),
        "E_IPPOOL_RESERVED_EXCLUDED",
        "spec.subnets[0].reserved[0]",
    ),
    (
        "reserved overlaps allocatable",
        pool("p", v4(reserved=[("10.56.0.150", "10.56.0.220")])),
        "E_IPPOOL_RANGE_OVERLAP",
        "spec.subnets[0].reserved[0]",
    ),
    (
        "IPv6 /64 without ranges",
        pool("p", subnet("fd00:56::/64")),
        "E_IPPOOL_TOO_LARGE",
        "spec.subnets",
    ),
    (
        "unknown field",
        {**pool("p", v4()), "spec": {"subnets": [{**v4(), "vlan": 5}]}},
        "E_UNKNOWN_FIELD",
        "spec.subnets[0].vlan",
    ),
    (
        "three subnets",
        pool("p", v4(), v4(), v4()),
        "E_SCHEMA",
        "spec.subnets",
    ),
]


@pytest.mark.parametrize(("title", "doc", "code", "path"), CASES, ids=[c[0] for c in CASES])
def test_refused_with_code_at_field(title: str, doc: dict[str, Any], code: str, path: str) -> None:
    plan, diagnostics = plan_pool(doc)
    assert plan is None, title
    assert (diagnostics[0].code.value, diagnostics[0].path) == (code, path), diagnostics


def test_size_bound_is_exact() -> None:
    assert MAX_POOL_ADDRESSES == 0x10000
    at_bound = pool("p", subnet("fd00::/64", ranges=[("fd00::1:0", "fd00::1:ffff")]))
    assert plan_pool(at_bound)[0] is not None
    over = pool("p", subnet("fd00::/64", ranges=[("fd00::1:0", "fd00::2:0")]))
    assert plan_pool(over)[1][0].code.value == "E_IPPOOL_TOO_LARGE"


def test_overlapping_pools() -> None:
    mine = pool("a", v4("10.56.0.0/24"))
    other = pool("b", v4("10.56.0.128/25", gateway=None, ranges=None, reserved=None))
    unrelated = pool("c", v4("10.57.0.0/24", gateway=None, ranges=None, reserved=None))
    found = overlap_diagnostics(mine, [mine, other, unrelated])
    assert [(d.code.value, d.path) for d in found] == [("E_IPPOOL_OVERLAP", "spec.subnets[0].cidr")]
    assert "IPPool b" in found[0].message


def test_dmn_lint_reports_file_line_column(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    bad = pool("p", v4(gateway="10.56.0.50"))
    path = tmp_path / "pool.yaml"
    path.write_text(yaml.safe_dump(bad, sort_keys=False))
    assert lint_cli.run([str(path), "--format", "json"]) == 1
    [diagnostic] = json.loads(capsys.readouterr().out)
    line = next(i for i, text in enumerate(path.read_text().splitlines(), 1) if "gateway:" in text)
    assert diagnostic["code"] == "E_IPPOOL_GATEWAY"
    assert (diagnostic["file"], diagnostic["line"]) == (str(path), line)
    assert diagnostic["column"] > 1


def test_dmn_lint_accepts_the_examples(capsys: pytest.CaptureFixture[str]) -> None:
    assert lint_cli.run([str(REPO / "examples" / "ipam" / "pool.yaml")]) == 0


def test_editor_schema_knows_ippool() -> None:
    """``dmn schema ippool``: the examples validate, an unknown field does not."""
    import jsonschema

    from dmn.api.editor_schema import editor_schema

    validator = jsonschema.Draft202012Validator(editor_schema("IPPool"))
    path = REPO / "examples" / "ipam" / "pool.yaml"
    for doc in (d for d in yaml.safe_load_all(path.read_text()) if d):
        assert list(validator.iter_errors(doc)) == []
    bad = pool("p", {**v4(), "vlan": 5})
    assert list(validator.iter_errors(bad))
