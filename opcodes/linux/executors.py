"""Native executors of the ``linux/*`` opcodes (pyroute2 rtnetlink only, no shell).

Each executor implements :class:`dmn.opcodes.executor.Executor` against the specs in
``specs.py`` and takes its namespaces from a :class:`LinkEnvironment` in ``ctx.env``.

Ownership (seed 000 §11.3): a link we create is first made under a random *nonce* name that is
journaled in the before-image, then given the ownership alias ``dmn:<operation>:<effect>``
(and, for sandbox links, its final name in the same request). Cleanup and recovery act on a
created link only when it carries that alias, or — in the crash window between creation and
aliasing — when it still has the journaled nonce name, the recorded kind and the recorded lower
device and no alias. A same-named link without that proof is foreign: never adopted, never
deleted. A moved root carries the move's alias while it is in the sandbox; undo returns it with
its original name, alias, MTU, MAC, addresses and admin state.

Where a link is not where it was left, undo and recovery search the host, the recorded
sandbox and every pinned namespace the environment lists, rather than assuming it is gone.
"""

from __future__ import annotations

import dataclasses
import errno
import logging
from collections.abc import Mapping
from typing import Any

from dmn.interpreter.handles import (
    Access,
    Handle,
    HandleType,
    LinkType,
    Provenance,
    ScopeKind,
)
from dmn.opcodes.executor import (
    EffectContext,
    Executor,
    ExecutorError,
    Observed,
    RecoveryObservation,
)
from dmn.opcodes.linux import specs
from dmn.opcodes.linux.links import (
    LinkState,
    addresses_of,
    by_index,
    by_name,
    children_of,
    locate_hinted,
    netlink_call,
    nonce_name,
    owned,
)
from dmn.opcodes.linux.netns import LinkEnvironment, NamespaceRef
from dmn.opcodes.spec import OpcodeSpec

_log = logging.getLogger(__name__)

Outputs = Mapping[str, tuple[Handle, ...]]
BOND_MODE_ACTIVE_BACKUP = 1
FAIL_OVER_MAC_ACTIVE = 1
MACVLAN_MODES = {"private": 1, "vepa": 2, "bridge": 4, "passthru": 8}
IPVLAN_MODES = {"l2": 0, "l3": 1, "l3s": 2}
SHARED_CHILD_KINDS = ("macvlan", "ipvlan")


def environment(ctx: EffectContext) -> LinkEnvironment:
    if not isinstance(ctx.env, LinkEnvironment):
        raise ExecutorError("E_ENV", "linux executors need a LinkEnvironment in ctx.env")
    return ctx.env


def single(ctx: EffectContext, port: str) -> Handle:
    handles = ctx.inputs.get(port, ())
    if len(handles) != 1:
        raise ExecutorError("E_PORT", f"input {port!r} needs exactly one handle")
    return handles[0]


def locate_input(env: LinkEnvironment, handle: Handle) -> tuple[NamespaceRef, LinkState]:
    """Find a handle's link in the namespace its scope names, re-verifying the hints."""
    ref = env.ref_for_scope(handle.scope)
    ipr = env.rtnl(ref)
    alias = str(handle.observations.get("alias", "") or "")
    hint = str(handle.observations.get("ifName", "") or "")
    link = owned(ipr, alias, (hint,)) if alias else None
    if link is None:
        link = locate_hinted(ipr, handle.observations)
    if link is None:
        raise ExecutorError(
            "E_LINK_NOT_FOUND",
            f"handle {handle.id}: no link matching {dict(handle.observations)} in {ref.path}",
        )
    return ref, link


