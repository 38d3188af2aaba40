"""Character device nodes a grant hands to a container: their wire form and kernel check.

A grant (VFIO group, RDMA device) is carried in its output handle as one ``deviceNodes``
observation, ``"<path> <major>:<minor>,..."`` — what the agent turns into NRI CreateContainer
device adjustments and the CDI spec's ``deviceNodes``. :func:`verified` proves a node under the
node's ``/dev`` is a character device with exactly the ``major:minor`` the kernel reports
(never a path from config: callers build ``relative`` from kernel-given names).
"""

from __future__ import annotations

import os
import re
import stat
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from dmn.opcodes.executor import ExecutorError

_NODE = re.compile(r"^(/dev/[A-Za-z0-9_./-]+) (\d+):(\d+)$")


@dataclass(frozen=True, slots=True)
class DeviceNode:
    path: str
    """Path inside the container (the same as on the node)."""
    major: int
    minor: int

    def to_json(self) -> dict[str, Any]:
        return {"path": self.path, "major": self.major, "minor": self.minor}

    @classmethod
    def from_json(cls, data: Any) -> DeviceNode:
        return cls(str(data["path"]), int(data["major"]), int(data["minor"]))


def encode(nodes: tuple[DeviceNode, ...]) -> str:
    return ",".join(f"{n.path} {n.major}:{n.minor}" for n in nodes)


def decode(text: str) -> tuple[DeviceNode, ...]:
    """The nodes of a ``deviceNodes`` observation; malformed entries raise ``E_DEVICE_NODE``."""
    out: list[DeviceNode] = []
    for entry in filter(None, text.split(",")):
        match = _NODE.fullmatch(entry)
        if match is None or ".." in match.group(1):
            raise ExecutorError("E_DEVICE_NODE", f"malformed device node entry {entry!r}")
        out.append(DeviceNode(match.group(1), int(match.group(2)), int(match.group(3))))
    return tuple(out)


def node_device(path: Path) -> int | None:
    """``st_rdev`` of the character device node at ``path``, or None when there is none."""
    try:
        st = os.stat(path)
    except FileNotFoundError:
        return None
    except OSError as exc:
        raise ExecutorError("E_DEVICE_NODE", f"stat {path}: {exc.strerror}") from exc
    return st.st_rdev if stat.S_ISCHR(st.st_mode) else None


def verified(dev_root: Path, relative: str, kernel: tuple[int, int], code: str) -> DeviceNode:
    """The node ``dev_root/relative`` exists, is a character device, and is the kernel's
    ``kernel`` (major, minor); else ``code``."""
    path = dev_root / relative
    rdev = node_device(path)
    if rdev is None:
        raise ExecutorError(code, f"{path} is missing or not a character device")
    if (os.major(rdev), os.minor(rdev)) != kernel:
        raise ExecutorError(
            code,
            f"{path} is {os.major(rdev)}:{os.minor(rdev)}, the kernel's is {kernel[0]}:{kernel[1]}",
        )
    return DeviceNode("/dev/" + relative, *kernel)
