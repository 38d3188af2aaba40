"""Upstream labs for the ``e2e`` tests, started on first use.

The lab with a node (kubelet, containerd, our agent) is one per test session, shared by
every ``test_upstream*`` module: starting it is the expensive part (and the machine has
one node address, so node labs take turns). ``DMN_E2E_INSTALL`` says how our driver is
installed on it (``tests/e2e/installed_driver.py``): ``process`` (the default) — host
processes, and ``test_helm_install.py`` brings up a Helm-installed lab of its own — or
``helm`` — the chart's Pods, and ``test_helm_install.py`` runs on this same lab after
the ``test_upstream*`` modules, its ``helm uninstall`` just before
``test_upstream_zz_down.py``'s ``down``. Each test cleans up its own Pods and waits where
the next test depends on it. The control-plane-only lab and that own Helm lab are one per
module; those modules run first (``pytest_collection_modifyitems``), so their labs are down
before the session's node lab takes the machine-wide lock. A module that needs Multus asks
for ``multus_lab``, which adds it to the session's node lab for that module only. A lab is
brought down at the end of its scope, also after failures; its state directory is a short
path under /tmp (unix socket paths must fit sockaddr_un). Never skipped: without the built
components the fixture fails with the build command.
"""

from __future__ import annotations

import fcntl
import os
import shutil
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import pytest

from dmn.api.cluster import Cluster
from dmn.lab import manifests
from dmn.lab.demo import TOPOLOGIES, apply_pools, wait_settled
from dmn.lab.node import HOST_DEVICE_TOPOLOGY
from dmn.lab.pod_demo import claim_template
from dmn.lab.upstream import host_changes
from dmn.lab.upstream.cluster import UpstreamLab
from dmn.lab.upstream.driver import DriverDeployment
from dmn.lab.upstream.helm_driver import HelmDriver
from dmn.lab.upstream.multus import MultusInstall
from tests.e2e import installed_driver, lab_pods


def host_snapshot() -> dict[str, object]:
    """What the lab may change on the host: links, mounts, cgroup roots, kernel settings.

    Other engineers' tests run on this machine at the same time: only links and mounts the
    lab could have made are compared (lab-named links, every veth and macvlan in the host
    namespace, mounts of the lab's directories, containerd's and the netns directories)."""
    from pyroute2 import IPRoute

    with IPRoute() as ip:
        links = []
        for link in ip.get_links():
            name = link.get_attr("IFLA_IFNAME")
            info = link.get_attr("IFLA_LINKINFO")
            kind = info.get_attr("IFLA_INFO_KIND") if info else ""
            if name.startswith("dmnlab") or kind in ("macvlan", "bridge"):
                links.append(name)
        links.sort()
    mounts = sorted(
        point
        for line in Path("/proc/self/mountinfo").read_text().splitlines()
        if any(
            m in (point := line.split()[4]) for m in ("/dmn-e2e-", "containerd", "kubelet", "/cni")
        )
    )
    sysctls = {n: (Path("/proc/sys") / n).read_text() for n in host_changes.SYSCTLS}
    cgroups = sorted(str(p) for p in Path("/sys/fs/cgroup").glob(f"*/{host_changes.CGROUP_NAME}*"))
    paths = {p: os.path.lexists(p) for p in host_changes.FIXED_PATHS}
    return {
        "links": links,
        "mounts": mounts,
        "sysctls": sysctls,
        "cgroups": cgroups,
        "paths": paths,
    }


@dataclass
class Session:
    lab: UpstreamLab
    before: dict[str, object]


WAIT = 120.0
NODE_LAB_LOCK = Path("/run/lock/dmn-upstream-node.lock")


def _session(with_node: bool, driver: DriverDeployment | None = None) -> Iterator[Session]:
    """Every upstream lab owns machine-wide things (the node-address veth pair and its
    address; with a node also containerd's and CNI's fixed directories and the lab cgroup),
    so labs of concurrent test runs on one machine take turns through a lock."""
    with _lab_turn():
        root = Path(tempfile.mkdtemp(prefix="dmn-e2e-", dir="/tmp"))
        lab = UpstreamLab(root, driver=driver, with_node=with_node)
        before = host_snapshot()
        try:
            lab.up()
            yield Session(lab, before)
        finally:
            problems = lab.down()  # a no-op when a test already brought it down
            shutil.rmtree(root, ignore_errors=True)
            assert not problems, problems


_HOLDING: list[bool] = []  # this process holds the lock (a second flock would wait forever)


@contextmanager
def _lab_turn() -> Iterator[None]:
    assert not _HOLDING, (
        "a lab of this test process already holds the machine-wide lab lock: the session's "
        "node lab is up, so test_control_plane.py must run before the test_upstream* modules"
    )
    NODE_LAB_LOCK.parent.mkdir(parents=True, exist_ok=True)
    with NODE_LAB_LOCK.open("a") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        _HOLDING.append(True)
        try:
            yield
        finally:
            _HOLDING.clear()
            fcntl.flock(handle, fcntl.LOCK_UN)