def link_handle(
    base: Handle | None,
    ctx: EffectContext,
    env: LinkEnvironment,
    ref: NamespaceRef,
    link: LinkState,
    grants: frozenset[Access],
) -> Handle:
    """The output handle for a link: a continued input handle, or a new one for a created link."""
    observations: dict[str, str | int | bool] = {
        "ifName": link.name,
        "ifIndex": link.index,
        "alias": link.alias,
        "mac": link.mac,
    }
    if base is not None:
        return Handle(
            id=base.id,
            type=base.type,
            inventory_id=base.inventory_id,
            scope=env.scope_of(ref),
            accesses=base.accesses,
            link_type=base.link_type,
            provenance=base.provenance,
            observations=observations,
        )
    return Handle(
        id=f"{ctx.operation_id}/{ctx.effect_id}/interface",
        type=HandleType.KERNEL_INTERFACE,
        inventory_id=f"link:{ctx.alias}",
        scope=env.scope_of(ref),
        accesses=grants,
        link_type=LinkType.ETHERNET,
        provenance=Provenance(operation=ctx.operation_id, effect=ctx.effect_id),
        observations=observations,
    )


def find_owned(
    env: LinkEnvironment,
    alias: str,
    nonce: tuple[str, str, int] | None,
    first: NamespaceRef | None = None,
    names: tuple[str, ...] = (),
) -> tuple[NamespaceRef, LinkState] | None:
    """Search known namespaces for the link this effect owns.

    Proof is the alias; or ``nonce = (name, kind, lower)`` for a link left un-aliased by a
    crash right after creation (the nonce name was journaled before the link existed).
    """
    refs = env.known()
    if first is not None:
        refs = [first, *[r for r in refs if r.identity != first.identity]]
    for ref in refs:
        try:
            found = find_owned_in(env, ref, alias, nonce, names)
        except ExecutorError:
            continue  # a pin that is gone or stale cannot hold our link any more
        if found is not None:
            return found
    return None


def find_owned_in(
    env: LinkEnvironment,
    ref: NamespaceRef,
    alias: str,
    nonce: tuple[str, str, int] | None,
    names: tuple[str, ...] = (),
    dump: bool = True,
) -> tuple[NamespaceRef, LinkState] | None:
    """:func:`find_owned` restricted to one namespace (``names``: where to look first).

    Each hinted name is looked up once; a link under it is ours when it carries the alias,
    or when it is the journaled nonce name with the recorded kind and lower and no alias.
    Only then (and only with ``dump``) is the namespace dumped for the alias, which finds
    an owned link someone renamed and refuses two links claiming one alias.
    """
    ipr = env.rtnl(ref)
    nonce_name_, kind, lower = nonce if nonce is not None else ("", "", 0)
    for name in dict.fromkeys(n for n in (*names, nonce_name_) if n):
        cand = by_name(ipr, name)
        if cand is None:
            continue
        if cand.alias == alias:
            return ref, cand
        if (
            name == nonce_name_
            and not cand.alias
            and cand.kind == kind
            and (not lower or cand.lower == lower)
        ):
            return ref, cand
    if not dump:
        return None
    link = owned(ipr, alias)
    return (ref, link) if link is not None else None


def set_alias(ipr: Any, index: int, alias: str) -> None:
    netlink_call("set alias", ipr.link, "set", index=index, ifalias=alias)


def delete_owned(env: LinkEnvironment, ref: NamespaceRef, link: LinkState) -> None:
    netlink_call(f"delete {link.name}", env.rtnl(ref).link, "del", index=link.index)


# ---------------------------------------------------------------------------- link-move


