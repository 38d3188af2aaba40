"""Netdev features (offloads) over the ethtool generic-netlink family, in a given namespace.

The requests: resolve the ``ethtool`` family (``CTRL_CMD_GETFAMILY``; a kernel without it —
before 5.6 or built without ``CONFIG_ETHTOOL_NETLINK`` — is refused with
``E_ETHTOOL_UNSUPPORTED``), read a link's features (``ETHTOOL_MSG_FEATURES_GET``, verbose
bitsets, so every feature comes with the kernel's own name) and change some
(``ETHTOOL_MSG_FEATURES_SET`` with a masked ``WANTED`` bitset naming only those features, so
nothing else is touched). The link is addressed by ifindex only, on a socket created inside
its namespace. Numbers are the kernel's uapi (``include/uapi/linux/ethtool_netlink*.h``,
``genetlink.h``); feature names are the kernel's ``netdev_features_strings``.

What a feature is, as the kernel reports it: ``HW`` (dev->hw_features, with a mask of every
feature the kernel knows) says which the driver lets userspace change, ``NOCHANGE``
(NETIF_F_NEVER_CHANGE) which never change, ``WANTED`` what was asked for, ``ACTIVE`` what is
in effect (the kernel drops a wanted feature whose dependency is off). A feature is *fixed*
when it is not in ``HW`` or is in ``NOCHANGE``.
"""

from __future__ import annotations

import socket
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from dmn.host.errors import HostError
from dmn.host.netlink_wire import (
    NETLINK_GENERIC,
    NetlinkFailure,
    as_text,
    flag,
    genl_family,
    genl_header,
    items,
    nested,
    parse,
    text,
    transact,
    u32,
)
from dmn.host.netns import LinkEnvironment, NamespaceRef, netlink_sockets_in

MSG_FEATURES_GET, MSG_FEATURES_SET = 11, 12
A_HEADER_DEV_INDEX, A_HEADER_FLAGS = 1, 3
FLAG_OMIT_REPLY = 2
A_FEATURES_HEADER, A_FEATURES_HW, A_FEATURES_WANTED = 1, 2, 3
A_FEATURES_ACTIVE, A_FEATURES_NOCHANGE = 4, 5
A_BITSET_NOMASK, A_BITSET_BITS = 1, 3
A_BITSET_BITS_BIT = 1
A_BITSET_BIT_INDEX, A_BITSET_BIT_NAME, A_BITSET_BIT_VALUE = 1, 2, 3
CODE = "E_ETHTOOL"


@dataclass(frozen=True, slots=True)
class Features:
    """A link's features by kernel name: every known one, the changeable ones, and those
    wanted and active (a feature absent from a set is off / not in it)."""

    known: frozenset[str]
    changeable: frozenset[str]
    wanted: frozenset[str]
    active: frozenset[str]

    def fixed(self, name: str) -> bool:
        return name not in self.changeable

    def to_json(self, names: frozenset[str] | None = None) -> dict[str, Any]:
        """The facts of ``names`` (all known when None), for a before-image."""
        keep = self.known if names is None else names
        return {
            "known": sorted(self.known & keep),
            "changeable": sorted(self.changeable & keep),
            "wanted": sorted(self.wanted & keep),
            "active": sorted(self.active & keep),
        }

    @classmethod
    def from_json(cls, data: Any) -> Features:
        return cls(
            frozenset(data["known"]),
            frozenset(data["changeable"]),
            frozenset(data["wanted"]),
            frozenset(data["active"]),
        )


def _bits(bitset: bytes) -> list[tuple[str, bool]]:
    """(name, value flag present) of each bit of a verbose bitset."""
    out: list[tuple[str, bool]] = []
    bits = parse(bitset).get(A_BITSET_BITS, b"")
    for kind, bit in items(bits):
        if kind != A_BITSET_BITS_BIT:
            continue
        fields = parse(bit)
        name = as_text(fields.get(A_BITSET_BIT_NAME, b""))
        if name:
            out.append((name, A_BITSET_BIT_VALUE in fields))
    return out


