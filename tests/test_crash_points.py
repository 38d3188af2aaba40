"""The kernel-lab crash matrices' kill-point choice (tests/crash_points.py)."""

from __future__ import annotations

import importlib
import subprocess

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


def test_owned_takes_only_the_owned_opcodes_boundaries(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(cp.FULL_ENV, "owned")
    assert cp.crash_points(NAMES, KINDS, "tests.kernel_lab.test_lab_ovs") == [5, 6, 7]
    assert cp.crash_points(NAMES, KINDS, "tests.kernel_lab.test_lab_switchdev") == [2, 3, 4]
    # an opcode nobody owns is killed wherever it runs
    unowned = {"rep": "share/hold-parent/v1", "attach": "ovs/port-attach/v1"}
    assert cp.crash_points(NAMES, unowned, "tests.kernel_lab.test_lab_ovs") == [2, 3, 4, 5, 6, 7]


def test_full_matrix_kills_everywhere(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(cp.FULL_ENV, "full")
    assert cp.crash_points(NAMES, KINDS, "tests.kernel_lab.test_lab_ovs") == list(range(10))


def test_a_slice_takes_alternate_owned_points_and_the_slices_cover_them(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    owner = "tests.kernel_lab.test_lab_ovs"
    taken = []
    for index in range(cp.SLICES):
        monkeypatch.setenv(cp.FULL_ENV, f"slice:{index}")
        assert cp.mode() == f"slice:{index}"
        taken.append(cp.crash_points(NAMES, KINDS, owner))
    assert taken == [[5, 7], [6]]
    # a host matrix is never sliced
    unowned = {"rep": "share/hold-parent/v1", "attach": "ovs/port-attach/v1"}
    assert cp.crash_points(NAMES, unowned, "tests.kernel.test_program_crashes") == [2, 3, 4]


def test_a_slice_never_leaves_a_matrix_without_a_kill(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(cp.FULL_ENV, "slice:1")
    assert cp.rotated(["only"], "tests.kernel_lab.test_lab_ovs") == ["only"]
    assert cp.rotated([], "tests.kernel_lab.test_lab_ovs") == []


def test_kept_boundaries_are_killed_in_every_slice(monkeypatch: pytest.MonkeyPatch) -> None:
    for index in range(cp.SLICES):
        monkeypatch.setenv(cp.FULL_ENV, f"slice:{index}")
        points = cp.crash_points(
            NAMES, KINDS, "tests.kernel_lab.test_lab_ovs", keep=lambda n: n == "after-apply:attach"
        )
        assert 6 in points and set(points) <= {5, 6, 7}


def test_the_default_slice_is_the_commit_count_modulo_the_slices(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv(cp.FULL_ENV, raising=False)
    proc = subprocess.run(
        ["git", "rev-list", "--count", "HEAD"], cwd=cp._REPO, capture_output=True, text=True
    )
    expected = int(proc.stdout) % cp.SLICES if proc.returncode == 0 else 0
    assert cp.mode() == f"slice:{expected}"
    assert f"slice:{expected} of {cp.SLICES}" in cp.describe()


def test_an_unknown_choice_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    for value in ("sometimes", "slice:x"):
        monkeypatch.setenv(cp.FULL_ENV, value)
        with pytest.raises(ValueError, match="expected full, owned or slice:N"):
            cp.mode()


def test_a_boundary_of_an_unknown_effect_is_an_error(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(cp.FULL_ENV, "owned")
    with pytest.raises(AssertionError, match="names no effect"):
        cp.crash_points(["after-apply:ghost"], KINDS, "tests.kernel_lab.test_lab_ovs")


def test_every_owner_is_a_test_module_and_every_opcode_is_placed() -> None:
    for kind, owner in cp.OWNERS.items():
        module = importlib.import_module(owner)
        assert any(name.startswith("test_") and "crash" in name for name in vars(module)), owner
        assert kind in default_executors(), kind
    assert set(default_executors()) - set(cp.OWNERS) == {"share/hold-parent/v1"}