class LinkMove:
    """``linux/link-move/v1``: host link → verified sandbox, renamed; undo returns it intact."""

    spec: OpcodeSpec = specs.LINK_MOVE

    def capture(self, ctx: EffectContext) -> Any:
        env = environment(ctx)
        sandbox = env.require_sandbox()
        handle = single(ctx, "interface")
        if handle.scope.kind is not ScopeKind.HOST:
            raise ExecutorError("E_SCOPE", f"handle {handle.id} is not in the host namespace")
        ipr = env.rtnl(env.host)
        _, link = locate_input(env, handle)
        full = dataclasses.replace(link, addresses=addresses_of(ipr, link.index))
        target = str(ctx.parameters["ifName"])
        if by_name(env.rtnl(sandbox), target) is not None:
            raise ExecutorError("E_NAME_TAKEN", f"{target!r} already exists in the sandbox")
        return {
            "host": env.host.to_json(),
            "sandbox": sandbox.to_json(),
            "original": full.to_json(),
            "target": target,
            "alias": ctx.alias,
        }

    def apply(self, ctx: EffectContext, before: Any) -> None:
        env = environment(ctx)
        sandbox = NamespaceRef.from_json(before["sandbox"])
        original = LinkState.from_json(before["original"])
        host = env.rtnl(env.host)
        link = by_index(host, original.index)
        if link is None or link.name != original.name or link.mac != original.mac:
            raise ExecutorError("E_LINK_CHANGED", f"{original.name} is no longer the captured link")
        if by_name(env.rtnl(sandbox), before["target"]) is not None:
            raise ExecutorError("E_NAME_TAKEN", f"{before['target']!r} exists in the sandbox")
        # one request moves, renames and claims the link: no window where it sits in the
        # sandbox without its ownership alias
        netlink_call(
            f"move {original.name}",
            host.link,
            "set",
            index=link.index,
            net_ns_fd=env.fd(sandbox),
            ifname=before["target"],
            ifalias=before["alias"],
        )
        moved = by_name(env.rtnl(sandbox), before["target"])
        if moved is None or moved.mac != original.mac:
            raise ExecutorError("E_LINK_LOST", f"{before['target']} not found after the move")
        if moved.alias != before["alias"]:
            set_alias(env.rtnl(sandbox), moved.index, before["alias"])

    def _in_sandbox(self, env: LinkEnvironment, before: Any) -> LinkState | None:
        sandbox = NamespaceRef.from_json(before["sandbox"])
        original = LinkState.from_json(before["original"])
        ipr = env.rtnl(sandbox)
        link = owned(ipr, before["alias"], (before["target"],))
        if link is None:
            cand = by_name(ipr, before["target"])
            if cand is not None and cand.mac == original.mac:
                link = cand
        return link

    def observe(self, ctx: EffectContext, before: Any) -> Observed:
        env = environment(ctx)
        link = self._in_sandbox(env, before)
        if link is None:
            return Observed(False, detail="link is not in the sandbox")
        ok = link.name == before["target"] and link.alias == before["alias"]
        sandbox = NamespaceRef.from_json(before["sandbox"])
        out = link_handle(single(ctx, "interface"), ctx, env, sandbox, link, frozenset())
        return Observed(ok, {"interface": (out,)}, "" if ok else f"read back {link.name}")

    def recover(self, ctx: EffectContext, before: Any) -> RecoveryObservation:
        env = environment(ctx)
        try:
            if self._in_sandbox(env, before) is not None:
                return RecoveryObservation.APPLIED
        except ExecutorError:
            pass
        original = LinkState.from_json(before["original"])
        home = by_name(env.rtnl(env.host), original.name)
        if home is not None and home.mac == original.mac:
            return RecoveryObservation.NOT_APPLIED
        return RecoveryObservation.UNCERTAIN

    def undo(self, ctx: EffectContext, before: Any, outputs: Outputs) -> None:
        env = environment(ctx)
        original = LinkState.from_json(before["original"])
        host = env.rtnl(env.host)
        found = self._locate_anywhere(env, before, original)
        if found is None:
            home = by_name(host, original.name)
            if home is not None and home.mac == original.mac:
                found = (env.host, home)
        if found is None:
            if original.kind and not self._sandbox_alive(env, before):
                # a virtual link (veth end, macvlan child) dies with its namespace
                _log.info("effect=%s event=undo-noop reason=sandbox-gone", ctx.effect_id)
                return
            raise ExecutorError(
                "E_LINK_LOST", f"{original.name} ({original.mac}) is in no known namespace"
            )
        ref, link = found
        if not env.is_host(ref):
            netlink_call(
                f"return {link.name}",
                env.rtnl(ref).link,
                "set",
                index=link.index,
                net_ns_fd=env.fd(env.host),
                ifname=original.name,
                ifalias=original.alias,
            )
        elif link.name != original.name:
            # back in the host under its sandbox name: what a physical device does when its
            # sandbox namespace is destroyed; the kernel renames only a link that is down
            if link.up:
                netlink_call(f"down {link.name}", host.link, "set", index=link.index, state="down")
            netlink_call(
                f"rename {link.name}", host.link, "set", index=link.index, ifname=original.name
            )
        restore_root(host, original)

    def _sandbox_alive(self, env: LinkEnvironment, before: Any) -> bool:
        try:
            env.rtnl(NamespaceRef.from_json(before["sandbox"]))
        except ExecutorError:
            return False
        return True

    def _locate_anywhere(
        self, env: LinkEnvironment, before: Any, original: LinkState
    ) -> tuple[NamespaceRef, LinkState] | None:
        sandbox = NamespaceRef.from_json(before["sandbox"])
        try:
            link = self._in_sandbox(env, before)
            if link is not None:
                return sandbox, link
        except ExecutorError:
            pass
        return find_owned(env, before["alias"], None, names=(before["target"], original.name))


