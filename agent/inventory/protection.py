"""The protected dependency closure of the node's management/primary interfaces.

Seeds are the links that carry a default route or a node IP, plus administrator-configured
PCI addresses. The closure then follows what an effect on a member could break (design
§5.1): the master of a protected link, the members of a protected master, the lower
device of a protected vlan/macvlan, the VFs of a protected PF, the PF of a protected VF,
and every function that shares a reset domain with a protected one.

If the live link state could not be read, nothing proves that a function's netdev is not
the management interface: every function with a host netdev is protected with
``unknown-state``. Pure code: the inputs are facts, the output is reasons per function.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from dmn.agent.inventory.facts import ProtectionReason, Unknown
from dmn.host.rtnetlink.links import LinkState


@dataclass(frozen=True, slots=True)
class FunctionNode:
    """What protection needs to know about one function."""

    pci_address: str
    own_ifnames: tuple[str, ...]
    pf_pci_address: str
    reset_domain: str


def protected_links(
    links: Sequence[LinkState],
    default_routes: frozenset[int],
    node_ips: Iterable[str],
) -> dict[str, set[ProtectionReason]]:
    """Link name → reasons, for the seeds and their master/member/lower closure."""
    by_index = {link.index: link for link in links}
    ips = {ip.split("/")[0] for ip in node_ips}
    reasons: dict[int, set[ProtectionReason]] = {}
    for link in links:
        if link.index in default_routes:
            reasons.setdefault(link.index, set()).add(ProtectionReason.DEFAULT_ROUTE)
        if ips & {a.address for a in link.addresses}:
            reasons.setdefault(link.index, set()).add(ProtectionReason.NODE_IP)
    pending = list(reasons)
    while pending:
        index = pending.pop()
        link = by_index[index]
        related: list[tuple[int, ProtectionReason]] = []
        if link.master:
            related.append((link.master, ProtectionReason.MASTER_OF_PROTECTED))
        if link.local_lower:
            related.append((link.local_lower, ProtectionReason.LOWER_OF_PROTECTED))
        related += [
            (m.index, ProtectionReason.MEMBER_OF_PROTECTED) for m in links if m.master == index
        ]
        for other, why in related:
            if other not in by_index:
                continue
            if other not in reasons:
                pending.append(other)
            reasons.setdefault(other, set()).add(why)
    return {by_index[i].name: r for i, r in reasons.items()}


def protected_functions(
    functions: Sequence[FunctionNode],
    links: Sequence[LinkState] | Unknown,
    default_routes: frozenset[int] | Unknown,
    node_ips: Iterable[str],
    configured: Iterable[str],
) -> dict[str, tuple[ProtectionReason, ...]]:
    """PCI address → sorted protection reasons (functions without reasons are omitted)."""
    out: dict[str, set[ProtectionReason]] = {}
    if isinstance(links, Unknown) or isinstance(default_routes, Unknown):
        for fn in functions:
            if fn.own_ifnames:
                out.setdefault(fn.pci_address, set()).add(ProtectionReason.UNKNOWN_STATE)
    else:
        by_link = protected_links(links, default_routes, node_ips)
        for fn in functions:
            for name in fn.own_ifnames:
                if name in by_link:
                    out.setdefault(fn.pci_address, set()).update(by_link[name])
    known = {fn.pci_address for fn in functions}
    for address in configured:
        if address in known:
            out.setdefault(address, set()).add(ProtectionReason.CONFIGURED)
    _close_over_hardware(functions, out)
    return {k: tuple(sorted(v)) for k, v in out.items()}


def _close_over_hardware(
    functions: Sequence[FunctionNode], out: dict[str, set[ProtectionReason]]
) -> None:
    vfs_of: dict[str, list[str]] = {}
    domain_of: dict[str, list[str]] = {}
    node: Mapping[str, FunctionNode] = {fn.pci_address: fn for fn in functions}
    for fn in functions:
        if fn.pf_pci_address:
            vfs_of.setdefault(fn.pf_pci_address, []).append(fn.pci_address)
        if fn.reset_domain:
            domain_of.setdefault(fn.reset_domain, []).append(fn.pci_address)
    pending = list(out)
    while pending:
        address = pending.pop()
        fn = node[address]
        related: list[tuple[str, ProtectionReason]] = []
        # A PF protected only for the sake of one VF must not be handed off or reset, but
        # that does not make its other VFs dependencies of the management interface.
        if out[address] - {ProtectionReason.PF_OF_PROTECTED_VF}:
            related += [(vf, ProtectionReason.VF_OF_PROTECTED_PF) for vf in vfs_of.get(address, ())]
        if fn.pf_pci_address in node:
            related.append((fn.pf_pci_address, ProtectionReason.PF_OF_PROTECTED_VF))
        related += [
            (peer, ProtectionReason.RESET_DOMAIN_PEER)
            for peer in domain_of.get(fn.reset_domain, ())
            if peer != address
        ]
        for other, why in related:
            reasons = out.setdefault(other, set())
            if why not in reasons:
                reasons.add(why)
                pending.append(other)
