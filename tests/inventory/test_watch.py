"""The change monitor wakes a rescan on real rtnetlink events in a private namespace."""

from __future__ import annotations

import queue
import uuid
from collections.abc import Iterator

import pytest
from pyroute2 import IPRoute, netns

from dmn.host.kernel_events import ChangeMonitor

pytestmark = pytest.mark.netns


@pytest.fixture
def ns() -> Iterator[str]:
    name = f"h5watch-{uuid.uuid4().hex[:8]}"
    netns.create(name)
    try:
        yield name
    finally:
        netns.remove(name)


def test_link_event_triggers_one_debounced_rescan(ns: str) -> None:
    """A burst (a veth pair added, one end set up) is one rescan: the next wake after it (a
    fence, :meth:`ChangeMonitor.notify`) is the next rescan, with only its own reason. The
    debounce outlasts the kernel's linkwatch, which reports an operstate change up to a
    second after the netlink call."""
    seen: queue.Queue[str] = queue.Queue()
    with (
        ChangeMonitor(seen.put, netns=ns, udev=False, debounce=3.0, resync=600) as monitor,
        IPRoute(netns=ns) as ip,
    ):
        ip.link("add", ifname="w0", kind="veth", peer="w1")
        w0 = ip.link_lookup(ifname="w0")[0]
        ip.link("set", index=w0, state="up")
        burst = seen.get(timeout=60)  # a wait, not a timing assert
        monitor.notify("fence")
        after = seen.get(timeout=60)
    assert "rtnl:RTM_NEWLINK" in burst
    assert after == "fence", f"the burst woke a second rescan: {after}"


def test_periodic_resync_and_failing_callback(ns: str) -> None:
    calls: queue.Queue[str] = queue.Queue()

    def flaky(reason: str) -> None:
        calls.put(reason)
        raise RuntimeError("rescan failed")

    with ChangeMonitor(flaky, netns=ns, udev=False, resync=0.2):
        first = calls.get(timeout=60)
        second = calls.get(timeout=60)  # still alive after the callback raised
    assert first == second == "resync"
