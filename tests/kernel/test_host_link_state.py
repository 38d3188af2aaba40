"""``linux/host-link-state/v1`` on the real kernel: a link lent at NodePrepare to another
component (Multus' delegate) comes back to the host at NodeUnprepare as it was lent.

The delegate is played here as the reference host-device plugin behaves: ADD moves the link
into the sandbox under the workload's name and sets it up; DEL sets it down, moves it back
and gives it its host name again — so without this effect the host keeps a down link (and
the node would taint its device). A veth stands in for the NIC (its peer in a namespace of
its own), in scratch namespaces; the run goes through the real binder, runner and journal
(``tests/kernel/plugins/host-lent``), and a SIGKILL at every boundary of the run and of the
release recovers to the same host.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from dmn.engine.binder import bind_program
from dmn.engine.bound import BoundProgram
from dmn.host.rtnetlink.links import by_index, by_name
from dmn.interpreter.loader import load_plugin_dir
from dmn.vocabulary.terms import Access
from tests.crash_fork_server import crash_fork_server
from tests.crash_points import crash_points, effect_kinds
from tests.kernel.node import Node, call
from tests.kernel.world import World, host_handle, world

pytestmark = [pytest.mark.netns]

PLUGIN = Path(__file__).parent / "plugins/host-lent/v1"
MTU = 1450


@pytest.fixture
def lent(tmp_path: Path) -> Iterator[tuple[Node, World, str, str]]:
    """A node, its world, the allocated root (up, MTU 1450, peer in its own namespace) and a
    sandbox for the delegate to use."""
    with world() as w:
        node = Node(tmp_path / "state", w.host)
        try:
            sandbox, peer_ns = w.sandbox(), w.sandbox()
            host = w.ipr(w.host)
            root, peer = w.veth(w.host, mtu=MTU)
            host.link("set", index=host.link_lookup(ifname=peer)[0], net_ns_fd=peer_ns)
            yield node, w, root, sandbox
        finally:
            node.release_pins()


def _program(w: World, root: str, op: str) -> BoundProgram:
    plugin, diagnostics = load_plugin_dir(PLUGIN)
    assert plugin is not None, diagnostics
    handle = host_handle(w.ipr(w.host), root, Access.EXCLUSIVE_CONFIGURE)
    bound = bind_program(plugin, "prepare", call({}, op, allocation={"device": (handle,)}))
    assert isinstance(bound, BoundProgram), [str(d) for d in bound]
    return bound


def _delegate_add(w: World, root: str, sandbox: str) -> None:
    """host-device's ADD: into the sandbox as ``net1``, MTU of the workload's choice, up."""
    host = w.ipr(w.host)
    host.link("set", index=host.link_lookup(ifname=root)[0], net_ns_fd=sandbox, ifname="net1")
    sb = w.ipr(sandbox)
    sb.link("set", index=sb.link_lookup(ifname="net1")[0], mtu=1400, state="up")


def _delegate_del(w: World, root: str, sandbox: str, name: str = "net1") -> None:
    """host-device's DEL: down, back to the host under its host name."""
    sb = w.ipr(sandbox)
    index = sb.link_lookup(ifname=name)[0]
    sb.link("set", index=index, state="down")
    sb.link("set", index=index, net_ns_fd=w.host, ifname=root)


def _lend_and_return(w: World, root: str, sandbox: str) -> None:
    _delegate_add(w, root, sandbox)
    _delegate_del(w, root, sandbox)
    link = by_name(w.ipr(w.host), root)
    assert link is not None and not link.up and link.mtu == 1400  # what DEL leaves


def test_release_sets_the_lent_links_state_again(lent: tuple[Node, World, str, str]) -> None:
    node, w, root, sandbox = lent
    baseline = w.snapshot(w.host)
    node.run("lend", _program(w, root, "lend"))
    assert w.snapshot(w.host) == baseline  # prepare changes nothing
    _lend_and_return(w, root, sandbox)
    node.cleanup("lend")
    assert w.snapshot(w.host) == baseline


