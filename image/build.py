"""Build the project's container image without a container engine.

Why: no container engine runs on the machines that build and test this project, yet the
chart needs an image that kubelet/containerd can run. So the image is assembled from
Debian's own packages (``mmdebstrap`` of bookworm, the distribution whose Python 3.11 the
project supports) plus a virtual environment holding the project's wheel and the exact
runtime dependency versions the development environment resolved (the product's
dependencies only: no extras), and written as an OCI
image archive (``oci-layout`` + ``index.json`` + blobs, with a ``manifest.json`` for
docker-archive readers) that ``ctr images import`` and ``docker load`` accept. The
``Dockerfile`` at the repository root produces the equivalent image with an engine.

Contract:
- Two layers. The base layer (Debian + venv with the pinned runtime dependencies) is
  cached under ``<cache>/base-<key>`` keyed by this script's recipe, the Debian suite, the
  package list and the pinned dependency versions; the application layer (the project's
  wheel, installed ``--no-deps``) under ``<cache>/image-<key>`` keyed by the base key and
  the wheel's contents. A ``.complete`` stamp is written last; a stamped directory is
  reused untouched. Only the newest few image directories are kept.
- The wheel is the product-only one (``DMN_WHEEL=product``, see ``setup.py``): no lab
  (``dmn.lab``, ``dmn.cli.lab``) and none of the data only the lab reads (chart, examples);
  a wheel that carries any of it is refused. ``dmn lab`` in the image says it is not
  installed (``E_LAB_NOT_INSTALLED``).
- ``<cache>`` is ``$DMN_IMAGE_CACHE`` or ``/var/cache/dmn-image`` — outside the clone.
  One build at a time per cache (an exclusive lock on ``<cache>/.build.lock``): two test
  processes may ask at once (the helm e2e lab and ``tests/image``), and a second build of
  the same key would remove the first one's half-written directory.
- The image's default user is ``dmn`` (65532:65532, non-root): the controller runs as
  it; the node agent's DaemonSet overrides the user and states its capabilities.
- Layer tars are deterministic: sorted entries, mtimes clamped to ``SOURCE_DATE_EPOCH``
  (default 0), no ``/dev``/``/proc``/``/sys``/``/tmp`` contents.

Runs with the system ``python3`` (stdlib only) as root; ``--python`` names the project's
venv interpreter (default ``.venv/bin/python``), used to build the wheel and to read the
resolved dependency versions. Prints one JSON object: the rootfs, the archive and sizes.
"""

from __future__ import annotations

import argparse
import contextlib
import fcntl
import gzip
import hashlib
import json
import logging
import os
import shutil
import subprocess
import sys
import tarfile
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

LOG = logging.getLogger("dmn.image.build")
ROOT = Path(__file__).resolve().parent.parent
DEFAULT_CACHE = Path("/var/cache/dmn-image")
RECIPE = "3"  # bump when the steps below change what lands in the image
SUITE = "bookworm"
MIRROR = "http://deb.debian.org/debian"
PACKAGES = ("python3", "python3-venv", "libudev1", "ca-certificates")
VENV = "/opt/dmn"
USER_ID = 65532
IMAGE_NAME = "dra-multi-network"
SOURCE_ONLY = frozenset({"ovs"})
"""Runtime requirements PyPI serves only as a source distribution (the ``ovs`` IDL 3.x)."""
KEEP_IMAGES = 3
LAB_MEMBERS = ("dmn/lab/", "dmn/cli/lab/", "dmn/charts/", "dmn/examples/")
"""What the product-only wheel must not carry: the lab, its command, the data only it reads."""
EXCLUDED_CONTENT = ("dev", "proc", "sys", "tmp", "run")
# Documentation, manuals and locales are not needed to run the driver.
DPKG_EXCLUDES = (
    "path-exclude=/usr/share/doc/*",
    "path-include=/usr/share/doc/*/copyright",
    "path-exclude=/usr/share/man/*",
    "path-exclude=/usr/share/info/*",
    "path-exclude=/usr/share/locale/*",
    "path-exclude=/usr/share/lintian/*",
)

