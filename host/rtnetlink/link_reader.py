"""Read-only rtnetlink link queries that decode only what :class:`LinkState` holds.

Why this exists: executors read links back many times per effect (identity rechecks, ownership
proofs, read-back postconditions), and pyroute2 pays for each request with an event-loop round
trip plus a generic decode of every attribute of every link (statistics included), roughly
0.3 ms per targeted get and 0.16 ms per link in a dump. This reader sends the same RTM_GETLINK
requests on its own netlink socket, asks the kernel to leave statistics out
(``RTEXT_FILTER_SKIP_STATS``) and decodes a handful of attributes with ``struct``.

Contract: :meth:`LinkReader.get` returns the link with that ifindex or name, or None when the
kernel answers ENODEV; any other kernel error raises :class:`NetlinkError` with its errno, like
pyroute2 does. :meth:`LinkReader.dump` returns every link of the socket's namespace, retrying a
dump the kernel reports as interrupted. :meth:`LinkReader.addresses` returns one link's
addresses from an RTM_GETADDR dump (pyroute2's ``get_addr`` costs about 1.3 ms for the same
answer). :meth:`LinkReader.acknowledged` sends the few link writes :mod:`link_writer` encodes
on the same socket; every other write stays with pyroute2.
"""

from __future__ import annotations

import errno
import os
import socket
import struct
from typing import Any

from pyroute2.netlink.exceptions import NetlinkError

NLMSG_ERROR = 2
NLMSG_DONE = 3
RTM_NEWLINK = 16
RTM_GETLINK = 18
RTM_NEWADDR = 20
RTM_GETADDR = 22
RTM_NEWNSID = 88
RTM_GETNSID = 90
NETNSA_NSID = 1
NETNSA_FD = 3
NLM_F_REQUEST = 0x1
NLM_F_DUMP = 0x300
NLM_F_DUMP_INTR = 0x10
RTEXT_FILTER_SKIP_STATS = 1 << 3
NLA_TYPE_MASK = 0x3FFF

IFLA_ADDRESS = 1
IFLA_IFNAME = 3
IFLA_MTU = 4
IFLA_LINK = 5
IFLA_MASTER = 10
IFLA_LINKINFO = 18
IFLA_IFALIAS = 20
IFLA_EXT_MASK = 29
IFLA_LINK_NETNSID = 37
IFLA_PERM_ADDRESS = 54
IFLA_PARENT_DEV_NAME = 56
IFLA_PARENT_DEV_BUS_NAME = 57
IFLA_INFO_KIND = 1
IFA_ADDRESS = 1
IFLA_INFO_DATA = 2

_HDR = struct.Struct("=IHHII")
_IFI = struct.Struct("=BBHiII")
_IFA = struct.Struct("=BBBBI")
_ADDR_FAMILIES = {socket.AF_INET: 4, socket.AF_INET6: 16}
_NLA = struct.Struct("=HH")

# IFLA_INFO_DATA fields executors check, per kind: attribute type -> (name, struct format)
_INFO_FIELDS: dict[str, dict[int, tuple[str, str]]] = {
    "macvlan": {1: ("IFLA_MACVLAN_MODE", "=I")},
    "ipvlan": {1: ("IFLA_IPVLAN_MODE", "=H")},
    "vlan": {1: ("IFLA_VLAN_ID", "=H")},
    "bond": {
        1: ("IFLA_BOND_MODE", "=B"),
        2: ("IFLA_BOND_ACTIVE_SLAVE", "=I"),
        3: ("IFLA_BOND_MIIMON", "=I"),
        13: ("IFLA_BOND_FAIL_OVER_MAC", "=B"),
    },
}

_MAX_DUMP_RETRIES = 5


def _attrs(buf: bytes, off: int, end: int) -> dict[int, tuple[int, int]]:
    """Attribute type -> (payload offset, payload end) of the rtattrs in ``buf[off:end]``."""
    out: dict[int, tuple[int, int]] = {}
    while off + 4 <= end:
        length, kind = _NLA.unpack_from(buf, off)
        if length < 4:
            break
        out.setdefault(kind & NLA_TYPE_MASK, (off + 4, off + length))
        off += (length + 3) & ~3
    return out


def _text(buf: bytes, span: tuple[int, int] | None) -> str:
    if span is None:
        return ""
    return buf[span[0] : span[1]].split(b"\0", 1)[0].decode("utf-8", "replace")


