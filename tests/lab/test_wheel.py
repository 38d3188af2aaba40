"""``dmn lab demo`` from an installed wheel, outside the checkout.

The wheel is built from this checkout, installed with ``--no-deps`` into a fresh virtual
environment in a temporary directory, and run there with that directory as the working
directory. The project's dependencies come from the checkout's environment through a
``.pth`` line that adds its site-packages as a plain path — which does not process the
editable install's own ``.pth`` hook, so ``dmn`` can only come from the wheel (the test
asserts where it was imported from). The wheel must carry the chart, the builtin programs and
the examples, and no test code.
"""

from __future__ import annotations

import os
import subprocess
import sys
import sysconfig
import venv
import zipfile
from pathlib import Path

import pytest

from dmn.cli.generate import repo_root

pytestmark = pytest.mark.slow

ROOT = repo_root()


def _build_wheel(out: Path) -> Path:
    out.mkdir(parents=True)
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "wheel",
            "--no-deps",
            "--no-build-isolation",
            "-q",
            "-w",
            str(out),
            str(ROOT),
        ],
        capture_output=True,
        text=True,
        timeout=600,
        cwd=out,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    (wheel,) = out.glob("dra_multi_network-*.whl")
    return wheel


def test_lab_demo_runs_from_an_installed_wheel(tmp_path: Path) -> None:
    wheel = _build_wheel(tmp_path / "dist")
    names = zipfile.ZipFile(wheel).namelist()
    assert (
        "dmn/charts/dra-multi-network/crds/networktopologies."
        "networking.dra-multi-network.schseba.github.io.yaml" in names
    )
    assert "dmn/programs/macvlan-cni/v1/plugin.yaml" in names
    assert "dmn/examples/topologies/shared-macvlan.yaml" in names
    assert "dmn/grammar/effects.lark" in names
    assert not [n for n in names if n.startswith("tests/") or "/tests/" in n or "conftest" in n]

    env_dir = tmp_path / "venv"
    venv.EnvBuilder(with_pip=False).create(env_dir)
    python = env_dir / "bin" / "python"
    site = Path(
        subprocess.run(
            [str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
            capture_output=True,
            text=True,
            check=True,
        ).stdout.strip()
    )
    (site / "checkout_dependencies.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    install = subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "--python",
            str(python),
            "install",
            "--no-deps",
            "-q",
            str(wheel),
        ],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert install.returncode == 0, install.stderr[-3000:]

    work = tmp_path / "elsewhere"
    work.mkdir()
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    where = subprocess.run(
        [str(python), "-c", "import dmn; print(dmn.__file__)"],
        capture_output=True,
        text=True,
        cwd=work,
        env=env,
        check=True,
    ).stdout.strip()
    assert Path(where).is_relative_to(env_dir), where
    assert not Path(where).resolve().is_relative_to(ROOT)

    demo = subprocess.run(
        [str(python), "-m", "dmn", "lab", "demo"],
        capture_output=True,
        text=True,
        cwd=work,
        env=env,
        timeout=600,
    )
    assert demo.returncode == 0, demo.stdout[-3000:] + demo.stderr[-3000:]
    assert "E_EFFECT_DENIED" in demo.stdout