# Closure of the project's runtime requirements (no extras) as installed in a venv.
_PINS_SCRIPT = r"""
import importlib.metadata as md, json, re
from packaging.requirements import Requirement
def norm(n): return re.sub(r"[-_.]+", "-", n).lower()
seen, todo = {}, ["dra-multi-network"]
while todo:
    name = todo.pop()
    try: d = md.distribution(name)
    except md.PackageNotFoundError: raise SystemExit(f"{name} not in the venv (make setup)")
    k = norm(d.metadata["Name"])
    if k in seen: continue
    seen[k] = d.version
    for r in d.requires or []:
        q = Requirement(r)
        if q.marker is None or q.marker.evaluate({"extra": ""}): todo.append(q.name)
seen.pop("dra-multi-network")
print(json.dumps(sorted(f"{k}=={v}" for k, v in seen.items())))
"""


@dataclass(frozen=True)
class Built:
    rootfs: Path
    archive: Path
    archive_bytes: int
    rootfs_bytes: int
    layers: list[dict[str, object]]


def cache_root() -> Path:
    return Path(os.environ.get("DMN_IMAGE_CACHE", str(DEFAULT_CACHE)))


def _epoch() -> int:
    return int(os.environ.get("SOURCE_DATE_EPOCH", "0"))


def _shown(arg: str) -> str:
    """An argument as the log shows it: an inline script by its first line only."""
    lines = [line for line in arg.splitlines() if line.strip()]
    return arg if len(lines) <= 1 else f"{lines[0].strip()} ...({len(lines)} lines)"


def _run(cmd: list[str], **kw: object) -> subprocess.CompletedProcess[str]:
    LOG.info("run %s", " ".join(_shown(arg) for arg in cmd))
    proc = subprocess.run(cmd, capture_output=True, text=True, **kw)  # type: ignore[call-overload]
    if proc.returncode != 0:
        sys.stderr.write(proc.stdout[-4000:] + proc.stderr[-4000:])
        raise RuntimeError(f"{cmd[0]} {' '.join(cmd[1:3])} failed (exit {proc.returncode})")
    return proc  # type: ignore[no-any-return]


def runtime_pins(python: Path) -> list[str]:
    out = _run([str(python), "-c", _PINS_SCRIPT]).stdout
    return list(json.loads(out))


def _digest(*parts: str) -> str:
    h = hashlib.sha256()
    for p in parts:
        h.update(p.encode())
        h.update(b"\0")
    return h.hexdigest()[:16]


def _chroot(rootfs: Path, *cmd: str) -> subprocess.CompletedProcess[str]:
    env = {"PATH": "/usr/sbin:/usr/bin:/sbin:/bin", "HOME": "/root", "LANG": "C.UTF-8"}
    return _run(["chroot", str(rootfs), *cmd], env=env)


def _add_user(rootfs: Path) -> None:
    passwd, group = rootfs / "etc/passwd", rootfs / "etc/group"
    if f":{USER_ID}:" not in passwd.read_text():
        with passwd.open("a") as fh:
            fh.write(
                f"dmn:x:{USER_ID}:{USER_ID}:dra-multi-network:/nonexistent:/usr/sbin/nologin\n"
            )
        with group.open("a") as fh:
            fh.write(f"dmn:x:{USER_ID}:\n")


def _clean(rootfs: Path) -> None:
    caches = ("var/lib/apt/lists", "var/cache/apt", "var/cache/debconf", "var/log", "root/.cache")
    for rel in caches:
        path = rootfs / rel
        if path.is_dir():
            for child in path.iterdir():
                if child.is_dir() and not child.is_symlink():
                    shutil.rmtree(child)
                else:
                    child.unlink()
    tmp = rootfs / "tmp"
    for child in tmp.iterdir() if tmp.is_dir() else ():
        if child.is_dir() and not child.is_symlink():
            shutil.rmtree(child)
        else:
            child.unlink()
    (rootfs / "etc/resolv.conf").unlink(missing_ok=True)
    (rootfs / "etc/hostname").unlink(missing_ok=True)


