"""Executor of ``ib/port-configure/v1``: IPoIB transport mode and MTU of a sandbox netdev.

How a node applies them, and why through sysfs: the ``mode`` attribute
(``/sys/class/net/<if>/mode``, Documentation/infiniband/ipoib.rst) is the interface every
IPoIB kernel since connected mode exists offers; rtnetlink can do the same only through the
``ipoib`` link kind's ``IFLA_IPOIB_MODE`` (u16: 0 datagram, 1 connected, beside
``IFLA_IPOIB_PKEY`` and ``IFLA_IPOIB_UMCAST``; ``ipoib_changelink`` calls the same
``ipoib_set_mode``), which the parent interface of a port reports only since the kernel gave
it ``rtnl_link_ops`` too. The executor reads and writes sysfs *of the sandbox's namespace*:
the environment's :class:`~dmn.host.netns_sysfs.NetnsSysfs` mounts a fresh sysfs in a
private mount namespace of one thread that entered the recorded network namespace, so
``class/net`` shows exactly that namespace's netdevs. The recorded-tree tests hand in a
tree for that namespace instead and run every line below unchanged; the view mount itself is
exercised on this machine's kernel with a veth (``tests/kernel/test_netns_sysfs.py``). What
no tree can show: the kernel's own side effects of a mode write (the MTU it sets) and its
refusals (-EINVAL for connected mode without the RC flag, an MTU above the mode's limit) —
the executor reads every value back instead of assuming them.

Ownership (the before-image records it; names are never consulted): the recorded namespace
(dev, inode) and the netdev's ifindex there; ``type`` 32; the parent PCI function (the
``device`` link) and ``dev_port``; the address's first twelve octets (flags, QPN, subnet
prefix), which ``ipoib_check_lladdr`` refuses to let anyone change. The port GUID (octets
12-19) is recorded for the operator but is not proof: ``ipoib_set_mac`` lets a tenant with
CAP_NET_ADMIN rewrite it. The permanent address (IFLA_PERM_ADDRESS) is not in sysfs. A
netdev at the recorded ifindex that differs in any of these is refused with
``E_IDENTITY_MISMATCH`` (the runner quarantines the effect) and nothing is written.

Undo restores the recorded mode first and then the recorded MTU (the mode write moves the
MTU). When the recorded namespace is gone, an IPoIB netdev is not destroyed with it: the
``ipoib`` link ops set ``netns_refund``, so the kernel returns it to the initial namespace.
Undo then looks in the host's view for the one netdev with the recorded parent, port and
fixed address octets and restores it there (none: nothing to restore; two: refused).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

from dmn.host.netns import LinkEnvironment, NamespaceRef
from dmn.host.rtnetlink.link_identity import IDENTITY_KEY, NAMESPACE_LOST, of_earlier_boot
from dmn.opcodes.device_environment import netns_sysfs
from dmn.opcodes.effect_handles import Outputs, environment, single
from dmn.opcodes.executor import EffectContext, ExecutorError, Observed, RecoveryObservation
from dmn.opcodes.ib import specs
from dmn.opcodes.ib.ipoib_sysfs import (
    ARPHRD_INFINIBAND,
    IpoibPort,
    PortDir,
    find_hardware,
    port_at,
)
from dmn.opcodes.spec import OpcodeSpec
from dmn.vocabulary.terms import ScopeKind

_log = logging.getLogger(__name__)
T = TypeVar("T")


def _identity(ref: NamespaceRef, port: IpoibPort) -> dict[str, Any]:
    return {
        "netns": ref.identity.to_json(),
        "index": port.ifindex,
        "type": port.type,
        "parent": port.parent,
        "devPort": port.dev_port,
        "fixedAddress": port.fixed_address,
        "guid": port.guid,
    }


def _recorded(before: Any) -> dict[str, Any]:
    found = before.get(IDENTITY_KEY) if isinstance(before, dict) else None
    if not isinstance(found, dict) or "fixedAddress" not in found or "index" not in found:
        raise ExecutorError(
            "E_IDENTITY_UNRECORDED",
            "the journal record holds no IPoIB identity; ownership cannot be proven",
        )
    return found


def _mismatch(identity: dict[str, Any], port: IpoibPort) -> str:
    """Empty when ``port`` has every recorded kernel-set fact, else the first that differs."""
    checks = (
        ("ifindex", port.ifindex, int(identity["index"])),
        ("type", port.type, ARPHRD_INFINIBAND),
        ("parent function", port.parent, str(identity["parent"])),
        ("dev_port", port.dev_port, int(identity["devPort"])),
        ("address flags/QPN/subnet prefix", port.fixed_address, str(identity["fixedAddress"])),
    )
    for what, live, want in checks:
        if live != want:
            return f"{what} {live or 'none'} != {want}"
    if not port.mode:
        return "no IPoIB mode attribute"
    return ""


def _proven(identity: dict[str, Any], port: PortDir | None, where: str) -> PortDir | None:
    if port is None:
        return None
    problem = _mismatch(identity, port.state())
    if problem:
        raise ExecutorError(
            "E_IDENTITY_MISMATCH",
            f"ifindex {identity['index']} in {where} holds {port.name!r}, not the recorded "
            f"IPoIB netdev ({problem}); not touched",
        )
    return port


def _set(port: PortDir, mode: str | None, mtu: int | None) -> None:
    """Mode first (the kernel moves the MTU when the mode changes), then the MTU."""
    state = port.state()
    if mode is not None and state.mode != mode:
        port.write("mode", mode)
    if mtu is not None and port.state().mtu != mtu:
        port.write("mtu", str(mtu))


class PortConfigure:
    """``ib/port-configure/v1``: IPoIB mode and MTU of a sandbox netdev; undo restores both."""

    spec: OpcodeSpec = specs.PORT_CONFIGURE

    def _in_view(
        self, ctx: EffectContext, ref: NamespaceRef, fn: Callable[[Path], T]
    ) -> tuple[LinkEnvironment, T]:
        env = environment(ctx)
        return env, netns_sysfs(env).run(env, ref, fn)

    def _wanted(self, ctx: EffectContext) -> tuple[str | None, int | None]:
        mode, mtu = ctx.parameters.get("mode"), ctx.parameters.get("mtu")
        return (None if mode is None else str(mode)), (None if mtu is None else int(mtu))

    def capture(self, ctx: EffectContext) -> Any:
        env = environment(ctx)
        handle = single(ctx, "interface")
        if handle.scope.kind is not ScopeKind.SANDBOX:
            raise ExecutorError("E_SCOPE", f"handle {handle.id} is not in a sandbox")
        ref = env.ref_for_scope(handle.scope)
        index = int(handle.observations.get("ifIndex", 0) or 0)
        mode, _ = self._wanted(ctx)

        def read(root: Path) -> IpoibPort:
            with port_at(root, index) as port:
                if port is None:
                    raise ExecutorError(
                        "E_LINK_NOT_FOUND", f"handle {handle.id}: no netdev at ifindex {index}"
                    )
                return port.state()

        _, state = self._in_view(ctx, ref, read)
        if state.type != ARPHRD_INFINIBAND or not state.mode or not state.parent:
            raise ExecutorError(
                "E_NOT_INFINIBAND",
                f"handle {handle.id}: {state.name!r} (type {state.type}) is not an IPoIB "
                "netdev of a PCI function",
            )
        if mode == "connected" and not state.connected_supported:
            raise ExecutorError(
                "E_IPOIB_MODE_UNSUPPORTED",
                f"parameters.mode: {state.name!r} does not support connected mode (its "
                "address lacks the RC flag)",
            )
        identity = _identity(ref, state)
        return {"netns": ref.to_json(), "port": state.to_json(), IDENTITY_KEY: identity}

    def apply(self, ctx: EffectContext, before: Any) -> None:
        identity = _recorded(before)
        ref = NamespaceRef.from_json(before["netns"])
        mode, mtu = self._wanted(ctx)

        def write(root: Path) -> None:
            with port_at(root, int(identity["index"])) as found:
                port = _proven(identity, found, ref.path)
                if port is None:
                    raise ExecutorError("E_LINK_CHANGED", "the captured IPoIB netdev is gone")
                _set(port, mode, mtu)

        self._in_view(ctx, ref, write)

    def _read(self, ctx: EffectContext, before: Any) -> IpoibPort | None:
        identity = _recorded(before)
        ref = NamespaceRef.from_json(before["netns"])

        def read(root: Path) -> IpoibPort | None:
            with port_at(root, int(identity["index"])) as found:
                port = _proven(identity, found, ref.path)
                return None if port is None else port.state()

        return self._in_view(ctx, ref, read)[1]

    def _matches(self, ctx: EffectContext, state: IpoibPort) -> bool:
        mode, mtu = self._wanted(ctx)
        return (mode is None or state.mode == mode) and (mtu is None or state.mtu == mtu)

    def observe(self, ctx: EffectContext, before: Any) -> Observed:
        state = self._read(ctx, before)
        if state is None:
            return Observed(False, detail="IPoIB netdev is gone")
        ok = self._matches(ctx, state)
        detail = "" if ok else f"mode {state.mode}, mtu {state.mtu} after the write"
        return Observed(ok, {"interface": (single(ctx, "interface"),)}, detail)

    def recover(self, ctx: EffectContext, before: Any) -> RecoveryObservation:
        try:
            state = self._read(ctx, before)
        except ExecutorError:
            return RecoveryObservation.UNCERTAIN
        if state is None:
            return RecoveryObservation.UNCERTAIN
        if self._matches(ctx, state):
            return RecoveryObservation.APPLIED
        captured = IpoibPort.from_json(before["port"])
        if (state.mode, state.mtu) == (captured.mode, captured.mtu):
            return RecoveryObservation.NOT_APPLIED
        return RecoveryObservation.UNCERTAIN

    def undo(self, ctx: EffectContext, before: Any, outputs: Outputs) -> None:
        env = environment(ctx)
        identity = _recorded(before)
        captured = IpoibPort.from_json(before["port"])
        ref = NamespaceRef.from_json(before["netns"])

        def restore_at(index: int, where: str) -> Callable[[Path], bool]:
            def restore(root: Path) -> bool:
                with port_at(root, index) as found:
                    port = _proven({**identity, "index": index}, found, where)
                    if port is None:
                        return False
                    _set(port, captured.mode, captured.mtu)
                    after = port.state()
                    if (after.mode, after.mtu) != (captured.mode, captured.mtu):
                        raise ExecutorError(
                            "E_SYSFS_WRITE",
                            f"{port.name}: mode {after.mode}, mtu {after.mtu} after restoring "
                            f"{captured.mode}/{captured.mtu}",
                        )
                    return True

            return restore

        try:
            _, done = self._in_view(ctx, ref, restore_at(int(identity["index"]), ref.path))
        except ExecutorError as exc:
            if exc.code not in NAMESPACE_LOST:
                raise
            if of_earlier_boot(env, identity):
                # the driver re-initialised the port at boot: nothing of ours is left
                _log.info("effect=%s event=undo-noop reason=%s", ctx.effect_id, exc.code)
                return
            done = False
        if done:
            return
        self._restore_returned(ctx, env, identity, restore_at)

    def _restore_returned(
        self,
        ctx: EffectContext,
        env: LinkEnvironment,
        identity: dict[str, Any],
        restore_at: Callable[[int, str], Callable[[Path], bool]],
    ) -> None:
        """The netdev left the recorded namespace (it died and the kernel refunded the
        device to the host): restore the one host netdev with the recorded hardware facts."""
        sysfs = netns_sysfs(env)
        parent, port, fixed = (
            str(identity["parent"]),
            int(identity["devPort"]),
            str(identity["fixedAddress"]),
        )
        matches = sysfs.run(env, env.host, lambda root: find_hardware(root, parent, port, fixed))
        if not matches:
            _log.warning("effect=%s event=undo-skip reason=ipoib-netdev-gone", ctx.effect_id)
            return
        if len(matches) > 1:
            raise ExecutorError(
                "E_OWNERSHIP_CONFLICT",
                f"{len(matches)} host netdevs of {parent} port {port} carry the recorded address",
            )
        sysfs.run(env, env.host, restore_at(matches[0], env.host.path))
        _log.info("effect=%s event=undo-restored-on-host ifindex=%s", ctx.effect_id, matches[0])
