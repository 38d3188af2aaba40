"""``sysctl/*`` opcodes: the per-interface IPv4/IPv6 settings a workload's interface needs.

Why ``connect``: the settings belong to a link in the Pod's namespace (``net1``), so they run
after the link is there, on the handle a ``linux/*`` effect output (design §6.2).

Why a fixed allowlist of typed fields and no path: a plugin names a setting by a parameter
of this model only; the executor maps that parameter to its kernel key (:data:`SYSCTL_KEYS`)
and builds the path from that key and the name the kernel reports for the granted link at
its verified ifindex (``host/sysctl.py``). Nothing from configuration ever becomes part of a
path, and a key outside the allowlist is an unknown parameter (``E_UNKNOWN_FIELD`` at lint),
a value outside its bounds a type error (``E_PARAM_TYPE``). Namespace-wide tables
(``conf/all``, ``conf/default``) and non-interface sysctls are out of reach by construction.

The kernel key of each parameter and its bounds are listed on
:class:`InterfaceSysctlParameters` (and so in ``dmn opcodes`` and ``docs/opcodes.md``).
Booleans are written 1/0. Undo writes back the recorded values, whatever they were.
"""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType
from typing import Annotated

from pydantic import AfterValidator, Field, model_validator

from dmn.opcodes.link_settings_contract import link_settings_spec
from dmn.opcodes.parameter_types import ParameterModel
from dmn.opcodes.spec import OpcodeSpec
from dmn.vocabulary.terms import LinkType


def _arp_ignore(value: int) -> int:
    if 4 <= value <= 7:
        raise ValueError("arp_ignore 4-7 are reserved: use 0-3 or 8")
    return value


ZeroToTwo = Annotated[int, Field(ge=0, le=2)]
ArpIgnore = Annotated[int, Field(ge=0, le=8), AfterValidator(_arp_ignore)]
AddrGenMode = Annotated[int, Field(ge=0, le=3)]
DadTransmits = Annotated[int, Field(ge=0, le=10)]

SYSCTL_KEYS: Mapping[str, tuple[str, str]] = MappingProxyType(
    {
        "ipv4RpFilter": ("ipv4", "rp_filter"),
        "ipv4ArpIgnore": ("ipv4", "arp_ignore"),
        "ipv4ArpAnnounce": ("ipv4", "arp_announce"),
        "ipv4ArpFilter": ("ipv4", "arp_filter"),
        "ipv4ArpAccept": ("ipv4", "arp_accept"),
        "ipv4ArpNotify": ("ipv4", "arp_notify"),
        "ipv4ProxyArp": ("ipv4", "proxy_arp"),
        "ipv4Forwarding": ("ipv4", "forwarding"),
        "ipv4AcceptLocal": ("ipv4", "accept_local"),
        "ipv4AcceptRedirects": ("ipv4", "accept_redirects"),
        "ipv4SendRedirects": ("ipv4", "send_redirects"),
        "ipv4LogMartians": ("ipv4", "log_martians"),
        "ipv6AcceptRa": ("ipv6", "accept_ra"),
        "ipv6Disable": ("ipv6", "disable_ipv6"),
        "ipv6Autoconf": ("ipv6", "autoconf"),
        "ipv6Forwarding": ("ipv6", "forwarding"),
        "ipv6AcceptDad": ("ipv6", "accept_dad"),
        "ipv6DadTransmits": ("ipv6", "dad_transmits"),
        "ipv6AddrGenMode": ("ipv6", "addr_gen_mode"),
        "ipv6UseTempaddr": ("ipv6", "use_tempaddr"),
        "ipv6AcceptRedirects": ("ipv6", "accept_redirects"),
        "ipv6NdiscNotify": ("ipv6", "ndisc_notify"),
    }
)
"""Parameter -> (family, kernel key): the allowlist, in the order the executor writes."""


def _key(name: str) -> str:
    family, key = SYSCTL_KEYS[name]
    return f"/proc/sys/net/{family}/conf/<interface>/{key}"


