"""The CDI spec of a VFIO or RDMA grant (opcodes/cdi_spec.py): valid against the CDI schema,
its environment edits (what the grant gave, under names no second grant shares), and an
upgraded agent still owning the bytes an earlier agent wrote (no env edits) for the same
grant: observed Applied, kept by apply, removed by undo. The executors' own rendering is
checked from a recorded before-image (capture and the kernel checks need the kernel lab:
tests/kernel_lab/test_lab_pci.py and test_lab_rdma.py)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from dmn.host.netns import NamespaceIdentity, NamespaceRef
from dmn.opcodes import cdi_spec
from dmn.opcodes.cdi_spec import GrantSpec
from dmn.opcodes.device_environment import DeviceEnvironment
from dmn.opcodes.executor import EffectContext, RecoveryObservation
from dmn.opcodes.granted_nodes import DeviceNode
from dmn.opcodes.rdma.device_access import DeviceAccess as RdmaAccess
from dmn.opcodes.vfio.device_access import DeviceAccess as VfioAccess
from tests.device_metadata.cdi_schema import problems

NODES = (DeviceNode("/dev/vfio/vfio", 10, 196), DeviceNode("/dev/vfio/41", 243, 0))
ENV = {"PCI_ADDRESS": "0000:3b:02.1", "IOMMU_GROUP": "41"}


def test_the_grant_spec_is_valid_cdi_and_names_its_env_by_device(tmp_path: Path) -> None:
    spec = GrantSpec.of(tmp_path, "vfio", "dmn:op1:vfio", NODES, ENV)
    doc = json.loads(spec.content)
    assert problems(doc) == []
    name = cdi_spec.device_name("dmn:op1:vfio")
    (device,) = doc["devices"]
    assert device["name"] == name
    assert device["containerEdits"]["env"] == [
        f"DMN_VFIO_{name.upper()}_PCI_ADDRESS=0000:3b:02.1",
        f"DMN_VFIO_{name.upper()}_IOMMU_GROUP=41",
    ]
    other = json.loads(GrantSpec.of(tmp_path, "vfio", "dmn:op2:vfio", NODES, ENV).content)
    names = {e.split("=")[0] for e in device["containerEdits"]["env"]}
    assert names.isdisjoint(e.split("=")[0] for e in other["devices"][0]["containerEdits"]["env"])


def test_an_earlier_agents_bytes_stay_this_grants_own(tmp_path: Path) -> None:
    spec = GrantSpec.of(tmp_path, "vfio", "dmn:op1:vfio", NODES, ENV)
    earlier = cdi_spec.render("vfio", "dmn:op1:vfio", NODES)
    assert "env" not in earlier and spec.earlier == (earlier,)
    spec.path.write_text(earlier)
    assert spec.observe() is RecoveryObservation.APPLIED and spec.holds()
    spec.write()  # applied already: left as it is
    assert spec.path.read_text() == earlier
    assert spec.remove("e1") and not spec.path.exists()
    spec.path.write_text('{"someone": "else"}\n')
    assert spec.observe() is RecoveryObservation.UNCERTAIN
    assert not spec.remove("e1") and spec.path.exists()


def _ctx(tmp_path: Path, effect: str) -> EffectContext:
    host = NamespaceRef(NamespaceIdentity(dev=4, inode=1, boot_id="b"), "/proc/1/ns/net")
    env = DeviceEnvironment(host=host, cdi_root=tmp_path)
    return EffectContext("op1", effect, {}, {}, env)


def _env(path: Path) -> list[str]:
    doc: dict[str, Any] = json.loads(path.read_text())
    assert problems(doc) == []
    return list(doc["devices"][0]["containerEdits"]["env"])


def test_the_vfio_and_rdma_executors_write_what_the_grant_gave(tmp_path: Path) -> None:
    vfio = _ctx(tmp_path, "vfio")
    before = {
        "function": {"address": "0000:3b:02.1"},
        "group": "41",
        "nodes": [n.to_json() for n in NODES],
    }
    VfioAccess().apply(vfio, before)
    prefix = cdi_spec.env_prefix("vfio", vfio.alias)
    assert _env(cdi_spec.spec_path(tmp_path, "vfio", vfio.alias)) == [
        f"{prefix}_PCI_ADDRESS=0000:3b:02.1",
        f"{prefix}_IOMMU_GROUP=41",
    ]
    rdma = _ctx(tmp_path, "rdma")
    nodes = [
        DeviceNode("/dev/infiniband/uverbs2", 231, 194),
        DeviceNode("/dev/infiniband/rdma_cm", 10, 58),
    ]
    RdmaAccess().apply(
        rdma,
        {
            "device": {"index": 3, "name": "mlx5_2", "nodeGuid": "x"},
            "nodes": [n.to_json() for n in nodes],
        },
    )
    prefix = cdi_spec.env_prefix("rdma", rdma.alias)
    assert _env(cdi_spec.spec_path(tmp_path, "rdma", rdma.alias)) == [
        f"{prefix}_DEVICE=mlx5_2",
        f"{prefix}_CHAR_DEVICES=/dev/infiniband/uverbs2,/dev/infiniband/rdma_cm",
    ]
