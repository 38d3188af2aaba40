"""A NetworkTopology's name and identity are input too (issue 39, item 7): a name that is
not a DNS label (null, NUL, newline, '/', 300 characters, upper case, a look-alike Unicode
letter) and a document without apiVersion are refused at the field by lint, compile and
explain; every document of a multi-document stream is compiled, not only the first."""

from __future__ import annotations

import copy
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from dmn.controller.compile.compiler import compile_topology
from dmn.interpreter.loader import load_builtin_plugins

ROOT = Path(__file__).resolve().parents[2]
PLUGIN = ROOT / "examples" / "workloads" / "10-plugin.yaml"
TOPOLOGY = ROOT / "examples" / "workloads" / "30-topology.yaml"

BAD_NAMES = [
    "a\x00b",
    "a\nb",
    "a/b",
    "a" * 300,
    "Vepa",
    "v\u0435pa",  # a Cyrillic 'e'
    "-vepa",
    "vepa.example",
    "",
]


def _base() -> dict[str, Any]:
    return yaml.safe_load(TOPOLOGY.read_text())  # type: ignore[no-any-return]


def _dmn(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "dmn", *args], capture_output=True, text=True, check=False
    )


@pytest.mark.parametrize("name", BAD_NAMES, ids=repr)
def test_a_name_that_is_no_dns_label_is_refused_at_the_field(name: str) -> None:
    doc = _base()
    doc["metadata"]["name"] = name
    result = compile_topology(doc, load_builtin_plugins())
    assert result.compiled is None
    assert ("E_NAME_INVALID", "metadata.name") in [
        (d.code.value, d.path) for d in result.diagnostics
    ]


def test_a_null_name_is_required_not_none() -> None:
    doc = _base()
    doc["metadata"]["name"] = None
    result = compile_topology(doc, load_builtin_plugins())
    assert result.compiled is None
    assert ("E_SCHEMA", "metadata") in [(d.code.value, d.path) for d in result.diagnostics]


@pytest.mark.parametrize("command", ["lint", "compile", "explain"])
def test_the_commands_refuse_them_with_file_line_column(tmp_path: Path, command: str) -> None:
    doc = _base()
    doc["metadata"]["name"] = "a/b"
    path = tmp_path / "topology.yaml"
    path.write_text(yaml.safe_dump(doc, sort_keys=False))
    args = [str(path), "--plugins", str(PLUGIN)]
    out = _dmn(command, *args)
    assert out.returncode == 1, out.stdout + out.stderr
    assert "topology.yaml:4:9: error[E_NAME_INVALID]" in out.stdout + out.stderr


def test_lint_refuses_a_topology_document_without_api_version(tmp_path: Path) -> None:
    doc = _base()
    del doc["apiVersion"]
    path = tmp_path / "topology.yaml"
    path.write_text(yaml.safe_dump(doc, sort_keys=False))
    out = _dmn("lint", str(path), "--plugins", str(PLUGIN))
    assert out.returncode == 1
    assert "error[E_SCHEMA]: apiVersion is required in a NetworkTopology document" in out.stdout


@pytest.mark.parametrize("command", ["compile", "explain"])
def test_a_bad_second_document_is_not_ignored(tmp_path: Path, command: str) -> None:
    first = _base()
    second = copy.deepcopy(first)
    second["metadata"]["name"] = "second"
    second["spec"]["steps"][0]["kind"] = "Bogus"
    path = tmp_path / "two.yaml"
    path.write_text(yaml.safe_dump_all([first, second], sort_keys=False))
    out = _dmn(command, str(path), "--plugins", str(PLUGIN))
    assert out.returncode == 1, out.stdout + out.stderr
    assert "error[E_SCHEMA]" in out.stdout + out.stderr
