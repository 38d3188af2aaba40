"""dranet v1.0.1 beside our driver on the session's upstream lab (issue 43: the peers).

The smoke CI runs so the peer's build and start stay honest: dranet starts on the lab's
kubelet and containerd (:class:`~dmn.lab.upstream.dranet.DranetPeer`), publishes a
ResourceSlice with its own links only while ours lists only ours, and both NRI plugins are
registered with containerd; two Pods with a claim on one dranet link each run with that
link inside (one under its own name, one renamed by the claim's config) and the claims show
dranet's ``networkData``, while a Pod of ours runs with its macvlan ``net1``; deleting the
dranet Pods gives the links back to the host, same MAC, and to dranet's slice; stopping
the peer undoes what it did to the host (the module's last test).
``test_upstream_zz_down.py`` then compares the whole host with before ``up``.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from dmn.api.cluster import Cluster
from dmn.api.cluster import resources as r
from dmn.api.identity import DRIVER as OUR_DRIVER
from dmn.lab.pod_demo import NAMESPACE
from dmn.lab.upstream import dranet
from dmn.lab.upstream.cluster import UpstreamLab
from dmn.lab.upstream.configs import NODE_NAME
from dmn.lab.upstream.demo import Kubectl
from dmn.lab.upstream.driver import LAB_LINKS
from dmn.lab.upstream.host_changes import HostRecord
from tests.e2e import lab_pods
from tests.e2e.conftest import Session
from tests.waiting import wait_for

pytestmark = [pytest.mark.e2e]
WAIT = 120.0


@pytest.fixture(scope="module")
def peer(upstream_session: Session) -> Iterator[dranet.DranetPeer]:
    started = dranet.DranetPeer(upstream_session.lab)
    started.start()
    try:
        yield started
    finally:
        if started.running():
            started.stop()


def _host_link(name: str) -> dict[str, Any] | None:
    from pyroute2 import IPRoute

    with IPRoute() as ip:
        found = ip.link_lookup(ifname=name)
        if not found:
            return None
        (link,) = ip.get_links(found[0])
        return {"mac": link.get_attr("IFLA_ADDRESS"), "kind": _kind(link)}


def _kind(link: Any) -> str:
    info = link.get_attr("IFLA_LINKINFO")
    return str(info.get_attr("IFLA_INFO_KIND")) if info else ""


def _slices(admin: Cluster, driver: str) -> list[dict[str, Any]]:
    return [
        s
        for s in admin.list(r.RESOURCE_SLICES).items
        if s["spec"]["driver"] == driver and s["spec"].get("nodeName") == NODE_NAME
    ]


def _nri_invocation_order(lab: UpstreamLab) -> list[str]:
    """The plugins containerd listed last in its "plugin invocation order" log lines."""
    text = (lab.layout.root / "logs" / "containerd.log").read_text(errors="replace")
    blocks = text.split("plugin invocation order")
    return re.findall(r'#\d+: \\?"([^"\\]+)\\?"', blocks[-1].split("validator plugins")[0])


def test_dranet_publishes_its_links_and_ours_only_ours(
    upstream_lab: UpstreamLab, admin: Cluster, peer: dranet.DranetPeer
) -> None:
    assert peer.published(admin) == peer.links
    theirs = _slices(admin, dranet.DRIVER)
    if_names = {
        d["attributes"]["dra.net/ifName"]["string"]
        for s in theirs
        for d in s["spec"].get("devices") or []
    }
    assert if_names == set(peer.links)
    assert [(_host_link(link) or {}).get("kind") for link in peer.links] == ["veth"] * len(
        peer.links
    )
    ours = json.dumps(_slices(admin, OUR_DRIVER))
    assert ours != "[]"
    assert not [link for link in peer.links if link in ours], ours
    assert not set(LAB_LINKS) & if_names
    order = wait_for(
        lambda: _nri_invocation_order(upstream_lab),
        timeout=WAIT,
        what="containerd's NRI plugin list",
    )
    assert "00-dra.net" in order and "10-dra-multi-network" in order, order
    assert order.index("00-dra.net") < order.index("10-dra-multi-network"), order


def _dranet_status(admin: Cluster, pod_name: str) -> list[dict[str, Any]]:
    (claim,) = lab_pods.claims_of(admin, lab_pods.uid(admin, pod_name))
    status = admin.get(r.RESOURCE_CLAIMS, claim["metadata"]["name"], NAMESPACE).get("status")
    return [d for d in (status or {}).get("devices") or [] if d.get("driver") == dranet.DRIVER]


def test_pods_get_dranet_links_beside_a_pod_of_ours_and_give_them_back(
    upstream_lab: UpstreamLab,
    admin: Cluster,
    peer: dranet.DranetPeer,
    classes: dict[str, str],
    pods: list[str],
) -> None:
    """``dranet-a`` gets ``dmnlab-dr0`` under its own name (dranet's native mode),
    ``dranet-b`` gets ``dmnlab-dr1`` renamed ``net1`` (its opaque config), while a Pod of
    ours gets a macvlan ``net1`` on the lab's link."""
    wanted = {"dranet-a": (peer.links[0], None), "dranet-b": (peer.links[1], "net1")}
    before = {name: _host_link(link) for name, (link, _) in wanted.items()}
    assert None not in before.values(), before
    for name, (link, if_name) in wanted.items():
        peer.add_claim_template(name, NAMESPACE, link=link, if_name=if_name)
        lab_pods.run(admin, pods, name, name)
    lab_pods.run(admin, pods, "dmn-beside-dranet", "shared-macvlan")
    lab_pods.wait_running(admin, *wanted, "dmn-beside-dranet")
    kubectl = Kubectl(upstream_lab.admin_kubeconfig)
    for name, (link, if_name) in wanted.items():
        inside = kubectl.exec(name, "ip", "-o", "link", "show", if_name or link)
        assert inside.returncode == 0, (inside.stderr, lab_pods.describe(admin, name))
        mac = before[name]["mac"]  # type: ignore[index]
        assert mac in inside.stdout, inside.stdout
        assert _host_link(link) is None
        status = wait_for(
            lambda name=name: _dranet_status(admin, name),
            timeout=WAIT,
            what=f"dranet's status.devices on {name}'s claim",
        )
        assert status[0]["networkData"] == {
            "interfaceName": if_name or link,
            "hardwareAddress": mac,
        }, status
    # dranet's inventory is the host's links: one inside a Pod leaves its slice meanwhile
    wait_for(lambda: not peer.published(admin), timeout=WAIT, what="links unpublished")
    ours = kubectl.exec("dmn-beside-dranet", "ip", "-o", "link", "show", "net1")
    assert ours.returncode == 0, (ours.stderr, lab_pods.describe(admin, "dmn-beside-dranet"))

    lab_pods.remove(admin, *wanted)
    for name in wanted:
        pods.remove(name)
    back = wait_for(
        lambda: all(_host_link(link) for link, _ in wanted.values()),
        timeout=WAIT,
        what="the links back in the host",
    )
    assert back
    assert {name: _host_link(link) for name, (link, _) in wanted.items()} == before
    wait_for(lambda: peer.published(admin) == peer.links, timeout=WAIT, what="republished")
    still = kubectl.exec("dmn-beside-dranet", "ip", "-o", "link", "show", "net1")
    assert still.returncode == 0, still.stderr
    for name in wanted:
        admin.delete(r.RESOURCE_CLAIM_TEMPLATES, name, NAMESPACE)


def test_stopping_dranet_undoes_its_host_changes(
    upstream_lab: UpstreamLab, admin: Cluster, peer: dranet.DranetPeer
) -> None:
    peer.stop()
    assert not peer.running()
    assert not _slices(admin, dranet.DRIVER)
    assert [link for link in peer.links if _host_link(link)] == []
    assert not os.path.lexists(dranet.DIAL_DIR)
    record = HostRecord.load(upstream_lab.host_file)
    assert not [n for n in record.links if n.startswith(dranet.LINK_PREFIX)], record
    assert not [p for p in record.paths if Path(p) in (dranet.DIAL_DIR, *dranet.DIAL_DIR.parents)]
