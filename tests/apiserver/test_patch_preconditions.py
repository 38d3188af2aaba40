"""A write's precondition is the resourceVersion the request names, as in kube-apiserver.

A PUT names one in its body; a patch only if the patch itself sets
``metadata.resourceVersion``. Another writer that lands between the store's read and its
commit makes a write that names a version a 409, while a patch that names none is applied
to the newer object (kube-apiserver's GuaranteedUpdate). The lab answered 409 to such a
patch too (``dmn lab apply`` met it while the controller wrote the topology's status).

The other write is made deterministic by an admission stand-in, which runs after the read
and before the commit.
"""

from __future__ import annotations

from typing import Any

import pytest

from dmn.lab.apiserver import Store, patches
from dmn.lab.apiserver.errors import ApiError
from dmn.lab.apiserver.kinds import CRD
from dmn.lab.apiserver.store import AdmissionAttributes

from .conftest import GROUP, widget, widget_crd

NS = "default"


class _WriteBetween:
    """Admission that makes one other write the first time the object is updated."""

    def __init__(self) -> None:
        self.store: Store | None = None
        self.other: tuple[Any, ...] | None = None

    def arm(self, store: Store, *update_args: Any) -> None:
        self.store, self.other = store, update_args

    def mutate(self, attrs: AdmissionAttributes) -> dict[str, Any] | None:
        other, self.other = self.other, None
        if other is not None and attrs.operation == "UPDATE":
            assert self.store is not None
            rt, name, patch = other
            self.store.update(rt, NS, name, patch=patch, patch_type=patches.MERGE)
        return None

    def validate(self, attrs: AdmissionAttributes) -> None:
        return None


@pytest.fixture
def store() -> tuple[Store, _WriteBetween]:
    between = _WriteBetween()
    s = Store(admission=between)
    s.create(CRD, "", widget_crd())
    return s, between


def _configmap(s: Store) -> tuple[Any, dict[str, Any]]:
    rt = s.resolve("", "v1", "configmaps")
    assert rt is not None
    created = s.create(rt, NS, {"metadata": {"name": "cm"}, "data": {"a": "1"}}).obj
    return rt, created


def _widget(s: Store) -> tuple[Any, dict[str, Any]]:
    rt = s.resolve(GROUP, "v1", "widgets")
    assert rt is not None
    return rt, s.create(rt, NS, widget("w", labels={"a": "1"})).obj


@pytest.mark.parametrize("patch_type", [patches.MERGE, patches.STRATEGIC])
def test_a_patch_naming_no_version_applies_to_the_newer_object(
    store: tuple[Store, _WriteBetween], patch_type: str
) -> None:
    s, between = store
    rt, created = _configmap(s)
    between.arm(s, rt, "cm", {"data": {"other": "x"}})
    result = s.update(rt, NS, "cm", patch={"data": {"b": "2"}}, patch_type=patch_type).obj
    assert result["data"] == {"a": "1", "other": "x", "b": "2"}
    assert int(result["metadata"]["resourceVersion"]) > int(created["metadata"]["resourceVersion"])


def test_a_json_patch_naming_no_version_applies_to_the_newer_object(
    store: tuple[Store, _WriteBetween],
) -> None:
    s, between = store
    rt, _ = _widget(s)
    between.arm(s, rt, "w", {"spec": {"labels": {"other": "x"}}})
    ops = [{"op": "add", "path": "/spec/labels/b", "value": "2"}]
    result = s.update(rt, NS, "w", patch=ops, patch_type=patches.JSON_PATCH).obj
    assert result["spec"]["labels"] == {"a": "1", "other": "x", "b": "2"}


def test_a_patch_naming_the_version_it_read_conflicts(store: tuple[Store, _WriteBetween]) -> None:
    s, between = store
    rt, created = _widget(s)
    read = created["metadata"]["resourceVersion"]
    between.arm(s, rt, "w", {"spec": {"labels": {"other": "x"}}})
    patch = {"metadata": {"resourceVersion": read}, "spec": {"labels": {"b": "2"}}}
    with pytest.raises(ApiError) as err:
        s.update(rt, NS, "w", patch=patch, patch_type=patches.MERGE)
    assert err.value.code == 409
    ops = [
        {"op": "replace", "path": "/metadata/resourceVersion", "value": read},
        {"op": "add", "path": "/spec/labels/b", "value": "2"},
    ]
    with pytest.raises(ApiError) as err:
        s.update(rt, NS, "w", patch=ops, patch_type=patches.JSON_PATCH)
    assert err.value.code == 409
    assert s.get(rt, NS, "w")["spec"]["labels"] == {"a": "1", "other": "x"}


def test_a_put_keeps_its_body_version_as_precondition(store: tuple[Store, _WriteBetween]) -> None:
    s, between = store
    rt, created = _configmap(s)
    between.arm(s, rt, "cm", {"data": {"other": "x"}})
    with pytest.raises(ApiError) as err:
        s.update(rt, NS, "cm", {**created, "data": {"a": "2"}})
    assert err.value.code == 409