def _name(pin: str) -> str:
    return pin.split("==", 1)[0]


def build_base(python: Path, pins: list[str]) -> tuple[Path, str]:
    key = _digest(RECIPE, SUITE, MIRROR, *PACKAGES, *DPKG_EXCLUDES, *pins)
    base = cache_root() / f"base-{key}"
    if (base / ".complete").exists() and (base / "layer.json").exists():
        return base, key
    shutil.rmtree(base, ignore_errors=True)
    base.mkdir(parents=True)
    rootfs = base / "rootfs"
    cmd = ["mmdebstrap", "--variant=minbase", "--mode=root", f"--include={','.join(PACKAGES)}"]
    cmd += [f"--dpkgopt={opt}" for opt in DPKG_EXCLUDES]
    cmd += [SUITE, str(rootfs), MIRROR]
    _run(cmd, env={**os.environ, "SOURCE_DATE_EPOCH": str(_epoch())})
    # The wheels are fetched by the host's pip (its index and CA settings), then installed
    # inside the root filesystem from that directory only: no network inside the chroot.
    wheelhouse = rootfs / "tmp/wheels"
    wheelhouse.mkdir(parents=True)
    (wheelhouse / "pins.txt").write_text("\n".join(pins) + "\n")
    binary = [p for p in pins if _name(p) not in SOURCE_ONLY]
    (wheelhouse / "binary.txt").write_text("\n".join(binary) + "\n")
    _run(
        [
            str(python),
            "-m",
            "pip",
            "download",
            "-q",
            "--only-binary=:all:",
            "--no-deps",
            "-d",
            str(wheelhouse),
            "-r",
            str(wheelhouse / "binary.txt"),
        ]
    )
    for pin in sorted(set(pins) - set(binary)):
        # published as a source distribution only: built into a wheel here, on the host,
        # from that sdist (pure Python: no C extension is built without OVS's headers)
        _run(
            [str(python), "-m", "pip", "wheel", "-q", "--no-deps", "--no-binary", _name(pin),
             "-w", str(wheelhouse), pin],
            env={**os.environ, "SOURCE_DATE_EPOCH": str(_epoch())},
        )  # fmt: skip
    _chroot(rootfs, "python3", "-m", "venv", VENV)
    _chroot(
        rootfs,
        f"{VENV}/bin/pip",
        "install",
        "-q",
        "--no-cache-dir",
        "--no-index",
        "--find-links=/tmp/wheels",
        "-r",
        "/tmp/wheels/pins.txt",
    )
    _add_user(rootfs)
    _clean(rootfs)
    write_layer(rootfs, base / "layer.tar", only=None)
    (base / "blob").mkdir()
    _save_layer(_gzip_blob(base / "layer.tar", base / "blob"), base)
    (base / "layer.tar").unlink()
    (base / ".complete").write_text(json.dumps({"recipe": RECIPE, "pins": pins}) + "\n")
    return base, key


def build_wheel(python: Path, out: Path) -> Path:
    out.mkdir(parents=True, exist_ok=True)
    _run(
        [
            str(python),
            "-m",
            "pip",
            "wheel",
            "-q",
            "--no-deps",
            "--no-build-isolation",
            "-w",
            str(out),
            str(ROOT),
        ],
        env={**os.environ, "SOURCE_DATE_EPOCH": str(_epoch()), "DMN_WHEEL": "product"},
    )
    wheels = sorted(out.glob("dra_multi_network-*.whl"))
    if len(wheels) != 1:
        raise RuntimeError(f"expected one wheel in {out}, found {len(wheels)}")
    lab = lab_members(wheels[0])
    if lab:
        raise RuntimeError(f"the product wheel carries the lab: {lab[:3]}")
    return wheels[0]


def lab_members(wheel: Path) -> list[str]:
    """The wheel's members that belong to the lab (empty for a product-only wheel)."""
    import zipfile

    with zipfile.ZipFile(wheel) as zf:
        return [n for n in zf.namelist() if n.startswith(LAB_MEMBERS)]


