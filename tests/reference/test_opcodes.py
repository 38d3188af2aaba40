"""``dmn opcodes``: the reference is computed from the specs and covers every opcode."""

from __future__ import annotations

import json

import pytest

from dmn.cli.generate import repo_root
from dmn.cli.opcodes import run
from dmn.opcodes.reference import describe
from dmn.opcodes.registry import default_registry
from dmn.reference_docs import generate, opcodes_page

NAMES = default_registry().names()


@pytest.mark.parametrize("name", NAMES)
def test_every_spec_says_what_it_changes_and_what_undo_does(name: str) -> None:
    spec = default_registry().get(name)
    assert spec is not None
    assert len(spec.changes) > 20, f"{name}: add `changes=` (what it changes on a node)"
    assert len(spec.undo) > 10, f"{name}: add `undo=` (what undoing it does)"


def test_json_for_one_opcode_carries_types_bounds_defaults_ports_and_hooks(capsys) -> None:  # type: ignore[no-untyped-def]
    assert run(["pci/function-reset/v1", "--format", "json"]) == 0
    entry = json.loads(capsys.readouterr().out)
    assert entry["name"] == "pci/function-reset/v1"
    assert entry["hooks"] == ["prepare"]
    assert entry["reversibility"] == "Irreversible"
    assert "Quarantine" in entry["recovery"]
    (method,) = entry["parameters"]["fields"]
    assert method == {
        "name": "method",
        "type": 'one of "auto", "flr", "pm", "bus"',
        "required": False,
        "default": "auto",
    }
    assert entry["inputs"][0]["access"] == "ExclusiveConfigure"
    assert "DeviceAccess" in entry["outputs"][0]["grants"]


def test_bounds_come_from_the_parameter_models() -> None:
    spec = default_registry().get("linux/create-vlan/v1")
    assert spec is not None
    fields = {f["name"]: f for f in describe(spec)["parameters"]["fields"]}
    assert fields["vlanId"]["bounds"] == {"minimum": 1, "maximum": 4094}
    assert fields["mtu"]["bounds"] == {"minimum": 68, "maximum": 65535}
    assert fields["ifName"]["bounds"]["maxLength"] == 15
    bridge = default_registry().get("bridge/port-vlan/v1")
    assert bridge is not None
    tagged = {f["name"]: f for f in describe(bridge)["parameters"]["fields"]}["tagged"]
    assert tagged["type"] == "list of integer"
    assert tagged["default"] == []
    assert tagged["bounds"]["items"] == {"minimum": 1, "maximum": 4094}


def test_family_and_all(capsys) -> None:  # type: ignore[no-untyped-def]
    assert run(["linux", "--format", "json"]) == 0
    names = [e["name"] for e in json.loads(capsys.readouterr().out)]
    assert names and all(n.startswith("linux/") for n in names)
    assert run(["--format", "json"]) == 0
    assert [e["name"] for e in json.loads(capsys.readouterr().out)] == NAMES
    assert run(["linux/link-move/v1"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("## `linux/link-move/v1`")
    assert "**Changes on the node:**" in out and "| `ifName` | string | yes |" in out


def test_unknown_name_is_a_reason_coded_error(capsys) -> None:  # type: ignore[no-untyped-def]
    assert run(["linux/teleport/v1"]) == 2  # a bad argument: exit 2, as dmn schema UNKNOWN
    assert "error[E_UNKNOWN_OPCODE]" in capsys.readouterr().err
    assert run(["linux/teleport/v1", "--format", "json"]) == 2
    (diag,) = json.loads(capsys.readouterr().out)  # nothing was printed on failure before
    assert diag["code"] == "E_UNKNOWN_OPCODE" and "linux/teleport/v1" in diag["message"]


def test_docs_reference_is_the_generated_page_and_drift_is_reported(tmp_path) -> None:  # type: ignore[no-untyped-def]
    page = (repo_root() / "docs" / "opcodes.md").read_text()
    assert page == opcodes_page()
    assert all(f"## `{n}`" in page for n in NAMES)
    (tmp_path / "docs").mkdir()
    (tmp_path / "docs" / "opcodes.md").write_text(page.replace("Reversible", "Irreversible"))
    assert "docs/opcodes.md" in generate(tmp_path, check=True)
    assert (tmp_path / "docs" / "opcodes.md").read_text() != page  # check writes nothing
    generate(tmp_path, check=False)
    assert (tmp_path / "docs" / "opcodes.md").read_text() == page
