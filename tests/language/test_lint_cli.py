"""``dmn lint``: output formats, exit codes, plugin resolution, pluggable kinds."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from dmn.cli.lint import run
from dmn.interpreter import lint
from dmn.interpreter.diagnostics import Code, Diagnostic

from .support import OPERATION, registry, variant

ROOT = Path(__file__).resolve().parents[2]
KEYS = {"code", "severity", "file", "line", "column", "path", "message"}


def write(tmp: Path, name: str, text: str) -> Path:
    path = tmp / name
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return path


def test_builtin_programs_lint_clean(capsys: pytest.CaptureFixture[str]) -> None:
    assert run([str(ROOT / "programs")]) == 0
    out = capsys.readouterr().out
    assert out.strip().endswith("0 error(s)")


def test_human_output_has_location_source_line_and_caret(tmp_path: Path) -> None:
    bad = variant(OPERATION, "{from: call.inputs.parent}", "{from: call.inputs.lower}")
    file = write(tmp_path, "op.yaml", bad.replace("metadata: {name: op}", "metadata: {name: op-x}"))
    result = lint.lint_paths([str(file)], registry=registry(), include_builtins=False)
    assert result.exit_code == 1
    lines = lint.render_human(result).splitlines()
    assert lines[0] == (
        f"{file}:29:28: error[E_REF_UNRESOLVED]: call.inputs.lower: "
        "the descriptor has no input port 'lower'"
    )
    assert lines[1] == "              parent: {from: call.inputs.lower}"
    assert lines[2] == "                             ^"
    assert lines[-1] == "1 file(s) checked, 1 error(s)"


def test_json_output_has_exactly_the_agreed_keys(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    file = write(tmp_path, "op.yaml", OPERATION.replace("kind: t/tune/v1", "kind: t/x/v1"))
    assert run([str(file), "--format", "json", "--no-builtins"]) == 1
    data = json.loads(capsys.readouterr().out)
    assert isinstance(data, list) and data
    assert all(set(item) == KEYS for item in data)
    assert {item["code"] for item in data} == {"E_UNKNOWN_OPCODE"}
    assert data[0]["file"] == str(file) and data[0]["line"] >= 1 and data[0]["column"] >= 1


def test_clean_file_json_is_an_empty_array(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    text = (ROOT / "programs" / "vlan-cni" / "v1" / "connect.yaml").read_text()
    file = write(tmp_path, "vlan-cni/v1/connect.yaml", text)
    assert run(["--format=json", str(file)]) == 0
    assert json.loads(capsys.readouterr().out) == []


def test_standalone_program_resolves_its_plugin_by_folder(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    text = (ROOT / "programs" / "vlan-cni" / "v1" / "connect.yaml").read_text()
    bad = text.replace("call.inputs.parent", "call.inputs.lower", 1)
    file = write(tmp_path, "vlan-cni/v1/connect.yaml", bad)
    assert run([str(file), "--format", "json"]) == 1
    assert {d["code"] for d in json.loads(capsys.readouterr().out)} == {"E_REF_UNRESOLVED"}
    orphan = write(tmp_path, "nobody/v1/connect.yaml", text)
    assert run([str(orphan), "--format", "json"]) == 1
    out = json.loads(capsys.readouterr().out)
    # The same code the topology compiler uses for a pluginRef that names no plugin.
    assert [d["code"] for d in out] == ["E_REF_UNRESOLVED"]
    assert "cannot resolve" in out[0]["message"] and out[0]["line"] >= 1


def test_plugins_dir_resolves_programs(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    plugins = tmp_path / "plugins"
    write(plugins, "op.yaml", OPERATION)
    program = (
        "apiVersion: effects.dra-multi-network.schseba.github.io/v1alpha1\n"
        "kind: HookProgram\nhook: connect\neffects: []\n"
    )
    file = write(tmp_path, "work/op/connect.yaml", program)
    assert run([str(file), "--plugins", str(plugins), "--format", "json"]) == 1
    codes = {d["code"] for d in json.loads(capsys.readouterr().out)}
    assert codes == {"E_EXPORT_MISSING"}  # resolved against 'op', whose output is not exported


def test_plugins_may_name_a_cr_file_or_a_plugin_yaml(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    cr = write(tmp_path, "crs/op.yaml", OPERATION)
    program = (
        "apiVersion: effects.dra-multi-network.schseba.github.io/v1alpha1\n"
        "kind: HookProgram\nhook: connect\neffects: []\n"
    )
    file = write(tmp_path, "work/op/connect.yaml", program)
    assert run([str(file), "--plugins", str(cr), "--format", "json"]) == 1
    assert {d["code"] for d in json.loads(capsys.readouterr().out)} == {"E_EXPORT_MISSING"}
    # a plugin directory's plugin.yaml brings its sibling hook programs along
    vlan = ROOT / "programs" / "vlan-cni" / "v1"
    file = write(tmp_path, "work/vlan-cni/connect.yaml", (vlan / "connect.yaml").read_text())
    args = [str(file), "--no-builtins", "--plugins", str(vlan / "plugin.yaml")]
    assert run([*args, "--format", "json"]) == 0
    assert json.loads(capsys.readouterr().out) == []
    assert run([str(file), "--plugins", str(tmp_path / "nope.yaml"), "--format", "json"]) == 2
    assert [d["code"] for d in json.loads(capsys.readouterr().out)] == ["E_IO"]


def test_plugin_directory_is_linted_as_one_plugin(tmp_path: Path) -> None:
    src = ROOT / "programs" / "bond-cni" / "v1"
    for f in src.glob("*.yaml"):
        write(tmp_path, f"bond-cni/v1/{f.name}", f.read_text())
    result = lint.lint_paths([str(tmp_path)], include_builtins=False)
    assert result.diagnostics == [] and result.exit_code == 0
    (tmp_path / "bond-cni/v1/connect.yaml").write_text(
        (src / "connect.yaml")
        .read_text()
        .replace("forEach: {in: call.inputs.members", "forEach: {in: call.inputs.member")
    )
    result = lint.lint_paths([str(tmp_path)], include_builtins=False)
    assert {d.code for d in result.diagnostics} == {Code.E_REF_UNRESOLVED}
    assert result.exit_code == 1


def test_exit_code_2_for_usage_and_unreadable_input(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert run([]) == 2
    assert "dmn lint: error[E_USAGE]: " in capsys.readouterr().err
    assert run(["--format", "xml", "x"]) == 2
    capsys.readouterr()
    assert run([str(tmp_path / "missing.yaml"), "--format", "json"]) == 2
    data = json.loads(capsys.readouterr().out)
    assert [d["code"] for d in data] == ["E_IO"]
    # A directory with nothing to lint is a usage error, not a silent pass.
    (tmp_path / "empty").mkdir()
    write(tmp_path, "empty/notes.txt", "not yaml\n")
    assert run([str(tmp_path / "empty"), "--format", "json"]) == 2
    assert [d["code"] for d in json.loads(capsys.readouterr().out)] == ["E_USAGE"]
    # Something that exists but is not a file (a FIFO must not block lint).
    os.mkfifo(tmp_path / "pipe.yaml")
    assert run([str(tmp_path / "pipe.yaml"), "--format", "json"]) == 2
    data = json.loads(capsys.readouterr().out)
    assert [d["code"] for d in data] == ["E_IO"] and "not a regular file" in data[0]["message"]
    # A file the kernel refuses to read, even to root.
    assert run(["/proc/self/mem", "--format", "json"]) == 2
    data = json.loads(capsys.readouterr().out)
    assert [d["code"] for d in data] == ["E_IO"] and data[0]["file"] == "/proc/self/mem"
    unreadable = write(tmp_path, "locked.yaml", "a: 1\n")
    unreadable.chmod(0)
    try:
        code = run([str(unreadable), "--format", "json"])
        data = json.loads(capsys.readouterr().out)
        # root can read anything; everyone else gets E_IO and exit 2
        assert (code == 2 and data[0]["code"] == "E_IO") or code == 1
    finally:
        unreadable.chmod(0o644)


def test_garbage_files_are_diagnostics(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    write(tmp_path, "a.yaml", "\x00\x01 not yaml: [")
    (tmp_path / "b.yaml").write_bytes(b"\xff\xfe\xfd")
    write(tmp_path, "c.yaml", "kind: Mystery\n")
    write(tmp_path, "d.yaml", "- just\n- a list\n")
    assert run([str(tmp_path), "--format", "json"]) == 1
    data = json.loads(capsys.readouterr().out)
    assert {d["code"] for d in data} <= {"E_SYNTAX", "E_SCHEMA"}
    assert len({d["file"] for d in data}) == 4


def test_registered_kinds_are_linted(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    seen: list[str] = []

    def check(doc: object, ctx: lint.LintContext) -> list[Diagnostic]:
        seen.append(type(doc).__name__)
        assert "vlan-cni" in ctx.plugins
        return [Diagnostic(code=Code.E_CYCLE, message="loop", file="t.yaml", line=2, column=3)]

    lint.register_kind("TestTopology", check)
    try:
        file = write(tmp_path, "t.yaml", "kind: TestTopology\nspec: {}\n")
        assert run([str(file), "--format", "json"]) == 1
        assert [d["code"] for d in json.loads(capsys.readouterr().out)] == ["E_CYCLE"]
        assert seen == ["YamlDocument"]
        assert "TestTopology" in lint.registered_kinds()
    finally:
        lint._KIND_CHECKERS.pop("TestTopology", None)


def test_human_output_never_echoes_control_characters(tmp_path) -> None:
    from dmn.interpreter.lint import lint_paths, render_human

    bad = tmp_path / "ctrl.yaml"
    bad.write_bytes(b'a: "\x01\x1b[31mred"\n')
    out = render_human(lint_paths([str(bad)]))
    assert "\x1b" not in out and "\x01" not in out
    assert '  a: "??[31mred"' in out
