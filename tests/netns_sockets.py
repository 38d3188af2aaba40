"""Netlink sockets for pyroute2's ``netns=`` without forking a helper process.

pyroute2 creates every ``IPRoute(netns=...)`` socket in a forked child that enters the
namespace and passes the socket back. A fork copies the whole test process: with a lab node
(API server, controller, agent, gRPC threads) in it, under the kernel lab's TCG emulation,
one fork took seconds and a single before/after survey of a lab node tens of seconds. The
agent never forks for this (:func:`dmn.host.netns.netlink_sockets_in` enters the
namespace in the calling thread for the ``socket()`` call only); :func:`install` makes the
tests' pyroute2 sockets come from that same function. Anything it does not cover — a
namespace pyroute2 must create first, a non-netlink socket, a ready-made fd — still goes
through pyroute2's own code.
"""

from __future__ import annotations

import os
import socket
from typing import Any

from pyroute2 import netns as pyroute2_netns

from dmn.host.netns import netlink_sockets_in

_original = pyroute2_netns.create_socket


def _namespace_path(name: str | bytes) -> str:
    path = os.fsdecode(name)
    return path if os.path.dirname(path) else os.path.join(pyroute2_netns.NETNS_RUN_DIR, path)


def create_socket(
    netns: Any = None,
    family: int = socket.AF_INET,
    socket_type: int = socket.SOCK_STREAM,
    proto: int = 0,
    fileno: int | None = None,
    flags: int = os.O_CREAT,
    libc: Any = None,
    **kwargs: Any,
) -> socket.socket:
    """pyroute2's ``create_socket`` contract: a socket of ``family``/``socket_type``/
    ``proto`` inside ``netns`` (a name under the netns run directory, a path or an fd)."""
    if fileno is None and family == socket.AF_NETLINK:
        if isinstance(netns, int):
            return _netlink_socket_in(netns, socket_type, proto)
        if isinstance(netns, (str, bytes)):
            path = _namespace_path(netns)
            if os.path.exists(path):  # else pyroute2 creates it (O_CREAT) or reports it
                fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
                try:
                    return _netlink_socket_in(fd, socket_type, proto)
                finally:
                    os.close(fd)
    return _original(netns, family, socket_type, proto, fileno, flags, libc, **kwargs)


def _netlink_socket_in(ns_fd: int, socket_type: int, proto: int) -> socket.socket:
    (fd,) = netlink_sockets_in(ns_fd, 1, proto)
    return socket.socket(socket.AF_NETLINK, socket_type, proto, fileno=fd)


def install() -> None:
    """Route pyroute2's namespace sockets through :func:`create_socket` (idempotent)."""
    pyroute2_netns.create_socket = create_socket