def _u32(buf: bytes, span: tuple[int, int] | None, signed: bool = False) -> int | None:
    if span is None or span[1] - span[0] < 4:
        return None
    return int(struct.unpack_from("=i" if signed else "=I", buf, span[0])[0])


def _info(buf: bytes, span: tuple[int, int] | None) -> tuple[str, dict[str, Any]]:
    if span is None:
        return "", {}
    nested = _attrs(buf, span[0], span[1])
    kind = _text(buf, nested.get(IFLA_INFO_KIND))
    info: dict[str, Any] = {}
    data = nested.get(IFLA_INFO_DATA)
    fields = _INFO_FIELDS.get(kind)
    if data is not None and fields:
        for attr, (start, stop) in _attrs(buf, data[0], data[1]).items():
            field = fields.get(attr)
            if field is not None and stop - start >= struct.calcsize(field[1]):
                info[field[0]] = struct.unpack_from(field[1], buf, start)[0]
    return kind, info


def decode_link(buf: bytes, off: int, end: int) -> dict[str, Any]:
    """The LinkState fields of one RTM_NEWLINK payload (``buf[off:end]``, after the header)."""
    _family, _pad, _type, index, flags, _change = _IFI.unpack_from(buf, off)
    attrs = _attrs(buf, off + _IFI.size, end)
    mac_span = attrs.get(IFLA_ADDRESS)
    mac = ":".join(f"{b:02x}" for b in buf[mac_span[0] : mac_span[1]]) if mac_span else ""
    perm_span = attrs.get(IFLA_PERM_ADDRESS)
    perm = ":".join(f"{b:02x}" for b in buf[perm_span[0] : perm_span[1]]) if perm_span else ""
    kind, info = _info(buf, attrs.get(IFLA_LINKINFO))
    netnsid = _u32(buf, attrs.get(IFLA_LINK_NETNSID), signed=True)
    return {
        "index": index,
        "flags": flags,
        "name": _text(buf, attrs.get(IFLA_IFNAME)),
        "alias": _text(buf, attrs.get(IFLA_IFALIAS)),
        "mtu": _u32(buf, attrs.get(IFLA_MTU)) or 0,
        "mac": mac,
        "kind": kind,
        "lower": _u32(buf, attrs.get(IFLA_LINK)) or 0,
        "master": _u32(buf, attrs.get(IFLA_MASTER)) or 0,
        "info": info,
        "link_netnsid": -1 if netnsid is None else netnsid,
        "perm_mac": perm,
        "parent_dev": _text(buf, attrs.get(IFLA_PARENT_DEV_NAME)),
        "parent_bus": _text(buf, attrs.get(IFLA_PARENT_DEV_BUS_NAME)),
    }


def _nla(kind: int, payload: bytes) -> bytes:
    raw = _NLA.pack(4 + len(payload), kind) + payload
    return raw + b"\0" * (-len(raw) % 4)


