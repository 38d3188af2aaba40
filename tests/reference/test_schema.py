"""``dmn schema``: every builtin and example document validates against its kind's JSON
Schema, and every negative example whose error is one of shape (``E_SCHEMA``,
``E_UNKNOWN_FIELD``) fails it."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import jsonschema
import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st

from dmn.api.editor_schema import KINDS, REFERENCE_PATTERN, editor_schema
from dmn.cli.schema import run
from dmn.interpreter.expressions import parse_reference

ROOT = Path(__file__).resolve().parents[2]
POSITIVE = sorted(
    [
        *ROOT.glob("programs/*/*/*.yaml"),
        *ROOT.glob("charts/dra-multi-network/plugins/*.yaml"),
        *ROOT.glob("examples/topologies/*.yaml"),
        *ROOT.glob("examples/plugins/**/*.yaml"),
        ROOT / "examples/workloads/10-plugin.yaml",
        ROOT / "examples/workloads/30-topology.yaml",
    ]
)
SHAPE_CODES = {"E_SCHEMA", "E_UNKNOWN_FIELD"}


def _expected(path: Path) -> str:
    match = re.match(r"#\s*expect:\s*(E_[A-Z_]+)", path.read_text())
    assert match, path
    return match.group(1)


NEGATIVE = sorted(
    p for p in (ROOT / "examples" / "negative").rglob("*.yaml") if _expected(p) in SHAPE_CODES
)


def _errors(doc: dict[str, Any]) -> list[str]:
    validator = jsonschema.Draft202012Validator(editor_schema(doc["kind"]))
    return [e.message for e in validator.iter_errors(doc)]


@pytest.mark.parametrize("kind", sorted(KINDS))
def test_schemas_are_valid_draft_2020_12(kind: str, capsys) -> None:  # type: ignore[no-untyped-def]
    assert run([kind.lower()]) == 0
    schema = json.loads(capsys.readouterr().out)
    jsonschema.Draft202012Validator.check_schema(schema)
    assert schema == editor_schema(kind)
    assert {"apiVersion", "kind"} <= set(schema["required"])


def test_unknown_kind_is_a_usage_error(capsys) -> None:  # type: ignore[no-untyped-def]
    assert run(["DeviceClass"]) == 2
    assert "error[E_USAGE]" in capsys.readouterr().err


@pytest.mark.parametrize("path", POSITIVE, ids=[str(p.relative_to(ROOT)) for p in POSITIVE])
def test_every_builtin_and_example_document_validates(path: Path) -> None:
    docs = [d for d in yaml.safe_load_all(path.read_text()) if d is not None]
    assert docs
    for doc in docs:
        assert doc["kind"] in KINDS
        assert _errors(doc) == []


@pytest.mark.parametrize("path", NEGATIVE, ids=[str(p.relative_to(ROOT)) for p in NEGATIVE])
def test_negative_shape_errors_fail_the_schema(path: Path) -> None:
    (doc,) = [d for d in yaml.safe_load_all(path.read_text()) if d is not None]
    assert _errors(doc), f"{path.name} ({_expected(path)}) passes the editor schema"


def test_there_are_shape_negatives_of_every_kind() -> None:
    kinds = {yaml.safe_load(p.read_text())["kind"] for p in NEGATIVE}
    assert kinds == {"NetworkPlugin", "NetworkTopology"}


def test_builtin_plugin_config_is_checked_per_plugin_ref() -> None:
    doc = yaml.safe_load((ROOT / "examples/topologies/dual-vf-bond-vlan.yaml").read_text())
    doc["spec"]["steps"][3]["config"]["vlanId"] = "100"
    assert any("'100' is not of type 'integer'" in e for e in _errors(doc))
    doc["spec"]["steps"][3]["config"]["vlanId"] = 100
    doc["spec"]["steps"][2]["config"]["ifName"] = "x" * 16
    assert _errors(doc)
    doc["spec"]["steps"][2]["config"]["ifName"] = "bond0"
    doc["spec"]["steps"][2]["pluginRef"]["name"] = "someone-elses-plugin"
    assert _errors(doc) == []  # unknown plugins' config is the compiler's to check


def _leaves(error: jsonschema.ValidationError) -> list[str]:
    if not error.context:
        return [error.message]
    return [m for sub in error.context for m in _leaves(sub)]


def _leaf_errors(doc: dict[str, Any]) -> list[str]:
    """Every failing leaf (through oneOf/anyOf, which editors descend into too)."""
    validator = jsonschema.Draft202012Validator(editor_schema(doc["kind"]))
    return [m for e in validator.iter_errors(doc) for m in _leaves(e)]


def _worked_example() -> dict[str, Any]:
    return yaml.safe_load((ROOT / "examples/workloads/10-plugin.yaml").read_text())  # type: ignore[no-any-return]


def _connect_effect(doc: dict[str, Any]) -> dict[str, Any]:
    return doc["spec"]["hooks"]["connect"]["effects"][0]  # type: ignore[no-any-return]


def test_the_editor_flags_an_unknown_opcode() -> None:
    doc = _worked_example()
    _connect_effect(doc)["kind"] = "linux/create-macvlan/v9"
    assert any("'linux/create-macvlan/v9' is not one of" in e for e in _leaf_errors(doc))
    doc = _worked_example()
    doc["spec"]["allowedEffects"].append("linux/create-macvlan/v9")
    assert any("'linux/create-macvlan/v9' is not one of" in e for e in _leaf_errors(doc))


def test_the_editor_flags_a_parameter_or_port_the_opcode_lacks() -> None:
    doc = _worked_example()
    bindings = _connect_effect(doc)["parameterBindings"]
    bindings["ifname"] = bindings.pop("ifName")
    assert any("'ifname' is not one of" in e for e in _leaf_errors(doc))
    doc = _worked_example()
    _connect_effect(doc)["inputs"] = {"link": {"from": "call.prepared.parent"}}
    assert any("'link' is not one of" in e for e in _leaf_errors(doc))


def test_the_editor_flags_a_from_that_is_no_reference() -> None:
    doc = _worked_example()
    _connect_effect(doc)["parameterBindings"]["mtu"] = {"from": "config.mtu"}
    assert any("'config.mtu' does not match" in e for e in _leaf_errors(doc))


def test_the_editor_flags_an_allocation_plugin_without_mode() -> None:
    doc = _worked_example()
    del doc["spec"]["configSchema"]["properties"]["mode"]
    assert any("'mode' is a required property" in e for e in _leaf_errors(doc))
    doc["spec"]["stepKinds"] = ["Operation"]
    assert not any("'mode'" in e for e in _leaf_errors(doc))


_FRAGMENTS = [
    "call", "effects", "config", "inputs", "prepared", "allocation", "sandbox", "mtu",
    "x", "a_b", "if-name", "and", "null", "in", "index", ".", ".", ".", " ", "[", "]", "0",
    "12", "12345", "-", "1x",
]  # fmt: skip


@settings(max_examples=1500, deadline=None)
@given(st.lists(st.sampled_from(_FRAGMENTS), min_size=1, max_size=8))
def test_the_reference_pattern_accepts_exactly_what_the_parser_does(parts: list[str]) -> None:
    text = "".join(parts)
    parsed, _ = parse_reference(text)
    assert (re.search(REFERENCE_PATTERN, text) is not None) == (parsed is not None), text
