"""Differential test against the reference macvlan CNI plugin (Debian containernetworking-plugins).

The same parent, mode and MTU: our durable macvlan attach (macvlan-cni through the runner)
into one sandbox, the reference plugin's ADD into another. The two children must agree on
kind, macvlan mode, MTU and lower device (the host parent, seen across namespaces).
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from benchmarks.attach_vs_cni import CNI_DIR, macvlan_cni_config, run_cni
from dmn.host.rtnetlink.links import LinkState
from dmn.vocabulary.terms import Access
from tests.kernel.node import Node, bind, call
from tests.kernel.scratch import netns_path
from tests.kernel.world import World, host_handle, link, world

pytestmark = pytest.mark.netns

CONFIG = {"mode": "bridge", "ifName": "net1", "mtu": 1400, "up": True}


@pytest.fixture
def node_world(tmp_path: Path) -> Iterator[tuple[Node, World]]:
    if not (CNI_DIR / "macvlan").is_file():
        pytest.skip("containernetworking-plugins is not installed (/usr/lib/cni/macvlan)")
    with world() as w:
        node = Node(tmp_path / "state", w.host)
        try:
            yield node, w
        finally:
            node.release_pins()


def _facts(w: World, ns: str, host_fd: int) -> tuple[str, object, int, int, bool]:
    ipr = w.ipr(ns)
    child: LinkState = link(ipr, "net1")
    nsid = ipr.get_netnsid(fd=host_fd)["nsid"]
    lower_in_host = child.link_netnsid == nsid
    return child.kind, child.info.get("IFLA_MACVLAN_MODE"), child.mtu, child.lower, lower_in_host


def test_our_macvlan_child_matches_the_reference_plugin(node_world: tuple[Node, World]) -> None:
    node, w = node_world
    ours_ns, cni_ns = w.sandbox(), w.sandbox()
    host = w.ipr(w.host)
    parent, _ = w.veth(w.host)
    baseline = w.snapshot(w.host)
    host_fd = os.open(netns_path(w.host), os.O_RDONLY)
    try:
        handle = host_handle(host, parent, Access.CREATE_CHILD, hid="parent-1")
        prep = call(CONFIG, "d-prep", allocation={"parent": (handle,)})
        prepared = node.run("d-prep", bind("macvlan-cni", "prepare", prep))
        ref = node.pin("diff", ours_ns)
        conn = call(CONFIG, "d-conn", prepared=dict(prepared.exports), sandbox=ref)
        node.run("d-conn", bind("macvlan-cni", "connect", conn), sandbox=ref)

        cni_config = {**macvlan_cni_config(parent), "mtu": CONFIG["mtu"]}
        run_cni("macvlan", "ADD", cni_config, netns_path(cni_ns), "diff-1", host_fd)
        try:
            ours = _facts(w, ours_ns, host_fd)
            theirs = _facts(w, cni_ns, host_fd)
            assert ours == theirs
            assert ours[0] == "macvlan" and ours[2] == 1400 and ours[4] is True
            assert ours[3] == link(host, parent).index
        finally:
            run_cni("macvlan", "DEL", cni_config, netns_path(cni_ns), "diff-1", host_fd)
        node.cleanup("d-conn")
        node.cleanup("d-prep")
    finally:
        os.close(host_fd)
    assert w.snapshot(w.host) == baseline
