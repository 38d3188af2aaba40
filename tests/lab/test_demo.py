"""``dmn lab demo`` — the main job — end to end, in-process and as a failing variant."""

from __future__ import annotations

from pathlib import Path

import pytest

from dmn.api.identity import DRIVER
from dmn.cli import lab as cli
from dmn.lab.demo import TOPOLOGIES, run_demo
from dmn.lab.node import NODE_NAME


def test_demo_holds_and_reports(capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.run(["demo"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[-1] == "demo: OK"
    names = sorted(p.stem for p in TOPOLOGIES.glob("*.yaml"))
    for name in names:
        line = next(x for x in out if x.startswith(f"  {name}: "))
        assert "Ready=True" in line and "revision=" + name in line
    assert "pools: macvlan-v4, macvlan-dual (examples/ipam/pool.yaml)" in out
    assert any(x.startswith("  allocated request=net1 device=") for x in out)
    assert any("rejected:" in x and "E_EFFECT_DENIED" in x for x in out)
    assert "lab down" in out


def test_demo_report_contents() -> None:
    report = run_demo(timeout=60)
    assert report.ok, report.problems
    assert report.slices == 2 and report.devices == 6  # 2 lab links x 3 personas
    assert report.pools == ["macvlan-v4", "macvlan-dual"]  # before the topologies
    assert {t.name for t in report.topologies} == {p.stem for p in TOPOLOGIES.glob("*.yaml")}
    for t in report.topologies:
        assert t.ready == "True" and t.revision.startswith(t.name) and t.device_classes
    assert report.allocation is not None
    [result] = report.allocation.results
    assert result["driver"] == DRIVER and result["pool"] == NODE_NAME
    assert result["device"].endswith("-macvlan")  # the shared-macvlan class's persona
    assert report.negative is not None and report.negative.rejected


def test_demo_fails_when_the_negative_is_not_rejected_as_expected(tmp_path: Path) -> None:
    wrong = tmp_path / "wrong.yaml"
    source = TOPOLOGIES.parent / "negative" / "topologies" / "effect-denied.yaml"
    wrong.write_text(source.read_text().replace("# expect: E_EFFECT_DENIED", "# expect: E_NOPE"))
    report = run_demo(timeout=60, negative=wrong)
    assert not report.ok
    assert report.negative is not None and not report.negative.rejected
    assert any("E_NOPE" in p for p in report.problems)