def restore_root(host: Any, original: LinkState) -> None:
    """Put a returned root back as captured: name, alias, MTU, MAC, addresses, admin state."""
    link = by_name(host, original.name)
    if link is None:
        raise ExecutorError("E_LINK_LOST", f"{original.name} did not arrive in the host")
    changes: dict[str, Any] = {}
    if link.mtu != original.mtu:
        changes["mtu"] = original.mtu
    if original.mac and link.mac.lower() != original.mac.lower():
        changes["address"] = original.mac
    if link.alias != original.alias:
        changes["ifalias"] = original.alias
    if changes:
        netlink_call(f"restore {original.name}", host.link, "set", index=link.index, **changes)
    present = {(a.family, a.address, a.prefixlen) for a in addresses_of(host, link.index)}
    for addr in original.addresses:
        if (addr.family, addr.address, addr.prefixlen) not in present:
            netlink_call(
                f"restore address {addr.address}",
                host.addr,
                "add",
                index=link.index,
                address=addr.address,
                prefixlen=addr.prefixlen,
                family=addr.family,
            )
    now = by_index(host, link.index)
    if now is not None and now.up != original.up:
        state = "up" if original.up else "down"
        netlink_call(f"{state} {original.name}", host.link, "set", index=link.index, state=state)


# ---------------------------------------------------------------------------- link-configure


