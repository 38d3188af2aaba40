"""Test reports carried from one pytest process into another.

Two parts of the suite run their tests in a process other than the one that prints the
session's results: the kernel lab (inside a qemu guest, :mod:`tests.kernel_lab.harness`) and
the upstream-lab e2e tests (in a second process on the host, :mod:`tests.e2e_beside`). The
running side appends every serialised report to one JSON-lines file (:class:`ReportStream`);
the printing side reads them back (:func:`read_reports`) and replays each item's reports into
its own session (:func:`replay`), so the terminal, ``-rA`` and ``--junitxml`` show the
outcome, traceback and captured output as if the test had run there. An item the other side
never finished is reported failed with the text the caller gives.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import pytest

REPORTS = "reports.jsonl"


class ReportStream:
    """Running side: append every test report to ``path``, one JSON object per line, synced
    (the other side may read the file after this process died)."""

    def __init__(self, config: pytest.Config, path: Path) -> None:
        self._config = config
        self._path = path

    @pytest.hookimpl(trylast=True)
    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        hook = self._config.hook
        data = hook.pytest_report_to_serializable(config=self._config, report=report)
        with open(self._path, "a") as out:
            out.write(json.dumps(data) + "\n")
            out.flush()
            os.fsync(out.fileno())


def read_reports(path: Path) -> dict[str, list[dict[str, Any]]]:
    """Every report in ``path`` by node id, in the order written; nothing when absent."""
    reports: dict[str, list[dict[str, Any]]] = {}
    if path.is_file():
        for line in path.read_text().splitlines():
            if line.strip():
                data = json.loads(line)
                reports.setdefault(data["nodeid"], []).append(data)
    return reports


def make_report(item: pytest.Item, when: str, outcome: str, longrepr: Any) -> pytest.TestReport:
    return pytest.TestReport(
        nodeid=item.nodeid,
        location=item.location,
        keywords={k: 1 for k in item.keywords},
        outcome=outcome,  # type: ignore[arg-type]
        longrepr=longrepr,
        when=when,  # type: ignore[arg-type]
        sections=[],
        duration=0.0,
    )


def _from_json(item: pytest.Item, data: Mapping[str, Any]) -> pytest.TestReport:
    """A report back from its JSON form. A skip's location tuple comes back from JSON as a
    list, which pytest's junitxml writer refuses: it is made a tuple again."""
    report: pytest.TestReport = item.ihook.pytest_report_from_serializable(
        config=item.config, data=dict(data)
    )
    if isinstance(report.longrepr, list):
        report.longrepr = tuple(report.longrepr)  # type: ignore[assignment]
    return report


def replay(
    item: pytest.Item,
    recorded: Mapping[str, Sequence[Mapping[str, Any]]],
    unfinished: Callable[[str], str],
) -> None:
    """Log ``item``'s recorded reports in this session; without a teardown report (the other
    side died or never reached it) add a failed call carrying ``unfinished(nodeid)``."""
    ihook = item.ihook
    ihook.pytest_runtest_logstart(nodeid=item.nodeid, location=item.location)
    reports = [_from_json(item, data) for data in recorded.get(item.nodeid, ())]
    if "teardown" not in [r.when for r in reports]:
        reports.append(make_report(item, "call", "failed", unfinished(item.nodeid)))
        reports.append(make_report(item, "teardown", "passed", None))
    for report in reports:
        ihook.pytest_runtest_logreport(report=report)
    ihook.pytest_runtest_logfinish(nodeid=item.nodeid, location=item.location)


def replay_skipped(item: pytest.Item, reason: str) -> None:
    """Log ``item`` as skipped at setup with ``reason``."""
    ihook = item.ihook
    ihook.pytest_runtest_logstart(nodeid=item.nodeid, location=item.location)
    path, line, _ = item.location
    for report in (
        make_report(item, "setup", "skipped", (path, (line or 0) + 1, reason)),
        make_report(item, "teardown", "passed", None),
    ):
        ihook.pytest_runtest_logreport(report=report)
    ihook.pytest_runtest_logfinish(nodeid=item.nodeid, location=item.location)