def test_release_leaves_a_link_still_lent_alone(lent: tuple[Node, World, str, str]) -> None:
    """The delegate's DEL has not given it back: nothing to restore, and the release is done
    (a link the node cannot see must not hold the claim's release)."""
    node, w, root, sandbox = lent
    node.run("kept", _program(w, root, "kept"))
    _delegate_add(w, root, sandbox)
    sb = w.ipr(sandbox)
    sb.link("set", index=sb.link_lookup(ifname="net1")[0], state="down")
    node.cleanup("kept")
    inside = by_name(sb, "net1")
    assert inside is not None and not inside.up and inside.mtu == 1400
    assert by_name(w.ipr(w.host), root) is None


@pytest.mark.adversarial
def test_a_tenant_renaming_and_re_macing_the_lent_link_does_not_hide_it(
    lent: tuple[Node, World, str, str],
) -> None:
    """Inside the Pod the tenant renames the link, changes its MAC and alias; the delegate
    returns it under a name of its own. The release finds it by kernel identity alone."""
    node, w, root, sandbox = lent
    index = by_name(w.ipr(w.host), root).index  # type: ignore[union-attr]
    node.run("tenant", _program(w, root, "tenant"))
    _delegate_add(w, root, sandbox)
    sb = w.ipr(sandbox)
    sb.link(
        "set",
        index=sb.link_lookup(ifname="net1")[0],
        ifname="eth9",
        address="02:00:00:aa:bb:cc",
        ifalias="not-yours",
    )
    _delegate_del(w, "dev7", sandbox, name="eth9")
    node.cleanup("tenant")
    back = by_index(w.ipr(w.host), index)
    assert back is not None and back.name == "dev7" and back.up and back.mtu == MTU


@pytest.mark.adversarial
def test_release_never_touches_another_link_at_the_recorded_ifindex(
    lent: tuple[Node, World, str, str],
) -> None:
    """The lent link stays away and another link takes its ifindex on the host: that link is
    not the recorded one (its lower device differs) and is left down; the release is done."""
    node, w, root, sandbox = lent
    host = w.ipr(w.host)
    index = by_name(host, root).index  # type: ignore[union-attr]
    node.run("taken", _program(w, root, "taken"))
    _delegate_add(w, root, sandbox)
    host.link("add", ifname="other0", kind="veth", peer="other1", index=index, mtu=9000)
    node.cleanup("taken")
    other = by_index(host, index)
    assert other is not None and other.name == "other0" and not other.up and other.mtu == 9000


@pytest.mark.crash
def test_host_link_state_crash_at_every_boundary(lent: tuple[Node, World, str, str]) -> None:
    """SIGKILL at each boundary of the run (then recovery and release: nothing was lent) and
    of the release (after the delegate handed the link back down; then recovery and the
    kubelet's retry): the host ends exactly as before, and nothing is quarantined."""
    node, w, root, sandbox = lent
    baseline = w.snapshot(w.host)
    survey = _program(w, root, "survey")
    names = node.survey("survey", survey)
    plan = {ph: crash_points(names[ph], effect_kinds(survey), __name__) for ph in names}
    assert plan["run"] and plan["cleanup"], names
    server = crash_fork_server()
    try:
        for phase in ("run", "cleanup"):
            for index in plan[phase]:
                op = f"{phase}{index}"
                program = _program(w, root, op)
                if phase == "run":
                    passed = node.killed_at(server, index, "run", op, program)
                else:
                    node.run(op, program)
                    _lend_and_return(w, root, sandbox)
                    passed = node.killed_at(server, index, "cleanup", op)
                assert passed, (phase, index)
                for result in node.recover():
                    assert result.state.value in ("Undone", "Completed"), result
                with node.runner() as runner:
                    end = runner.cleanup(op)
                assert end.state.value == "Undone", (phase, index, end)
                assert w.snapshot(w.host) == baseline, (phase, index, passed)
    finally:
        server.close()
