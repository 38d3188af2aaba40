"""Every example topology compiles; its revision and DeviceClasses are valid objects;
every negative example fails with exactly the code its first line announces."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import cel
import kubernetes_validate
import pytest

from dmn.api.identity import DRIVER
from dmn.api.revision import NetworkTopologyRevision
from dmn.api.root_config import TopologyRootConfiguration
from dmn.controller.compile.compiler import compile_topology
from tests.compile.support import EXAMPLES, NEGATIVE, load_topology

EXAMPLE_FILES = sorted(EXAMPLES.glob("*.yaml"))
NEGATIVE_FILES = sorted(NEGATIVE.glob("*.yaml"))
REQUIRED = {
    "dual-vf-bond-vlan",
    "shared-macvlan",
    "shared-ipvlan",
    "host-device",
    "vfio",
    "rdma-kernel-vf",
}


def test_required_examples_exist() -> None:
    assert {p.stem for p in EXAMPLE_FILES} >= REQUIRED


@pytest.mark.parametrize("path", EXAMPLE_FILES, ids=lambda p: p.stem)
def test_example_compiles(path: Path, plugins: dict[str, Any]) -> None:
    data, source = load_topology(path)
    result = compile_topology(data, plugins, source=source, uid="11111111-2222")
    assert result.diagnostics == ()
    compiled = result.compiled
    assert compiled is not None
    rev = NetworkTopologyRevision.model_validate(compiled.revision)
    assert rev.spec.digest == compiled.digest
    assert compiled.revision_name.startswith(data["metadata"]["name"] + "-")
    assert compiled.revision_name.endswith(compiled.naming_digest[7:17])
    roots = sorted(
        (s for s in data["spec"]["steps"] if s["kind"] == "Allocation"), key=lambda s: s["id"]
    )
    classes = compiled.device_classes("rev-uid-1")
    assert [c["metadata"]["name"] for c in classes] == [r.device_class_name for r in rev.spec.roots]
    assert len(classes) == len(roots)
    for cls, root in zip(classes, roots, strict=True):
        kubernetes_validate.validate(cls, "1.37.0", strict=True)
        params = cls["spec"]["config"][0]["opaque"]["parameters"]
        trc = TopologyRootConfiguration.model_validate(params)
        assert trc.revision_ref.uid == "rev-uid-1"
        assert trc.revision_ref.digest == compiled.digest
        assert trc.root_step == root["id"]
        assert cls["spec"]["config"][0]["opaque"]["driver"] == DRIVER


def _device(attrs: dict[str, Any], driver: str = DRIVER) -> dict[str, Any]:
    return {"device": {"driver": driver, "attributes": {DRIVER: attrs}, "capacity": {}}}


def _matches(cls: dict[str, Any], device: dict[str, Any]) -> bool:
    return all(
        cel.compile(sel["cel"]["expression"]).execute(device) is True
        for sel in cls["spec"]["selectors"]
    )


def test_dual_vf_selectors_evaluate(plugins: dict[str, Any]) -> None:
    data, source = load_topology(EXAMPLES / "dual-vf-bond-vlan.yaml")
    compiled = compile_topology(data, plugins, source=source).compiled
    assert compiled is not None
    left = compiled.device_classes("u")[0]
    good = {
        "plugin": "sriov-cni",
        "mode": "kernel",
        "linkType": "ethernet",
        "allocationReady": True,
    }
    assert _matches(left, _device(good))
    assert not _matches(left, _device(good, driver="other.example.com"))
    assert not _matches(left, _device(good | {"allocationReady": False}))
    assert not _matches(left, _device(good | {"mode": "vfio"}))
    assert not _matches(left, _device(good | {"plugin": "host-cni"}))
    no_domain = {"device": {"driver": DRIVER, "attributes": {}, "capacity": {}}}
    assert not _matches(left, no_domain)  # no attribute of ours at all: a clean non-match
    for missing in good:
        attrs = {k: v for k, v in good.items() if k != missing}
        assert not _matches(left, _device(attrs)), f"device without {missing} must not match"


def test_hardware_selector_narrows_but_cannot_replace(plugins: dict[str, Any]) -> None:
    data, source = load_topology(EXAMPLES / "host-device.yaml")
    compiled = compile_topology(data, plugins, source=source).compiled
    assert compiled is not None
    (cls,) = compiled.device_classes("u")
    assert len(cls["spec"]["selectors"]) == 2
    base = {"plugin": "host-cni", "mode": "kernel", "linkType": "ethernet", "allocationReady": True}
    assert _matches(cls, _device(base | {"vendor": "0x15b3"}))
    assert not _matches(cls, _device(base | {"vendor": "0x8086"}))
    assert not _matches(cls, _device(base))  # vendor missing
    assert not _matches(cls, _device(base | {"vendor": "0x15b3", "plugin": "sriov-cni"}))


def test_conditional_ports_resolved(plugins: dict[str, Any]) -> None:
    vfio = compile_topology(load_topology(EXAMPLES / "vfio.yaml")[0], plugins).compiled
    rdma = compile_topology(load_topology(EXAMPLES / "rdma-kernel-vf.yaml")[0], plugins).compiled
    assert vfio is not None and rdma is not None
    assert {o["port"] for o in vfio.revision["spec"]["outputs"]} == {"device"}
    assert {o["port"] for o in rdma.revision["spec"]["outputs"]} == {"interface", "rdma"}


_EXPECT = re.compile(r"^# expect: (E_[A-Z_]+)")


@pytest.mark.parametrize("path", NEGATIVE_FILES, ids=lambda p: p.stem)
def test_negative_example(path: Path, plugins: dict[str, Any]) -> None:
    from dmn.interpreter.source import load_yaml_documents

    m = _EXPECT.match(path.read_text().splitlines()[0])
    assert m, f"{path} must start with '# expect: E_CODE'"
    docs, problems = load_yaml_documents(path.read_bytes(), str(path))
    diagnostics = list(problems)
    if docs and not problems:
        result = compile_topology(docs[0].data, plugins, source=docs[0].source)
        assert result.compiled is None
        diagnostics += result.diagnostics
    codes = [d.code.value for d in diagnostics]
    assert codes and set(codes) == {m.group(1)}, codes  # exactly its code, nothing else
    first = diagnostics[0]
    assert first.file == str(path) and first.line > 1 and first.path is not None


@pytest.mark.parametrize("name", ["shared-macvlan", "shared-ipvlan"])
def test_shared_roots_require_children_capacity(plugins: dict[str, Any], name: str) -> None:
    data, source = load_topology(EXAMPLES / f"{name}.yaml")
    compiled = compile_topology(data, plugins, source=source).compiled
    assert compiled is not None
    assert compiled.revision["spec"]["roots"][0]["shared"] is True
    (cls,) = compiled.device_classes("u")
    step = data["spec"]["steps"][0]
    attrs = {
        "plugin": step["pluginRef"]["name"],
        "mode": "bridge" if name == "shared-macvlan" else "l2",
        "linkType": "ethernet",
        "allocationReady": True,
    }
    shareable = _device(attrs)
    shareable["device"]["capacity"] = {DRIVER: {"children": "64"}}
    assert _matches(cls, shareable)
    assert not _matches(cls, _device(attrs))  # an exclusive persona is never a shared root


def test_exclusive_roots_are_not_shared(plugins: dict[str, Any]) -> None:
    data, _ = load_topology(EXAMPLES / "dual-vf-bond-vlan.yaml")
    compiled = compile_topology(data, plugins).compiled
    assert compiled is not None
    assert {r["shared"] for r in compiled.revision["spec"]["roots"]} == {False}
