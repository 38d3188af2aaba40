"""The readiness file and check behind ``dmn node-ready`` (agent/readiness.py)."""

from __future__ import annotations

import json
from pathlib import Path

from dmn.agent.readiness import FILE_NAME, Readiness, ReadinessReporter, check, write

ALL = Readiness(True, True, True)


def test_ready_only_when_all_three_facts_hold(tmp_path: Path) -> None:
    write(tmp_path, ALL, now=100.0)
    assert check(tmp_path, 30, now=110.0) == (True, "ready")
    for missing in ("kubeletRegistered", "nriConnected", "journalWritable"):
        facts = Readiness(
            **{k: k != missing for k in ("kubeletRegistered", "nriConnected", "journalWritable")}
        )
        write(tmp_path, facts, now=100.0)
        ok, reason = check(tmp_path, 30, now=110.0)
        assert not ok and reason == f"E_AGENT_NOT_READY: not yet {missing}"


def test_stale_missing_and_garbled_files_are_not_ready(tmp_path: Path) -> None:
    assert check(tmp_path, 30)[1].startswith("E_AGENT_NOT_READY:")
    write(tmp_path, ALL, now=100.0)
    ok, reason = check(tmp_path, 30, now=200.0)
    assert not ok and reason.startswith("E_READINESS_STALE:")
    (tmp_path / FILE_NAME).write_text("{not json")
    ok, reason = check(tmp_path, 30)
    assert not ok and "unreadable" in reason
    (tmp_path / FILE_NAME).write_text(json.dumps({"writtenAt": 1}))
    assert not check(tmp_path, 30)[0]


def test_reporter_reports_a_failed_write_as_not_writable(tmp_path: Path) -> None:
    gone = tmp_path / "gone"
    reporter = ReadinessReporter(gone, lambda: ALL, interval=0.05)
    facts = reporter.report_once()
    assert facts == Readiness(True, True, False)
    assert not check(gone, 30)[0]


def test_reporter_survives_a_failing_probe_and_withdraws_on_stop(tmp_path: Path) -> None:
    def broken() -> Readiness:
        raise RuntimeError("boom")

    reporter = ReadinessReporter(tmp_path, broken, interval=0.05)
    assert reporter.report_once() == Readiness(False, False, False)
    reporter.probe = lambda: ALL
    reporter.start()
    reporter.stop()
    assert not (tmp_path / FILE_NAME).exists()