def wheel_digest(wheel: Path) -> str:
    """Digest of the wheel's member names and contents (zip timestamps ignored)."""
    import zipfile

    h = hashlib.sha256()
    with zipfile.ZipFile(wheel) as zf:
        for name in sorted(zf.namelist()):
            h.update(name.encode() + b"\0" + zf.read(name) + b"\0")
    return h.hexdigest()


def _snapshot(rootfs: Path) -> dict[str, tuple[int, int, int]]:
    out: dict[str, tuple[int, int, int]] = {}
    for dirpath, dirnames, filenames in os.walk(rootfs):
        for name in dirnames + filenames:
            p = Path(dirpath, name)
            st = p.lstat()
            out[str(p.relative_to(rootfs))] = (st.st_mode, st.st_size, st.st_mtime_ns)
    return out


def _tar_filter(info: tarfile.TarInfo) -> tarfile.TarInfo:
    info.mtime = min(int(info.mtime), _epoch()) if _epoch() else 0
    info.uname = info.gname = ""
    return info


def write_layer(rootfs: Path, target: Path, only: set[str] | None) -> None:
    """A deterministic uncompressed layer tar of ``rootfs`` (or of the paths in ``only``)."""
    names: list[str] = []
    for dirpath, dirnames, filenames in os.walk(rootfs):
        dirnames.sort()
        rel_dir = Path(dirpath).relative_to(rootfs)
        top = rel_dir.parts[0] if rel_dir.parts else ""
        if top in EXCLUDED_CONTENT:
            dirnames[:] = []
            continue
        for name in sorted(dirnames + filenames):
            rel = str(rel_dir / name) if rel_dir.parts else name
            if only is None or rel in only:
                names.append(rel)
    with tarfile.open(target, "w", format=tarfile.PAX_FORMAT) as tar:
        for rel in sorted(names):
            tar.add(rootfs / rel, arcname=rel, recursive=False, filter=_tar_filter)


def _gzip_blob(layer_tar: Path, blobs: Path) -> tuple[str, str, int]:
    """(diff_id, blob digest, blob size) of a layer, written gzip'd into ``blobs``."""
    diff = hashlib.sha256()
    tmp = blobs / "layer.tmp"
    with (
        layer_tar.open("rb") as src,
        tmp.open("wb") as raw,
        gzip.GzipFile(fileobj=raw, mode="wb", mtime=0, compresslevel=6) as gz,
    ):
        while chunk := src.read(1 << 20):
            diff.update(chunk)
            gz.write(chunk)
    blob = hashlib.sha256(tmp.read_bytes()).hexdigest()
    size = tmp.stat().st_size
    tmp.rename(blobs / blob)
    return f"sha256:{diff.hexdigest()}", f"sha256:{blob}", size


def _json_blob(obj: object, blobs: Path) -> tuple[str, int]:
    data = json.dumps(obj, sort_keys=True, separators=(",", ":")).encode()
    digest = hashlib.sha256(data).hexdigest()
    (blobs / digest).write_bytes(data)
    return f"sha256:{digest}", len(data)


def image_config(diff_ids: list[str], version: str) -> dict[str, object]:
    return {
        "architecture": "amd64",
        "os": "linux",
        "created": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(_epoch())),
        "config": {
            "User": f"{USER_ID}:{USER_ID}",
            "Env": [
                f"PATH={VENV}/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
                "PYTHONUNBUFFERED=1",
            ],
            "Entrypoint": [f"{VENV}/bin/dmn"],
            "Cmd": ["--help"],
            "WorkingDir": "/",
            "Labels": {
                "org.opencontainers.image.title": IMAGE_NAME,
                "org.opencontainers.image.version": version,
                "org.opencontainers.image.licenses": "Apache-2.0",
            },
        },
        "rootfs": {"type": "layers", "diff_ids": diff_ids},
        "history": [
            {"created_by": f"mmdebstrap {SUITE} + venv {VENV} with pinned dependencies"},
            {"created_by": f"pip install --no-deps dra-multi-network {version}"},
        ],
    }


