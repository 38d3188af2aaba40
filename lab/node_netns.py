"""Real kernel links for the lab node: a veth pair in a network namespace the lab owns.

With ``dmn lab up --links netns`` the lab node's ``lab0``/``lab1`` are a real veth pair
(MTU 1500, up) inside a fresh namespace ``dmn-lab-<8 hex>``, and the inventory reads them
through rtnetlink (:class:`~dmn.agent.inventory.Pyroute2Links`). The host's own links are
never read or touched.

:func:`create` returns only once the kernel reports both links' operstate UP. Setting a
veth up returns at once, but the kernel updates the operstate later, from its link-watch
work queue (on a busy machine the lab read ``LOWERLAYERDOWN`` right after creating the
pair). The lab scans its inventory right after :func:`create`, and without
``follow_links`` never again: a link seen down then stayed "unhealthy", got the
``NoSchedule`` taint once the taint grace ran out, and every later allocation was
Unschedulable.

Ownership is recorded before anything is created: the namespace name goes to
``<state dir>/netns`` first, so a lab killed at any point leaves a record that proves the
namespace is ours; :func:`remove_recorded` (run on ``up`` and on stop) deletes exactly the
recorded namespace, and only if its name has the lab's prefix. Needs root (CAP_SYS_ADMIN
and CAP_NET_ADMIN); without it creation fails with a reason-coded :class:`NetnsError`.
"""

from __future__ import annotations

import contextlib
import logging
import re
import time
import uuid
from pathlib import Path
from typing import Any

from dmn.agent.inventory import Pyroute2Links

log = logging.getLogger(__name__)

PREFIX = "dmn-lab-"
_NAME = re.compile(r"^dmn-lab-[0-9a-f]{8}$")
#: how long the kernel may take to report the new pair operationally up
UP_TIMEOUT = 10.0


class NetnsError(Exception):
    def __init__(self, code: str, message: str) -> None:
        super().__init__(f"{code}: {message}")
        self.code = code
        self.message = message


def _record(state_root: Path) -> Path:
    return state_root / "netns"


def create(state_root: Path, links: tuple[str, str]) -> str:
    """Create the namespace and the veth pair ``links``; returns the namespace name."""
    from pyroute2 import IPRoute, netns

    name = f"{PREFIX}{uuid.uuid4().hex[:8]}"
    state_root.mkdir(parents=True, exist_ok=True)
    _record(state_root).write_text(name + "\n")
    try:
        netns.create(name)
        with IPRoute(netns=name) as ip:
            ip.link("add", ifname=links[0], kind="veth", peer=links[1])
            indexes = [ip.link_lookup(ifname=link)[0] for link in links]
            for index in indexes:
                ip.link("set", index=index, state="up", mtu=1500)
            _wait_operstate_up(ip, indexes)
    except Exception as exc:  # netlink and permission errors alike
        remove_recorded(state_root)
        raise NetnsError("E_NETNS", f"creating lab namespace {name}: {exc}") from exc
    log.info("lab netns created name=%s links=%s", name, ",".join(links))
    return name


def _wait_operstate_up(ip: Any, indexes: list[int]) -> None:
    """Return once every link in ``indexes`` reports operstate UP; TimeoutError after
    :data:`UP_TIMEOUT` seconds."""
    deadline = time.monotonic() + UP_TIMEOUT
    while True:
        states = {str(m.get_attr("IFLA_OPERSTATE")) for m in ip.get_links(*indexes)}
        if states == {"UP"}:
            return
        if time.monotonic() >= deadline:
            raise TimeoutError(f"links not up after {UP_TIMEOUT:g}s (operstate {sorted(states)})")
        time.sleep(0.01)


def remove_recorded(state_root: Path) -> None:
    """Delete the namespace the record names (ours by construction), then the record."""
    record = _record(state_root)
    try:
        name = record.read_text().strip()
    except FileNotFoundError:
        return
    if _NAME.match(name):
        from pyroute2 import netns

        try:
            if name in netns.listnetns():
                netns.remove(name)
                log.info("lab netns removed name=%s", name)
        except OSError as exc:
            raise NetnsError("E_NETNS", f"removing lab namespace {name}: {exc}") from exc
    else:
        log.warning("lab netns record ignored (not a lab name) record=%s", record)
    with contextlib.suppress(FileNotFoundError):
        record.unlink()


def link_source(name: str) -> Pyroute2Links:
    return Pyroute2Links(name)
