"""Executor of ``ip/addresses/v1``: addresses added to a granted sandbox link.

The lifecycle, and why each step is safe:

* ``capture`` finds the link from the granted handle, records its identity
  (:mod:`granted_link`) and the addresses to add, and refuses (``E_ADDRESS_EXISTS``) when
  the link already has one of them — an address this effect did not add is never adopted.
* ``apply`` proves the link again, refuses again if one of the addresses appeared since,
  and adds them in order; if the kernel refuses one, the addresses this call added are
  deleted before the error is raised, so a failed apply leaves nothing of its own.
* ``observe`` reads the link's addresses back: every one present and none failed duplicate
  address detection. The output handle (the record's, which undo receives) carries each
  address's kernel **creation stamp** (:mod:`dmn.host.rtnetlink.addresses`) under
  :data:`STAMPS`.
* ``undo`` deletes, on the proven link only, each address whose creation stamp is the
  recorded one. An address that is gone is left gone; one with another stamp was deleted
  and added again by someone else (a tenant with CAP_NET_ADMIN) and is left in place; an
  IPv4 primary address is left when another address of its subnet that is not ours
  depends on it (the kernel would delete that secondary with it). Whatever is left
  unproven makes undo raise ``E_ADDRESS_NOT_OWNED`` after the proven ones are gone: the
  runner quarantines the effect. A link whose namespace is gone took its addresses with
  it; another link at the recorded ifindex is ``E_IDENTITY_MISMATCH`` (quarantined,
  untouched).
* ``recover`` (the outcome was not recorded): Applied when every address is on the proven
  link, NotApplied when none is, Uncertain otherwise.

Limit (stated, not hidden): an effect whose outcome was never recorded (a crash between
apply and the outcome's commit) has no recorded stamps; its undo then deletes the listed
addresses the link has — each was absent at capture, and before the attachment is Ready
the gate holds every container of the sandbox, so only this effect can have added them.
"""

from __future__ import annotations

import ipaddress
import logging
import socket
from typing import Any

from dmn.host.errors import HostError
from dmn.host.rtnetlink.addresses import (
    InterfaceAddress,
    add_address,
    delete_address,
    link_addresses,
)
from dmn.opcodes.effect_handles import Outputs, environment
from dmn.opcodes.executor import EffectContext, ExecutorError, Observed, RecoveryObservation
from dmn.opcodes.ip import specs
from dmn.opcodes.ip.granted_link import (
    captured,
    continued,
    proven,
    proven_for_recovery,
    proven_for_undo,
    proven_or_refused,
)
from dmn.opcodes.spec import OpcodeSpec
from dmn.vocabulary.handles import IP_ADDRESSES
from dmn.vocabulary.ip_values import IpInterface, interface_of

_log = logging.getLogger("dmn.opcodes.ip.executors")

STAMPS = "ipAddressStamps"
"""Observation key of the output handle: ``address/prefix@cstamp`` of each added address,
space-separated — the record undo proves ownership by. The kernel keeps ``cstamp`` in
hundredths of a second, and nothing else tells two additions of the same address apart: an
address deleted and added again within the same hundredth has our stamp and is taken for
ours (undo deletes it, and the pool effect releases its allocation — the sandbox the
tenant re-added it in is being torn down)."""

Key = tuple[str, int]


def _key(iface: IpInterface) -> Key:
    return (str(iface.ip), iface.network.prefixlen)


def _wanted(before: Any) -> list[IpInterface]:
    return [interface_of(value) for value in before["addresses"]]


def _by_key(live: tuple[InterfaceAddress, ...]) -> dict[Key, InterfaceAddress]:
    return {(a.address, a.prefixlen): a for a in live}


def _refuse_present(live: tuple[InterfaceAddress, ...], wanted: list[IpInterface]) -> None:
    have = {a.address: a for a in live}
    for iface in wanted:
        found = have.get(str(iface.ip))
        if found is not None:
            raise ExecutorError(
                "E_ADDRESS_EXISTS",
                f"the link already has {found.cidr}; an address this effect did not add is "
                "never adopted",
            )


def encode_stamps(stamps: dict[Key, int]) -> str:
    return " ".join(f"{a}/{p}@{c}" for (a, p), c in sorted(stamps.items()))


def decode_stamps(text: str) -> dict[Key, int]:
    out: dict[Key, int] = {}
    for item in text.split():
        cidr, _, stamp = item.rpartition("@")
        address, _, prefix = cidr.rpartition("/")
        out[(address, int(prefix))] = int(stamp)
    return out


def recorded_stamps(outputs: Outputs) -> dict[Key, int] | None:
    """The stamps the effect's outcome recorded; None when no outcome was recorded."""
    handles = outputs.get("interface", ())
    if not handles:
        return None
    text = handles[0].observations.get(STAMPS)
    return decode_stamps(text) if isinstance(text, str) else None


