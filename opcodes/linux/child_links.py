"""Executors that create child links of a parent: ``linux/create-macvlan/v1``,
``linux/create-ipvlan/v1`` (host children of a held shared parent) and
``linux/create-vlan/v1`` (802.1Q child of a parent already in the sandbox).

macvlan and ipvlan children cannot share one parent; :func:`host_children` finds a host
link's children wherever they live now, for that family check.
"""

from __future__ import annotations

from typing import Any

from dmn.host.netns import LinkEnvironment
from dmn.host.rtnetlink.links import (
    LinkState,
    by_index,
    by_name,
    children_of,
    netlink_call,
    nonce_name,
)
from dmn.opcodes.effect_handles import environment, locate_input, single
from dmn.opcodes.executor import EffectContext, ExecutorError
from dmn.opcodes.linux import specs
from dmn.opcodes.linux.created_link import _CreatedLink
from dmn.opcodes.spec import OpcodeSpec
from dmn.vocabulary.terms import ScopeKind

MACVLAN_MODES = {"private": 1, "vepa": 2, "bridge": 4, "passthru": 8}
IPVLAN_MODES = {"l2": 0, "l3": 1, "l3s": 2}
SHARED_CHILD_KINDS = ("macvlan", "ipvlan")


def host_children(
    env: LinkEnvironment, parent_index: int, kinds: tuple[str, ...] = SHARED_CHILD_KINDS
) -> list[LinkState]:
    """Children (of ``kinds``) of a host link wherever they live now: the host and every
    known namespace.

    A child moved into a sandbox still hangs off the host parent; it is found by its lower
    ifindex together with the id that namespace gives the host namespace. Other namespaces
    are only read, through one lean reader socket each (no pyroute2 socket), and the dumps
    ask the kernel for those kinds only: this scan runs over every pin on the node.
    """
    found = list(children_of(env.reader(env.host), parent_index, kinds=kinds))
    host_fd = env.fd(env.host)
    for ref in env.known():
        if env.is_host(ref):
            continue
        try:
            reader = env.reader(ref)
        except ExecutorError:
            continue
        nsid = reader.nsid_of(host_fd)
        if nsid < 0:
            continue  # no id for the host there: no link in it can have a host lower
        found.extend(children_of(reader, parent_index, nsid, kinds=kinds))
    return found


def _shared_parent_check(
    env: LinkEnvironment, kind: str, parent_index: int, parent_mtu: int, mtu: int
) -> None:
    other = "ipvlan" if kind == "macvlan" else "macvlan"
    clash = [c.name for c in host_children(env, parent_index, (other,)) if c.kind == other]
    if clash:
        raise ExecutorError(
            "E_FAMILY_CONFLICT",
            f"parent already has {other} children {clash}; {kind} and {other} cannot share it",
        )
    if mtu > parent_mtu:
        raise ExecutorError("E_MTU_EXCEEDS_PARENT", f"mtu {mtu} > parent mtu {parent_mtu}")


class _SharedChild(_CreatedLink):
    """macvlan/ipvlan child of a held shared parent, created in the host namespace."""

    def capture(self, ctx: EffectContext) -> Any:
        env = environment(ctx)
        parent = single(ctx, "parent")
        if parent.scope.kind is not ScopeKind.HOST:
            raise ExecutorError("E_SCOPE", "the shared parent must be in the host namespace")
        _, link = locate_input(env, parent)
        mtu = int(ctx.parameters["mtu"])
        _shared_parent_check(env, self.kind, link.index, link.mtu, mtu)
        return {
            "netns": env.host.to_json(),
            "parent": link.to_json(),
            "lower": link.index,
            "nonce": nonce_name(),
            "alias": ctx.alias,
            **self._planned(env, env.host, link.index, env.host.identity.to_json()),
        }

    def _check(self, ctx: EffectContext, env: LinkEnvironment, before: Any) -> None:
        recorded = LinkState.from_json(before["parent"])
        live = by_index(env.rtnl(env.host), recorded.index)
        if live is None or live.name != recorded.name or live.mac != recorded.mac:
            raise ExecutorError("E_LINK_CHANGED", f"parent {recorded.name} changed identity")
        _shared_parent_check(env, self.kind, live.index, live.mtu, int(ctx.parameters["mtu"]))