class LinkConfigure:
    """``linux/link-configure/v1``: MTU and admin state of a sandbox link; undo restores both."""

    spec: OpcodeSpec = specs.LINK_CONFIGURE

    def capture(self, ctx: EffectContext) -> Any:
        env = environment(ctx)
        handle = single(ctx, "interface")
        if handle.scope.kind is not ScopeKind.SANDBOX:
            raise ExecutorError("E_SCOPE", f"handle {handle.id} is not in a sandbox")
        ref, link = locate_input(env, handle)
        return {"netns": ref.to_json(), "link": link.to_json()}

    def _link(self, env: LinkEnvironment, before: Any) -> tuple[Any, LinkState | None]:
        ref = NamespaceRef.from_json(before["netns"])
        recorded = LinkState.from_json(before["link"])
        ipr = env.rtnl(ref)
        link = by_index(ipr, recorded.index)
        # identity: ifindex + name in the recorded namespace, plus the ownership alias when the
        # link carries one (a bond's MAC follows its active member, so MAC is no identity here)
        if link is not None and (
            link.name != recorded.name or (recorded.alias and link.alias != recorded.alias)
        ):
            link = None
        return ipr, link

    def apply(self, ctx: EffectContext, before: Any) -> None:
        env = environment(ctx)
        ipr, link = self._link(env, before)
        if link is None:
            raise ExecutorError("E_LINK_CHANGED", "the captured link is gone or renamed")
        mtu, up = ctx.parameters.get("mtu"), ctx.parameters.get("up")
        changes: dict[str, Any] = {}
        if mtu is not None and link.mtu != mtu:
            changes["mtu"] = int(mtu)
        if up is not None and link.up != bool(up):
            changes["state"] = "up" if up else "down"
        if changes:  # one request: the kernel applies the MTU before the admin state
            netlink_call(f"configure {link.name}", ipr.link, "set", index=link.index, **changes)

    def _matches(self, ctx: EffectContext, link: LinkState) -> bool:
        mtu, up = ctx.parameters.get("mtu"), ctx.parameters.get("up")
        return (mtu is None or link.mtu == mtu) and (up is None or link.up == bool(up))

    def observe(self, ctx: EffectContext, before: Any) -> Observed:
        env = environment(ctx)
        _, link = self._link(env, before)
        if link is None:
            return Observed(False, detail="link is gone")
        ref = NamespaceRef.from_json(before["netns"])
        out = link_handle(single(ctx, "interface"), ctx, env, ref, link, frozenset())
        ok = self._matches(ctx, link)
        return Observed(ok, {"interface": (out,)}, "" if ok else "MTU/admin state differ")

    def recover(self, ctx: EffectContext, before: Any) -> RecoveryObservation:
        env = environment(ctx)
        _, link = self._link(env, before)
        if link is None:
            return RecoveryObservation.UNCERTAIN
        if self._matches(ctx, link):
            return RecoveryObservation.APPLIED
        recorded = LinkState.from_json(before["link"])
        if (link.mtu, link.up) == (recorded.mtu, recorded.up):
            return RecoveryObservation.NOT_APPLIED
        return RecoveryObservation.UNCERTAIN

    def undo(self, ctx: EffectContext, before: Any, outputs: Outputs) -> None:
        env = environment(ctx)
        ipr, link = self._link(env, before)
        if link is None:
            _log.warning("effect=%s event=undo-skip reason=link-gone", ctx.effect_id)
            return
        recorded = LinkState.from_json(before["link"])
        if link.up and not recorded.up:
            netlink_call(f"down {link.name}", ipr.link, "set", index=link.index, state="down")
        if link.mtu != recorded.mtu:
            netlink_call(f"mtu {link.name}", ipr.link, "set", index=link.index, mtu=recorded.mtu)
        if recorded.up and not link.up:
            netlink_call(f"up {link.name}", ipr.link, "set", index=link.index, state="up")


# ---------------------------------------------------------------------------- created links


