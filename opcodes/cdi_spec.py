"""The CDI spec file through which a container runtime hands a grant's nodes to containers.

One file per effect (a VFIO group, an RDMA device), in the agent's CDI directory (node
configuration, never workload config): ``dmn-<family>-<digest>.json``, where the digest is of
``dmn:<operation>:<effect>``, holding one CDI device of kind
``dra-multi-network.schseba.github.io/<family>`` whose ``containerEdits.deviceNodes`` are
exactly the verified nodes and whose ``containerEdits.env`` tells the workload what it got
(:func:`env_prefix`: ``DMN_VFIO_<DEVICE>_PCI_ADDRESS``/``_IOMMU_GROUP``,
``DMN_RDMA_<DEVICE>_DEVICE``/``_CHAR_DEVICES``). The spec's annotation names the owning
effect. Ownership is the exact content: undo removes the file only
when it still holds the bytes this effect wrote; anything else at that path is not ours and is
left alone (``E_CDI_SPEC`` on apply). Writes are atomic (temporary file + rename).

:class:`GrantSpec` is one effect's spec (path + exact bytes) with the write, the recovery
observation and the ownership-checked removal every device-access executor needs (VFIO and
RDMA share them; they differ only in how they find and verify the nodes).
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from dmn.opcodes.executor import ExecutorError, RecoveryObservation
from dmn.opcodes.granted_nodes import DeviceNode

_log = logging.getLogger(__name__)

CDI_VERSION = "0.6.0"
CDI_VENDOR = "dra-multi-network.schseba.github.io"
OWNER_ANNOTATION = "dra-multi-network.schseba.github.io/owner"


def device_name(owner: str) -> str:
    return "g" + hashlib.sha256(owner.encode()).hexdigest()[:20]


def spec_path(cdi_root: Path, family: str, owner: str) -> Path:
    return cdi_root / f"dmn-{family}-{device_name(owner)}.json"


def qualified_name(family: str, owner: str) -> str:
    """The fully qualified CDI device name (``vendor/class=name``) a runtime resolves."""
    return f"{CDI_VENDOR}/{family}={device_name(owner)}"


def env_prefix(family: str, owner: str) -> str:
    """The prefix of a grant's environment variables: ``DMN_<FAMILY>_<DEVICE>`` where
    ``<DEVICE>`` is the CDI device name upper-cased (``G`` and 20 hex digits). Distinct for
    every effect, so two grants in one container (two claims, two requests) never set the
    same variable; the workload finds its device's name in the claim's
    ``status.devices[].data.cdiDevices`` or the metadata file's ``grantCdiDevice``."""
    return f"DMN_{family.upper()}_{device_name(owner).upper()}"


def render(
    family: str,
    owner: str,
    nodes: tuple[DeviceNode, ...],
    env: Mapping[str, str] | None = None,
) -> str:
    """The spec's bytes; ``env`` (suffix -> value) becomes ``containerEdits.env`` entries
    ``<env_prefix>_<suffix>=<value>`` in the given order (none: no ``env`` key, the bytes an
    agent before the env edits wrote)."""
    edits: dict[str, Any] = {
        "deviceNodes": [
            {
                "path": n.path,
                "type": "c",
                "major": n.major,
                "minor": n.minor,
                "permissions": "rw",
            }
            for n in nodes
        ]
    }
    if env:
        prefix = env_prefix(family, owner)
        edits["env"] = [f"{prefix}_{key}={value}" for key, value in env.items()]
    spec = {
        "cdiVersion": CDI_VERSION,
        "kind": f"{CDI_VENDOR}/{family}",
        "annotations": {OWNER_ANNOTATION: owner},
        "devices": [
            {
                "name": device_name(owner),
                "containerEdits": edits,
            }
        ],
    }
    return json.dumps(spec, indent=1, sort_keys=True) + "\n"


def read(path: Path) -> str | None:
    try:
        return path.read_text()
    except FileNotFoundError:
        return None
    except OSError as exc:
        raise ExecutorError("E_CDI_SPEC", f"read {path}: {exc.strerror}") from exc


def write(path: Path, content: str) -> None:
    """Write ``content`` at ``path`` unless another content is there (not ours)."""
    existing = read(path)
    if existing == content:
        return
    if existing is not None:
        raise ExecutorError("E_CDI_SPEC", f"{path} exists with other content: not ours")
    tmp = path.with_name(f".{path.name}.tmp")
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        with open(tmp, "w") as out:
            out.write(content)
            out.flush()
            os.fsync(out.fileno())
        os.replace(tmp, path)
    except OSError as exc:
        raise ExecutorError("E_CDI_SPEC", f"write {path}: {exc.strerror}") from exc


def remove_if_ours(path: Path, content: str) -> bool:
    """Remove the file when it holds exactly ``content``; True when it is gone afterwards."""
    existing = read(path)
    if existing is None:
        return True
    if existing != content:
        return False
    try:
        path.unlink()
    except FileNotFoundError:
        pass
    except OSError as exc:
        raise ExecutorError("E_CDI_SPEC", f"remove {path}: {exc.strerror}") from exc
    return True


@dataclass(frozen=True, slots=True)
class GrantSpec:
    """The CDI spec of one effect's grant: where it lives and the exact bytes that make it
    ours. Built from the before-image alone (recorded nodes, the effect's alias), so undo and
    recovery never look anything up afresh."""

    path: Path
    content: str
    earlier: tuple[str, ...] = ()
    """The bytes an earlier agent wrote for the same grant (before the env edits): still
    this effect's file, so an upgraded agent observes, keeps and removes it as its own."""

    @classmethod
    def of(
        cls,
        cdi_root: Path,
        family: str,
        owner: str,
        nodes: tuple[DeviceNode, ...],
        env: Mapping[str, str] | None = None,
    ) -> GrantSpec:
        earlier = (render(family, owner, nodes),) if env else ()
        return cls(spec_path(cdi_root, family, owner), render(family, owner, nodes, env), earlier)

    def _ours(self, existing: str | None) -> bool:
        return existing == self.content or existing in self.earlier

    def write(self) -> None:
        if read(self.path) in self.earlier:
            return  # an earlier agent's bytes for this very grant: applied already
        write(self.path, self.content)

    def holds(self) -> bool:
        """The file holds exactly this grant."""
        return self._ours(read(self.path))

    def observe(self) -> RecoveryObservation:
        """After a crash: this exact content is Applied, no file NotApplied, other bytes
        Uncertain (someone else's file, or ours damaged: never claimed, never removed)."""
        existing = read(self.path)
        if existing is None:
            return RecoveryObservation.NOT_APPLIED
        if self._ours(existing):
            return RecoveryObservation.APPLIED
        return RecoveryObservation.UNCERTAIN

    def remove(self, effect_id: str) -> bool:
        """Undo: remove the file only while it holds this grant's bytes; another file at the
        path is left alone (logged). True when no file of ours remains."""
        if any(remove_if_ours(self.path, c) for c in (self.content, *self.earlier)):
            return True
        _log.warning("effect=%s event=undo-skip reason=cdi-spec-not-ours", effect_id)
        return False
