"""SIGKILL at every journal boundary of macvlan-cni, host-cni, the host-tuned test plugin
(sysctl and ethtool settings), the macvlan-l3 test plugin (a macvlan child with ip/addresses
and ip/routes) and the ip-static test plugin (the same opcodes on a link that outlives them),
with the real executors.

For each boundary index the run (or the cleanup) happens in a forked child that kills itself
exactly there; the parent then recovers from the journal alone (environment rebuilt from the
pins), cleans up, and proves: the stand-in host is as before, the sandbox holds nothing of
ours, and the foreign links placed beside ours — one with the very name the workload asked
for — are untouched.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from dmn.engine.binder import bind_program
from dmn.engine.bound import BoundProgram
from dmn.host.netns import identity_of
from dmn.host.rtnetlink.links import all_links, by_name
from dmn.interpreter.loader import load_plugin_dir
from dmn.vocabulary.handles import Handle, Scope
from dmn.vocabulary.terms import Access, HandleType, LinkType, ScopeKind
from tests.crash_fork_server import CrashForkServer, crash_fork_server
from tests.crash_points import crash_points, effect_kinds
from tests.kernel.interface_readback import HOST_TUNED, features_in
from tests.kernel.node import Node, bind, call
from tests.kernel.scratch import netns_path
from tests.kernel.test_ip_executors import l3_state
from tests.kernel.world import World, host_handle, world

pytestmark = [pytest.mark.netns, pytest.mark.crash]

MACVLAN_CONFIG = {"mode": "bridge", "ifName": "net1", "mtu": 1500, "up": True}
HOST_CONFIG = {"mode": "kernel", "ifName": "net1", "mtu": 1400, "up": True}
MAX_BOUNDARIES = 40
L3_PLUGIN = Path(__file__).parent / "plugins/macvlan-l3/v1"
STATIC_PLUGIN = Path(__file__).parent / "plugins/ip-static/v1"
L3_CONFIG = {"ifName": "net1", "mtu": 1500, "up": True, "addresses": ["10.84.0.2/24"]}


@pytest.fixture(scope="module")
def server() -> Iterator[CrashForkServer]:
    s = crash_fork_server()
    try:
        yield s
    finally:
        s.close()


@pytest.fixture
def node_world(tmp_path: Path) -> Iterator[tuple[Node, World]]:
    with world() as w:
        node = Node(tmp_path / "state", w.host)
        try:
            yield node, w
        finally:
            node.release_pins()


def _sandbox_names(w: World, ns: str) -> set[str]:
    return {x.name for x in all_links(w.ipr(ns))}


def _crash_matrix(
    server: CrashForkServer,
    node: Node,
    w: World,
    sandbox: str,
    prepare: Callable[[str], Any],
    connect: Callable[[str], Any],
    owner: str | None = None,
    sandbox_state: Callable[[str], Any] | None = None,
    facts: Callable[[], Any] | None = None,
) -> tuple[int, int]:
    """Kill the connect run, then the connect cleanup, at every boundary; check each time.

    With ``owner`` (a kernel-lab module's ``__name__``) the kill points are
    :func:`~tests.crash_points.crash_points` of a surveyed uninterrupted run, and the counts
    returned are the survey's boundary counts. With ``sandbox_state`` (what the sandbox is
    compared by, instead of its link names) every cleanup must also end Undone: nothing
    quarantined. ``facts`` reads more of the world that must be as before after each cleanup
    (what the host snapshot does not show)."""
    baseline = w.snapshot(w.host)
    baseline_facts = facts() if facts is not None else None
    state = sandbox_state or (lambda ns: _sandbox_names(w, ns))
    sandbox_before = state(sandbox)
    run_points = cleanup_points = 0
    plan: dict[str, list[int]] = {}
    if owner is not None:
        prepared = node.run("survey-prep", prepare("survey"))
        ref = node.pin("survey", sandbox)
        program = connect("survey")(prepared, ref)
        names = node.survey("survey-conn", program, ref)
        node.cleanup("survey-prep")
        node.pins.release("survey", cleanup_verified=True)
        plan = {ph: crash_points(names[ph], effect_kinds(program), owner) for ph in names}
        run_points, cleanup_points = len(names["run"]), len(names["cleanup"])
    for phase in ("run", "cleanup"):
        for index in plan[phase] if plan else range(MAX_BOUNDARIES):
            op = f"{phase}{index}"
            prepared = node.run(f"{op}-prep", prepare(op))
            ref = node.pin(op, sandbox)
            program = connect(op)(prepared, ref)
            if phase == "run":
                passed = node.killed_at(server, index, "run", f"{op}-conn", program, ref)
            else:
                node.run(f"{op}-conn", program, sandbox=ref)
                passed = node.killed_at(server, index, "cleanup", f"{op}-conn")
            for result in node.recover():
                assert result.state.value in ("Undone", "Completed"), result
            with node.runner() as r:
                ends = [r.cleanup(f"{op}-conn"), r.cleanup(f"{op}-prep")]
            if sandbox_state is not None:
                assert [e.state.value for e in ends] == ["Undone"] * 2, (phase, index, ends)
            assert state(sandbox) == sandbox_before, (phase, index, passed)
            assert w.snapshot(w.host) == baseline, (phase, index, passed)
            if facts is not None:
                assert facts() == baseline_facts, (phase, index, passed)
            node.pins.release(op, cleanup_verified=True)
            if plan:
                assert passed, (phase, index)
                continue
            if not passed:
                break
            if phase == "run":
                run_points += 1
            else:
                cleanup_points += 1
    return run_points, cleanup_points


def test_macvlan_cni_crash_at_every_boundary(
    server: CrashForkServer, node_world: tuple[Node, World]
) -> None:
    node, w = node_world
    sandbox = w.sandbox()
    host = w.ipr(w.host)
    parent, _ = w.veth(w.host)
    # foreign neighbours: a macvlan on the same parent named like the workload's interface,
    # and an unrelated link in the sandbox
    host.link(
        "add",
        ifname="net1",
        kind="macvlan",
        link=host.link_lookup(ifname=parent)[0],
        macvlan_mode="bridge",
    )
    sb = w.ipr(sandbox)
    sb.link("add", ifname="keepme0", kind="veth", peer="keepme1")
    # a foreign child of the same parent created straight in the sandbox, as ours will be:
    # same kind, same lower, no alias — never ours
    host.link(
        "add",
        ifname="other0",
        kind="macvlan",
        link=host.link_lookup(ifname=parent)[0],
        macvlan_mode="bridge",
        net_ns_fd=sandbox,
    )
    handle = host_handle(host, parent, Access.CREATE_CHILD, hid="parent-1")

    def prepare(op: str) -> Any:
        c = call(MACVLAN_CONFIG, f"{op}-prep", allocation={"parent": (handle,)})
        return bind("macvlan-cni", "prepare", c)

    def connect(op: str) -> Any:
        def make(prepared: Any, ref: Any) -> Any:
            c = call(MACVLAN_CONFIG, f"{op}-conn", prepared=dict(prepared.exports), sandbox=ref)
            return bind("macvlan-cni", "connect", c)

        return make

    run_points, cleanup_points = _crash_matrix(server, node, w, sandbox, prepare, connect)
    # one effect created in the sandbox: intent (before, after), before-image, apply,
    # outcome, completion; undo: Undoing, undone
    assert run_points >= 6 and cleanup_points >= 2


@pytest.mark.parametrize("plugin", ["host-cni", "sriov-cni"])
def test_host_cni_crash_at_every_boundary(
    server: CrashForkServer, node_world: tuple[Node, World], plugin: str
) -> None:
    """host-cni's and sriov-cni's kernel-mode line (their prepare has no effect there;
    connect: link-move + link-configure of the allocated root, a veth stand-in)."""
    node, w = node_world
    sandbox, peer_ns = w.sandbox(), w.sandbox()
    host = w.ipr(w.host)
    root, peer = w.veth(w.host, mtu=1450)
    host.link("set", index=host.link_lookup(ifname=peer)[0], net_ns_fd=peer_ns)
    host.link("set", index=host.link_lookup(ifname=root)[0], ifalias="uplink-a")
    host.addr("add", index=host.link_lookup(ifname=root)[0], address="192.0.2.1", prefixlen=30)
    w.ipr(sandbox).link("add", ifname="keepme0", kind="veth", peer="keepme1")
    handle = host_handle(host, root, Access.EXCLUSIVE_CONFIGURE)

    def prepare(op: str) -> Any:
        c = call(HOST_CONFIG, f"{op}-prep", allocation={"interface": (handle,)})
        return bind(plugin, "prepare", c)

    def connect(op: str) -> Any:
        def make(prepared: Any, ref: Any) -> Any:
            c = call(HOST_CONFIG, f"{op}-conn", prepared=dict(prepared.exports), sandbox=ref)
            return bind(plugin, "connect", c)

        return make

    run_points, cleanup_points = _crash_matrix(server, node, w, sandbox, prepare, connect)
    assert run_points >= 8 and cleanup_points >= 4


def test_host_cni_carrying_host_addresses_crash_at_every_boundary(
    server: CrashForkServer, node_world: tuple[Node, World]
) -> None:
    """host-cni with carryHostAddresses (link-move recording the root's host addresses and
    routes, link-configure, ip/carried-host-config re-creating them in the sandbox) killed
    at every boundary of its effects: after recovery and cleanup the root is back in the
    host with exactly its addresses and routes (every table), the sandbox holds nothing of
    ours, and nothing is quarantined."""
    node, w = node_world
    sandbox, peer_ns = w.sandbox(), w.sandbox()
    host = w.ipr(w.host)
    root, peer = w.veth(w.host)
    host.link("set", index=host.link_lookup(ifname=peer)[0], net_ns_fd=peer_ns)
    index = host.link_lookup(ifname=root)[0]
    host.addr("add", index=index, address="10.86.0.2", prefixlen=24)
    host.addr("add", index=index, address="fd86::2", prefixlen=64, flags=0x02)
    host.route("add", dst="10.87.0.0", dst_len=16, gateway="10.86.0.1", oif=index, priority=10)
    host.route("add", dst="2001:db8:87::", dst_len=64, gateway="fd86::1", oif=index)
    host.route("add", dst="10.88.0.0", dst_len=16, gateway="10.86.0.1", oif=index, table=100)
    w.ipr(sandbox).link("add", ifname="keepme0", kind="veth", peer="keepme1")
    handle = host_handle(host, root, Access.EXCLUSIVE_CONFIGURE)
    config = {**HOST_CONFIG, "carryHostAddresses": True}

    def prepare(op: str) -> Any:
        return bind(
            "host-cni", "prepare", call(config, f"{op}-prep", allocation={"interface": (handle,)})
        )

    def connect(op: str) -> Any:
        def make(prepared: Any, ref: Any) -> Any:
            c = call(config, f"{op}-conn", prepared=dict(prepared.exports), sandbox=ref)
            program = bind("host-cni", "connect", c)
            assert [e.id for e in program.effects] == ["move", "state", "carried"]
            return program

        return make

    def host_l3() -> Any:
        return l3_state(w.host)

    run_points, cleanup_points = _crash_matrix(
        server,
        node,
        w,
        sandbox,
        prepare,
        connect,
        owner=__name__,
        sandbox_state=l3_state,
        facts=host_l3,
    )
    # three effects: intent, per effect before-image, apply and outcome, completion;
    # cleanup: per effect Undoing and undone
    assert run_points >= 11 and cleanup_points >= 6


def test_interface_settings_crash_at_every_boundary(
    server: CrashForkServer, node_world: tuple[Node, World]
) -> None:
    """The test plugin host-tuned (link-move of a veth stand-in, sysctl/interface/v1,
    ethtool/features/v1): after every kill, recovery and cleanup the root is back in the
    host with its offload features as before (features survive the namespace moves; the
    per-interface sysctls are reset by the kernel on every move, so they are proven in
    tests/kernel/test_interface_settings.py instead)."""
    node, w = node_world
    plugin, diagnostics = load_plugin_dir(HOST_TUNED)
    assert plugin is not None, diagnostics
    sandbox = w.sandbox()
    host = w.ipr(w.host)
    root, _ = w.veth(w.host, mtu=1450)
    w.ipr(sandbox).link("add", ifname="keepme0", kind="veth", peer="keepme1")
    handle = host_handle(host, root, Access.EXCLUSIVE_CONFIGURE)
    config = {"ifName": "net1", "mode": "kernel"}

    def bound(hook: str, c: Any) -> BoundProgram:
        program = bind_program(plugin, hook, c)
        assert isinstance(program, BoundProgram), [str(d) for d in program]
        return program

    def prepare(op: str) -> Any:
        return bound("prepare", call(config, f"{op}-prep", allocation={"interface": (handle,)}))

    def connect(op: str) -> Any:
        def make(prepared: Any, ref: Any) -> Any:
            c = call(config, f"{op}-conn", prepared=dict(prepared.exports), sandbox=ref)
            return bound("connect", c)

        return make

    def features() -> dict[str, bool]:
        return features_in(w.host, root)

    assert features()["rx-gro"] is False and features()["tx-checksum-ip-generic"] is True
    run_points, cleanup_points = _crash_matrix(
        server, node, w, sandbox, prepare, connect, owner=__name__, facts=features
    )
    # three effects: before-image, apply, outcome each; undo: Undoing, undone each
    assert run_points >= 9 and cleanup_points >= 6


def test_macvlan_with_addresses_and_routes_crash_at_every_boundary(
    server: CrashForkServer, node_world: tuple[Node, World]
) -> None:
    """The macvlan-l3 test plugin (create-macvlan v2, then ip/addresses twice and ip/routes)
    killed at every boundary of its effects: recovery and cleanup leave the sandbox's
    addresses and routes — and a foreign link's beside ours — exactly as before."""
    node, w = node_world
    sandbox = w.sandbox()
    host = w.ipr(w.host)
    parent, _ = w.veth(w.host)
    sb = w.ipr(sandbox)
    sb.link("add", ifname="keepme0", kind="veth", peer="keepme1")
    keep = sb.link_lookup(ifname="keepme0")[0]
    sb.link("set", index=keep, state="up")
    sb.addr("add", index=keep, address="10.84.1.2", prefixlen=24)
    sb.route("add", dst="10.85.0.0", dst_len=16, gateway="10.84.1.1", oif=keep, priority=11)
    handle = host_handle(host, parent, Access.CREATE_CHILD, hid="parent-1")
    plugin, diagnostics = load_plugin_dir(L3_PLUGIN)
    assert plugin is not None, diagnostics

    def bound(hook: str, c: Any) -> Any:
        program = bind_program(plugin, hook, c)
        assert isinstance(program, BoundProgram), [str(d) for d in program]
        return program

    def prepare(op: str) -> Any:
        return bound("prepare", call(L3_CONFIG, f"{op}-prep", allocation={"parent": (handle,)}))

    def connect(op: str) -> Any:
        def make(prepared: Any, ref: Any) -> Any:
            c = call(L3_CONFIG, f"{op}-conn", prepared=dict(prepared.exports), sandbox=ref)
            return bound("connect", c)

        return make

    run_points, cleanup_points = _crash_matrix(
        server, node, w, sandbox, prepare, connect, owner=__name__, sandbox_state=l3_state
    )
    # four effects: intent, then per effect before-image, apply and outcome, completion;
    # cleanup: per effect Undoing and undone
    assert run_points >= 14 and cleanup_points >= 8


