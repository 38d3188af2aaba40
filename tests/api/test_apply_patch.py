"""kubectl's client-side apply as a pure three-way merge patch."""

from __future__ import annotations

import json

from dmn.api.cluster.apply_patch import (
    LAST_APPLIED,
    MAX_LAST_APPLIED,
    previous_apply,
    three_way_patch,
    with_last_applied,
)


def test_fields_dropped_from_the_manifest_are_deleted_others_writers_kept() -> None:
    first = {"metadata": {"name": "t"}, "spec": {"config": {"mode": "bridge", "mtuu": 1}}}
    current = {
        "metadata": {"name": "t", "labels": {"x": "y"}, "finalizers": ["f"]},
        "spec": {"config": {"mode": "bridge", "mtuu": 1}, "defaulted": True},
        "status": {"ready": True},
    }
    second = {"metadata": {"name": "t"}, "spec": {"config": {"mode": "private"}}}
    patch = three_way_patch(first, second, current)
    assert patch == {"spec": {"config": {"mode": "private", "mtuu": None}}}


def test_unchanged_manifest_is_an_empty_patch_and_lists_replace_whole() -> None:
    doc = {"metadata": {"name": "t"}, "spec": {"steps": [{"id": "a"}, {"id": "b"}]}}
    assert three_way_patch(doc, doc, doc) == {}
    smaller = {"metadata": {"name": "t"}, "spec": {"steps": [{"id": "a"}]}}
    assert three_way_patch(doc, smaller, doc) == {"spec": {"steps": [{"id": "a"}]}}


def test_last_applied_round_trip_and_size_bound() -> None:
    doc = {"metadata": {"name": "t", "annotations": {"a": "b"}}, "spec": {"k": 1}}
    stamped = with_last_applied(doc)
    recorded = previous_apply(stamped)
    assert recorded == doc and LAST_APPLIED not in json.dumps(recorded)
    huge = {"metadata": {"name": "t"}, "spec": {"blob": "x" * MAX_LAST_APPLIED}}
    assert LAST_APPLIED not in (with_last_applied(huge)["metadata"].get("annotations") or {})
    assert previous_apply({"metadata": {"annotations": {LAST_APPLIED: "{not json"}}}) == {}
