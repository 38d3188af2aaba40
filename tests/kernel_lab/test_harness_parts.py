"""The kernel lab's host-side parts that need no VM: module order, cpio, vmlinux, qemu check."""

from __future__ import annotations

import lzma
import subprocess
from pathlib import Path

import pytest

from tests.kernel_lab import harness
from tests.kernel_lab.image import ImageError, _Cpio, boot_module_order, extract_vmlinux


def test_boot_modules_load_dependencies_first_and_skip_builtins(tmp_path: Path) -> None:
    (tmp_path / "modules.dep").write_text(
        "kernel/fs/9p/9p.ko.xz: kernel/net/9p/9pnet.ko.xz kernel/fs/netfs/netfs.ko.xz\n"
        "kernel/net/9p/9pnet.ko.xz:\n"
        "kernel/fs/netfs/netfs.ko.xz:\n"
        "kernel/net/9p/9pnet_virtio.ko.xz: kernel/net/9p/9pnet.ko.xz "
        "kernel/drivers/virtio_ring.ko\n"
        "kernel/drivers/virtio_ring.ko:\n"
        "kernel/fs/overlayfs/overlay.ko.xz:\n"
    )
    order = boot_module_order(tmp_path, ("virtio_pci", "9pnet_virtio", "9p", "overlay"))
    assert order.index("kernel/net/9p/9pnet.ko.xz") < order.index(
        "kernel/net/9p/9pnet_virtio.ko.xz"
    )
    assert order.index("kernel/fs/netfs/netfs.ko.xz") < order.index("kernel/fs/9p/9p.ko.xz")
    assert len(order) == len(set(order)) == 6  # virtio_pci is built in: not listed


def test_cpio_archive_is_readable_by_cpio(tmp_path: Path) -> None:
    cpio = _Cpio()
    cpio.directory("bin")
    cpio.file("bin/hello", b"hi\n", 0o755)
    cpio.chardev("console", 5, 1, 0o600)
    archive = tmp_path / "a.cpio"
    archive.write_bytes(cpio.finish())
    listing = subprocess.run(
        ["busybox", "cpio", "-t", "-F", str(archive)], capture_output=True, text=True, check=True
    ).stdout.split()
    assert listing == ["bin", "bin/hello", "console"]


def test_vmlinux_is_cut_out_of_the_xz_payload(tmp_path: Path) -> None:
    elf = b"\x7fELF" + b"\0" * 60
    bz = tmp_path / "vmlinuz"
    bz.write_bytes(b"MZ-setup-code" + lzma.compress(elf, format=lzma.FORMAT_XZ))
    extract_vmlinux(bz, tmp_path / "vmlinux")
    assert (tmp_path / "vmlinux").read_bytes() == elf
    bz.write_bytes(b"no payload here")
    with pytest.raises(ImageError):
        extract_vmlinux(bz, tmp_path / "other")


def test_missing_qemu_without_root_is_a_clear_skip_reason(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(harness.shutil, "which", lambda name: None)
    monkeypatch.setattr(harness.os, "geteuid", lambda: 1000)
    reason = harness._ensure_qemu()
    assert reason is not None and "qemu-system-x86_64" in reason