@dataclass(frozen=True)
class Layer:
    """A gzip'd layer blob on disk with its digests."""

    diff_id: str
    digest: str
    size: int
    blob: Path


def _save_layer(described: tuple[str, str, int], where: Path) -> Layer:
    diff_id, digest, size = described
    layer = Layer(diff_id, digest, size, where / "blob" / digest.split(":")[1])
    doc = {"diff_id": diff_id, "digest": digest, "size": size}
    (where / "layer.json").write_text(json.dumps(doc) + "\n")
    return layer


def _load_layer(where: Path) -> Layer:
    doc = json.loads((where / "layer.json").read_text())
    blob = where / "blob" / doc["digest"].split(":")[1]
    return Layer(doc["diff_id"], doc["digest"], doc["size"], blob)


def write_archive(layers_in: list[Layer], version: str, target: Path) -> list[dict[str, object]]:
    """An OCI image archive (with a docker-archive manifest.json) of the given layers."""
    ref = f"{IMAGE_NAME}:{version}"
    with tempfile.TemporaryDirectory(dir=target.parent) as tmp:
        layout = Path(tmp)
        blobs = layout / "blobs/sha256"
        blobs.mkdir(parents=True)
        layers = []
        for layer in layers_in:
            os.link(layer.blob, blobs / layer.blob.name)
            layers.append({"diff_id": layer.diff_id, "digest": layer.digest, "size": layer.size})
        config = image_config([str(x["diff_id"]) for x in layers], version)
        config_digest, config_size = _json_blob(config, blobs)
        manifest = {
            "schemaVersion": 2,
            "mediaType": "application/vnd.oci.image.manifest.v1+json",
            "config": {
                "mediaType": "application/vnd.oci.image.config.v1+json",
                "digest": config_digest,
                "size": config_size,
            },
            "layers": [
                {
                    "mediaType": "application/vnd.oci.image.layer.v1.tar+gzip",
                    "digest": x["digest"],
                    "size": x["size"],
                }
                for x in layers
            ],
        }
        manifest_digest, manifest_size = _json_blob(manifest, blobs)
        index = {
            "schemaVersion": 2,
            "mediaType": "application/vnd.oci.image.index.v1+json",
            "manifests": [
                {
                    "mediaType": "application/vnd.oci.image.manifest.v1+json",
                    "digest": manifest_digest,
                    "size": manifest_size,
                    "annotations": {
                        "io.containerd.image.name": f"docker.io/library/{ref}",
                        "org.opencontainers.image.ref.name": version,
                    },
                    "platform": {"architecture": "amd64", "os": "linux"},
                }
            ],
        }
        (layout / "index.json").write_text(json.dumps(index, sort_keys=True))
        (layout / "oci-layout").write_text('{"imageLayoutVersion":"1.0.0"}')
        docker_manifest = [
            {
                "Config": f"blobs/sha256/{config_digest.split(':')[1]}",
                "RepoTags": [ref],
                "Layers": [f"blobs/sha256/{str(x['digest']).split(':')[1]}" for x in layers],
            }
        ]
        (layout / "manifest.json").write_text(json.dumps(docker_manifest))
        partial = target.with_suffix(".partial")
        with tarfile.open(partial, "w", format=tarfile.PAX_FORMAT) as tar:
            for path in sorted(layout.rglob("*")):
                tar.add(
                    path, arcname=str(path.relative_to(layout)), recursive=False, filter=_tar_filter
                )
        partial.rename(target)
    return layers


def _du(path: Path) -> int:
    total = 0
    for dirpath, _, filenames in os.walk(path):
        for name in filenames:
            p = Path(dirpath, name)
            if not p.is_symlink():
                total += p.lstat().st_size
    return total


def _prune(keep: Path, base: Path) -> None:
    """Keep the newest few image directories and the base in use (plus one older base)."""
    for pattern, count, current in (("image-*", KEEP_IMAGES, keep), ("base-*", 2, base)):
        dirs = sorted(cache_root().glob(pattern), key=lambda p: p.stat().st_mtime, reverse=True)
        for old in dirs[count:]:
            if old != current:
                shutil.rmtree(old, ignore_errors=True)


