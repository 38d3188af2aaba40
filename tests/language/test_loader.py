"""Plugin loading: directories, inline CRs, builtins, contract digests."""

from __future__ import annotations

import shutil
from pathlib import Path

from dmn.interpreter.diagnostics import Code
from dmn.interpreter.loader import (
    builtin_diagnostics,
    builtin_programs_root,
    load_builtin_plugins,
    load_plugin_dir,
    load_plugins,
)

from .support import OPERATION

BUILTIN_NAMES = {
    "host-cni",
    "sriov-cni",
    "macvlan-cni",
    "ipvlan-cni",
    "bond-cni",
    "vlan-cni",
    "accelerated-bridge-cni",
    "accelerated-bridge-cni-uplink",
    "ovs-cni",
    "multus-cni",
    "multus-cni-shared",
}


def test_builtins_load_with_their_programs() -> None:
    plugins = load_builtin_plugins()
    assert set(plugins) == BUILTIN_NAMES
    assert builtin_diagnostics() == []
    for plugin in plugins.values():
        assert plugin.programs, plugin.name
        assert plugin.descriptor.spec.implementation.type == "Builtin"
        for hook, prog in plugin.programs.items():
            assert prog.hook == hook
            assert prog.source.file.endswith(f"{plugin.name}/v1/{hook}.yaml")
    assert set(plugins["sriov-cni"].programs) == {"prepare", "connect"}
    assert set(plugins["vlan-cni"].programs) == {"connect"}


def copy_builtin(tmp: Path, name: str) -> Path:
    dest = tmp / name / "v1"
    shutil.copytree(builtin_programs_root() / name / "v1", dest)
    return dest


def test_contract_digest_is_stable_and_content_addressed(tmp_path: Path) -> None:
    original = load_builtin_plugins()["vlan-cni"]
    dest = copy_builtin(tmp_path, "vlan-cni")
    copy, diags = load_plugin_dir(dest)
    assert copy is not None and not diags
    assert copy.contract_digest == original.contract_digest
    text = (dest / "connect.yaml").read_text()
    (dest / "connect.yaml").write_text("# a comment changes nothing\n" + text)
    again, _ = load_plugin_dir(dest)
    assert again is not None and again.contract_digest == original.contract_digest
    (dest / "connect.yaml").write_text(
        text.replace("{kind: link-state-match}", "{kind: link-in-sandbox}")
    )
    changed, _ = load_plugin_dir(dest)
    assert changed is not None and changed.contract_digest != original.contract_digest


def test_hook_defined_twice_and_wrong_hook_file(tmp_path: Path) -> None:
    dest = copy_builtin(tmp_path, "vlan-cni")
    plugin_yaml = dest / "plugin.yaml"
    connect = (dest / "connect.yaml").read_text()
    inline = "    connect: {effects: []}\n"
    plugin_yaml.write_text(plugin_yaml.read_text().replace("  hooks:\n", "  hooks:\n" + inline))
    plugin, diags = load_plugin_dir(dest)
    assert plugin is not None
    assert [(d.code, d.file) for d in diags] == [(Code.E_SCHEMA, str(dest / "connect.yaml"))]
    (dest / "prepare.yaml").write_text(connect)
    _, diags = load_plugin_dir(dest)
    assert any("holds a 'connect' program" in d.message for d in diags)


def test_missing_or_broken_plugin_yaml(tmp_path: Path) -> None:
    plugin, diags = load_plugin_dir(tmp_path)
    assert plugin is None and [d.code for d in diags] == [Code.E_IO]
    (tmp_path / "plugin.yaml").write_text("kind: HookProgram\n")
    plugin, diags = load_plugin_dir(tmp_path)
    assert plugin is None and diags and all(d.code is Code.E_SCHEMA for d in diags)


def test_load_plugins_finds_directories_and_inline_crs(tmp_path: Path) -> None:
    copy_builtin(tmp_path, "bond-cni")
    (tmp_path / "extra.yaml").write_text(OPERATION)
    (tmp_path / "dup.yaml").write_text(OPERATION)
    plugins, diags = load_plugins(tmp_path)
    assert set(plugins) == {"bond-cni", "op"}
    assert [d.code for d in diags] == [Code.E_SCHEMA]  # 'op' defined twice
    _, diags = load_plugins(tmp_path / "nope")
    assert [d.code for d in diags] == [Code.E_IO]


def test_contract_digests_from_many_threads_at_the_cache_bound() -> None:
    """The controller's workers, the webhook and the agent ask for digests concurrently; at
    the cache's bound one thread evicted while another inserted, and the evicting thread
    raised 'dictionary changed size during iteration' (seen in the controller's log)."""
    import dataclasses
    import sys
    import threading

    from dmn.interpreter import loader

    shipped = next(iter(load_builtin_plugins().values()))
    expected = shipped.contract_digest
    errors: list[BaseException] = []

    def digest_fresh_copies() -> None:
        try:
            for _ in range(1500):
                copy = dataclasses.replace(shipped)
                assert copy.contract_digest == expected
        except BaseException as exc:
            errors.append(exc)

    interval = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)
    try:
        threads = [threading.Thread(target=digest_fresh_copies) for _ in range(8)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    finally:
        sys.setswitchinterval(interval)
    assert errors == []
    assert len(loader._DIGESTS) <= loader._DIGESTS_KEPT