def test_ip_effects_on_a_link_that_outlives_them_crash_at_every_boundary(
    server: CrashForkServer, node_world: tuple[Node, World]
) -> None:
    """The ip-static test plugin (an Operation: ip/addresses then ip/routes on a veth end
    already in the sandbox) killed at every boundary of its effects: the link stays, so
    recovery and cleanup must themselves leave its addresses and routes — and the routes of
    the link's peer beside it — exactly as before, with nothing quarantined."""
    node, w = node_world
    sandbox = w.sandbox()
    sb = w.ipr(sandbox)
    sb.link("add", ifname="net1", kind="veth", peer="peer1")
    for name in ("net1", "peer1"):
        sb.link("set", index=sb.link_lookup(ifname=name)[0], state="up")
    peer = sb.link_lookup(ifname="peer1")[0]
    sb.addr("add", index=peer, address="10.74.9.1", prefixlen=24)
    sb.route("add", dst="10.77.0.0", dst_len=16, gateway="10.74.9.2", oif=peer, table=100)
    net1 = by_name(sb, "net1")
    assert net1 is not None
    handle = Handle(
        id="net1",
        type=HandleType.KERNEL_INTERFACE,
        inventory_id=f"link:{net1.mac}",
        scope=Scope(ScopeKind.SANDBOX, identity_of(netns_path(sandbox))),
        accesses=frozenset({Access.READ, Access.EXCLUSIVE_CONFIGURE}),
        link_type=LinkType.ETHERNET,
        observations={"ifName": net1.name, "ifIndex": net1.index, "mac": net1.mac},
    )
    plugin, diagnostics = load_plugin_dir(STATIC_PLUGIN)
    assert plugin is not None, diagnostics

    def program(op: str, ref: Any) -> BoundProgram:
        c = call({}, op, inputs={"interface": (handle,)}, sandbox=ref)
        bound = bind_program(plugin, "connect", c)
        assert isinstance(bound, BoundProgram), [str(d) for d in bound]
        return bound

    baseline = l3_state(sandbox)
    ref = node.pin("survey", sandbox)
    kinds = effect_kinds(program("survey", ref))
    names = node.survey("survey", program("survey", ref), ref)
    node.pins.release("survey", cleanup_verified=True)
    assert l3_state(sandbox) == baseline
    for phase in ("run", "cleanup"):
        points = crash_points(names[phase], kinds, __name__)
        assert points, phase
        for index in points:
            op = f"{phase}{index}"
            ref = node.pin(op, sandbox)
            if phase == "run":
                passed = node.killed_at(server, index, "run", op, program(op, ref), ref)
            else:
                node.run(op, program(op, ref), sandbox=ref)
                passed = node.killed_at(server, index, "cleanup", op)
            assert passed, (phase, index)
            for result in node.recover():
                assert result.state.value in ("Undone", "Completed"), result
            with node.runner() as r:
                end = r.cleanup(op)
            assert end.state.value == "Undone", (phase, index, passed, end)
            now = l3_state(sandbox)
            assert now == baseline, (phase, index, passed, _differences(now, baseline))
            node.pins.release(op, cleanup_verified=True)


def _differences(now: Any, then: Any) -> list[Any]:
    """What is in one state and not in the other (addresses, IPv4 and IPv6 routes)."""
    out = []
    for a, b in zip(now, then, strict=True):
        left = [x for x in a if x not in b]
        right = [x for x in b if x not in a]
        out.append((left, right))
    return out
