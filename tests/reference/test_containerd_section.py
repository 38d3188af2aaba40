"""The operator guide's containerd section is the configuration the upstream lab runs.

The guide's TOML block and the lab's rendered containerd config are both parsed; the NRI
settings a user copies (validator on, its tolerate key, the timeouts, no node-wide
required plugin) must be the same values, and the tolerate key must be the chart's
default. The e2e tests (``tests/e2e/test_upstream_fail_closed.py``) prove what that
configuration does on containerd 2.3.7.
"""

from __future__ import annotations

import re
import tomllib
from pathlib import Path
from typing import Any

import yaml

from dmn.cli.generate import repo_root
from dmn.lab.runtime.required_plugins import TOLERATE_MISSING_PLUGINS
from dmn.lab.upstream.configs import Layout, containerd_config

ROOT = repo_root()
NRI = "io.containerd.nri.v1.nri"
COPIED = ("disable", "plugin_registration_timeout", "plugin_request_timeout")


def _guide_block() -> dict[str, Any]:
    text = (ROOT / "docs" / "operator-guide.md").read_text()
    section = text.split("## containerd NRI configuration", 1)[1].split("\n## ", 1)[0]
    match = re.search(r"```toml\n(.*?)```", section, re.S)
    assert match, "the containerd section has a toml block"
    return tomllib.loads(match.group(1))["plugins"][NRI]  # type: ignore[no-any-return]


def _lab_block(tmp: Path) -> dict[str, Any]:
    rendered = containerd_config(Layout(tmp), Path("/runc"), Path("/cni"))
    return tomllib.loads(rendered)["plugins"][NRI]  # type: ignore[no-any-return]


def test_guide_and_lab_configure_nri_alike(tmp_path: Path) -> None:
    guide, lab = _guide_block(), _lab_block(tmp_path)
    assert guide["default_validator"] == lab["default_validator"], (guide, lab)
    for key in COPIED:
        assert guide[key] == lab[key], key
    assert lab["default_validator"] == {
        "enable": True,
        "tolerate_missing_plugins_annotation": TOLERATE_MISSING_PLUGINS,
    }
    assert "required_plugins" not in lab["default_validator"]


def test_tolerate_key_is_the_charts_default() -> None:
    values = yaml.safe_load((ROOT / "charts" / "dra-multi-network" / "values.yaml").read_text())
    assert values["nri"]["tolerateMissingPluginsAnnotation"] == TOLERATE_MISSING_PLUGINS
