"""The kernel lab's boot image: a stock Debian kernel plus a tiny initramfs, cached on disk.

The host kernel lacks bonding, 802.1Q, ipvlan, dummy and bridge VLAN filtering, so tests that
need them run inside a Debian kernel booted under qemu (design §11). This module prepares what
that boot needs, once per cache directory (:data:`CACHE_ROOT`):

* the kernel package named by the ``linux-image-amd64`` metapackage, downloaded with
  ``apt-get download`` and unpacked with ``dpkg -x`` (never installed), ``depmod`` run on it;
* an uncompressed ELF ``vmlinux`` cut out of the xz-compressed bzImage, because qemu boots it
  directly (PVH) and skips the in-guest decompression that is slow under TCG;
* ``netdevsim.ko`` built out of tree for that exact kernel (``extra_modules.py``), so the
  device opcodes have a real SR-IOV/devlink/switchdev substrate;
* an initramfs (newc cpio, gzip) holding static busybox, the virtio/9p/overlay modules in
  dependency order and ``guest_init.sh`` as ``/init``.

Run ``python -m tests.kernel_lab.image`` to prepare the cache ahead of a test run.

The cache lives outside the clone when it can (``/var/cache/dmn-kernel-lab`` for root,
``DMN_KERNEL_LAB_CACHE`` to choose another), keyed by the kernel package's versioned name, so
a fresh clone reuses the kernel, netdevsim and depmod work of an earlier one (a warm CI run
paid about a minute for them in every clone). The initramfs depends on this checkout's
``guest_init.sh`` and is keyed by its content. VM run folders stay in the clone
(``<repo>/.kernel-lab/runs``, git-ignored).
"""

from __future__ import annotations

import fcntl
import gzip
import hashlib
import io
import logging
import lzma
import os
import shutil
import stat
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from tests.kernel_lab.extra_modules import ModuleBuildError, build_netdevsim

log = logging.getLogger(__name__)

REPO_ROOT = Path(__file__).resolve().parents[2]
RUNS_ROOT = REPO_ROOT / ".kernel-lab" / "runs"


def _cache_root() -> Path:
    chosen = os.environ.get("DMN_KERNEL_LAB_CACHE")
    if chosen:
        return Path(chosen)
    if os.geteuid() == 0:
        return Path("/var/cache/dmn-kernel-lab")
    return REPO_ROOT / ".kernel-lab"


CACHE_ROOT = _cache_root()
METAPACKAGE = "linux-image-amd64"
BOOT_MODULES = ("virtio_pci", "9pnet_virtio", "9p", "overlay")
BUSYBOX = Path("/bin/busybox")
INIT_SCRIPT = Path(__file__).with_name("guest_init.sh")


class ImageError(RuntimeError):
    """The boot image could not be prepared; the message says which step and why."""


@dataclass(frozen=True, slots=True)
class BootImage:
    """Paths of one prepared kernel: what ``vm.py`` hands to qemu."""

    package: str
    kernel_release: str
    vmlinux: Path
    initramfs: Path
    modules_dir: Path

    def describe(self) -> str:
        return f"{self.package} ({self.kernel_release})"


def _run(argv: list[str], cwd: Path | None = None) -> str:
    proc = subprocess.run(argv, cwd=cwd, capture_output=True, text=True, check=False)
    if proc.returncode != 0:
        raise ImageError(f"{' '.join(argv)} failed ({proc.returncode}): {proc.stderr.strip()}")
    return proc.stdout


def resolve_kernel_package() -> str:
    """The ABI package the metapackage depends on right now (changes with point releases)."""
    override = os.environ.get("DMN_KERNEL_LAB_PACKAGE")
    if override:
        return override
    for line in _run(["apt-cache", "depends", METAPACKAGE]).splitlines():
        parts = line.split()
        if len(parts) == 2 and parts[0] == "Depends:" and parts[1].startswith("linux-image-"):
            return parts[1]
    raise ImageError(f"apt-cache knows no kernel behind {METAPACKAGE}; run apt-get update")


def extract_vmlinux(bzimage: Path, target: Path) -> None:
    """Cut the xz payload out of a bzImage and write the ELF kernel inside it."""
    data = bzimage.read_bytes()
    start = data.find(b"\xfd7zXZ\x00")
    if start < 0:
        raise ImageError(f"{bzimage}: no xz payload (kernel not xz-compressed?)")
    elf = lzma.LZMADecompressor(format=lzma.FORMAT_XZ).decompress(data[start:])
    if elf[:4] != b"\x7fELF":
        raise ImageError(f"{bzimage}: xz payload is not an ELF image")
    tmp = target.with_suffix(".tmp")
    tmp.write_bytes(elf)
    tmp.rename(target)


def _module_name(path: str) -> str:
    base = path.rsplit("/", 1)[-1]
    for suffix in (".ko.xz", ".ko.zst", ".ko.gz", ".ko"):
        if base.endswith(suffix):
            base = base[: -len(suffix)]
            break
    return base.replace("-", "_")


def boot_module_order(modules_dir: Path, tops: tuple[str, ...] = BOOT_MODULES) -> list[str]:
    """Module files (relative to ``modules_dir``) to insmod, every dependency first."""
    deps: dict[str, tuple[str, list[str]]] = {}
    for line in (modules_dir / "modules.dep").read_text().splitlines():
        head, _, tail = line.partition(":")
        deps[_module_name(head)] = (head, tail.split())
    order: list[str] = []

    def visit(name: str) -> None:
        if name not in deps:  # built into the kernel
            return
        path, needs = deps[name]
        for need in reversed(needs):
            visit(_module_name(need))
        if path not in order:
            order.append(path)

    for top in tops:
        visit(top)
    return order