class _CreatedLink:
    """Common lifecycle of a link this effect creates (nonce name → alias → maybe rename)."""

    spec: OpcodeSpec
    kind: str = ""

    def _nonce(self, before: Any) -> tuple[str, str, int]:
        return (before["nonce"], self.kind, int(before.get("lower", 0)))

    def _target_ref(self, env: LinkEnvironment, before: Any) -> NamespaceRef:
        return NamespaceRef.from_json(before["netns"])

    def _find(
        self, env: LinkEnvironment, before: Any, everywhere: bool = True
    ) -> tuple[NamespaceRef, LinkState] | None:
        """This effect's link: in the target namespace only (forward path, where nothing else
        can have moved it yet), or in every known namespace (recovery and undo)."""
        target = self._target_ref(env, before)
        names = (str(before.get("final") or ""), before["nonce"])
        if not everywhere:
            return find_owned_in(
                env, target, before["alias"], self._nonce(before), names, dump=False
            )
        return find_owned(env, before["alias"], self._nonce(before), target, names)

    def _create(self, ctx: EffectContext, ipr: Any, before: Any) -> None:
        raise NotImplementedError

    def _finish(
        self, env: LinkEnvironment, ref: NamespaceRef, link: LinkState, before: Any
    ) -> None:
        """Give the new link its proof of ownership (and its final name, in one request)."""
        changes: dict[str, Any] = {"ifalias": before["alias"]}
        final = before.get("final")
        if final and link.name != final:
            changes["ifname"] = final
        netlink_call("claim link", env.rtnl(ref).link, "set", index=link.index, **changes)

    def _grants(self) -> frozenset[Access]:
        port = self.spec.outputs["interface"]
        return port.grants

    def _check(self, ctx: EffectContext, env: LinkEnvironment, before: Any) -> None:
        """Re-check identity and compatibility immediately before creating (subclasses)."""

    def apply(self, ctx: EffectContext, before: Any) -> None:
        env = environment(ctx)
        ref = self._target_ref(env, before)
        ipr = env.rtnl(ref)
        if self._find(env, before, everywhere=False) is None:
            self._check(ctx, env, before)
            try:
                self._create(ctx, ipr, before)
            except ExecutorError as exc:
                if exc.code == f"E_NETLINK_{errno.EEXIST}":  # the kernel checks atomically
                    raise ExecutorError(
                        "E_NAME_TAKEN", f"nonce name {before['nonce']} exists"
                    ) from exc
                raise
        found = self._find(env, before, everywhere=False)
        if found is None:
            raise ExecutorError("E_LINK_LOST", "created link not found")
        if found[1].alias != before["alias"] or (
            before.get("final") and found[1].name != before["final"]
        ):
            self._finish(env, found[0], found[1], before)

    def _verify(self, ctx: EffectContext, link: LinkState, before: Any) -> str:
        """Empty when the link reads back as bound, else what differs (subclasses add)."""
        if before.get("final") and link.name != before["final"]:
            return f"name {link.name} != {before['final']}"
        if link.mtu != int(ctx.parameters["mtu"]):
            return f"mtu {link.mtu} != {ctx.parameters['mtu']}"
        if link.kind != self.kind:
            return f"kind {link.kind} != {self.kind}"
        if before.get("lower") and link.lower != int(before["lower"]):
            return f"lower {link.lower} != {before['lower']}"
        return ""

    def observe(self, ctx: EffectContext, before: Any) -> Observed:
        env = environment(ctx)
        found = self._find(env, before, everywhere=False)
        if found is None or found[1].alias != before["alias"]:
            return Observed(False, detail="created link not found by its alias")
        ref, link = found
        problem = self._verify(ctx, link, before)
        out = link_handle(None, ctx, env, ref, link, self._grants())
        return Observed(not problem, {"interface": (out,)}, problem)

    def recover(self, ctx: EffectContext, before: Any) -> RecoveryObservation:
        env = environment(ctx)
        found = self._find(env, before)
        if found is None:
            return RecoveryObservation.NOT_APPLIED
        ref, link = found
        if link.alias != before["alias"] or (before.get("final") and link.name != before["final"]):
            self._finish(env, ref, link, before)  # crash between create and claim
        return RecoveryObservation.APPLIED

    def undo(self, ctx: EffectContext, before: Any, outputs: Outputs) -> None:
        env = environment(ctx)
        found = self._find(env, before)
        if found is None:
            _log.info("effect=%s event=undo-noop reason=not-present", ctx.effect_id)
            return
        delete_owned(env, *found)


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
            kind="vlan",
            link=int(before["lower"]),
            vlan_id=int(ctx.parameters["vlanId"]),
            mtu=int(ctx.parameters["mtu"]),
        )

    def _verify(self, ctx: EffectContext, link: LinkState, before: Any) -> str:
        if link.info.get("IFLA_VLAN_ID") != int(ctx.parameters["vlanId"]):
            return f"vlan id {link.info.get('IFLA_VLAN_ID')} != {ctx.parameters['vlanId']}"
        return super()._verify(ctx, link, before)