class LinkReader:
    """Link reads on one NETLINK_ROUTE socket (created by the caller in the right namespace)."""

    def __init__(self, fd: int | None = None) -> None:
        if fd is None:
            self._sock = socket.socket(socket.AF_NETLINK, socket.SOCK_DGRAM, 0)
        else:
            self._sock = socket.socket(fileno=fd)
        self._sock.bind((0, 0))
        self._seq = 0
        self._bufsize = 65536

    def close(self) -> None:
        self._sock.close()

    def _request(
        self, flags: int, index: int = 0, name: str = "", kind: str = ""
    ) -> list[dict[str, Any]]:
        body = _IFI.pack(socket.AF_UNSPEC, 0, 0, index, 0, 0)
        if name:
            body += _nla(IFLA_IFNAME, name.encode() + b"\0")
        if kind:
            body += _nla(IFLA_LINKINFO, _nla(IFLA_INFO_KIND, kind.encode() + b"\0"))
        body += _nla(IFLA_EXT_MASK, struct.pack("=I", RTEXT_FILTER_SKIP_STATS))
        return [
            decode_link(data, start, end)
            for data, start, end in self._exchange(RTM_GETLINK, flags, body, RTM_NEWLINK)
        ]

    def _exchange(
        self, msg_type: int, flags: int, body: bytes, reply_type: int
    ) -> list[tuple[bytes, int, int]]:
        """Send one request; (buffer, payload start, payload end) of each reply message."""
        self._seq += 1
        seq = self._seq
        self._sock.send(_HDR.pack(_HDR.size + len(body), msg_type, flags, seq, 0) + body)
        out: list[tuple[bytes, int, int]] = []
        interrupted = False
        while True:
            data, _, rflags, _ = self._sock.recvmsg(self._bufsize)
            if rflags & socket.MSG_TRUNC:  # never expected: the kernel caps dump chunks at 32 KiB
                raise NetlinkError(errno.EMSGSIZE, "netlink reply larger than the read buffer")
            off = 0
            while off + _HDR.size <= len(data):
                length, mtype, mflags, mseq, _pid = _HDR.unpack_from(data, off)
                if length < _HDR.size:
                    raise NetlinkError(errno.EBADMSG, "truncated netlink message")
                end = off + length
                if mseq != seq:  # a late answer to an earlier request
                    off = (end + 3) & ~3
                    continue
                if mflags & NLM_F_DUMP_INTR:
                    interrupted = True
                if mtype == NLMSG_ERROR:
                    code = -int(struct.unpack_from("=i", data, off + _HDR.size)[0])
                    if code:
                        raise NetlinkError(code, os.strerror(code))
                    return out
                if mtype == NLMSG_DONE:
                    if interrupted:
                        raise _Interrupted
                    return out
                if mtype == reply_type:
                    out.append((data, off + _HDR.size, end))
                    if not flags & NLM_F_DUMP:
                        return out
                off = (end + 3) & ~3

    def acknowledged(self, msg_type: int, flags: int, body: bytes) -> None:
        """Send one request the kernel acknowledges (a link write :mod:`link_writer`
        encoded) and wait for the acknowledgement; a refusal raises :class:`NetlinkError`
        with its errno."""
        self._exchange(msg_type, flags, body, reply_type=-1)

    def nsid_of(self, ns_fd: int) -> int:
        """The id this socket's namespace gives the namespace behind ``ns_fd``; -1 if none
        is assigned (the kernel does not assign one for a query)."""
        body = struct.pack("=B3x", socket.AF_UNSPEC) + _nla(NETNSA_FD, struct.pack("=I", ns_fd))
        for data, start, end in self._exchange(RTM_GETNSID, NLM_F_REQUEST, body, RTM_NEWNSID):
            nsid = _u32(data, _attrs(data, start + 4, end).get(NETNSA_NSID), signed=True)
            return -1 if nsid is None else nsid
        return -1

    def get(self, index: int = 0, name: str = "") -> dict[str, Any] | None:
        try:
            found = self._request(NLM_F_REQUEST, index=index, name=name)
        except NetlinkError as exc:
            if exc.code == errno.ENODEV:
                return None
            raise
        return found[0] if found else None

    def addresses(self, index: int) -> list[tuple[int, str, int]]:
        """(family, address, prefix length) of every IPv4/IPv6 address on link ``index``,
        in the kernel's order; the address is ``IFA_ADDRESS`` as ``inet_ntop`` writes it
        (what pyroute2's ``get_addr`` reports). The dump covers the namespace (the kernel
        filters by index only for strict sockets); other links' entries are skipped."""
        body = _IFA.pack(socket.AF_UNSPEC, 0, 0, 0, 0)
        for _ in range(_MAX_DUMP_RETRIES):
            try:
                replies = self._exchange(RTM_GETADDR, NLM_F_REQUEST | NLM_F_DUMP, body, RTM_NEWADDR)
            except _Interrupted:
                continue
            out: list[tuple[int, str, int]] = []
            for data, start, end in replies:
                family, prefixlen, _flags, _scope, ifindex = _IFA.unpack_from(data, start)
                size = _ADDR_FAMILIES.get(family)
                if ifindex != index or size is None:
                    continue
                span = _attrs(data, start + _IFA.size, end).get(IFA_ADDRESS)
                if span is None or span[1] - span[0] != size:
                    continue
                out.append((family, socket.inet_ntop(family, data[span[0] : span[1]]), prefixlen))
            return out
        raise NetlinkError(errno.EINTR, "address dump kept being interrupted")

    def dump(self, kind: str = "") -> list[dict[str, Any]]:
        """Every link; with ``kind`` the kernel is asked to filter (it does so only for kinds
        it knows, so callers must still filter the result)."""
        for _ in range(_MAX_DUMP_RETRIES):
            try:
                return self._request(NLM_F_REQUEST | NLM_F_DUMP, kind=kind)
            except _Interrupted:
                continue
        raise NetlinkError(errno.EINTR, "link dump kept being interrupted")


class _Interrupted(Exception):
    """The kernel flagged a dump as inconsistent (links changed during it): dump again."""