class IpAddresses:
    """``ip/addresses/v1``."""

    spec: OpcodeSpec = specs.IP_ADDRESSES

    def capture(self, ctx: EffectContext) -> Any:
        parameters = specs.IpAddressesParameters.model_validate(ctx.parameters)
        env, ref, link, record = captured(ctx)
        wanted = parameters.interfaces()
        _refuse_present(link_addresses(env.rtnl(ref), link.index), wanted)
        return {
            **record,
            "addresses": [str(iface) for iface in wanted],
            "nodad": parameters.nodad,
        }

    def apply(self, ctx: EffectContext, before: Any) -> None:
        env = environment(ctx)
        ref, link = proven_or_refused(env, before)
        ipr = env.rtnl(ref)
        wanted = _wanted(before)
        _refuse_present(link_addresses(ipr, link.index), wanted)
        added: list[IpInterface] = []
        try:
            for iface in wanted:
                add_address(ipr, link.index, iface, bool(before.get("nodad")))
                added.append(iface)
        except HostError as exc:
            self._take_back(ipr, link.index, added)
            if exc.code == "E_NETLINK_17":
                raise ExecutorError(
                    "E_ADDRESS_EXISTS", f"an address appeared on the link while adding: {exc}"
                ) from exc
            raise

    def _take_back(self, ipr: Any, index: int, added: list[IpInterface]) -> None:
        """Delete what this apply added before it failed (no one else can have added these
        between the add and now: each was refused had it been present)."""
        for iface in reversed(added):
            family = int(socket.AF_INET if iface.version == 4 else socket.AF_INET6)
            entry = InterfaceAddress(family, str(iface.ip), iface.network.prefixlen)
            try:
                delete_address(ipr, index, entry)
            except HostError:
                _log.warning("event=take-back-failed address=%s", iface, exc_info=True)

    def observe(self, ctx: EffectContext, before: Any) -> Observed:
        env = environment(ctx)
        ref, link = proven(env, before)
        if link is None:
            return Observed(False, detail="link is gone")
        live = _by_key(link_addresses(env.rtnl(ref), link.index))
        stamps: dict[Key, int] = {}
        problems: list[str] = []
        for iface in _wanted(before):
            found = live.get(_key(iface))
            if found is None:
                problems.append(f"{iface} missing")
                continue
            if found.dad_failed:
                problems.append(f"{iface} failed duplicate address detection")
            stamps[_key(iface)] = found.created
        added = " ".join(str(iface) for iface in _wanted(before))
        out = continued(ctx, env, ref, link, {STAMPS: encode_stamps(stamps), IP_ADDRESSES: added})
        return Observed(not problems, {"interface": (out,)}, "; ".join(problems))

    def recover(self, ctx: EffectContext, before: Any) -> RecoveryObservation:
        env = environment(ctx)
        proof = proven_for_recovery(env, before)
        if proof is None:
            return RecoveryObservation.UNCERTAIN
        ref, link = proof
        live = _by_key(link_addresses(env.rtnl(ref), link.index))
        wanted = _wanted(before)
        present = sum(1 for iface in wanted if _key(iface) in live)
        if present == len(wanted):
            return RecoveryObservation.APPLIED
        if present == 0:
            return RecoveryObservation.NOT_APPLIED
        return RecoveryObservation.UNCERTAIN

    def undo(self, ctx: EffectContext, before: Any, outputs: Outputs) -> None:
        env = environment(ctx)
        proof = proven_for_undo(env, before, ctx.effect_id)
        if proof is None:
            return
        ref, link = proof
        ipr = env.rtnl(ref)
        live = link_addresses(ipr, link.index)
        by_key = _by_key(live)
        stamps = recorded_stamps(outputs)
        wanted = _wanted(before)
        ours: dict[Key, InterfaceAddress] = {}
        refused: list[str] = []
        for iface in wanted:
            found = by_key.get(_key(iface))
            if found is None:
                _log.info("effect=%s event=undo-skip address=%s reason=gone", ctx.effect_id, iface)
                continue
            if stamps is not None and stamps.get(_key(iface)) != found.created:
                refused.append(f"{iface} was removed and added again by someone else")
                continue
            ours[_key(iface)] = found
        for iface in reversed(wanted):
            found = ours.get(_key(iface))
            if found is None:
                continue
            dependant = foreign_secondaries(found, live, ours)
            if dependant:
                refused.append(
                    f"{iface} is the primary address of {', '.join(dependant)}, which are "
                    "not ours (the kernel would delete them with it)"
                )
                continue
            delete_address(ipr, link.index, found)
        if refused:
            raise ExecutorError(
                "E_ADDRESS_NOT_OWNED",
                "left in place, not proven ours: " + "; ".join(refused),
            )


def foreign_secondaries(
    primary: InterfaceAddress, live: tuple[InterfaceAddress, ...], ours: dict[Key, Any]
) -> list[str]:
    """The IPv4 secondaries of ``primary``'s subnet that are not ours."""
    if primary.family != socket.AF_INET or primary.secondary:
        return []
    subnet = ipaddress.ip_interface(primary.cidr).network
    return [
        a.cidr
        for a in live
        if a.family == socket.AF_INET
        and a.secondary
        and a.prefixlen == primary.prefixlen
        and ipaddress.ip_address(a.address) in subnet
        and (a.address, a.prefixlen) not in ours
    ]
