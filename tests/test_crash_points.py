"""The kernel-lab crash matrices' kill-point choice (tests/crash_points.py)."""

from __future__ import annotations

import importlib

import pytest

from dmn.opcodes.executor_table import default_executors
from tests import crash_points as cp

NAMES = [
    "before-intent",
    "after-intent",
    "after-before-image:rep",
    "after-apply:rep",
    "after-outcome:rep",
    "after-before-image:attach",
    "after-apply:attach",
    "after-outcome:attach",
    "before-completed",
    "after-completed",
]
KINDS = {"rep": "representor/configure/v1", "attach": "ovs/port-attach/v1"}


def test_by_default_only_the_owned_opcodes_boundaries(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(cp.FULL_ENV, raising=False)
    assert cp.crash_points(NAMES, KINDS, "tests.kernel_lab.test_lab_ovs") == [5, 6, 7]
    assert cp.crash_points(NAMES, KINDS, "tests.kernel_lab.test_lab_switchdev") == [2, 3, 4]
    # an opcode nobody owns is killed wherever it runs
    unowned = {"rep": "share/hold-parent/v1", "attach": "ovs/port-attach/v1"}
    assert cp.crash_points(NAMES, unowned, "tests.kernel_lab.test_lab_ovs") == [2, 3, 4, 5, 6, 7]


def test_full_matrix_kills_everywhere(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(cp.FULL_ENV, "full")
    assert cp.crash_points(NAMES, KINDS, "tests.kernel_lab.test_lab_ovs") == list(range(10))


def test_a_boundary_of_an_unknown_effect_is_an_error(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(cp.FULL_ENV, raising=False)
    with pytest.raises(AssertionError, match="names no effect"):
        cp.crash_points(["after-apply:ghost"], KINDS, "tests.kernel_lab.test_lab_ovs")


def test_every_owner_is_a_test_module_and_every_opcode_is_placed() -> None:
    for kind, owner in cp.OWNERS.items():
        module = importlib.import_module(owner)
        assert any(name.startswith("test_") and "crash" in name for name in vars(module)), owner
        assert kind in default_executors(), kind
    assert set(default_executors()) - set(cp.OWNERS) == {"share/hold-parent/v1"}
