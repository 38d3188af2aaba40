"""Netlink framing for the families pyroute2 does not speak here (RDMA, devlink and ethtool
generic netlink).

Why by hand: the executors need a handful of requests, on sockets created inside a given
namespace (:func:`dmn.host.netns.netlink_sockets_in`); a full library would bring a
second event loop per namespace. Contract: :func:`transact` sends one request and returns the
attributes of every answer, raising :class:`NetlinkFailure` (with the kernel's errno) on an
error answer. Attributes are parsed flat (nested ones are left as bytes; :func:`items` keeps
repeated ones, for a nest's entries).
"""

from __future__ import annotations

import itertools
import os
import socket
import struct

from dmn.host.errors import HostError

NLM_F_REQUEST, NLM_F_ACK, NLM_F_DUMP = 0x1, 0x4, 0x300
NLMSG_ERROR, NLMSG_DONE = 2, 3
HEADER = struct.Struct("=IHHII")
_seq = itertools.count(1)


class NetlinkFailure(HostError):
    """An error answer; ``errno`` is the kernel's."""

    def __init__(self, code: str, err: int, message: str) -> None:
        super().__init__(code, message)
        self.errno = err


def attr(kind: int, payload: bytes) -> bytes:
    length = 4 + len(payload)
    return struct.pack("=HH", length, kind) + payload + b"\0" * ((4 - length % 4) % 4)


def u8(kind: int, value: int) -> bytes:
    return attr(kind, struct.pack("=B", value))


def u16(kind: int, value: int) -> bytes:
    return attr(kind, struct.pack("=H", value))


def u32(kind: int, value: int) -> bytes:
    return attr(kind, struct.pack("=I", value))


def text(kind: int, value: str) -> bytes:
    return attr(kind, value.encode() + b"\0")


NLA_F_NESTED = 0x8000


def nested(kind: int, payload: bytes) -> bytes:
    """A nested attribute, flagged as such (families with strict validation require it)."""
    return attr(kind | NLA_F_NESTED, payload)


def flag(kind: int) -> bytes:
    return attr(kind, b"")


def items(body: bytes) -> list[tuple[int, bytes]]:
    """Every attribute of ``body`` in order, repeated kinds included (type flags cleared)."""
    out: list[tuple[int, bytes]] = []
    offset = 0
    while offset + 4 <= len(body):
        length, kind = struct.unpack_from("=HH", body, offset)
        if length < 4:
            break
        out.append((kind & 0x3FFF, body[offset + 4 : offset + length]))
        offset += (length + 3) & ~3
    return out


def parse(body: bytes) -> dict[int, bytes]:
    """The first attribute of each kind in ``body``."""
    out: dict[int, bytes] = {}
    for kind, payload in items(body):
        out.setdefault(kind, payload)
    return out


def as_text(raw: bytes) -> str:
    return raw.split(b"\0", 1)[0].decode(errors="replace")


def as_int(raw: bytes) -> int:
    return int.from_bytes(raw, "little")


def transact(
    sock: socket.socket,
    kind: int,
    payload: bytes,
    *,
    dump: bool,
    code: str,
    what: str,
    skip: int = 0,
) -> list[dict[int, bytes]]:
    """One request of message type ``kind``; ``skip`` bytes of family header precede the
    attributes of each answer (4 for generic netlink)."""
    seq = next(_seq)
    flags = NLM_F_REQUEST | (NLM_F_DUMP if dump else NLM_F_ACK)
    sock.send(HEADER.pack(HEADER.size + len(payload), kind, flags, seq, 0) + payload)
    answers: list[dict[int, bytes]] = []
    while True:
        data = sock.recv(1 << 16)
        offset = 0
        while offset + HEADER.size <= len(data):
            length, mtype, _, mseq, _ = HEADER.unpack_from(data, offset)
            body = data[offset + HEADER.size : offset + length]
            offset += (length + 3) & ~3
            if mseq != seq:
                continue
            if mtype == NLMSG_DONE:
                return answers
            if mtype == NLMSG_ERROR:
                err = -struct.unpack_from("=i", body)[0]
                if err == 0:
                    return answers
                raise NetlinkFailure(code, err, f"{what}: {os.strerror(err)}")
            answers.append(parse(body[skip:]))


NETLINK_GENERIC = 16
GENL_ID_CTRL, CTRL_CMD_GETFAMILY, CTRL_ATTR_FAMILY_ID, CTRL_ATTR_FAMILY_NAME = 0x10, 3, 1, 2


def genl_header(cmd: int, version: int = 1) -> bytes:
    """The generic netlink family header of a request (command, version, reserved)."""
    return struct.pack("=BBH", cmd, version, 0)


def genl_family(sock: socket.socket, name: str, code: str) -> int | None:
    """The id of the generic netlink family ``name`` (``CTRL_CMD_GETFAMILY``), None when the
    kernel answers without one; an error answer raises :class:`NetlinkFailure` (``ENOENT``:
    the kernel has no such family)."""
    answers = transact(
        sock, GENL_ID_CTRL, genl_header(CTRL_CMD_GETFAMILY) + text(CTRL_ATTR_FAMILY_NAME, name),
        dump=False, code=code, what=f"resolve {name}", skip=4,
    )  # fmt: skip
    family = answers[0].get(CTRL_ATTR_FAMILY_ID) if answers else None
    return as_int(family) if family is not None else None
