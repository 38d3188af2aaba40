"""The InfiniBand lines of host-cni and sriov-cni connect, through the real binder, runner,
RocksDB journal and executors, with SIGKILL at every journal boundary.

The line is ``ib-move`` (linux/link-move) → ``ipoib`` (ib/port-configure) → ``ib-state``
(linux/link-configure). No kernel here has an IPoIB netdev (no InfiniBand link layer), so the
line runs on two stand-ins that share the one thing the executors agree on — the netdev's
ifindex in the pinned sandbox namespace:

* rtnetlink: a veth end in the stand-in host namespace, which link-move really moves into the
  real sandbox namespace (the kernel keeps its ifindex there) and link-configure really
  configures;
* sysfs: a recorded ConnectX-3 IPoIB tree (``add_connectx3_ipoib``) served as the sysfs view
  of that sandbox namespace (keyed by its real (dev, inode)), with ``ib0`` at the veth's
  ifindex, which ib/port-configure reads and writes. The tree does not follow the netlink
  side's rename (it keeps ``ib0``): the executor never reads names.

Each check compares both worlds with their state before the run: the host's links, the
sandbox's links, and every netdev of the tree (ours and a foreign pkey child).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from dmn.engine.journal import EffectState
from dmn.host.rtnetlink.links import all_links, by_name
from dmn.vocabulary.handles import Handle, Provenance, Scope
from dmn.vocabulary.terms import Access, HandleType, LinkType, ScopeKind
from tests.crash_fork_server import CrashForkServer, crash_fork_server
from tests.fixtures.sysfs_layouts import CX3_HCA, SysfsBuilder, add_connectx3_ipoib
from tests.kernel.node import Node, bind, call
from tests.kernel.world import World, world

pytestmark = pytest.mark.netns

PLUGINS = ("host-cni", "sriov-cni")
CONFIG = {
    "mode": "kernel",
    "linkType": "infiniband",
    "ipoibMode": "connected",
    "ifName": "net1",
    "mtu": 2044,
    "up": True,
}
FOREIGN_CHILD = "80:00:02:0a:fe:80:00:00:00:00:00:00:00:02:c9:03:00:0a:1b:2c"
MAX_BOUNDARIES = 40


def record(node: Node, op: str) -> Any:
    with node.runner() as r:
        found = r.journal.load_operation(op)
    assert found is not None
    return found


def tree_state(root: Path) -> dict[str, dict[str, str]]:
    out = {}
    for entry in sorted((root / "class" / "net").iterdir()):
        out[entry.name] = {
            a: (entry / a).read_text().strip() for a in ("ifindex", "mode", "mtu", "address")
        }
    return out


class Stage:
    """The stand-in host, the pinned sandbox and the IPoIB tree of one test."""

    def __init__(self, w: World, tmp: Path) -> None:
        self.w = w
        self.sandbox = w.sandbox()
        host = w.ipr(w.host)
        self.root, _peer = w.veth(w.host, mtu=2044)
        link = by_name(host, self.root)
        assert link is not None
        self.index = link.index
        # a foreign link in the sandbox, at an ifindex the moved root will not need
        w.ipr(self.sandbox).link("add", ifname="keepme0", kind="veth", peer="keepme1", index=60)
        b = SysfsBuilder(tmp / "sandbox-sys")
        add_connectx3_ipoib(b, ifindex=self.index)
        b.ipoib("ib0.8001", CX3_HCA, address=FOREIGN_CHILD, mode="connected", ifindex=70)
        self.tree = b.root
        self.handle = Handle(
            id="ib-root",
            type=HandleType.KERNEL_INTERFACE,
            inventory_id=f"pci:{CX3_HCA}",
            scope=Scope(ScopeKind.HOST),
            accesses=frozenset({Access.READ, Access.EXCLUSIVE_CONFIGURE}),
            link_type=LinkType.INFINIBAND,
            provenance=Provenance(claim_uid="claim-1", request="ib", device=self.root),
            observations={"ifName": self.root, "ifIndex": link.index, "mac": link.mac},
        )

    def node(self, state_dir: Path) -> Node:
        return Node(state_dir, self.w.host, sysfs_views=((self.sandbox, self.tree),))

    def prepare(self, plugin: str) -> Callable[[str], Any]:
        def make(op: str) -> Any:
            c = call(CONFIG, op, allocation={"ibInterface": (self.handle,)})
            return bind(plugin, "prepare", c)

        return make

    def connect(self, plugin: str) -> Callable[[str], Any]:
        def make(op: str) -> Any:
            def bound(prepared: Any, ref: Any) -> Any:
                c = call(CONFIG, op, prepared=dict(prepared.exports), sandbox=ref)
                return bind(plugin, "connect", c)

            return bound

        return make

    def sandbox_names(self) -> set[str]:
        return {x.name for x in all_links(self.w.ipr(self.sandbox))}


@pytest.fixture
def stage(tmp_path: Path) -> Iterator[Stage]:
    with world() as w:
        yield Stage(w, tmp_path)


@pytest.mark.parametrize("plugin", PLUGINS)
def test_infiniband_connect_configures_ipoib_and_undoes_exactly(
    stage: Stage, tmp_path: Path, plugin: str
) -> None:
    node = stage.node(tmp_path / "state")
    host_before = stage.w.snapshot(stage.w.host)
    tree_before = tree_state(stage.tree)
    sandbox_before = stage.sandbox_names()
    try:
        prepared = node.run("prep", stage.prepare(plugin)("prep"))
        ref = node.pin("att", stage.sandbox)
        node.run("conn", stage.connect(plugin)("conn")(prepared, ref), sandbox=ref)
        effects = record(node, "conn").effects
        assert [e.id for e in effects] == ["ib-move", "ipoib", "ib-state"]
        moved = by_name(stage.w.ipr(stage.sandbox), "net1")
        assert moved is not None and moved.index == stage.index  # the tree's ib0
        after = tree_state(stage.tree)
        assert after["ib0"]["mode"] == "connected"
        assert after["ib0.8001"] == tree_before["ib0.8001"]
        before_image = next(e.before for e in effects if e.id == "ipoib")
        assert before_image["identity"]["parent"] == CX3_HCA
        assert before_image["port"]["mode"] == "datagram"
        node.cleanup("conn")
        node.cleanup("prep")
        assert tree_state(stage.tree) == tree_before
        assert stage.sandbox_names() == sandbox_before
        assert stage.w.snapshot(stage.w.host) == host_before
    finally:
        node.release_pins()


@pytest.mark.adversarial
@pytest.mark.parametrize("plugin", PLUGINS)
def test_impostor_at_the_recorded_ifindex_quarantines_ipoib_only(
    stage: Stage, tmp_path: Path, plugin: str
) -> None:
    """After connect the tenant replaces our IPoIB netdev in its sysfs with its own pkey
    child at the same ifindex: cleanup quarantines the ipoib effect (E_IDENTITY_MISMATCH),
    writes nothing to the impostor, and still undoes the other effects."""
    node = stage.node(tmp_path / "state")
    try:
        prepared = node.run("prep", stage.prepare(plugin)("prep"))
        ref = node.pin("att", stage.sandbox)
        node.run("conn", stage.connect(plugin)("conn")(prepared, ref), sandbox=ref)
        ours = (stage.tree / "class" / "net" / "ib0").resolve()
        (stage.tree / "class" / "net" / "ib0").unlink()
        ours.rename(stage.tree / "taken-away")
        b = SysfsBuilder(stage.tree)
        b.paths[CX3_HCA] = ours.parent.parent
        b.ipoib("ib0", CX3_HCA, address=FOREIGN_CHILD.replace(":0a:", ":0c:", 1),
                mode="connected", mtu=9000, ifindex=stage.index)  # fmt: skip
        impostor = tree_state(stage.tree)["ib0"]
        with node.runner() as r:
            result = r.cleanup("conn")
        assert result.quarantined == ("ipoib",)
        effects = record(node, "conn").effects
        states = {e.id: e.state for e in effects}
        assert states == {
            "ib-move": EffectState.UNDONE,
            "ipoib": EffectState.QUARANTINED,
            "ib-state": EffectState.UNDONE,
        }
        ipoib = next(e for e in effects if e.id == "ipoib")
        assert ipoib.failure is not None and ipoib.failure.code == "E_IDENTITY_MISMATCH"
        assert tree_state(stage.tree)["ib0"] == impostor
    finally:
        node.release_pins()


@pytest.fixture(scope="module")
def server() -> Iterator[CrashForkServer]:
    s = crash_fork_server()
    try:
        yield s
    finally:
        s.close()


@pytest.mark.crash
@pytest.mark.parametrize("plugin", PLUGINS)
def test_infiniband_connect_crash_at_every_boundary(
    server: CrashForkServer, stage: Stage, tmp_path: Path, plugin: str
) -> None:
    """SIGKILL at every boundary of the connect run and of its cleanup; recovery in a fresh
    process, then cleanup: both worlds as before each time, the foreign links untouched."""
    node = stage.node(tmp_path / "state")
    host_before = stage.w.snapshot(stage.w.host)
    tree_before = tree_state(stage.tree)
    sandbox_before = stage.sandbox_names()
    points = {"run": 0, "cleanup": 0}
    try:
        for phase in ("run", "cleanup"):
            for index in range(MAX_BOUNDARIES):
                op = f"{phase}{index}"
                prepared = node.run(f"{op}-prep", stage.prepare(plugin)(f"{op}-prep"))
                ref = node.pin(op, stage.sandbox)
                program = stage.connect(plugin)(f"{op}-conn")(prepared, ref)
                if phase == "run":
                    passed = node.killed_at(server, index, "run", f"{op}-conn", program, ref)
                else:
                    node.run(f"{op}-conn", program, sandbox=ref)
                    passed = node.killed_at(server, index, "cleanup", f"{op}-conn")
                for result in node.recover():
                    assert result.state.value in ("Undone", "Completed"), result
                with node.runner() as r:
                    r.cleanup(f"{op}-conn")
                    r.cleanup(f"{op}-prep")
                where = (phase, index, passed[-1:] if passed else "finished")
                assert tree_state(stage.tree) == tree_before, where
                assert stage.sandbox_names() == sandbox_before, where
                assert stage.w.snapshot(stage.w.host) == host_before, where
                node.pins.release(op, cleanup_verified=True)
                if not passed:
                    break
                points[phase] += 1
    finally:
        node.release_pins()
    # three effects: intent (before, after), then per effect before-image, apply, outcome,
    # and the completion pair; undo: Undoing + undone per effect
    assert points["run"] >= 4 + 3 * 3 and points["cleanup"] >= 2 * 3