class CreateMacvlan(_SharedChild):
    """``linux/create-macvlan/v1``."""

    spec: OpcodeSpec = specs.CREATE_MACVLAN
    kind = "macvlan"

    def _create(self, ctx: EffectContext, ipr: Any, before: Any) -> None:
        netlink_call(
            "create macvlan",
            ipr.link,
            "add",
            ifname=before["nonce"],
            index=self._index(before),
            kind="macvlan",
            link=int(before["lower"]),
            macvlan_mode=str(ctx.parameters["mode"]),
            mtu=int(ctx.parameters["mtu"]),
        )

    def _verify(self, ctx: EffectContext, link: LinkState, before: Any) -> str:
        mode = link.info.get("IFLA_MACVLAN_MODE")
        if mode not in (ctx.parameters["mode"], MACVLAN_MODES[str(ctx.parameters["mode"])]):
            return f"macvlan mode {mode} != {ctx.parameters['mode']}"
        return super()._verify(ctx, link, before)


class CreateIpvlan(_SharedChild):
    """``linux/create-ipvlan/v1``."""

    spec: OpcodeSpec = specs.CREATE_IPVLAN
    kind = "ipvlan"

    def _create(self, ctx: EffectContext, ipr: Any, before: Any) -> None:
        netlink_call(
            "create ipvlan",
            ipr.link,
            "add",
            ifname=before["nonce"],
            index=self._index(before),
            kind="ipvlan",
            link=int(before["lower"]),
            ipvlan_mode=IPVLAN_MODES[str(ctx.parameters["mode"])],
            mtu=int(ctx.parameters["mtu"]),
        )

    def _verify(self, ctx: EffectContext, link: LinkState, before: Any) -> str:
        mode = link.info.get("IFLA_IPVLAN_MODE")
        if mode not in (ctx.parameters["mode"], IPVLAN_MODES[str(ctx.parameters["mode"])]):
            return f"ipvlan mode {mode} != {ctx.parameters['mode']}"
        return super()._verify(ctx, link, before)


class CreateVlan(_CreatedLink):
    """``linux/create-vlan/v1``: 802.1Q child of a parent already in the same sandbox."""

    spec: OpcodeSpec = specs.CREATE_VLAN
    kind = "vlan"

    def capture(self, ctx: EffectContext) -> Any:
        env = environment(ctx)
        parent = single(ctx, "parent")
        if parent.scope.kind is not ScopeKind.SANDBOX:
            raise ExecutorError("E_SCOPE", "the VLAN parent must be in the sandbox")
        ref, link = locate_input(env, parent)
        sandbox = env.require_sandbox()
        if ref.identity != sandbox.identity:
            raise ExecutorError("E_NOT_SAME_SANDBOX", "the VLAN parent is in another sandbox")
        self._precheck(ctx, env.rtnl(ref), link)
        return {
            "netns": ref.to_json(),
            "parent": link.to_json(),
            "lower": link.index,
            "final": str(ctx.parameters["ifName"]),
            "nonce": nonce_name(),
            "alias": ctx.alias,
            **self._planned(env, ref, link.index, ref.identity.to_json()),
        }

    def _precheck(self, ctx: EffectContext, ipr: Any, parent: LinkState) -> None:
        mtu, vid, name = (
            int(ctx.parameters["mtu"]),
            int(ctx.parameters["vlanId"]),
            str(ctx.parameters["ifName"]),
        )
        if mtu > parent.mtu:
            raise ExecutorError("E_MTU_EXCEEDS_PARENT", f"mtu {mtu} > parent mtu {parent.mtu}")
        if by_name(ipr, name) is not None:
            raise ExecutorError("E_NAME_TAKEN", f"{name!r} already exists in the sandbox")
        for child in children_of(ipr, parent.index):
            if child.kind == "vlan" and child.info.get("IFLA_VLAN_ID") == vid:
                raise ExecutorError("E_VLAN_TAKEN", f"VLAN {vid} already exists on {parent.name}")

    def _check(self, ctx: EffectContext, env: LinkEnvironment, before: Any) -> None:
        ref = self._target_ref(env, before)
        recorded = LinkState.from_json(before["parent"])
        live = by_index(env.rtnl(ref), recorded.index)
        if live is None or live.name != recorded.name:
            raise ExecutorError("E_LINK_CHANGED", f"parent {recorded.name} changed identity")
        self._precheck(ctx, env.rtnl(ref), live)

    def _create(self, ctx: EffectContext, ipr: Any, before: Any) -> None:
        netlink_call(
            "create vlan",
            ipr.link,
            "add",
            ifname=before["nonce"],
            index=self._index(before),
            kind="vlan",
            link=int(before["lower"]),
            vlan_id=int(ctx.parameters["vlanId"]),
            mtu=int(ctx.parameters["mtu"]),
        )

    def _verify(self, ctx: EffectContext, link: LinkState, before: Any) -> str:
        if link.info.get("IFLA_VLAN_ID") != int(ctx.parameters["vlanId"]):
            return f"vlan id {link.info.get('IFLA_VLAN_ID')} != {ctx.parameters['vlanId']}"
        return super()._verify(ctx, link, before)
