"""``dmn compile`` end to end through the dispatcher."""

from __future__ import annotations

import json

import yaml

from dmn.cli import main
from tests.compile.support import EXAMPLES, NEGATIVE, as_object, fixture_plugins


def test_compile_prints_revision_and_classes(capsys) -> None:  # type: ignore[no-untyped-def]
    rc = main(["compile", str(EXAMPLES / "dual-vf-bond-vlan.yaml")])
    out = capsys.readouterr()
    assert rc == 0, out.err
    docs = list(yaml.safe_load_all(out.out))
    assert [d["kind"] for d in docs] == ["NetworkTopologyRevision", "DeviceClass", "DeviceClass"]


def test_compile_reports_like_lint(capsys) -> None:  # type: ignore[no-untyped-def]
    path = NEGATIVE / "cycle.yaml"
    rc = main(["compile", str(path)])
    out = capsys.readouterr().out
    assert rc == 1
    lines = out.splitlines()
    assert lines[0].startswith(f"{path}:16:15: error[E_CYCLE]")
    assert lines[2].strip() == "^" and lines[-1] == "1 file(s) checked, 1 error(s)"
    assert main(["compile", str(path), "--format", "json"]) == 1
    (diag,) = json.loads(capsys.readouterr().out)
    assert diag["code"] == "E_CYCLE" and diag["line"] == 16


def test_missing_file_is_usage_error(capsys, tmp_path) -> None:  # type: ignore[no-untyped-def]
    assert main(["compile", str(tmp_path / "nope.yaml")]) == 2
    assert "E_IO" in capsys.readouterr().out
    assert main(["compile"]) == 2
    assert "dmn compile: error[E_USAGE]: " in capsys.readouterr().err


def test_plugins_dir(capsys, tmp_path) -> None:  # type: ignore[no-untyped-def]
    plugins = fixture_plugins()
    for name in ("sriov-cni", "bond-cni", "vlan-cni"):
        (tmp_path / f"{name}.yaml").write_text(yaml.safe_dump(as_object(plugins[name])))
    rc = main(["compile", str(EXAMPLES / "dual-vf-bond-vlan.yaml"), "--plugins", str(tmp_path)])
    assert rc == 0, capsys.readouterr().err
    rc = main(["compile", str(EXAMPLES / "vfio.yaml"), "--plugins", str(tmp_path / "none")])
    assert rc == 2


def test_garbage_bytes_and_directories_are_diagnostics(capsys, tmp_path) -> None:  # type: ignore[no-untyped-def]
    garbage = tmp_path / "garbage.yaml"
    garbage.write_bytes(bytes(range(256)) * 4)
    assert main(["compile", str(garbage)]) == 1
    out = capsys.readouterr()
    # the first byte that is not UTF-8 (0x80, offset 128) at its line and column: line 2
    # starts after the 0x0a at offset 10
    assert out.out.startswith(f"{garbage}:2:118:") and "error[E_SYNTAX]" in out.out
    assert "Traceback" not in out.out + out.err
    assert main(["compile", str(tmp_path)]) == 2
    out = capsys.readouterr()
    assert "E_IO" in out.out and "Traceback" not in out.out + out.err


def test_every_negative_topology_through_the_cli(capsys) -> None:  # type: ignore[no-untyped-def]
    for path in sorted(NEGATIVE.glob("*.yaml")):
        expected = path.read_text().splitlines()[0].removeprefix("# expect: ").strip()
        assert main(["compile", str(path), "--format", "json"]) == 1, path
        diags = json.loads(capsys.readouterr().out)
        assert {d["code"] for d in diags} == {expected}, path
        assert all(d["file"] == str(path) and d["line"] >= 1 for d in diags), diags