CONTROL_PLANE_MODULE = "tests.e2e.test_control_plane"
SCALE_MODULE = "tests.e2e.test_scale_smoke"
HELM_MODULE = "tests.e2e.test_helm_install"
DOWN_MODULE = "tests.e2e.test_upstream_zz_down"


def _module(item: pytest.Item) -> str:
    return str(getattr(getattr(item, "module", None), "__name__", ""))


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Modules with their own lab run first, whatever order the command line named them in:
    once the session's node lab is up, another lab in this process cannot start. On a
    Helm-installed session lab ``test_helm_install.py`` is not one of them: it runs after
    the other node modules (its upgrade and uninstall change the driver under them), just
    before the down comparison."""
    own = (
        (CONTROL_PLANE_MODULE, SCALE_MODULE)
        if installed_driver.HELM
        else (CONTROL_PLANE_MODULE, SCALE_MODULE, HELM_MODULE)
    )

    def rank(item: pytest.Item) -> int:
        module = _module(item)
        return own.index(module) if module in own else len(own)

    items.sort(key=rank)
    if not installed_driver.HELM:
        return
    helm = [item for item in items if _module(item) == HELM_MODULE]
    rest = [item for item in items if _module(item) != HELM_MODULE]
    e2e = [i for i, item in enumerate(rest) if _module(item).startswith("tests.e2e.")]
    down = [i for i, item in enumerate(rest) if _module(item) == DOWN_MODULE]
    at = down[0] if down else (e2e[-1] + 1 if e2e else len(rest))
    items[:] = rest[:at] + helm + rest[at:]


@pytest.fixture(scope="session")
def upstream_session() -> Iterator[Session]:
    """The whole lab (node included), once for the test session; our driver installed as
    ``DMN_E2E_INSTALL`` says."""
    yield from _session(with_node=True, driver=HelmDriver() if installed_driver.HELM else None)


@pytest.fixture(scope="module")
def helm_session(request: pytest.FixtureRequest) -> Iterator[Session]:
    """A lab with our driver installed by `helm install` (Pods from the local image): the
    session's node lab when it is installed so, else one of the module's own (its module,
    test_helm_install.py, then sorts before the test_upstream* modules)."""
    if installed_driver.HELM:
        yield request.getfixturevalue("upstream_session")
    else:
        yield from _session(with_node=True, driver=HelmDriver())


@pytest.fixture(scope="module")
def control_plane() -> Iterator[Session]:
    """etcd, kube-apiserver, our controller and webhook only (fast; no kubelet)."""
    yield from _session(with_node=False)


@pytest.fixture(scope="module")
def multus_lab(upstream_session: Session) -> Iterator[MultusInstall]:
    """Multus (thin plugin, ahead of the Pod network) and Whereabouts (IPAM and its control
    loop Pod) in the session's node lab, for the requesting module only: no other lab is
    brought up, and the modules that do not ask run without Multus in their Pods' path.
    Afterwards every Pod still selecting networks is deleted (through Multus) and Multus is
    taken out of the path again; the CRDs and their objects stay until ``down``."""
    lab = upstream_session.lab
    install = lab.enable_multus()
    try:
        yield install
    finally:
        lab.disable_multus()


@pytest.fixture(scope="session")
def classes(upstream_session: Session) -> dict[str, str]:
    """The example IPPools, then every example topology plus the lab host-device one
    applied, Ready, with claim templates ``shared-macvlan`` (net1 addressed from the pool
    macvlan-v4) and ``lab-host-device``; topology name → DeviceClass."""
    admin = upstream_session.lab.admin()
    try:
        apply_pools(admin)
        docs = manifests.load(TOPOLOGIES)
        for doc in docs:
            admin.apply(doc.doc)
        admin.apply(HOST_DEVICE_TOPOLOGY)
        names = [d.name for d in docs if d.kind == "NetworkTopology"] + ["lab-host-device"]
        results = wait_settled(admin, names, WAIT)
        assert all(t.ready == "True" for t in results), results
        for name in ("shared-macvlan", "lab-host-device"):
            device_class = next(t for t in results if t.name == name).device_classes[0]
            admin.apply(claim_template(name, device_class))
        return {t.name: t.device_classes[0] for t in results if t.device_classes}
    finally:
        admin.close()


@pytest.fixture
def upstream_lab(upstream_session: Session) -> UpstreamLab:
    return upstream_session.lab


@pytest.fixture
def admin(upstream_lab: UpstreamLab) -> Iterator[Cluster]:
    cluster = upstream_lab.admin()
    try:
        yield cluster
    finally:
        cluster.close()


@pytest.fixture
def pods(admin: Cluster) -> Iterator[list[str]]:
    """Names of Pods the test creates; deleted afterwards and waited for, and so are the
    ResourceClaims generated for them (the next test counts devices, capacity and links, so
    nothing of this one may linger: a generated claim outlives its Pod until the garbage
    collector deletes it, and until then it keeps its share of a link allocated)."""
    created: list[str] = []
    yield created
    lab_pods.remove(admin, *created)
