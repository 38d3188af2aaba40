"""Executors of ``linux/create-macvlan/v2`` and ``linux/create-ipvlan/v2``: a child of a held
shared host parent created directly in the call's verified, pinned sandbox (issue 15).

One journaled effect replaces v1's create-on-host + move (the kernel's namespace move alone
costs more than the reference plugin's whole ADD). The lifecycle, and why each step is safe:

* ``capture`` (before anything changes) records the target pin (identity + path), the
  parent's identity on the host, the link's identity-to-be (a random free ifindex in the
  sandbox, the kind, the lower device on the host: :mod:`link_identity`), the workload's
  final name and the ownership alias; the runner journals it before ``apply``.
* ``apply`` re-proves the parent, then sends one RTM_NEWLINK from the host namespace with
  ``IFLA_NET_NS_FD`` of the pinned sandbox: the kernel creates the child in the sandbox (it
  never exists on the host) at the journaled ifindex, under the final name and in the final
  admin state, atomically refusing a taken name or ifindex (EEXIST → ``E_NAME_TAKEN``) and a
  parent whose receive handler belongs to another family (EBUSY: an
  ipvlan/macvlan/bridge/bond port → ``E_FAMILY_CONFLICT``). It then claims the link with
  the ownership alias (a label; the proof is the identity). v1's temporary *nonce* name is
  not needed here: no name is ever the proof of a v2 child, its recorded ifindex with the
  kind and a lower in the host is (a tenant cannot make a link whose lower is on the host),
  and creating under the final name spares the kernel a rename of the new link.
* ``recover`` after a crash looks for the link by that recorded identity in the pinned
  sandbox; a link found there unclaimed (any name: records of earlier versions created it
  under a nonce) is claimed — alias, final name, admin state. Nothing else is ever adopted.
* ``undo`` deletes the child in place in its namespace (no move back); a child whose
  sandbox is gone died with it.
"""

from __future__ import annotations

import errno
from collections.abc import Mapping
from types import MappingProxyType
from typing import Any, ClassVar

from dmn.host.netns import LinkEnvironment, NamespaceRef
from dmn.host.rtnetlink.links import LinkState, by_index, by_name, link_request
from dmn.opcodes.effect_handles import environment, locate_input, single
from dmn.opcodes.executor import EffectContext, ExecutorError, RecoveryObservation
from dmn.opcodes.linux import specs
from dmn.opcodes.linux.child_links import IPVLAN_MODES, MACVLAN_MODES
from dmn.opcodes.linux.created_link import _CreatedLink
from dmn.opcodes.spec import OpcodeSpec
from dmn.vocabulary.terms import ScopeKind


