"""Device health from the running agent to a kubelet-like client over the real DRA socket.

The lab node's links are a real veth pair in a namespace the lab creates; the lab's
publisher follows that namespace's rtnetlink events, the agent judges every published
device against the rescanned inventory and streams the list on DRAResourceHealth v1 and
v1alpha1 (both versions kubelet v1.37 may call).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from typing import Any

import grpc
import pytest

from dmn.agent.protos import (
    dra_health_v1_pb2,
    dra_health_v1_pb2_grpc,
    dra_health_v1alpha1_pb2,
    dra_health_v1alpha1_pb2_grpc,
)
from tests.coordinator.lab_node import LabNode, lab_node

WAIT = 60.0


@pytest.fixture
def node() -> Iterator[LabNode]:
    with lab_node(follow_links=True) as n:
        yield n


def _set_link(netns: str, name: str, state: str) -> None:
    from pyroute2 import IPRoute

    with IPRoute(netns=netns) as ip:
        ip.link("set", index=ip.link_lookup(ifname=name)[0], state=state)


def _until(stream: Iterator[Any], check: Callable[[dict[str, Any]], bool]) -> dict[str, Any]:
    """Read reports until one satisfies ``check``; returns it as device name → entry."""
    deadline = time.monotonic() + WAIT
    last: dict[str, Any] = {}
    while time.monotonic() < deadline:
        last = {d.device.device_name: d for d in next(stream).devices}
        if check(last):
            return last
    raise AssertionError(f"no such report within {WAIT}s; last: {last}")


def _on(link: str) -> Callable[[Any], bool]:
    return lambda d: d.message.split()[1] == link


def test_health_follows_a_link_going_down_and_up(node: LabNode) -> None:
    with grpc.insecure_channel(f"unix://{node.kubelet.dra_socket}") as ch:
        v1 = dra_health_v1_pb2_grpc.DRAResourceHealthStub(ch)
        alpha = dra_health_v1alpha1_pb2_grpc.DRAResourceHealthStub(ch)
        stream = v1.NodeWatchResources(dra_health_v1_pb2.NodeWatchResourcesRequest(), timeout=WAIT)
        old = alpha.NodeWatchResources(
            dra_health_v1alpha1_pb2.NodeWatchResourcesRequest(), timeout=WAIT
        )
        H = dra_health_v1_pb2
        healthy = _until(
            stream, lambda r: len(r) == 6 and all(d.health == H.HEALTHY for d in r.values())
        )
        assert {d.device.pool_name for d in healthy.values()} == {"lab-node"}
        assert {d.health_check_timeout_seconds for d in healthy.values()} == {30}
        lab0 = {name for name, d in healthy.items() if _on("lab0")(d)}
        assert len(lab0) == 3  # kernel, macvlan and ipvlan personas of the link

        _set_link(node.host_ns, "lab0", "down")
        down = _until(stream, lambda r: all(r[n].health == H.UNHEALTHY for n in lab0))
        assert {down[n].message for n in lab0} == {"link lab0 is not usable (operstate DOWN)"}
        # the same list on v1alpha1 (same message shape, same numbers)
        old_down = _until(
            old, lambda r: all(r[n].health == dra_health_v1alpha1_pb2.UNHEALTHY for n in lab0)
        )
        assert old_down.keys() == down.keys()

        _set_link(node.host_ns, "lab0", "up")
        _until(stream, lambda r: all(r[n].health == H.HEALTHY for n in lab0))
        stream.cancel()
        old.cancel()
