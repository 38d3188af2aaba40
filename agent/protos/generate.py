"""Regenerate ``*_pb2.py`` (+ ``.pyi`` type stubs) / ``*_pb2_grpc.py`` from the ``.proto`` files.

Registered in ``cli/generate.py`` GENERATORS. protoc runs in-process through grpcio-tools
(pinned in the test extras so the output is byte-for-byte reproducible) into a temporary
directory; files that differ from the checked-in ones are reported and, unless ``check``,
written. Protos are compiled with ``-I <root>`` as ``dmn/agent/protos/<name>.proto`` so the
generated imports are absolute (``from dmn.agent.protos import ...``) and every file has a
project-unique name in the process-wide descriptor pool.
"""

from __future__ import annotations

import importlib.resources
import tempfile
from pathlib import Path

PROTO_DIR = "agent/protos"
IMPORT_PREFIX = "dmn/agent/protos"

# Services served or called over gRPC get *_pb2_grpc.py stubs; NRI and ttrpc messages are
# carried by our own ttrpc implementation and need message classes only.
GRPC_PROTOS = (
    "dra_v1.proto",
    "dra_v1beta1.proto",
    "pluginregistration_v1.proto",
    "dra_health_v1.proto",
    "dra_health_v1alpha1.proto",
    "grpc_health_v1.proto",
)
MESSAGE_PROTOS = ("nri_api.proto", "ttrpc_status.proto", "ttrpc_request.proto")


class ProtocError(RuntimeError):
    """protoc rejected a .proto file."""


def _protoc(root: Path, out: Path, protos: tuple[str, ...], grpc: bool) -> None:
    from grpc_tools import protoc

    include = str(importlib.resources.files("grpc_tools") / "_proto")
    args = [
        "grpc_tools.protoc",
        f"-I{root}",
        f"-I{include}",
        f"--python_out={out}",
        f"--pyi_out={out}",
    ]
    if grpc:
        args.append(f"--grpc_python_out={out}")
    args += [f"{IMPORT_PREFIX}/{name}" for name in protos]
    if protoc.main(args) != 0:
        raise ProtocError(f"protoc failed for {', '.join(protos)}")


def generate(root: Path, check: bool) -> list[str]:
    """Return repo-relative paths whose content differs; write them unless ``check``."""
    if not (root / "dmn" / "agent").exists():
        raise ProtocError(f"{root} has no dmn/agent; pass the repository root")
    drift: list[str] = []
    with tempfile.TemporaryDirectory(prefix="dmn-protos-") as tmp:
        out = Path(tmp)
        _protoc(root, out, GRPC_PROTOS, grpc=True)
        _protoc(root, out, MESSAGE_PROTOS, grpc=False)
        produced = sorted((out / IMPORT_PREFIX).glob("*.py*"))
        expected = {p.name for p in produced}
        for path in produced:
            target = root / PROTO_DIR / path.name
            data = path.read_bytes()
            if not target.exists() or target.read_bytes() != data:
                drift.append(f"{PROTO_DIR}/{path.name}")
                if not check:
                    target.write_bytes(data)
        for stale in sorted((root / PROTO_DIR).glob("*_pb2*.py*")):
            if stale.name not in expected:
                drift.append(f"{PROTO_DIR}/{stale.name}")
                if not check:
                    stale.unlink()
    return drift
