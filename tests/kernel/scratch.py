"""Scratch network namespaces and unique link names for real-kernel tests.

Every namespace a test makes gets a unique name (prefix ``dmnt-``), and is removed in a
``finally`` even when the test fails; removing a namespace destroys every link inside it, so a
test that keeps its links inside its own namespaces leaves nothing behind on the host.
"""

from __future__ import annotations

import itertools
import os
from collections.abc import Iterator
from contextlib import contextmanager

from pyroute2 import IPRoute, netns

_counter = itertools.count()


def unique(prefix: str) -> str:
    """A link or namespace name unique to this process and call, at most 15 characters."""
    return f"{prefix}{os.getpid() % 100000:05d}{next(_counter) % 1000:03d}"[:15]


@contextmanager
def scratch_netns(prefix: str = "dmnt") -> Iterator[str]:
    """Create a named netns (``/var/run/netns/<name>``), yield its name, always remove it."""
    name = unique(prefix)
    netns.create(name)
    try:
        with IPRoute(netns=name) as ipr:
            ipr.link("set", index=ipr.link_lookup(ifname="lo")[0], state="up")
        yield name
    finally:
        netns.remove(name)


def netns_path(name: str) -> str:
    return f"/var/run/netns/{name}"