class _SandboxChild(_CreatedLink):
    """A macvlan/ipvlan child of a held host parent, created in the verified sandbox."""

    mode_attr: str = ""
    modes: ClassVar[Mapping[str, int]] = MappingProxyType({})

    def capture(self, ctx: EffectContext) -> Any:
        env = environment(ctx)
        sandbox = env.require_sandbox()
        parent = single(ctx, "parent")
        if parent.scope.kind is not ScopeKind.HOST:
            raise ExecutorError("E_SCOPE", "the shared parent must be in the host namespace")
        _, link = locate_input(env, parent)
        mtu = int(ctx.parameters["mtu"])
        if mtu > link.mtu:
            raise ExecutorError("E_MTU_EXCEEDS_PARENT", f"mtu {mtu} > parent mtu {link.mtu}")
        final = str(ctx.parameters["ifName"])
        if by_name(env.rtnl(sandbox), final) is not None:
            raise ExecutorError("E_NAME_TAKEN", f"{final!r} already exists in the sandbox")
        return {
            "netns": sandbox.to_json(),
            "host": env.host.to_json(),
            "parent": link.to_json(),
            "lower": link.index,
            "final": final,
            "up": bool(ctx.parameters["up"]),
            "alias": ctx.alias,
            **self._planned(env, sandbox, link.index, env.host.identity.to_json()),
        }

    def _parent(self, env: LinkEnvironment, before: Any) -> LinkState:
        recorded = LinkState.from_json(before["parent"])
        live = by_index(env.rtnl(env.host), recorded.index)
        if live is None or live.name != recorded.name or live.mac != recorded.mac:
            raise ExecutorError("E_LINK_CHANGED", f"parent {recorded.name} changed identity")
        return live

    def _request(self, ctx: EffectContext) -> dict[str, Any]:
        mode = str(ctx.parameters["mode"])
        return {f"{self.kind}_mode": mode if self.kind == "macvlan" else self.modes[mode]}

    def apply(self, ctx: EffectContext, before: Any) -> None:
        env = environment(ctx)
        sandbox = NamespaceRef.from_json(before["netns"])
        live = self._parent(env, before)
        mtu = int(ctx.parameters["mtu"])
        if mtu > live.mtu:
            raise ExecutorError("E_MTU_EXCEEDS_PARENT", f"mtu {mtu} > parent mtu {live.mtu}")
        try:
            link_request(
                f"create {self.kind} in sandbox",
                env.rtnl(env.host),
                "add",
                ifname=before["final"],
                index=self._index(before),
                kind=self.kind,
                link=int(before["lower"]),
                mtu=mtu,
                net_ns_fd=env.fd(sandbox),
                state="up" if before.get("up") else "down",
                **self._request(ctx),
            )
        except ExecutorError as exc:
            if exc.code == f"E_NETLINK_{errno.EEXIST}":
                raise ExecutorError(
                    "E_NAME_TAKEN",
                    f"{before['final']!r} or ifindex {self._index(before)} is taken in the sandbox",
                ) from exc
            if exc.code == f"E_NETLINK_{errno.EBUSY}":
                raise ExecutorError(
                    "E_FAMILY_CONFLICT",
                    f"parent {live.name} already serves another link family "
                    f"(ipvlan/macvlan/bridge/bond port); a {self.kind} child cannot share it",
                ) from exc
            raise
        found = self._find(env, before, everywhere=False)
        if found is None:
            raise ExecutorError("E_LINK_LOST", "created link not found in the sandbox")
        self._finish(env, found[0], found[1], before)

    def _finish(
        self, env: LinkEnvironment, ref: NamespaceRef, link: LinkState, before: Any
    ) -> None:
        """Claim: the ownership alias, and the final name and admin state where they differ
        (a link recovery finds under an earlier version's nonce name), in one request (the
        kernel renames before it sets the link up)."""
        changes: dict[str, Any] = {"ifalias": before["alias"]}
        if link.name != before["final"]:
            changes["ifname"] = before["final"]
        if bool(before.get("up")) != link.up:
            changes["state"] = "up" if before.get("up") else "down"
        link_request("claim link", env.rtnl(ref), "set", index=link.index, **changes)

    def recover(self, ctx: EffectContext, before: Any) -> RecoveryObservation:
        env = environment(ctx)
        found = self._find(env, before)
        if found is None:
            return RecoveryObservation.NOT_APPLIED
        ref, link = found
        if (
            link.alias != before["alias"]
            or link.name != before["final"]
            or link.up != bool(before.get("up"))
        ):
            self._finish(env, ref, link, before)  # crash between create and claim
        return RecoveryObservation.APPLIED

    def _verify(self, ctx: EffectContext, link: LinkState, before: Any) -> str:
        mode = link.info.get(self.mode_attr)
        wanted = str(ctx.parameters["mode"])
        if mode not in (wanted, self.modes[wanted]):
            return f"{self.kind} mode {mode} != {wanted}"
        if link.up != bool(before.get("up")):
            return f"admin state up={link.up} != {before.get('up')}"
        return super()._verify(ctx, link, before)


class CreateMacvlanInSandbox(_SandboxChild):
    """``linux/create-macvlan/v2``."""

    spec: OpcodeSpec = specs.CREATE_MACVLAN_IN_SANDBOX
    kind = "macvlan"
    mode_attr = "IFLA_MACVLAN_MODE"
    modes = MACVLAN_MODES


class CreateIpvlanInSandbox(_SandboxChild):
    """``linux/create-ipvlan/v2``."""

    spec: OpcodeSpec = specs.CREATE_IPVLAN_IN_SANDBOX
    kind = "ipvlan"
    mode_attr = "IFLA_IPVLAN_MODE"
    modes = IPVLAN_MODES
