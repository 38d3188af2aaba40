"""Policy routing rules of one namespace as rtnetlink reports them, and their writes
(``ip/rules``).

A rule is identified here by (family, priority) — ``ip/rules`` refuses a priority that
holds any rule, so one priority holds at most one rule of ours — and recorded whole:
source and destination prefixes, table, input and output interface names (a rule names
links by name, not ifindex), and protocol. Nothing on a rule is written by the kernel
alone.

Contract: :func:`rules_of` returns every rule of ``family``; :func:`add_rule` adds one;
:func:`delete_rule` deletes the rule matching every attribute and says whether there was
one. Kernel refusals are :class:`~dmn.host.errors.HostError` with the errno.
"""

from __future__ import annotations

import errno
import ipaddress
from dataclasses import asdict, dataclass
from typing import Any

from dmn.host.errors import HostError
from dmn.host.rtnetlink.links import netlink_call

FR_ACT_TO_TBL = 1
RTPROT_STATIC = 4


@dataclass(frozen=True, slots=True)
class RuleEntry:
    family: int
    priority: int
    table: int
    source: str = ""
    source_len: int = 0
    destination: str = ""
    destination_len: int = 0
    iifname: str = ""
    oifname: str = ""
    protocol: int = RTPROT_STATIC

    @property
    def key(self) -> tuple[int, int]:
        return (self.family, self.priority)

    def describe(self) -> str:
        parts = [f"priority {self.priority}"]
        if self.source:
            parts.append(f"from {self.source}/{self.source_len}")
        if self.destination:
            parts.append(f"to {self.destination}/{self.destination_len}")
        return " ".join([*parts, f"table {self.table}"])

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> RuleEntry:
        return cls(**data)


def _canonical(raw: Any) -> str:
    return str(ipaddress.ip_address(raw)) if raw else ""


def rules_of(ipr: Any, family: int) -> list[RuleEntry]:
    out = []
    for msg in netlink_call("read rules", ipr.get_rules, family=family):
        if int(msg["action"]) != FR_ACT_TO_TBL:
            continue
        table = msg.get_attr("FRA_TABLE")
        out.append(
            RuleEntry(
                family=int(msg["family"]),
                priority=int(msg.get_attr("FRA_PRIORITY") or 0),
                table=int(table if table is not None else msg["table"]),
                source=_canonical(msg.get_attr("FRA_SRC")),
                source_len=int(msg["src_len"]),
                destination=_canonical(msg.get_attr("FRA_DST")),
                destination_len=int(msg["dst_len"]),
                iifname=str(msg.get_attr("FRA_IIFNAME") or ""),
                oifname=str(msg.get_attr("FRA_OIFNAME") or ""),
                protocol=int(msg.get_attr("FRA_PROTOCOL") or 0),
            )
        )
    return out


def _fields(rule: RuleEntry) -> dict[str, Any]:
    fields: dict[str, Any] = {
        "family": rule.family,
        "priority": rule.priority,
        "table": rule.table,
        "action": FR_ACT_TO_TBL,
        "FRA_PROTOCOL": rule.protocol,
    }
    if rule.source:
        fields.update(src=rule.source, src_len=rule.source_len)
    if rule.destination:
        fields.update(dst=rule.destination, dst_len=rule.destination_len)
    if rule.iifname:
        fields["iifname"] = rule.iifname
    if rule.oifname:
        fields["oifname"] = rule.oifname
    return fields


def add_rule(ipr: Any, rule: RuleEntry) -> None:
    netlink_call(f"add rule {rule.describe()}", ipr.rule, "add", **_fields(rule))


def delete_rule(ipr: Any, rule: RuleEntry) -> bool:
    """Delete the rule matching every attribute of ``rule``; False when none does."""
    try:
        netlink_call(f"delete rule {rule.describe()}", ipr.rule, "del", **_fields(rule))
    except HostError as exc:
        if exc.code == f"E_NETLINK_{errno.ENOENT}":
            return False
        raise
    return True
