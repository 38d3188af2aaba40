"""The controller's NetworkPlugin conversions are reused for one stored state only."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from dmn.api.cluster import Cluster
from dmn.api.cluster import resources as r
from dmn.controller.compile.plugin_sources import (
    StoredStateCache,
    cached_plugin_object,
    plugins_from_objects,
)


def test_one_stored_state_is_converted_once_and_a_changed_one_again(cluster: Cluster) -> None:
    cache: StoredStateCache[Any] = StoredStateCache()
    objects = cluster.list(r.NETWORK_PLUGINS).items
    first, bad = plugins_from_objects(objects, cache)
    again, _ = plugins_from_objects(cluster.list(r.NETWORK_PLUGINS).items, cache)
    assert first and not bad
    assert all(again[name] is plugin for name, plugin in first.items())

    name = "macvlan-cni"
    obj = cluster.get(r.NETWORK_PLUGINS, name)
    obj["spec"]["implementation"]["handler"] = "not-a-handler"  # breaks the builtin contract
    cluster.replace(r.NETWORK_PLUGINS, obj)
    changed, bad = plugins_from_objects(cluster.list(r.NETWORK_PLUGINS).items, cache)
    assert name not in changed and bad[name][0].code == "E_CONFLICT"
    assert all(changed[n] is first[n] for n in changed)


def test_objects_without_a_stored_state_are_never_cached() -> None:
    cache: StoredStateCache[Any] = StoredStateCache()
    obj = {"apiVersion": "x/v1", "kind": "NetworkPlugin", "metadata": {"name": "p"}}
    for _ in range(2):
        plugin, problems = cached_plugin_object(cache, copy.deepcopy(obj), "networkplugin/p")
        assert plugin is None and problems
    assert cache._entries == {}


def test_the_cache_is_bounded(cluster: Cluster) -> None:
    cache: StoredStateCache[Any] = StoredStateCache(kept=2)
    plugins_from_objects(cluster.list(r.NETWORK_PLUGINS).items, cache)
    assert len(cache._entries) == 2


def test_a_resync_does_not_re_check_an_unchanged_plugin(
    cluster: Cluster, monkeypatch: pytest.MonkeyPatch
) -> None:
    from dmn.controller.compile import plugin_sources
    from dmn.controller.plugin_status import PluginStatusReconciler
    from dmn.opcodes.registry import default_registry

    checks: list[str] = []
    real = plugin_sources.checked_plugin_object

    def counted(obj: Any, registry: Any) -> Any:
        checks.append(obj["metadata"]["name"])
        return real(obj, registry)

    monkeypatch.setattr(plugin_sources, "checked_plugin_object", counted)
    reconciler = PluginStatusReconciler(cluster, default_registry())
    name = "ovs-cni"
    for _ in range(3):  # the first writes status (a new stored state), then nothing changes
        reconciler.reconcile(name)
    status = cluster.get(r.NETWORK_PLUGINS, name)["status"]
    assert status["contractDigest"] and status["conditions"][0]["status"] == "True"
    assert checks == [name, name]


def test_a_passing_plugin_is_checked_once_per_content_and_a_failing_one_every_time(
    cluster: Cluster, monkeypatch: pytest.MonkeyPatch
) -> None:
    """What the language check reads (the object less status and metadata but its name)
    keys the passing checks: a new stored state with the same content — another API
    server's copy, or the plugin after its own status write — is not checked again; a
    changed spec is, and a failing check (its positions come from the served YAML, with
    metadata) is never kept."""
    from dmn.controller.compile import plugin_sources
    from dmn.opcodes.registry import default_registry

    monkeypatch.setattr(plugin_sources, "_PASSED", plugin_sources._PassedChecks())
    checked: list[str] = []
    real = plugin_sources.check_plugin

    def counted(plugin: Any, registry: Any) -> Any:
        checked.append(plugin.name)
        return real(plugin, registry)

    monkeypatch.setattr(plugin_sources, "check_plugin", counted)
    registry = default_registry()
    obj = cluster.get(r.NETWORK_PLUGINS, "ovs-cni")
    first, problems = plugin_sources.checked_plugin_object(obj, registry)
    assert first is not None and not problems and checked == ["ovs-cni"]
    elsewhere = copy.deepcopy(obj)
    elsewhere["metadata"] |= {"uid": "another", "resourceVersion": "9", "labels": {"a": "b"}}
    elsewhere["status"] = {"contractDigest": "x"}
    again, problems = plugin_sources.checked_plugin_object(elsewhere, registry)
    assert again is first and not problems and checked == ["ovs-cni"]
    # another registry object: checked anew, and what it gave is not shared
    plugin_sources.checked_plugin_object(obj, plugin_sources.OpcodeRegistry())
    assert len(checked) > 1
    assert len(plugin_sources._PASSED._entries) == 1
    changed = copy.deepcopy(obj)
    changed["spec"]["implementation"]["handler"] = "not-a-handler"
    for _ in range(2):
        _, problems = plugin_sources.checked_plugin_object(changed, registry)
        assert problems and problems[0].code == "E_CONFLICT"
    assert len(plugin_sources._PASSED._entries) == 1
