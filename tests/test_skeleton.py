"""The package layout and the CLI dispatcher behave as the README promises."""

from __future__ import annotations

import subprocess
import sys

import pytest

from dmn.cli import dispatch, main


def test_subpackages_live_under_one_namespace() -> None:
    import dmn.engine
    import dmn.interpreter
    import dmn.opcodes

    assert dmn.interpreter.__name__ == "dmn.interpreter"
    assert dmn.engine.__name__ == "dmn.engine"
    assert dmn.opcodes.__name__ == "dmn.opcodes"
    assert dmn.DRIVER_NAME == "dra-multi-network.schseba.github.io"


def test_unknown_command_is_a_usage_error(capsys) -> None:
    assert dispatch("no-such-command", []) == 2
    assert "dmn: error[E_USAGE]: unknown command 'no-such-command'" in capsys.readouterr().err


def test_help_exits_zero(capsys) -> None:
    assert main(["--help"]) == 0
    assert "usage: dmn" in capsys.readouterr().out


def test_module_entry_point_runs() -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "dmn", "--help"], capture_output=True, text=True, check=False
    )
    assert proc.returncode == 0, proc.stderr


def test_generate_refuses_a_root_that_is_not_the_repository(tmp_path, capsys) -> None:
    assert main(["generate", "--check", "--root", str(tmp_path)]) == 2
    assert "E_USAGE" in capsys.readouterr().err


@pytest.mark.parametrize("missing", ["dmn.cli.lab", "dmn.lab"])
def test_lab_missing_from_a_product_installation_is_one_reason_coded_line(
    missing: str, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """The image's product-only wheel has no ``dmn.cli.lab`` / ``dmn.lab``: ``dmn lab`` says
    so in one line with a reason code and how to get the lab, never a traceback."""
    monkeypatch.delitem(sys.modules, "dmn.cli.lab", raising=False)
    monkeypatch.setitem(sys.modules, missing, None)
    assert main(["lab", "status"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "error[E_LAB_NOT_INSTALLED]" in err, err
    assert "pip install '.[lab]'" in err