def _listed(bitset: bytes) -> frozenset[str]:
    """The names in a list-type (``NOMASK``) verbose bitset: the bits that are set."""
    return frozenset(name for name, _ in _bits(bitset))


class Ethtool:
    """One generic netlink socket bound to the ethtool family, in one namespace."""

    def __init__(self, sock: socket.socket) -> None:
        self._sock = sock
        try:
            family = genl_family(sock, "ethtool", CODE)
        except NetlinkFailure as exc:
            family, why = None, f" ({exc})"
        else:
            why = ""
        if family is None:
            raise HostError(
                "E_ETHTOOL_UNSUPPORTED",
                f"this kernel has no ethtool netlink family{why}; it needs Linux 5.6+ with "
                "CONFIG_ETHTOOL_NETLINK",
            )
        self._family = family

    @staticmethod
    def _genl(cmd: int) -> bytes:
        return genl_header(cmd)

    def close(self) -> None:
        self._sock.close()

    def __enter__(self) -> Ethtool:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def features(self, index: int) -> Features:
        """The features of the link at ``index`` (``E_ETHTOOL`` with the errno if refused:
        ENODEV when no link has that ifindex)."""
        header = nested(A_FEATURES_HEADER, u32(A_HEADER_DEV_INDEX, index))
        answers = transact(
            self._sock, self._family, self._genl(MSG_FEATURES_GET) + header, dump=False,
            code=CODE, what=f"features of ifindex {index}", skip=4,
        )  # fmt: skip
        if not answers:
            raise HostError(CODE, f"no features reply for ifindex {index}")
        reply = answers[0]
        hw = _bits(reply.get(A_FEATURES_HW, b""))
        nochange = _listed(reply.get(A_FEATURES_NOCHANGE, b""))
        return Features(
            known=frozenset(name for name, _ in hw),
            changeable=frozenset(name for name, on in hw if on) - nochange,
            wanted=_listed(reply.get(A_FEATURES_WANTED, b"")),
            active=_listed(reply.get(A_FEATURES_ACTIVE, b"")),
        )

    def set_wanted(self, index: int, wanted: Mapping[str, bool]) -> None:
        """Ask for each named feature on or off; every other feature keeps its wanted value
        (the bitset's mask is exactly these names)."""
        bits = b"".join(
            nested(
                A_BITSET_BITS_BIT,
                text(A_BITSET_BIT_NAME, name) + (flag(A_BITSET_BIT_VALUE) if on else b""),
            )
            for name, on in sorted(wanted.items())
        )
        header = nested(
            A_FEATURES_HEADER,
            u32(A_HEADER_DEV_INDEX, index) + u32(A_HEADER_FLAGS, FLAG_OMIT_REPLY),
        )
        body = header + nested(A_FEATURES_WANTED, nested(A_BITSET_BITS, bits))
        transact(
            self._sock, self._family, self._genl(MSG_FEATURES_SET) + body, dump=False,
            code=CODE, what=f"set features of ifindex {index}", skip=4,
        )  # fmt: skip


def open_in(env: LinkEnvironment, ref: NamespaceRef) -> Ethtool:
    """An ethtool socket inside ``ref`` (proven to be the recorded namespace first)."""
    env.reader(ref)
    try:
        (fd,) = netlink_sockets_in(env.fd(ref), 1, NETLINK_GENERIC)
    except OSError as exc:
        raise NetlinkFailure(CODE, exc.errno or 0, f"generic netlink: {exc}") from exc
    sock = socket.socket(socket.AF_NETLINK, socket.SOCK_DGRAM, NETLINK_GENERIC, fileno=fd)
    try:
        return Ethtool(sock)
    except BaseException:
        sock.close()
        raise
