"""What a new plugin author sees for two common mistakes (issue 37.6), through the real
``dmn explain`` on the shipped worked example: an unknown opcode is reported once as
E_UNKNOWN_OPCODE (no misleading E_EFFECT_DENIED after it); an Allocation plugin without a
``mode`` config field is told exactly what to add, by ``dmn lint`` already."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

import yaml

WORKLOADS = Path(__file__).resolve().parents[2] / "examples" / "workloads"


def _explain(tmp_path: Path, plugin: dict[str, Any]) -> subprocess.CompletedProcess[str]:
    path = tmp_path / "plugin.yaml"
    path.write_text(yaml.safe_dump(plugin))
    return subprocess.run(
        [
            sys.executable,
            "-m",
            "dmn",
            "explain",
            str(WORKLOADS / "30-topology.yaml"),
            "--plugins",
            str(path),
        ],
        capture_output=True,
        text=True,
        check=False,
    )


def _plugin() -> dict[str, Any]:
    return yaml.safe_load((WORKLOADS / "10-plugin.yaml").read_text())  # type: ignore[no-any-return]


def test_an_unknown_opcode_is_reported_alone(tmp_path: Path) -> None:
    plugin = _plugin()
    plugin["spec"]["hooks"]["connect"]["effects"][0]["kind"] = "linux/create-macvlan/v9"
    out = _explain(tmp_path, plugin)
    assert out.returncode != 0
    assert "E_UNKNOWN_OPCODE" in out.stdout + out.stderr
    assert "E_EFFECT_DENIED" not in out.stdout + out.stderr


def test_a_missing_mode_says_what_to_add(tmp_path: Path) -> None:
    plugin = _plugin()
    del plugin["spec"]["configSchema"]["properties"]["mode"]
    for hook in ("prepare", "connect"):
        (effect,) = plugin["spec"]["hooks"][hook]["effects"]
        del effect["parameterBindings"]["mode"]
        effect.setdefault("parameters", {})["mode"] = "vepa"
    out = _explain(tmp_path, plugin)
    assert out.returncode != 0
    text = out.stdout + out.stderr
    assert "E_SCHEMA" in text
    assert "configSchema needs a string property `mode`" in text
    assert "mode: {type: string, enum: [bridge], default: bridge}" in text


def _lint(tmp_path: Path, plugin: dict[str, Any]) -> str:
    path = tmp_path / "plugin.yaml"
    path.write_text(yaml.safe_dump(plugin, sort_keys=False))
    out = subprocess.run(
        [sys.executable, "-m", "dmn", "lint", str(path)],
        capture_output=True,
        text=True,
        check=False,
    )
    assert out.returncode == 1, out.stdout + out.stderr
    return out.stdout + out.stderr


def test_lint_flags_an_allocation_plugin_without_mode_at_its_properties(tmp_path: Path) -> None:
    plugin = _plugin()
    del plugin["spec"]["configSchema"]["properties"]["mode"]
    for hook in ("prepare", "connect"):
        (effect,) = plugin["spec"]["hooks"][hook]["effects"]
        del effect["parameterBindings"]["mode"]
        effect.setdefault("parameters", {})["mode"] = "vepa"
    text = _lint(tmp_path, plugin)
    lines = yaml.safe_dump(plugin, sort_keys=False).splitlines()
    row = next(i for i, line in enumerate(lines, 1) if line.strip() == "properties:")
    assert f"plugin.yaml:{row}:5: error[E_SCHEMA]: an Allocation plugin's configSchema" in text
    assert "1 error(s)" in text


def test_lint_flags_a_mode_that_a_step_may_leave_out(tmp_path: Path) -> None:
    plugin = _plugin()
    del plugin["spec"]["configSchema"]["properties"]["mode"]["default"]
    text = _lint(tmp_path, plugin)
    assert "config field 'mode' of an Allocation plugin must be required or have a default" in text


def test_lint_flags_a_mode_that_is_not_a_string(tmp_path: Path) -> None:
    plugin = _plugin()
    plugin["spec"]["configSchema"]["properties"]["mode"] = {"type": "integer", "default": 1}
    text = _lint(tmp_path, plugin)
    assert "config field 'mode' of an Allocation plugin must be a string" in text