def project_version() -> str:
    import tomllib

    with (ROOT / "pyproject.toml").open("rb") as fh:
        return str(tomllib.load(fh)["project"]["version"])


def ensure(python: Path) -> Built:
    """Build (or reuse) the image for the current checkout; see the module contract."""
    cache_root().mkdir(parents=True, exist_ok=True)
    with (cache_root() / ".build.lock").open("a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            return _ensure(python)
        finally:
            with contextlib.suppress(OSError):
                fcntl.flock(lock, fcntl.LOCK_UN)


def _ensure(python: Path) -> Built:
    pins = runtime_pins(python)
    base, base_key = build_base(python, pins)
    version = project_version()
    with tempfile.TemporaryDirectory() as tmp:
        wheel = build_wheel(python, Path(tmp))
        key = _digest(base_key, wheel_digest(wheel))
        image = cache_root() / f"image-{key}"
        if not (image / ".complete").exists():
            shutil.rmtree(image, ignore_errors=True)
            image.mkdir(parents=True)
            rootfs = image / "rootfs"
            _run(["cp", "-a", str(base / "rootfs"), str(rootfs)])
            before = _snapshot(rootfs)
            shutil.copy(wheel, rootfs / "tmp" / wheel.name)
            _chroot(
                rootfs,
                f"{VENV}/bin/pip",
                "install",
                "-q",
                "--no-deps",
                "--no-cache-dir",
                "--no-compile",
                f"/tmp/{wheel.name}",
            )
            _chroot(
                rootfs,
                f"{VENV}/bin/python",
                "-m",
                "compileall",
                "-q",
                f"{VENV}/lib/python3.11/site-packages/dmn",
            )
            _clean(rootfs)
            after = _snapshot(rootfs)
            removed = sorted(set(before) - set(after))
            if removed:
                raise RuntimeError(f"installing the wheel removed base files: {removed[:5]}")
            changed = {p for p, v in after.items() if before.get(p) != v}
            write_layer(rootfs, image / "app-layer.tar", only=changed)
            (image / "blob").mkdir()
            app = _save_layer(_gzip_blob(image / "app-layer.tar", image / "blob"), image)
            write_archive([_load_layer(base), app], version, image / "image.tar")
            (image / "app-layer.tar").unlink()
            (image / ".complete").write_text(json.dumps({"base": base_key}) + "\n")
    os.utime(image)
    os.utime(base)
    _prune(image, base)
    archive = image / "image.tar"
    index = json.loads(_read_member(archive, "index.json"))
    manifest_digest = index["manifests"][0]["digest"].split(":")[1]
    manifest = json.loads(_read_member(archive, f"blobs/sha256/{manifest_digest}"))
    return Built(
        rootfs=image / "rootfs",
        archive=archive,
        archive_bytes=archive.stat().st_size,
        rootfs_bytes=_du(image / "rootfs"),
        layers=[{"digest": x["digest"], "size": x["size"]} for x in manifest["layers"]],
    )


def _read_member(archive: Path, name: str) -> bytes:
    with tarfile.open(archive) as tar:
        member = tar.extractfile(name)
        if member is None:
            raise RuntimeError(f"{archive}: {name} is not a file")
        return member.read()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--python", type=Path, default=ROOT / ".venv/bin/python")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s")
    started = time.monotonic()
    try:
        built = ensure(args.python)
    except (RuntimeError, OSError, subprocess.SubprocessError) as exc:
        LOG.error("E_IMAGE_BUILD %s", exc)
        return 1
    result = {
        "rootfs": str(built.rootfs),
        "archive": str(built.archive),
        "archive_bytes": built.archive_bytes,
        "rootfs_bytes": built.rootfs_bytes,
        "layers": built.layers,
        "seconds": round(time.monotonic() - started, 1),
    }
    print(json.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
