"""What a new plugin author sees for two common mistakes (issue 37.6), through the real
``dmn explain`` on the shipped worked example: an unknown opcode is reported once as
E_UNKNOWN_OPCODE (no misleading E_EFFECT_DENIED after it); an Allocation plugin without a
``mode`` config field is told exactly what to add."""

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
    assert "configSchema must have a string property `mode`" in text
    assert "mode: {type: string, enum: [vepa], default: vepa}" in text
