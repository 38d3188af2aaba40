"""Arbitrary input never escapes as anything but a Kubernetes Status error."""

from __future__ import annotations

import copy

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from dmn.lab.apiserver import Store
from dmn.lab.apiserver.errors import ApiError
from dmn.lab.apiserver.kinds import CRD
from dmn.lab.apiserver.patches import json_patch, merge_patch, strategic_merge_patch

from .conftest import GROUP, widget, widget_crd

pytestmark = pytest.mark.property

json_values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(-5, 20)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=6),
    lambda inner: (
        st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=6), inner, max_size=4)
    ),
    max_leaves=20,
)
spec_keys = st.sampled_from(
    ["size", "color", "name", "tags", "ports", "config", "labels", "ratio", "mode", "x"]
)
specs = st.dictionaries(spec_keys, json_values, max_size=6)


@pytest.fixture(scope="module")
def store() -> Store:
    s = Store()
    s.create(CRD, "", widget_crd())
    return s


@settings(
    max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(spec=specs, counter=st.integers(0, 10**9))
def test_create_is_stored_or_a_status(store: Store, spec: dict, counter: int) -> None:
    rt = store.resolve(GROUP, "v1", "widgets")
    assert rt is not None
    body = widget(f"w{counter}")
    body["spec"] = spec
    try:
        result = store.create(rt, "default", body)
    except ApiError as exc:
        assert exc.code in (400, 409, 422) and exc.status()["kind"] == "Status"
        if exc.code == 422:
            assert exc.details and exc.details["causes"]
        return
    assert result.obj["spec"]["size"] == spec["size"]


@settings(max_examples=200, deadline=None)
@given(target=json_values, patch=json_values)
def test_patches_return_a_document_or_a_status(target, patch) -> None:
    before = copy.deepcopy(target)
    for apply in (
        lambda: merge_patch(target, patch),
        lambda: json_patch(target, patch),
        lambda: strategic_merge_patch(target, patch, "pods"),
    ):
        try:
            apply()
        except ApiError as exc:
            assert exc.code in (400, 422)
    assert target == before  # patches never modify their input


@settings(max_examples=100, deadline=None)
@given(
    target=st.dictionaries(st.text(max_size=4), json_values, max_size=4),
    patch=st.dictionaries(st.text(max_size=4), json_values, max_size=4),
)
def test_merge_patch_is_idempotent(target, patch) -> None:
    once = merge_patch(target, patch)
    assert merge_patch(once, patch) == once


ops = st.lists(
    st.tuples(
        st.sampled_from(["create", "update", "delete", "finalize", "unfinalize", "own", "label"]),
        st.sampled_from(["a", "b", "c", "d"]),
        st.sampled_from(["a", "b", "c", "d"]),
    ),
    max_size=40,
)


@settings(max_examples=60, deadline=None)
@given(sequence=ops)
def test_watch_replay_rebuilds_the_listed_state(sequence) -> None:
    """Whatever happens (finalizers, GC cascades, label changes), replaying the watch history
    from the start reproduces exactly what a list returns, with strictly increasing versions."""
    from dmn.lab.apiserver.kinds import BUILTINS

    store = Store(history_limit=100_000)
    cms = next(t for t in BUILTINS if t.plural == "configmaps")
    start = store.resource_version
    for op, name, other in sequence:
        try:
            if op == "create":
                store.create(cms, "default", {"metadata": {"name": name}, "data": {"v": "0"}})
            elif op == "update":
                store.update(
                    cms,
                    "default",
                    name,
                    patch={"data": {"v": other}},
                    patch_type="application/merge-patch+json",
                )
            elif op == "delete":
                store.delete(cms, "default", name)
            elif op in ("finalize", "unfinalize"):
                finalizers = ["x.example.com/f"] if op == "finalize" else None
                store.update(
                    cms,
                    "default",
                    name,
                    patch={"metadata": {"finalizers": finalizers}},
                    patch_type="application/merge-patch+json",
                )
            elif op == "own":
                owner = store.get(cms, "default", other)
                ref = {
                    "apiVersion": "v1",
                    "kind": "ConfigMap",
                    "name": other,
                    "uid": owner["metadata"]["uid"],
                }
                store.update(
                    cms,
                    "default",
                    name,
                    patch={"metadata": {"ownerReferences": [ref]}},
                    patch_type="application/merge-patch+json",
                )
            else:
                store.update(
                    cms,
                    "default",
                    name,
                    patch={"metadata": {"labels": {"l": other}}},
                    patch_type="application/merge-patch+json",
                )
        except ApiError as exc:
            assert exc.code in (404, 409, 422)
    replayed: dict[str, dict] = {}
    last = start
    for event in store.events_after(start, 0):
        assert event.rv > last
        last = event.rv
        if event.storage != cms.storage_key:
            continue
        name = event.obj["metadata"]["name"]
        if event.type == "DELETED":
            assert name in replayed
            del replayed[name]
        else:
            assert (name in replayed) == (event.type == "MODIFIED")
            replayed[name] = event.obj
        assert event.obj["metadata"]["resourceVersion"] == str(event.rv)
    listed, rv, _next, _rest = store.list_objects(cms, "default")
    assert rv == last
    assert {o["metadata"]["name"]: o["metadata"]["resourceVersion"] for o in listed} == {
        n: o["metadata"]["resourceVersion"] for n, o in replayed.items()
    }
    # garbage collection converged: live objects only reference live owners
    uids = {o["metadata"]["uid"] for o in listed}
    for obj in listed:
        if obj["metadata"].get("deletionTimestamp"):
            continue
        for ref in obj["metadata"].get("ownerReferences") or []:
            assert ref["uid"] in uids, (obj["metadata"]["name"], ref)