class CreateBond(_CreatedLink):
    """``linux/create-bond/v1``: active-backup, explicit miimon, fail_over_mac=active."""

    spec: OpcodeSpec = specs.CREATE_BOND
    kind = "bond"

    def capture(self, ctx: EffectContext) -> Any:
        env = environment(ctx)
        sandbox = env.require_sandbox()
        name = str(ctx.parameters["ifName"])
        if by_name(env.rtnl(sandbox), name) is not None:
            raise ExecutorError("E_NAME_TAKEN", f"{name!r} already exists in the sandbox")
        return {
            "netns": sandbox.to_json(),
            "final": name,
            "nonce": nonce_name(),
            "alias": ctx.alias,
        }

    def _check(self, ctx: EffectContext, env: LinkEnvironment, before: Any) -> None:
        if by_name(env.rtnl(self._target_ref(env, before)), before["final"]) is not None:
            raise ExecutorError("E_NAME_TAKEN", f"{before['final']!r} already exists")

    def _create(self, ctx: EffectContext, ipr: Any, before: Any) -> None:
        netlink_call(
            "create bond",
            ipr.link,
            "add",
            ifname=before["nonce"],
            kind="bond",
            bond_mode=BOND_MODE_ACTIVE_BACKUP,
            bond_miimon=int(ctx.parameters["miimon"]),
            bond_fail_over_mac=FAIL_OVER_MAC_ACTIVE,
            mtu=int(ctx.parameters["mtu"]),
        )

    def _verify(self, ctx: EffectContext, link: LinkState, before: Any) -> str:
        info = link.info
        if info.get("IFLA_BOND_MODE") != BOND_MODE_ACTIVE_BACKUP:
            return f"bond mode {info.get('IFLA_BOND_MODE')} is not active-backup"
        if info.get("IFLA_BOND_MIIMON") != int(ctx.parameters["miimon"]):
            return f"miimon {info.get('IFLA_BOND_MIIMON')} != {ctx.parameters['miimon']}"
        if info.get("IFLA_BOND_FAIL_OVER_MAC") != FAIL_OVER_MAC_ACTIVE:
            return f"fail_over_mac {info.get('IFLA_BOND_FAIL_OVER_MAC')} is not active"
        return super()._verify(ctx, link, before)


# ---------------------------------------------------------------------------- attach-master