class InterfaceSysctlParameters(ParameterModel):
    """Per-interface settings from a fixed allowlist, each optional (at least one is set),
    each the file ``/proc/sys/net/<family>/conf/<interface>/<key>`` of the granted link
    (Documentation/networking/ip-sysctl.rst); booleans are written 1/0, undo writes back the
    recorded values. IPv4: ``ipv4RpFilter`` rp_filter (0 off, 1 strict, 2 loose reverse-path
    filtering; the kernel applies the larger of this and conf/all), ``ipv4ArpIgnore``
    arp_ignore (0-3 or 8: which ARP requests to answer), ``ipv4ArpAnnounce`` arp_announce
    (0-2: which source address ARP requests use), ``ipv4ArpFilter`` arp_filter,
    ``ipv4ArpAccept`` arp_accept (0-2: gratuitous ARP creates entries; 2 only in the same
    subnet), ``ipv4ArpNotify`` arp_notify, ``ipv4ProxyArp`` proxy_arp, ``ipv4Forwarding``
    forwarding, ``ipv4AcceptLocal`` accept_local, ``ipv4AcceptRedirects`` accept_redirects,
    ``ipv4SendRedirects`` send_redirects, ``ipv4LogMartians`` log_martians. IPv6:
    ``ipv6AcceptRa`` accept_ra (0 never, 1 unless forwarding, 2 even when forwarding),
    ``ipv6Disable`` disable_ipv6, ``ipv6Autoconf`` autoconf (SLAAC addresses),
    ``ipv6Forwarding`` forwarding, ``ipv6AcceptDad`` accept_dad (0-2), ``ipv6DadTransmits``
    dad_transmits (0-10 probes), ``ipv6AddrGenMode`` addr_gen_mode (0 EUI-64, 1 none,
    2 stable privacy, 3 random), ``ipv6UseTempaddr`` use_tempaddr (0-2: privacy addresses),
    ``ipv6AcceptRedirects`` accept_redirects, ``ipv6NdiscNotify`` ndisc_notify."""

    ipv4RpFilter: ZeroToTwo | None = Field(None, description=_key("ipv4RpFilter"))
    ipv4ArpIgnore: ArpIgnore | None = Field(None, description=_key("ipv4ArpIgnore"))
    ipv4ArpAnnounce: ZeroToTwo | None = Field(None, description=_key("ipv4ArpAnnounce"))
    ipv4ArpFilter: bool | None = Field(None, description=_key("ipv4ArpFilter"))
    ipv4ArpAccept: ZeroToTwo | None = Field(None, description=_key("ipv4ArpAccept"))
    ipv4ArpNotify: bool | None = Field(None, description=_key("ipv4ArpNotify"))
    ipv4ProxyArp: bool | None = Field(None, description=_key("ipv4ProxyArp"))
    ipv4Forwarding: bool | None = Field(None, description=_key("ipv4Forwarding"))
    ipv4AcceptLocal: bool | None = Field(None, description=_key("ipv4AcceptLocal"))
    ipv4AcceptRedirects: bool | None = Field(None, description=_key("ipv4AcceptRedirects"))
    ipv4SendRedirects: bool | None = Field(None, description=_key("ipv4SendRedirects"))
    ipv4LogMartians: bool | None = Field(None, description=_key("ipv4LogMartians"))
    ipv6AcceptRa: ZeroToTwo | None = Field(None, description=_key("ipv6AcceptRa"))
    ipv6Disable: bool | None = Field(None, description=_key("ipv6Disable"))
    ipv6Autoconf: bool | None = Field(None, description=_key("ipv6Autoconf"))
    ipv6Forwarding: bool | None = Field(None, description=_key("ipv6Forwarding"))
    ipv6AcceptDad: ZeroToTwo | None = Field(None, description=_key("ipv6AcceptDad"))
    ipv6DadTransmits: DadTransmits | None = Field(None, description=_key("ipv6DadTransmits"))
    ipv6AddrGenMode: AddrGenMode | None = Field(None, description=_key("ipv6AddrGenMode"))
    ipv6UseTempaddr: ZeroToTwo | None = Field(None, description=_key("ipv6UseTempaddr"))
    ipv6AcceptRedirects: bool | None = Field(None, description=_key("ipv6AcceptRedirects"))
    ipv6NdiscNotify: bool | None = Field(None, description=_key("ipv6NdiscNotify"))

    @model_validator(mode="after")
    def _something_to_do(self) -> InterfaceSysctlParameters:
        if not self.requested():
            raise ValueError("set at least one setting")
        return self

    def requested(self) -> dict[str, int]:
        """The set parameters as the integers written, in allowlist order."""
        out: dict[str, int] = {}
        for name in SYSCTL_KEYS:
            value = getattr(self, name)
            if value is not None:
                out[name] = int(value)
        return out


_ANY_LINK = frozenset({LinkType.ETHERNET, LinkType.INFINIBAND})

INTERFACE = link_settings_spec(
    name="sysctl/interface/v1",
    summary="Set allowlisted per-interface IPv4/IPv6 sysctls of a sandbox link.",
    changes=(
        "Writes the requested /proc/sys/net/{ipv4,ipv6}/conf/<link>/<key> settings of a link "
        "in the Pod's namespace (the link found by its verified ifindex, never by a name from "
        "configuration); the original values are recorded first."
    ),
    undo=(
        "Writes back the recorded values, to the link at the recorded ifindex when it still "
        "has the recorded identity (its current name, whatever the tenant renamed it to); "
        "another link at that ifindex is quarantined, never written."
    ),
    parameters=InterfaceSysctlParameters,
    link_types=_ANY_LINK,
    postcondition="sysctl-values-match",
)

SPECS: tuple[OpcodeSpec, ...] = (INTERFACE,)
