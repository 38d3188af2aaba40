"""The README's first command on a fresh Debian machine: ``git clone … && make lab`` as root.

A clean clone of the committed HEAD (a git bundle, cloned inside) in a minimal bookworm root
filesystem holding only what the README lists (:mod:`tests.fresh_machine.base`), run as root
with an empty HOME and a bare environment in its own mount and PID namespaces (the host's
network namespace: uv, pip and apt reach PyPI and Debian as a newcomer's machine would).
``make lab`` must install what it lacks itself, print ``demo: OK`` and exit 0, and print
nothing a newcomer would take for an error. Uncommitted changes are not in the clone.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest

from tests.fresh_machine import base

ROOT = Path(__file__).resolve().parents[2]
RUN = Path(__file__).with_name("run_readme.sh")
#: the site's network settings, passed on when set (a TLS-intercepting egress proxy's CA,
#: proxies): the network's, not the project's prerequisites
NETWORK_ENV = ("SSL_CERT_FILE", "PIP_CERT", "REQUESTS_CA_BUNDLE", "HTTP_PROXY", "HTTPS_PROXY",
               "NO_PROXY", "http_proxy", "https_proxy", "no_proxy")  # fmt: skip
# what a newcomer would read as an error: a traceback, gRPC's fork notes, apt's or debconf's
# warnings, any E:/W: line from apt, pip's or uv's warnings
NOISE = re.compile(
    r"Traceback|fork_posix|skipping fork|^(E|W): |debconf|WARNING|warning:|error:", re.M | re.I
)

pytestmark = [
    pytest.mark.fresh_machine,
    pytest.mark.skipif(os.geteuid() != 0, reason="needs root (mount namespaces, chroot)"),
    pytest.mark.skipif(shutil.which("mmdebstrap") is None, reason="needs mmdebstrap"),
    pytest.mark.timeout(900),
]


def test_make_lab_from_a_clean_clone(tmp_path: Path) -> None:
    rootfs = base.ensure_base()
    bundle = tmp_path / "dra-multi-network.bundle"
    subprocess.run(["git", "bundle", "create", "-q", str(bundle), "HEAD"], cwd=ROOT, check=True)
    # the overlay's upper and work directories must be on a filesystem overlayfs accepts as
    # upper (not tmpfs-in-overlay): the cache's
    work = base.cache_root() / "runs" / tmp_path.name
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True)
    try:
        proc = subprocess.run(
            ["unshare", "--mount", "--pid", "--fork", "--propagation", "private",
             "sh", str(RUN), str(rootfs), str(work), str(bundle),
             *(f"{name}={os.environ[name]}" for name in NETWORK_ENV if name in os.environ)],
            capture_output=True, text=True, timeout=840, stdin=subprocess.DEVNULL,
        )  # fmt: skip
    finally:
        shutil.rmtree(work, ignore_errors=True)
    output = proc.stdout + proc.stderr
    assert proc.returncode == 0, output[-6000:]
    assert "demo: OK" in proc.stdout, output[-6000:]
    installed = "installing system packages for make lab: python3-venv iproute2 iputils-ping"
    assert installed in output, output[-6000:]
    assert "pods:" in proc.stdout and "pings demo-b over net1" in proc.stdout, output[-6000:]
    noise = [line for line in output.splitlines() if NOISE.search(line)]
    assert noise == [], "\n".join(noise)