def _read_module(path: Path) -> bytes:
    raw = path.read_bytes()
    if path.name.endswith(".xz"):
        return lzma.decompress(raw)
    if path.name.endswith(".gz"):
        return gzip.decompress(raw)
    if path.name.endswith(".zst"):
        raise ImageError(f"{path}: zstd-compressed modules are not supported")
    return raw


class _Cpio:
    """A minimal writer of the ``newc`` cpio format the kernel unpacks as initramfs."""

    def __init__(self) -> None:
        self._buf = io.BytesIO()
        self._ino = 1

    def _entry(
        self, name: str, mode: int, data: bytes = b"", rdev: tuple[int, int] = (0, 0)
    ) -> None:
        encoded = name.encode() + b"\0"
        fields = (
            self._ino, mode, 0, 0, 1, int(time.time()), len(data), 0, 0, rdev[0], rdev[1],
            len(encoded), 0,
        )  # fmt: skip
        self._ino += 1
        self._buf.write(b"070701" + b"".join(b"%08X" % f for f in fields) + encoded)
        self._buf.write(b"\0" * (-self._buf.tell() % 4))
        self._buf.write(data)
        self._buf.write(b"\0" * (-self._buf.tell() % 4))

    def directory(self, name: str) -> None:
        self._entry(name, stat.S_IFDIR | 0o755)

    def file(self, name: str, data: bytes, mode: int = 0o644) -> None:
        self._entry(name, stat.S_IFREG | mode, data)

    def chardev(self, name: str, major: int, minor: int, mode: int) -> None:
        self._entry(name, stat.S_IFCHR | mode, rdev=(major, minor))

    def finish(self) -> bytes:
        self._entry("TRAILER!!!", 0)
        return self._buf.getvalue()


def build_initramfs(modules_dir: Path, target: Path) -> None:
    if not BUSYBOX.is_file():
        raise ImageError(f"{BUSYBOX} missing: apt-get install busybox-static")
    cpio = _Cpio()
    for d in ("bin", "mods", "proc", "sys", "dev", "lower", "rw", "newroot"):
        cpio.directory(d)
    cpio.chardev("dev/console", 5, 1, 0o600)
    cpio.chardev("dev/null", 1, 3, 0o666)
    cpio.file("bin/busybox", BUSYBOX.read_bytes(), 0o755)
    cpio.file("init", INIT_SCRIPT.read_bytes(), 0o755)
    names = []
    for rel in boot_module_order(modules_dir):
        name = _module_name(rel)
        cpio.file(f"mods/{name}.ko", _read_module(modules_dir / rel))
        names.append(name)
    cpio.file("modules.order.lab", ("\n".join(names) + "\n").encode())
    tmp = target.with_suffix(".tmp")
    tmp.write_bytes(gzip.compress(cpio.finish(), compresslevel=1))
    tmp.rename(target)


def prepare(cache_root: Path = CACHE_ROOT) -> BootImage:
    """Return the cached boot image, building whatever part is missing. Idempotent, locked."""
    cache_root.mkdir(parents=True, exist_ok=True)
    # a worktree may link .kernel-lab to a shared cache: the guest's initramfs cannot follow
    # an absolute symlink of the host tree, so every path handed to the VM is resolved
    cache_root = cache_root.resolve()
    package = resolve_kernel_package()
    base = cache_root / package
    base.mkdir(exist_ok=True)
    with open(cache_root / ".lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        tree = base / "tree"
        if not (tree / "boot").is_dir():
            debs = sorted(base.glob(f"{package}_*.deb"))
            if not debs:
                log.info("kernel_lab.download package=%s", package)
                _run(["apt-get", "download", "-q", package], cwd=base)
                debs = sorted(base.glob(f"{package}_*.deb"))
            if not debs:
                raise ImageError(f"apt-get download {package} produced no .deb in {base}")
            shutil.rmtree(tree, ignore_errors=True)
            staging = base / "tree.tmp"
            shutil.rmtree(staging, ignore_errors=True)
            _run(["dpkg", "-x", str(debs[-1]), str(staging)])
            staging.rename(tree)
        releases = sorted(p.name for p in (tree / "lib/modules").iterdir())
        if not releases:
            raise ImageError(f"{tree}/lib/modules is empty")
        release = releases[-1]
        modules_dir = tree / "lib/modules" / release
        extra = modules_dir / "extra" / "netdevsim.ko"
        if not extra.is_file():
            try:
                build_netdevsim(
                    base, sorted(base.glob(f"{package}_*.deb"))[-1], release, modules_dir
                )
            except (ModuleBuildError, IndexError, subprocess.TimeoutExpired) as exc:
                raise ImageError(f"netdevsim for {release}: {exc}") from None
            (modules_dir / "modules.dep").unlink(missing_ok=True)
        if not (modules_dir / "modules.dep").is_file():
            _run(["depmod", "-b", str(tree), release])
        vmlinux = base / f"vmlinux-{release}"
        if not vmlinux.is_file():
            extract_vmlinux(tree / "boot" / f"vmlinuz-{release}", vmlinux)
        digest = hashlib.sha256(INIT_SCRIPT.read_bytes()).hexdigest()[:16]
        initramfs = base / f"initramfs-{digest}.cpio.gz"
        if not initramfs.is_file():
            build_initramfs(modules_dir, initramfs)
    return BootImage(package, release, vmlinux, initramfs, modules_dir)


if __name__ == "__main__":
    logging.basicConfig(level=logging.INFO)
    started = time.monotonic()
    try:
        image = prepare()
    except ImageError as exc:
        print(f"kernel lab image: {exc}", file=sys.stderr)
        raise SystemExit(1) from None
    print(f"kernel lab image ready: {image.describe()} in {time.monotonic() - started:.1f}s")
