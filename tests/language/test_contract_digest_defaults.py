"""A plugin's contract digest depends on meaning, not on which defaults are spelled out."""

from __future__ import annotations

import pytest

from dmn.interpreter.documents import NetworkPlugin
from dmn.interpreter.loader import Plugin, load_builtin_plugins


@pytest.mark.parametrize("name", sorted(load_builtin_plugins()))
def test_stored_copy_with_defaults_written_out_has_the_same_digest(name: str) -> None:
    shipped = load_builtin_plugins()[name]
    # What an API server stores: every default of the CRD (generated from these models)
    # made explicit.
    stored = shipped.descriptor.model_dump(mode="json", by_alias=True, exclude_none=True)
    descriptor = NetworkPlugin.model_validate(stored)
    plugin = Plugin(descriptor=descriptor, source=shipped.source, programs=shipped.programs)
    if name in {"host-cni", "sriov-cni"}:  # their files leave some port defaults implicit
        explicit = {"mode": "json", "by_alias": True, "exclude_unset": True}
        assert descriptor.model_dump(**explicit) != shipped.descriptor.model_dump(**explicit)
    assert plugin.contract_digest == shipped.contract_digest


def test_a_changed_default_changes_the_digest() -> None:
    shipped = load_builtin_plugins()["host-cni"]
    data = shipped.descriptor.model_dump(mode="json", by_alias=True, exclude_none=True)
    port = next(iter(data["spec"]["outputs"].values()))
    port["maxItems"] = port.get("maxItems", 1) + 1
    plugin = Plugin(
        descriptor=NetworkPlugin.model_validate(data),
        source=shipped.source,
        programs=shipped.programs,
    )
    assert plugin.contract_digest != shipped.contract_digest
