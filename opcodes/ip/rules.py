"""Executor of ``ip/rules/v1``: policy routing rules in the sandbox of a granted link.

A rule lives in the namespace, not on a link; it names the granted link (``iif``/``oif``)
by the name the link has at capture, since that is what the kernel matches. Rules are
keyed by (family, priority): a priority that holds any rule refuses the effect
(``E_RULE_EXISTS``), so each priority holds one rule of ours, recorded whole. Undo runs
only while the link proves to be the recorded one in the recorded namespace and deletes
a rule only when every attribute matches (``E_RULE_NOT_OWNED`` otherwise). The lifecycle
is :class:`~dmn.opcodes.ip.keyed_entries.KeyedEntries`'.
"""

from __future__ import annotations

import ipaddress
import socket
from collections.abc import Hashable
from typing import Any

from dmn.host.rtnetlink.links import LinkState
from dmn.host.rtnetlink.rules import RTPROT_STATIC, RuleEntry, add_rule, delete_rule, rules_of
from dmn.opcodes.executor import EffectContext
from dmn.opcodes.ip import specs
from dmn.opcodes.ip.keyed_entries import KeyedEntries
from dmn.opcodes.spec import OpcodeSpec


def entry_of(rule: specs.Rule, link_name: str) -> RuleEntry:
    source = ipaddress.ip_network(rule.from_) if rule.from_ else None
    destination = ipaddress.ip_network(rule.to) if rule.to else None
    return RuleEntry(
        family=int(socket.AF_INET if rule.version == 4 else socket.AF_INET6),
        priority=rule.priority,
        table=rule.table,
        source=str(source.network_address) if source else "",
        source_len=source.prefixlen if source else 0,
        destination=str(destination.network_address) if destination else "",
        destination_len=destination.prefixlen if destination else 0,
        iifname=link_name if rule.iif else "",
        oifname=link_name if rule.oif else "",
        protocol=RTPROT_STATIC,
    )


class IpRules(KeyedEntries[RuleEntry]):
    """``ip/rules/v1``."""

    spec: OpcodeSpec = specs.IP_RULES
    what = "rule"
    exists_code = "E_RULE_EXISTS"
    not_owned_code = "E_RULE_NOT_OWNED"

    def wanted(self, ctx: EffectContext, link: LinkState) -> list[RuleEntry]:
        parameters = specs.IpRulesParameters.model_validate(ctx.parameters)
        return [entry_of(rule, link.name) for rule in parameters.rules]

    def from_json(self, data: dict[str, Any]) -> RuleEntry:
        return RuleEntry.from_json(data)

    def live(
        self, ipr: Any, link: LinkState, entries: list[RuleEntry]
    ) -> dict[Hashable, RuleEntry]:
        out: dict[Hashable, RuleEntry] = {}
        for family in sorted({r.family for r in entries}):
            for entry in rules_of(ipr, family):
                out.setdefault(entry.key, entry)
        return out

    def add(self, ipr: Any, entry: RuleEntry, over: RuleEntry | None) -> None:
        add_rule(ipr, entry)

    def delete(self, ipr: Any, entry: RuleEntry) -> bool:
        return delete_rule(ipr, entry)

    def describe(self, entry: RuleEntry) -> str:
        return entry.describe()