class AttachMaster:
    """``linux/attach-master/v1``: enslave one member; undo releases it and restores it."""

    spec: OpcodeSpec = specs.ATTACH_MASTER

    def capture(self, ctx: EffectContext) -> Any:
        env = environment(ctx)
        master_ref, master = locate_input(env, single(ctx, "master"))
        member_ref, member = locate_input(env, single(ctx, "member"))
        if master_ref.identity != member_ref.identity:
            raise ExecutorError(
                "E_NOT_SAME_SANDBOX", "member and master are in different namespaces"
            )
        if not master.alias.startswith("dmn:"):
            raise ExecutorError("E_NOT_OWNED", f"master {master.name} was not created by us")
        self._precheck(master, member)
        full = by_index(env.rtnl(member_ref), member.index, with_addresses=True)
        assert full is not None
        return {"netns": member_ref.to_json(), "master": master.to_json(), "member": full.to_json()}

    def _precheck(self, master: LinkState, member: LinkState) -> None:
        if member.master and member.master != master.index:
            raise ExecutorError("E_FOREIGN_MASTER", f"{member.name} already has a master")
        if member.mtu != master.mtu:
            raise ExecutorError(
                "E_MTU_MISMATCH", f"member {member.name} mtu {member.mtu} != bond {master.mtu}"
            )

    def _live(self, env: LinkEnvironment, before: Any) -> tuple[Any, LinkState, LinkState]:
        ref = NamespaceRef.from_json(before["netns"])
        ipr = env.rtnl(ref)
        rec_master = LinkState.from_json(before["master"])
        rec_member = LinkState.from_json(before["member"])
        master = owned(ipr, rec_master.alias, (rec_master.name,))
        member = by_index(ipr, rec_member.index)
        if master is None or master.index != rec_master.index:
            raise ExecutorError("E_LINK_CHANGED", f"bond {rec_master.name} is gone")
        if member is None or member.name != rec_member.name:
            raise ExecutorError("E_LINK_CHANGED", f"member {rec_member.name} is gone")
        return ipr, master, member

    def apply(self, ctx: EffectContext, before: Any) -> None:
        env = environment(ctx)
        ipr, master, member = self._live(env, before)
        if member.master == master.index:
            return
        self._precheck(master, member)
        if member.up:  # the bonding driver refuses to enslave a device that is up
            netlink_call(f"down {member.name}", ipr.link, "set", index=member.index, state="down")
        netlink_call(
            f"enslave {member.name}", ipr.link, "set", index=member.index, master=master.index
        )

    def observe(self, ctx: EffectContext, before: Any) -> Observed:
        env = environment(ctx)
        _, master, member = self._live(env, before)
        ok = member.master == master.index
        return Observed(ok, {}, "" if ok else f"{member.name} is not a member of {master.name}")

    def recover(self, ctx: EffectContext, before: Any) -> RecoveryObservation:
        env = environment(ctx)
        try:
            _, master, member = self._live(env, before)
        except ExecutorError:
            return RecoveryObservation.UNCERTAIN
        if member.master == master.index:
            return RecoveryObservation.APPLIED
        if not member.master:
            return RecoveryObservation.NOT_APPLIED
        return RecoveryObservation.UNCERTAIN

    def undo(self, ctx: EffectContext, before: Any, outputs: Outputs) -> None:
        env = environment(ctx)
        ref = NamespaceRef.from_json(before["netns"])
        ipr = env.rtnl(ref)
        rec_master = LinkState.from_json(before["master"])
        rec_member = LinkState.from_json(before["member"])
        member = by_index(ipr, rec_member.index)
        if member is None or member.name != rec_member.name:
            raise ExecutorError("E_LINK_LOST", f"member {rec_member.name} is gone")
        if member.master and member.master == rec_master.index:
            netlink_call(f"release {member.name}", ipr.link, "set", index=member.index, master=0)
        elif member.master:
            raise ExecutorError("E_FOREIGN_MASTER", f"{member.name} now has a foreign master")
        member = by_index(ipr, rec_member.index)
        assert member is not None
        changes: dict[str, Any] = {}
        if member.mtu != rec_member.mtu:
            changes["mtu"] = rec_member.mtu
        if rec_member.mac and member.mac.lower() != rec_member.mac.lower():
            changes["address"] = rec_member.mac
        if changes:
            netlink_call(f"restore {member.name}", ipr.link, "set", index=member.index, **changes)
        member = by_index(ipr, rec_member.index)
        if member is not None and member.up != rec_member.up:
            state = "up" if rec_member.up else "down"
            netlink_call(f"{state} {member.name}", ipr.link, "set", index=member.index, state=state)


EXECUTORS: Mapping[str, Executor] = {
    specs.LINK_MOVE.name: LinkMove(),
    specs.LINK_CONFIGURE.name: LinkConfigure(),
    specs.CREATE_MACVLAN.name: CreateMacvlan(),
    specs.CREATE_IPVLAN.name: CreateIpvlan(),
    specs.CREATE_VLAN.name: CreateVlan(),
    specs.CREATE_BOND.name: CreateBond(),
    specs.ATTACH_MASTER.name: AttachMaster(),
}
"""Every ``linux/*`` executor by opcode name, for the runner's executor registry."""
