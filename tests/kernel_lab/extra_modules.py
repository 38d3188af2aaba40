"""Out-of-tree modules for the lab kernel: netdevsim, which Debian does not ship.

The device opcodes (``sriov/*``, ``devlink/*``, ``representor/*``) need an SR-IOV PF whose
VF settings, devlink eswitch mode and representors the kernel really implements. Debian's
kernel builds no ``netdevsim``, so this module compiles it from the ``linux-source`` package
of the lab kernel's exact version against the matching ``linux-headers`` package, and drops
``netdevsim.ko`` into the unpacked kernel tree (``lib/modules/<release>/extra``) before
``depmod`` runs, so ``modprobe netdevsim`` works in the guest (it pulls in ``psample``).

Cached: the build happens once per kernel tree; the source ``.deb`` is kept beside the image
``.deb``. Needs ``gcc make bc flex bison libelf-dev`` (``.ci/run`` installs them); the headers
package of the exact version is installed with apt when missing (``linux-source`` is only
downloaded and unpacked, never installed).
"""

from __future__ import annotations

import logging
import lzma
import os
import shutil
import subprocess
import tarfile
from pathlib import Path

log = logging.getLogger(__name__)

NETDEVSIM_DIR = "drivers/net/netdevsim"
EXTRA = "extra"
BUILD_TOOLS = ("gcc", "make", "bc", "flex", "bison")


class ModuleBuildError(RuntimeError):
    """An out-of-tree module could not be built; the message says which step and why."""


def _run(argv: list[str], cwd: Path | None = None, timeout: float = 900) -> str:
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    proc = subprocess.run(
        argv, cwd=cwd, capture_output=True, text=True, check=False, env=env, timeout=timeout
    )
    if proc.returncode != 0:
        tail = "\n".join((proc.stderr or proc.stdout).strip().splitlines()[-8:])
        raise ModuleBuildError(f"{' '.join(argv)} failed ({proc.returncode}): {tail}")
    return proc.stdout


def package_version(image_deb: Path) -> str:
    """``linux-image-6.1.0-57-amd64_6.1.192-3_amd64.deb`` → ``6.1.192-3``."""
    parts = image_deb.name.split("_")
    if len(parts) != 3:
        raise ModuleBuildError(f"{image_deb.name}: not a package_version_arch.deb name")
    return parts[1]


def source_package(release: str) -> str:
    """``6.1.0-57-amd64`` → ``linux-source-6.1`` (Debian names it by major.minor)."""
    major, minor = release.split(".")[:2]
    return f"linux-source-{major}.{minor}"


def headers_dir(release: str) -> Path:
    return Path("/usr/src") / f"linux-headers-{release}"


def ensure_headers(release: str, version: str) -> Path:
    """The headers tree of exactly this kernel; apt-installs ``linux-headers-<release>``."""
    path = headers_dir(release)
    if not (path / "Makefile").is_file():
        log.info("kernel_lab.headers install release=%s version=%s", release, version)
        _run(
            ["apt-get", "-o", "DPkg::Lock::Timeout=300", "install", "-y", "-q",
             "--no-install-recommends", f"linux-headers-{release}={version}"]
        )  # fmt: skip
    if not (path / "Makefile").is_file():
        raise ModuleBuildError(f"{path}/Makefile missing after installing the headers")
    return path


def unpack_netdevsim_source(base: Path, release: str, version: str, target: Path) -> None:
    """Extract only ``drivers/net/netdevsim`` of the kernel source tarball into ``target``."""
    pkg = source_package(release)
    debs = sorted(base.glob(f"{pkg}_{version}_*.deb"))
    if not debs:
        log.info("kernel_lab.download package=%s version=%s", pkg, version)
        _run(["apt-get", "download", "-q", f"{pkg}={version}"], cwd=base)
        debs = sorted(base.glob(f"{pkg}_{version}_*.deb"))
    if not debs:
        raise ModuleBuildError(f"apt-get download {pkg}={version} produced no .deb in {base}")
    staging = base / "source.tmp"
    shutil.rmtree(staging, ignore_errors=True)
    _run(["dpkg", "-x", str(debs[-1]), str(staging)])
    tarballs = sorted(staging.glob("usr/src/linux-source-*.tar.xz"))
    if not tarballs:
        raise ModuleBuildError(f"{debs[-1].name} holds no usr/src/linux-source-*.tar.xz")
    prefix = tarballs[0].name.removesuffix(".tar.xz") + "/" + NETDEVSIM_DIR + "/"
    target.mkdir(parents=True, exist_ok=True)
    found = 0
    with lzma.open(tarballs[0]) as xz, tarfile.open(fileobj=xz, mode="r|") as tar:
        for member in tar:
            if member.isfile() and member.name.startswith(prefix):
                rel = member.name[len(prefix) :]
                data = tar.extractfile(member)
                if data is None or "/" in rel:
                    continue
                (target / rel).write_bytes(data.read())
                found += 1
    shutil.rmtree(staging, ignore_errors=True)
    if not found:
        raise ModuleBuildError(f"{tarballs[0].name} has no {NETDEVSIM_DIR}")


def build_netdevsim(base: Path, image_deb: Path, release: str, modules_dir: Path) -> Path:
    """Return ``<modules_dir>/extra/netdevsim.ko``, building it when missing.

    The caller runs ``depmod`` afterwards (the image step holds the cache lock).
    """
    installed = modules_dir / EXTRA / "netdevsim.ko"
    if installed.is_file():
        return installed
    missing = [tool for tool in BUILD_TOOLS if shutil.which(tool) is None]
    if missing:
        raise ModuleBuildError(f"build tools missing: {' '.join(missing)} (see .ci/run)")
    version = package_version(image_deb)
    headers = ensure_headers(release, version)
    build = base / "netdevsim-build"
    shutil.rmtree(build, ignore_errors=True)
    unpack_netdevsim_source(base, release, version, build)
    log.info("kernel_lab.build module=netdevsim release=%s", release)
    _run(["make", "-C", str(headers), f"M={build}", "CONFIG_NETDEVSIM=m", "modules"])
    built = build / "netdevsim.ko"
    if not built.is_file():
        raise ModuleBuildError(f"make produced no {built}")
    installed.parent.mkdir(parents=True, exist_ok=True)
    tmp = installed.with_suffix(".tmp")
    shutil.copyfile(built, tmp)
    tmp.rename(installed)
    shutil.rmtree(build, ignore_errors=True)
    return installed
