"""SIGKILL at every journal boundary of ipvlan-cni, with the real executors, in the kernel
lab (this kernel has no ipvlan). The same matrix as ``tests/kernel/test_program_crashes.py``
(macvlan-cni, host-cni): for each boundary the run (or the cleanup) of connect happens in a
forked child that kills itself there; recovery from the journal alone, then cleanup, and the
stand-in host is as before, the sandbox holds nothing of ours, and the foreign links beside
ours — a tenant's ipvlan in the sandbox on its own veth, an unrelated veth — are untouched.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from dmn.engine.binder import bind_program
from dmn.engine.bound import BoundProgram
from dmn.interpreter.loader import load_plugin_dir
from dmn.vocabulary.terms import Access
from tests.crash_fork_server import CrashForkServer, crash_fork_server
from tests.kernel.node import Node, bind, call
from tests.kernel.test_program_crashes import _crash_matrix
from tests.kernel.world import World, host_handle, world

pytestmark = [pytest.mark.kernel_lab, pytest.mark.crash]

IPVLAN_CONFIG = {"mode": "l2", "ifName": "net1", "mtu": 1500, "up": True}
HOST_CHILD_PLUGIN = Path(__file__).parent / "plugins/ipvlan-host-child/v1"


@pytest.fixture
def node_world(tmp_path: Path) -> Iterator[tuple[Node, World, CrashForkServer]]:
    server = crash_fork_server()
    with world() as w:
        node = Node(tmp_path / "state", w.host)
        try:
            yield node, w, server
        finally:
            server.close()
            node.release_pins()


def test_ipvlan_cni_crash_at_every_boundary(
    node_world: tuple[Node, World, CrashForkServer],
) -> None:
    node, w, server = node_world
    sandbox = w.sandbox()
    host = w.ipr(w.host)
    parent, _ = w.veth(w.host)
    sb = w.ipr(sandbox)
    sb.link("add", ifname="keepme0", kind="veth", peer="keepme1")
    sb.link("add", ifname="tenant0", kind="ipvlan", link=sb.link_lookup(ifname="keepme1")[0])
    handle = host_handle(host, parent, Access.CREATE_CHILD, hid="parent-1")

    def prepare(op: str) -> Any:
        c = call(IPVLAN_CONFIG, f"{op}-prep", allocation={"parent": (handle,)})
        return bind("ipvlan-cni", "prepare", c)

    def connect(op: str) -> Any:
        def make(prepared: Any, ref: Any) -> Any:
            c = call(IPVLAN_CONFIG, f"{op}-conn", prepared=dict(prepared.exports), sandbox=ref)
            return bind("ipvlan-cni", "connect", c)

        return make

    run_points, cleanup_points = _crash_matrix(
        server, node, w, sandbox, prepare, connect, owner=__name__
    )
    # one effect created in the sandbox: intent (before, after), before-image, apply,
    # outcome, completion; undo: Undoing, undone
    assert run_points >= 6 and cleanup_points >= 2


def test_v1_host_child_ipvlan_crash_at_every_boundary(
    node_world: tuple[Node, World, CrashForkServer],
) -> None:
    """create-ipvlan/v1 (no builtin program uses it) through a test plugin: the child is
    created on the host, moved into the sandbox (link-move/v1) and configured
    (link-configure/v1); SIGKILL at the create's boundaries of the run and the cleanup (the
    move's and configure's are the host-kernel matrices'), a host child left by a crash
    before the move included, and nothing of ours or theirs is left or lost."""
    node, w, server = node_world
    plugin, diagnostics = load_plugin_dir(HOST_CHILD_PLUGIN)
    assert plugin is not None, diagnostics
    sandbox = w.sandbox()
    host = w.ipr(w.host)
    parent, _ = w.veth(w.host)
    w.ipr(sandbox).link("add", ifname="keepme0", kind="veth", peer="keepme1")
    handle = host_handle(host, parent, Access.CREATE_CHILD, hid="parent-1")

    def program(hook: str, c: Any) -> BoundProgram:
        bound = bind_program(plugin, hook, c)
        assert isinstance(bound, BoundProgram), [str(d) for d in bound]
        return bound

    def prepare(op: str) -> Any:
        return program(
            "prepare", call(IPVLAN_CONFIG, f"{op}-prep", allocation={"parent": (handle,)})
        )

    def connect(op: str) -> Any:
        def make(prepared: Any, ref: Any) -> Any:
            c = call(IPVLAN_CONFIG, f"{op}-conn", prepared=dict(prepared.exports), sandbox=ref)
            bound = program("connect", c)
            assert [e.kind for e in bound.effects] == [
                "linux/create-ipvlan/v1",
                "linux/link-move/v1",
                "linux/link-configure/v1",
            ]
            return bound

        return make

    run_points, cleanup_points = _crash_matrix(
        server, node, w, sandbox, prepare, connect, owner=__name__
    )
    # three effects: intent, per effect before-image/apply/outcome, completion; undo of three
    assert run_points >= 12 and cleanup_points >= 6
