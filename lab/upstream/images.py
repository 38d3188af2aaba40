"""The upstream lab's images, built as docker-archive tarballs without any registry.

* ``localhost/dmn-lab/pause:1`` — the project's pause program (``pause/main.go``, built by
  ``build.py pause``) as ``/pause``; containerd's CRI uses it as the sandbox image.
* ``localhost/dmn-lab/busybox:1`` — Debian's static busybox (``busybox-static``) as
  ``/bin/busybox`` with applet links for ``sh ip ping nc sleep`` and a few more.
* with ``--multus`` only, a one-program image per static Go binary the lab runs as a Pod
  (:func:`program_archive`: Whereabouts' ``ip-control-loop``), tagged with its pin.

An archive is the format ``ctr images import`` reads: ``manifest.json`` (``RepoTags``), one
image config (os, architecture, rootfs diff id) and one uncompressed layer. Archives are
deterministic (fixed mtimes and owners), so rebuilding gives the same image ID.
:func:`import_images` imports them into containerd's ``k8s.io`` namespace and labels them
``io.cri-containerd.pinned=pinned`` so kubelet's image garbage collection keeps them.
Pods use ``imagePullPolicy: Never``.
"""

from __future__ import annotations

import hashlib
import io
import json
import subprocess
import tarfile
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

PAUSE_IMAGE = "localhost/dmn-lab/pause:1"
BUSYBOX_IMAGE = "localhost/dmn-lab/busybox:1"
BUSYBOX_BINARY = Path("/usr/bin/busybox")  # Debian busybox-static
BUSYBOX_APPLETS = (
    "sh", "ip", "ping", "nc", "sleep", "cat", "ls", "echo", "ps", "grep", "hostname",
    "ifconfig", "true", "false", "mkdir", "rm", "touch", "wget",
)  # fmt: skip
PINNED_LABEL = "io.cri-containerd.pinned=pinned"


class ImageError(Exception):
    def __init__(self, code: str, message: str) -> None:
        super().__init__(f"{code}: {message}")
        self.code, self.message = code, message


@dataclass(frozen=True)
class Entry:
    """One layer member: a regular file (``data``), a directory or a symlink (``target``)."""

    path: str
    data: bytes | None = None
    mode: int = 0o755
    target: str = ""


def _layer(entries: list[Entry]) -> bytes:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for e in entries:
            info = tarfile.TarInfo(e.path)
            info.mtime, info.uid, info.gid, info.mode = 0, 0, 0, e.mode
            if e.target:
                info.type, info.linkname = tarfile.SYMTYPE, e.target
                tar.addfile(info)
            elif e.data is None:
                info.type = tarfile.DIRTYPE
                tar.addfile(info)
            else:
                info.size = len(e.data)
                tar.addfile(info, io.BytesIO(e.data))
    return buf.getvalue()


def archive(tag: str, entries: list[Entry], config: Mapping[str, object]) -> bytes:
    """A docker-archive tarball holding one image: ``tag``, one layer of ``entries``."""
    layer = _layer(entries)
    diff_id = "sha256:" + hashlib.sha256(layer).hexdigest()
    image_config = {
        "architecture": "amd64",
        "os": "linux",
        "created": "1970-01-01T00:00:00Z",
        "config": config,
        "rootfs": {"type": "layers", "diff_ids": [diff_id]},
        "history": [{"created": "1970-01-01T00:00:00Z", "created_by": "dmn lab images"}],
    }
    config_bytes = json.dumps(image_config, sort_keys=True).encode()
    config_name = hashlib.sha256(config_bytes).hexdigest() + ".json"
    layer_name = diff_id.split(":", 1)[1] + "/layer.tar"
    manifest = [{"Config": config_name, "RepoTags": [tag], "Layers": [layer_name]}]
    members = [
        Entry(config_name, config_bytes, 0o644),
        Entry(layer_name, layer, 0o644),
        Entry("manifest.json", json.dumps(manifest).encode(), 0o644),
    ]
    return _layer(members)


def _base_dirs() -> list[Entry]:
    return [Entry(d) for d in ("dev", "proc", "sys", "etc", "tmp", "run", "var")]


def pause_archive(pause_binary: Path) -> bytes:
    entries = [*_base_dirs(), Entry("pause", pause_binary.read_bytes())]
    return archive(PAUSE_IMAGE, entries, {"Entrypoint": ["/pause"], "Env": ["PATH=/"]})


def busybox_archive(busybox: Path = BUSYBOX_BINARY) -> bytes:
    if not busybox.is_file():
        raise ImageError(
            "E_BUSYBOX_MISSING", f"{busybox} not found (apt-get install busybox-static)"
        )
    entries = [*_base_dirs(), Entry("bin"), Entry("bin/busybox", busybox.read_bytes())]
    entries += [Entry(f"bin/{applet}", target="busybox") for applet in BUSYBOX_APPLETS]
    entries.append(Entry("etc/passwd", b"root:x:0:0:root:/:/bin/sh\n", 0o644))
    entries.append(Entry("etc/group", b"root:x:0:\n", 0o644))
    config = {"Cmd": ["sh"], "Env": ["PATH=/bin"], "WorkingDir": "/"}
    return archive(BUSYBOX_IMAGE, entries, config)


def program_archive(tag: str, binary: Path) -> bytes:
    """An image holding one static program as ``/<name>``, its entrypoint."""
    entries = [*_base_dirs(), Entry(binary.name, binary.read_bytes())]
    return archive(tag, entries, {"Entrypoint": [f"/{binary.name}"], "Env": ["PATH=/"]})


def write_archive(directory: Path, ref: str, data: bytes) -> Path:
    """Write one image archive into ``directory``, named after the reference's last part."""
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / (ref.rsplit("/", 1)[-1].replace(":", "-") + ".tar")
    path.write_bytes(data)
    return path


def write_archives(directory: Path, pause_binary: Path) -> dict[str, Path]:
    """Write both archives into ``directory``; returns image reference → archive path."""
    return {
        ref: write_archive(directory, ref, data)
        for ref, data in (
            (PAUSE_IMAGE, pause_archive(pause_binary)),
            (BUSYBOX_IMAGE, busybox_archive()),
        )
    }


def import_images(ctr: Path, address: str, archives: dict[str, Path]) -> None:
    """Import each archive into containerd's CRI namespace and pin it."""
    base = [str(ctr), "--address", address, "--namespace", "k8s.io"]
    for ref, path in archives.items():
        for args in (
            ["images", "import", "--local", str(path)],
            ["images", "label", ref, PINNED_LABEL],
        ):
            proc = subprocess.run([*base, *args], capture_output=True, text=True, timeout=120)
            if proc.returncode != 0:
                detail = (proc.stderr or proc.stdout).strip().splitlines()[-1:] or ["no output"]
                raise ImageError("E_IMAGE_IMPORT", f"ctr {' '.join(args[:2])} {ref}: {detail[0]}")
