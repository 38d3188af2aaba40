"""``dmn compile`` end to end through the dispatcher."""

from __future__ import annotations

import yaml

from dmn.cli import main
from tests.compile.support import EXAMPLES, NEGATIVE, PLUGIN_DIR


def test_compile_prints_revision_and_classes(capsys) -> None:  # type: ignore[no-untyped-def]
    rc = main(["compile", str(EXAMPLES / "dual-vf-bond-vlan.yaml"), "--plugins", str(PLUGIN_DIR)])
    out = capsys.readouterr()
    assert rc == 0, out.err
    docs = list(yaml.safe_load_all(out.out))
    assert [d["kind"] for d in docs] == ["NetworkTopologyRevision", "DeviceClass", "DeviceClass"]


def test_compile_reports_like_lint(capsys) -> None:  # type: ignore[no-untyped-def]
    path = NEGATIVE / "cycle.yaml"
    rc = main(["compile", str(path), "--plugins", str(PLUGIN_DIR)])
    err = capsys.readouterr().err
    assert rc == 1
    assert err.startswith(f"{path}:") and "error[E_CYCLE]" in err


def test_missing_file_is_usage_error(capsys, tmp_path) -> None:  # type: ignore[no-untyped-def]
    assert main(["compile", str(tmp_path / "nope.yaml"), "--plugins", str(PLUGIN_DIR)]) == 2
    assert "E_IO" in capsys.readouterr().err
