"""SIGKILL at every journal boundary of ``ip/pool-addresses/v1`` (the ip-pool test plugin on
a veth end already in the sandbox), run and cleanup, with the real executor, the real
journal and the lab API server as the arbiter.

After each kill the parent recovers from the journal alone (the environment rebuilt from the
pins, with the IPPool port but no claim: the owner comes from the before-image), cleans up,
and proves: the sandbox's addresses and routes are as before, nothing is quarantined, no
IPAllocation is left, and no address was ever held twice.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from dmn.api.cluster import Cluster
from dmn.api.cluster import resources as r
from dmn.engine.binder import bind_program
from dmn.engine.bound import BoundProgram
from dmn.host.netns import identity_of
from dmn.host.rtnetlink.links import by_name
from dmn.interpreter.loader import load_plugin_dir
from dmn.lab.apiserver import LabApiServer
from dmn.opcodes.address_pools import ClaimOwner
from dmn.vocabulary.handles import Handle, Scope
from dmn.vocabulary.terms import Access, HandleType, LinkType, ScopeKind
from tests.crash_fork_server import CrashForkServer, crash_fork_server
from tests.crash_points import crash_points, effect_kinds
from tests.kernel.node import Node, call
from tests.kernel.scratch import netns_path
from tests.kernel.test_ip_executors import l3_state
from tests.kernel.test_ip_pool_addresses import cluster, lab  # noqa: F401  # module fixtures
from tests.kernel.world import world

pytestmark = [pytest.mark.netns, pytest.mark.crash]

PLUGIN = Path(__file__).parent / "plugins/ip-pool/v1"


@pytest.fixture(scope="module")
def server() -> Iterator[CrashForkServer]:
    s = crash_fork_server()
    try:
        yield s
    finally:
        s.close()


def test_pool_addresses_crash_at_every_boundary(
    server: CrashForkServer,
    lab: LabApiServer,  # noqa: F811
    cluster: Cluster,  # noqa: F811
    tmp_path: Path,
) -> None:
    url = lab.url
    owner = ClaimOwner("tenant-a", "claim-c", "uid-crash", "node-1")
    with world() as w:
        node = Node(tmp_path / "state", w.host, ipam_url=url, claim_owner=owner)
        try:
            _matrix(server, cluster, node, w)
        finally:
            node.release_pins()


def _matrix(server: CrashForkServer, api: Cluster, node: Node, w: Any) -> None:
    sandbox = w.sandbox()
    sb = w.ipr(sandbox)
    sb.link("add", ifname="net1", kind="veth", peer="peer1")
    for name in ("net1", "peer1"):
        sb.link("set", index=sb.link_lookup(ifname=name)[0], state="up")
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
    plugin, diagnostics = load_plugin_dir(PLUGIN)
    assert plugin is not None, diagnostics

    def program(op: str, ref: Any) -> BoundProgram:
        c = call({}, op, inputs={"interface": (handle,)}, sandbox=ref)
        bound = bind_program(plugin, "connect", c)
        assert isinstance(bound, BoundProgram), [str(d) for d in bound]
        return bound

    def held() -> list[str]:
        return sorted(o["spec"]["address"] for o in api.list(r.IP_ALLOCATIONS).items)

    baseline = l3_state(sandbox)
    ref = node.pin("survey", sandbox)
    kinds = effect_kinds(program("survey", ref))
    names = node.survey("survey", program("survey", ref), ref)
    node.pins.release("survey", cleanup_verified=True)
    assert l3_state(sandbox) == baseline and held() == []
    assert any(n.startswith("after-apply:") for n in names["run"]), names
    for phase in ("run", "cleanup"):
        points = crash_points(names[phase], kinds, __name__)
        # run: before-image, apply, outcome; cleanup: Undoing, undone
        assert len(points) >= (3 if phase == "run" else 2), (phase, names[phase])
        for index in points:
            op = f"{phase}{index}"
            ref = node.pin(op, sandbox)
            if phase == "run":
                passed = node.killed_at(server, index, "run", op, program(op, ref), ref)
            else:
                node.run(op, program(op, ref), sandbox=ref)
                passed = node.killed_at(server, index, "cleanup", op)
            assert passed, (phase, index)
            assert len(held()) <= 2, (phase, index, held())  # never a second pair
            for result in node.recover():
                assert result.state.value in ("Undone", "Completed"), result
            with node.runner() as runner:
                end = runner.cleanup(op)
            assert end.state.value == "Undone", (phase, index, passed, end)
            assert l3_state(sandbox) == baseline, (phase, index, passed)
            assert held() == [], (phase, index, passed)
            node.pins.release(op, cleanup_verified=True)
