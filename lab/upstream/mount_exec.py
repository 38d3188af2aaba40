"""Run a program in a mount namespace of its own, with lab directories bound at fixed paths.

Why: a peer the lab runs beside our driver (dranet, :mod:`dmn.lab.upstream.dranet`) has
its kubelet plugin directories and its NRI socket compiled in at the paths of a real node,
while the lab keeps kubelet's and containerd's below its own directory. The lab's process
starter runs ``python -m dmn.lab.upstream.mount_exec --bind SRC:DST ... -- PROGRAM ARG...``;
this module prepares the namespace and then replaces itself with the program, so the pid
the lab records is the program's and the namespace ends with it. Lab tooling only: the
product never runs it.

Contract:

* every mount of the new namespace becomes a slave (``MS_SLAVE | MS_REC``): a mount made
  in the host later (containerd pinning a Pod's network namespace below the lab's shared
  directory) still appears here, and nothing mounted here appears in the host;
* a ``DST`` that exists is covered by the bind; a ``DST`` that does not is created on an
  empty tmpfs mounted over its deepest existing ancestor — in this namespace only, so the
  host's file system gains nothing. Every such tmpfs is planned before anything is
  mounted (a later tmpfs would hide an earlier bind), and one is refused when it would be
  ``/`` or would hide a ``SRC``;
* symbolic links in ``DST`` are followed on the host (``/var/run`` is ``/run`` on Debian);
* any failure before the program starts exits with status 125 and one line on stderr.
"""

from __future__ import annotations

import argparse
import ctypes
import os
import sys
from collections.abc import Sequence
from pathlib import Path

CLONE_NEWNS = 0x00020000  # <linux/sched.h>
MS_BIND = 4096
MS_REC = 16384
MS_SLAVE = 1 << 19
EXIT_SETUP = 125


class SetupError(Exception):
    pass


def _parse_bind(text: str) -> tuple[Path, Path]:
    source, sep, target = text.partition(":")
    if not sep or not source.startswith("/") or not target.startswith("/"):
        raise argparse.ArgumentTypeError(f"--bind wants SRC:DST, two absolute paths: {text!r}")
    return Path(source), Path(target)


def _below(path: Path, top: Path) -> bool:
    return path == top or top in path.parents


def _existing_ancestor(path: Path) -> Path:
    for candidate in (path, *path.parents):
        if candidate.exists():
            return candidate
    return Path("/")


def plan(binds: Sequence[tuple[Path, Path]]) -> tuple[list[tuple[Path, Path]], list[Path]]:
    """The binds with resolved targets, and the tmpfs mount points (outermost only) that
    give every missing target a place; raises :class:`SetupError` for a forbidden plan."""
    resolved = [(Path(os.path.realpath(src)), Path(os.path.realpath(dst))) for src, dst in binds]
    for src, _ in resolved:
        if not src.exists():
            raise SetupError(f"bind source {src} does not exist")
    wanted = {_existing_ancestor(dst) for _, dst in resolved if not dst.exists()}
    shadows = sorted(
        p for p in wanted if not any(other != p and _below(p, other) for other in wanted)
    )
    for shadow in shadows:
        if shadow == Path("/"):
            raise SetupError("a tmpfs over / would hide the whole host")
        for src, _ in resolved:
            if _below(src, shadow):
                raise SetupError(f"a tmpfs over {shadow} would hide the bind source {src}")
    return resolved, shadows


def _bytes(text: str | None) -> bytes | None:
    return None if text is None else text.encode()


def _mount(
    libc: ctypes.CDLL,
    source: str | None,
    target: Path,
    fstype: str | None,
    flags: int,
    data: str | None = None,
) -> None:
    rc = libc.mount(_bytes(source), str(target).encode(), _bytes(fstype), flags, _bytes(data))
    if rc != 0:
        errno = ctypes.get_errno()
        raise SetupError(f"mount {source or fstype} on {target}: {os.strerror(errno)}")


def prepare(binds: Sequence[tuple[Path, Path]]) -> None:
    """Enter a new mount namespace and carry out :func:`plan` in it."""
    resolved, shadows = plan(binds)
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.unshare(CLONE_NEWNS) != 0:
        raise SetupError(f"unshare(CLONE_NEWNS): {os.strerror(ctypes.get_errno())}")
    _mount(libc, None, Path("/"), None, MS_SLAVE | MS_REC)
    for shadow in shadows:
        _mount(libc, "tmpfs", shadow, "tmpfs", 0, "mode=0755")
    for src, dst in resolved:
        dst.mkdir(parents=True, exist_ok=True)
        _mount(libc, str(src), dst, None, MS_BIND | MS_REC)


def main(argv: Sequence[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    if "--" not in args:
        print("mount_exec: usage: --bind SRC:DST ... -- PROGRAM [ARG...]", file=sys.stderr)
        return EXIT_SETUP
    split = args.index("--")
    parser = argparse.ArgumentParser(prog="mount_exec")
    parser.add_argument("--bind", action="append", type=_parse_bind, default=[])
    options = parser.parse_args(args[:split])
    program = args[split + 1 :]
    if not program:
        print("mount_exec: no program after --", file=sys.stderr)
        return EXIT_SETUP
    try:
        prepare(options.bind)
    except SetupError as exc:
        print(f"mount_exec: {exc}", file=sys.stderr)
        return EXIT_SETUP
    sys.stdout.flush()
    try:
        os.execv(program[0], program)
    except OSError as exc:
        print(f"mount_exec: cannot run {program[0]}: {exc.strerror}", file=sys.stderr)
    return EXIT_SETUP


if __name__ == "__main__":
    sys.exit(main())
