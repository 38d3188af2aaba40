"""Every ``dmn`` command parses ``--format json`` and ``--format=json`` alike and reports a
usage error the same way (one plumbing module, :mod:`dmn.cli.command_line`)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from dmn.cli import COMMANDS, main
from dmn.cli.command_line import requested_format

ROOT = Path(__file__).resolve().parent.parent
TOPOLOGY = ROOT / "examples" / "topologies"


def test_requested_format_reads_both_spellings() -> None:
    assert requested_format(["x", "--format", "json"]) == "json"
    assert requested_format(["--format=json", "x"]) == "json"
    assert requested_format(["--format=human", "--format", "json"]) == "json"
    assert requested_format(["--", "--format=json"]) is None
    assert requested_format(["x"]) is None


@pytest.mark.parametrize("command", sorted(COMMANDS))
def test_a_bad_flag_is_one_reason_coded_line_on_stderr(command: str) -> None:
    """In process, like the console scripts: exit 2, one line, code E_USAGE, no traceback."""
    proc = subprocess.run(
        [sys.executable, "-m", "dmn", command, "--no-such-flag"],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=ROOT,
    )
    assert proc.returncode == 2, proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1, proc.stderr
    assert lines[0].startswith(f"dmn {command}: error[E_USAGE]: "), proc.stderr
    assert proc.stdout == ""


@pytest.mark.parametrize("command", sorted(COMMANDS))
def test_a_usage_error_with_format_json_is_a_json_diagnostic(
    command: str, capsys: pytest.CaptureFixture[str]
) -> None:
    for spelling in (["--format", "json"], ["--format=json"]):
        assert main([command, "--no-such-flag", *spelling]) == 2
        captured = capsys.readouterr()
        (diag,) = json.loads(captured.out)
        assert diag["code"] == "E_USAGE" and diag["severity"] == "error"
        assert set(diag) == {"code", "severity", "file", "line", "column", "path", "message"}
        assert captured.err == ""


def test_help_exits_zero_for_every_command(capsys: pytest.CaptureFixture[str]) -> None:
    for command in COMMANDS:
        assert main([command, "--help"]) == 0, command
        assert "usage: dmn" in capsys.readouterr().out


@pytest.mark.parametrize(
    "argv",
    [
        ["lint", str(TOPOLOGY)],
        ["compile", str(TOPOLOGY / "shared-macvlan.yaml")],
    ],
)
def test_format_json_and_format_equals_json_give_the_same_output(
    argv: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    outputs = []
    for spelling in (["--format", "json"], ["--format=json"]):
        code = main([*argv, *spelling])
        out = capsys.readouterr().out
        json.loads(out)  # always JSON, on success too
        outputs.append((code, out))
    assert outputs[0] == outputs[1]
    assert outputs[0][0] == 0


def test_journal_accepts_both_spellings(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    # no journal there: the same reason-coded failure either way, never a usage error
    for spelling in (["--format", "json"], ["--format=json"]):
        assert main(["journal", "show", "--state-dir", str(tmp_path), *spelling]) == 1
        (diag,) = json.loads(capsys.readouterr().out)
        assert diag["code"] == "E_JOURNAL_MISSING"
