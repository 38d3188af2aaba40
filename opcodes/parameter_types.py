"""Constrained value types shared by opcode parameter models.

These encode the limits design §6 puts on user-visible values (interface names,
MTUs, VLAN IDs, administrator aliases), so every opcode rejects the same bad values
with the same message. They are strict: a string never passes for an integer and a
boolean never passes for a number.
"""

from __future__ import annotations

from typing import Annotated

from pydantic import AfterValidator, BaseModel, ConfigDict, Field

from dmn.vocabulary.ifname import IFNAME_MAX_BYTES, IFNAME_PATTERN, ifname_problem


def _check_ifname(value: str) -> str:
    problem = ifname_problem(value)
    if problem is not None:
        raise ValueError(problem)
    return value


IfName = Annotated[
    str,
    Field(min_length=1, max_length=IFNAME_MAX_BYTES, pattern=IFNAME_PATTERN),
    AfterValidator(_check_ifname),
]
"""A Linux interface name a workload may choose: 1-15 ASCII ``[A-Za-z0-9_.-]``, not reserved."""

Mtu = Annotated[int, Field(ge=68, le=65535)]
"""Any MTU the kernel accepts for a link (IPv4 minimum 68); hardware limits are the
executor's to enforce, plugin config schemas narrow it further (576..9000 for Ethernet)."""

VlanId = Annotated[int, Field(ge=1, le=4094)]
"""An 802.1Q VLAN ID; 0 and 4095 are reserved by the standard."""

MonitorIntervalMs = Annotated[int, Field(ge=1, le=10000)]
"""Bond link monitoring interval (miimon) in milliseconds, design §6.3."""

ADMIN_ALIAS_PATTERN = r"^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$"
AdminAlias = Annotated[str, Field(min_length=1, max_length=63, pattern=ADMIN_ALIAS_PATTERN)]
"""An administrator alias from an exposure-policy grant (a DNS label). Aliases name
approved bridges and uplinks; the executor resolves them through the policy, so a
workload never supplies a bridge name, database path or device name."""


class ParameterModel(BaseModel):
    """Base of every opcode parameter model: unknown fields and loose types are errors."""

    model_config = ConfigDict(extra="forbid", strict=True, frozen=True)
