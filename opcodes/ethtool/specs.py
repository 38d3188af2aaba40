"""``ethtool/*`` opcodes: offload features of a workload's interface.

Why ``connect``: the features belong to the link handed to the Pod (``net1``), configured in
its namespace after a ``linux/*`` effect put it there (design §6.2).

Why these names: they are the kernel's own feature strings (``netdev_features_strings``, what
``ethtool -k`` prints and the ethtool netlink family speaks), a fixed allowlist of the
checksum, segmentation, receive-coalescing and VLAN offloads a network-function workload
tunes. ``ethtool -K``'s legacy group words (``tso``, ``gro``, ``rx-checksumming``) are not
accepted: each names several kernel features, and an exact restore needs the exact bits.
Features that are not per-workload choices (``highdma``, ``loopback``, ``netns-local``,
crypto and tunnel-port offloads) are left out.

A feature the device has *fixed* (not in its changeable set, or one the kernel never lets
change) and is asked to change is refused before anything changes
(``E_FEATURE_FIXED``); a name this kernel does not know, ``E_FEATURE_UNKNOWN``; a kernel
without ethtool netlink, ``E_ETHTOOL_UNSUPPORTED``. Undo asks for the recorded wanted state
of exactly the requested features again (the kernel then re-derives what depends on them).
"""

from __future__ import annotations

from typing import Annotated, Literal, get_args

from pydantic import Field

from dmn.opcodes.link_settings_contract import link_settings_spec
from dmn.opcodes.parameter_types import ParameterModel
from dmn.opcodes.spec import OpcodeSpec
from dmn.vocabulary.terms import LinkType

FeatureName = Literal[
    "rx-checksum",
    "tx-checksum-ipv4",
    "tx-checksum-ipv6",
    "tx-checksum-ip-generic",
    "tx-checksum-sctp",
    "tx-scatter-gather",
    "tx-scatter-gather-fraglist",
    "tx-tcp-segmentation",
    "tx-tcp6-segmentation",
    "tx-tcp-ecn-segmentation",
    "tx-tcp-mangleid-segmentation",
    "tx-udp-segmentation",
    "tx-generic-segmentation",
    "rx-gro",
    "rx-gro-hw",
    "rx-gro-list",
    "rx-udp-gro-forwarding",
    "rx-lro",
    "rx-hashing",
    "rx-ntuple-filter",
    "rx-vlan-hw-parse",
    "tx-vlan-hw-insert",
    "rx-vlan-filter",
    "rx-vlan-stag-hw-parse",
    "tx-vlan-stag-hw-insert",
    "rx-vlan-stag-filter",
    "hw-tc-offload",
    "tx-nocache-copy",
    "rx-fcs",
    "rx-all",
]
"""The allowlisted kernel feature strings."""

FEATURE_NAMES: tuple[str, ...] = get_args(FeatureName)


class FeaturesParameters(ParameterModel):
    """``features``: kernel feature name -> on/off, one to all of the allowlisted names
    (the kernel's own strings, e.g. `rx-checksum`, `tx-checksum-ip-generic`,
    `tx-scatter-gather`, `tx-tcp-segmentation`, `tx-generic-segmentation`, `rx-gro`,
    `rx-vlan-hw-parse`)."""

    features: Annotated[dict[FeatureName, bool], Field(min_length=1, max_length=len(FEATURE_NAMES))]


_ETHERNET = frozenset({LinkType.ETHERNET})

FEATURES = link_settings_spec(
    name="ethtool/features/v1",
    summary="Turn allowlisted offload features of a sandbox link on or off (ethtool netlink).",
    changes=(
        "Asks the kernel, over the ethtool netlink family, to turn the named features of a "
        "link in the Pod's namespace on or off (the link addressed by its verified ifindex); "
        "the features' wanted and active state is recorded first. A fixed feature asked to "
        "change is refused before anything changes."
    ),
    undo=(
        "Asks for the recorded wanted state of exactly those features again on the link at "
        "the recorded ifindex when it still has the recorded identity; another link there is "
        "quarantined, never changed."
    ),
    parameters=FeaturesParameters,
    link_types=_ETHERNET,
    postcondition="features-match",
)

SPECS: tuple[OpcodeSpec, ...] = (FEATURES,)
