"""A small real-kernel world for executor tests: a stand-in host namespace plus sandboxes.

Nothing touches the machine's real host namespace: the "host" the executors see is a scratch
namespace, sandboxes are scratch namespaces too, and all of them are removed on exit (which
destroys every virtual link inside). :func:`drive` runs one effect the way the runner does
(capture → apply → observe) and returns what undo needs.
"""

from __future__ import annotations

import subprocess
from collections.abc import Iterator, Mapping
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, field
from typing import Any

from pyroute2 import IPRoute

from dmn.host.netns import LinkEnvironment, NamespaceRef
from dmn.host.rtnetlink.links import LinkState, all_links, by_name
from dmn.opcodes.executor import EffectContext, Executor, Observed
from dmn.opcodes.executor_table import default_executors
from dmn.vocabulary.handles import Handle, Provenance, Scope
from dmn.vocabulary.terms import Access, HandleType, LinkType, ScopeKind
from tests.kernel.scratch import netns_path, scratch_netns, unique

EXECUTORS: dict[str, Executor] = default_executors()


@dataclass
class World:
    host: str
    stack: ExitStack
    sandboxes: list[str] = field(default_factory=list)

    def sandbox(self) -> str:
        name = self.stack.enter_context(scratch_netns("dmsb"))
        self.sandboxes.append(name)
        return name

    def ipr(self, ns: str) -> Any:
        return self.stack.enter_context(IPRoute(netns=ns))

    def env(self, sandbox: str | None = None, pins: tuple[str, ...] | None = None) -> Any:
        refs = tuple(NamespaceRef.at(netns_path(n)) for n in (pins or ()))
        env = LinkEnvironment(
            host=NamespaceRef.at(netns_path(self.host)),
            sandbox=NamespaceRef.at(netns_path(sandbox)) if sandbox else None,
            pins=lambda: refs,
        )
        self.stack.callback(env.close)
        return env

    def veth(self, ns: str, mtu: int = 1500) -> tuple[str, str]:
        a, b = unique("va"), unique("vb")
        ipr = self.ipr(ns)
        ipr.link("add", ifname=a, kind="veth", peer=b)
        for n in (a, b):
            ipr.link("set", index=ipr.link_lookup(ifname=n)[0], mtu=mtu, state="up")
        return a, b

    def snapshot(self, ns: str) -> dict[str, tuple[Any, ...]]:
        """Everything a test compares to prove a namespace is as before (not ifindexes)."""
        ipr = self.ipr(ns)
        out = {}
        for link in all_links(ipr):
            full = by_name(ipr, link.name, with_addresses=True)
            assert full is not None
            out[link.name] = (full.alias, full.mtu, full.mac, full.up, full.kind, full.addresses)
        return out


@contextmanager
def world() -> Iterator[World]:
    with ExitStack() as stack:
        host = stack.enter_context(scratch_netns("dmho"))
        yield World(host, stack)


def host_handle(ipr: Any, name: str, access: Access, hid: str | None = None) -> Handle:
    link = by_name(ipr, name)
    assert link is not None
    return Handle(
        id=hid or f"root-{name}",
        type=HandleType.KERNEL_INTERFACE,
        inventory_id=f"netdev:{link.mac}",
        scope=Scope(ScopeKind.HOST),
        accesses=frozenset({Access.READ, access}),
        link_type=LinkType.ETHERNET,
        provenance=Provenance(claim_uid="claim-1", request="net", device=name),
        observations={"ifName": link.name, "ifIndex": link.index, "mac": link.mac},
    )


@dataclass
class Done:
    """A driven effect: its context and before-image, and the observation."""

    kind: str
    ctx: EffectContext
    before: Any
    observed: Observed

    def output(self, port: str = "interface") -> Handle:
        return self.observed.outputs[port][0]

    def undo(self) -> None:
        EXECUTORS[self.kind].undo(self.ctx, self.before, self.observed.outputs)


def drive(
    env: Any,
    kind: str,
    inputs: Mapping[str, tuple[Handle, ...]],
    parameters: Mapping[str, Any],
    operation: str = "op1",
    effect: str = "e1",
) -> Done:
    ex = EXECUTORS[kind]
    ctx = EffectContext(operation, effect, inputs, parameters, env)
    before = ex.capture(ctx)
    ex.apply(ctx, before)
    observed = ex.observe(ctx, before)
    assert observed.postconditions_ok, observed.detail
    return Done(kind, ctx, before, observed)


def ping(ns: str, address: str) -> bool:
    proc = subprocess.run(
        ["ip", "netns", "exec", ns, "ping", "-c", "1", "-W", "2", address],
        capture_output=True,
        check=False,
    )
    return proc.returncode == 0


def add_address(ipr: Any, name: str, cidr: str) -> None:
    address, prefix = cidr.split("/")
    index = ipr.link_lookup(ifname=name)[0]
    ipr.addr("add", index=index, address=address, prefixlen=int(prefix))
    ipr.link("set", index=index, state="up")


def link(ipr: Any, name: str) -> LinkState:
    found = by_name(ipr, name, with_addresses=True)
    assert found is not None, name
    return found
