"""The node agent runs sriov-cni (representor) -> accelerated-bridge-cni on a netdevsim
switchdev representor in the lab kernel.

Everything is the real agent path (``tests/coordinator/lab_node.py``): the lab API server with
the generated CRDs and builtin plugins, the real controller compiling the topologies, the lab
allocator, the agent's NodePrepare and the lab NRI runtime's RunPodSandbox/Stop/Remove over
the NRI socket, the RocksDB journal and the real executors. A DeviceExposurePolicy exposes the
lab's links as sriov-cni kernel VFs with ``allowedHostBridges``/``allowedOvsBridges``; the
agent builds the ``HostRepresentor`` handle from the inventory, verifies it against the kernel
(switch ID and port name), and gives the bridge steps the grants of that policy and the OVSDB
endpoint of its ``--ovsdb-remote`` flag.

Stand-in: netdevsim's VFs have no netdev and no PCI function, so the VF endpoint is the lab's
veth ``lab0`` and the inventory's join of that endpoint to its representor (on real hardware:
the devlink port of the VF's PCI function) is made by the test (:func:`joined`); the
representor itself — its netdev, switch ID, port name, bridge membership, VLANs and OVS port —
is the kernel's. The bridge is a VLAN-filtering kernel bridge with an administrator-set MAC;
OVS is a test-owned ``ovsdb-server`` + ``ovs-vswitchd`` (kernel datapath) in the lab node's
namespace: the agent's ovs-cni run makes the representor its port, and the Linux bridge path
must leave OVSDB alone. A bridge named in config is only an alias: the real
bridge's name and an ungranted VLAN are refused at NodePrepare before anything changes.
Read back with ``bridge -j vlan``, the links' netlink facts and ``ovs-vsctl``. The whole agent
is also SIGKILLed on the Linux-bridge path (a coordinator child process, as
``tests/coordinator/test_crash.py`` does on the host) and recovers exactly.
"""

from __future__ import annotations

import copy
import subprocess
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import pytest
from pyroute2 import IPRoute

from dmn.agent.coordinator import Refusal
from dmn.agent.inventory import Inventory
from dmn.agent.inventory.facts import Representor
from dmn.agent.journal.records import AttachmentState
from dmn.api.cluster import resources as r
from dmn.api.identity import DRIVER
from dmn.host.inventory_sources import LinkSource
from dmn.host.rtnetlink.links import by_name
from dmn.lab.allocator.service import ClaimService
from dmn.lab.demo import wait_settled
from dmn.lab.node import NODE_NAME
from dmn.lab.node import inventory as lab_inventory
from dmn.lab.runtime.nri_runtime import LabPod
from tests.coordinator.lab_node import WAIT, LabNode, lab_node
from tests.coordinator.test_crash import killed
from tests.coordinator.test_end_to_end import snapshot
from tests.crash_fork_server import crash_fork_server, start_crash_fork_server
from tests.crash_points import full_matrix, rotated
from tests.kernel.scratch import netns_path, scratch_netns
from tests.kernel_lab import netdevsim
from tests.kernel_lab.bridge_vlans import vlans
from tests.kernel_lab.ovs_switch import BRIDGE as OVS_BRIDGE
from tests.kernel_lab.ovs_switch import OvsSwitch, ovs_switch

# one lab node (API server, controller, agent, netdevsim, OVS) for the module: its start is
# most of the first test's time under TCG
pytestmark = [pytest.mark.kernel_lab, pytest.mark.timeout(1800)]

ENDPOINT = "lab0"  # the lab link standing in for the VF's netdev
PORT = "pf0vf1"
BRIDGE, BRIDGE_MAC = "tenantbr0", "02:00:00:00:be:01"
API = "networking.dra-multi-network.schseba.github.io/v1alpha1"
HOST_BRIDGES = [
    {
        "name": BRIDGE,
        "alias": "tenant-br",
        "mac": BRIDGE_MAC,
        "vlans": [{"first": 100}, {"first": 200, "last": 300}],
    }
]
OVS_BRIDGES = [{"name": OVS_BRIDGE, "alias": "tenant-ovs", "vlans": [{"first": 100}]}]
BUDGET = [
    "linux/link-move/v1",
    "linux/link-configure/v1",
    "representor/configure/v1",
    "bridge/port-attach/v1",
    "bridge/port-vlan/v1",
    "ovs/port-attach/v1",
]


GRANTED = {"allowedHostBridges": HOST_BRIDGES, "allowedOvsBridges": OVS_BRIDGES}


def policy(**exposure: Any) -> dict[str, Any]:
    """The lab links as switchdev VFs for sriov-cni (above the lab's own kernel policy)."""
    return {
        "apiVersion": API,
        "kind": "DeviceExposurePolicy",
        "metadata": {"name": "lab-switchdev-vfs"},
        "spec": {
            "priority": 200,
            "action": "Expose",
            "selector": {"kind": "Link"},
            "exposure": {
                "persona": "kernel",
                "plugin": "sriov-cni",
                "mode": "kernel",
                "compatibility": [
                    {"scope": "Interface", "domain": "interface", "groups": ["kernel-handoff"]}
                ],
                "effectPermissions": BUDGET,
                **exposure,
            },
        },
    }


@dataclass
class Join:
    """The representor the scan joins to :data:`ENDPOINT` (None: none yet)."""

    representor: Representor | None = None


@dataclass
class Lab:
    node: LabNode
    dev: netdevsim.NetdevsimPf
    rep: str  # the representor's netdev name
    switch: OvsSwitch
    endpoint_id: str
    classes: dict[str, str] = field(default_factory=dict)

    @property
    def ns(self) -> str:
        return self.node.host_ns

    def port(self) -> dict[str, Any]:
        """What removal must restore about the representor: master, MTU, state, VLANs."""
        with IPRoute(netns=self.ns) as ipr:
            link = by_name(ipr, self.rep)
            assert link is not None
            state = {"master": link.master, "mtu": link.mtu, "up": link.up}
        return {**state, "vlans": vlans(self.ns, self.rep)}

    def world(self) -> dict[str, Any]:
        """Every link of the lab node (alias, MTU, MAC, state, kind, addresses), the
        representor's port state and the whole OVSDB/datapath state."""
        return {"links": snapshot(self.ns), "port": self.port(), "ovs": self.switch.state()}

    def bridge_index(self) -> int:
        with IPRoute(netns=self.ns) as ipr:
            return int(ipr.link_lookup(ifname=BRIDGE)[0])


def joined(join: Join) -> Any:
    def inventory(sysfs: Path, links: LinkSource | None) -> Inventory:
        inv = lab_inventory(sysfs, links)
        if join.representor is None:
            return inv
        items = {
            key: replace(item, representor=join.representor)
            if item.netdevs and item.netdevs[0].ifname == ENDPOINT
            else item
            for key, item in inv.items.items()
        }
        return replace(inv, items=items)

    return inventory


def topology(name: str, step: dict[str, Any], endpoint_id: str) -> dict[str, Any]:
    selector = f'device.attributes["{DRIVER}"].inventoryID == "{endpoint_id}"'
    return {
        "apiVersion": API,
        "kind": "NetworkTopology",
        "metadata": {"name": name},
        "spec": {
            "effectBudget": {"allow": BUDGET},
            "steps": [
                {
                    "id": "vf",
                    "kind": "Allocation",
                    "pluginRef": {"name": "sriov-cni"},
                    "config": {
                        "mode": "kernel",
                        "ifName": "net1",
                        "mtu": 1500,
                        "up": True,
                        "representor": True,
                    },
                    "hardwareSelectors": [{"cel": {"expression": selector}}],
                },
                {
                    "id": "port",
                    "kind": "Operation",
                    "inputs": {"representor": {"from": "vf.representor"}},
                    **step,
                },
            ],
        },
    }


BRIDGE_STEP = {
    "pluginRef": {"name": "accelerated-bridge-cni"},
    "config": {"bridge": "tenant-br", "vlan": 100, "trunk": [200, 300], "mtu": 1450},
}
OVS_STEP = {
    "pluginRef": {"name": "ovs-cni"},
    "config": {"bridge": "tenant-ovs", "vlan": 100, "mtu": 1450},
}


def device_class(lab: Lab, name: str, step: dict[str, Any]) -> str:
    lab.node.cluster.apply(topology(name, step, lab.endpoint_id))
    (topo,) = wait_settled(lab.node.cluster, [name], WAIT)
    assert topo.ready == "True", topo
    (cls,) = topo.device_classes
    return str(cls)


def republish(node: LabNode) -> None:
    pub = node.lab.publication
    assert pub is not None
    pub.inventory = pub.scan()
    pub.publish()


@pytest.fixture(scope="module")
def lab() -> Iterator[Lab]:
    start_crash_fork_server(("coordinator",))  # its imports run beside this setup
    # the guest boots with its loopback down and the lab API server listens on 127.0.0.1
    # (only ever inside the disposable VM: the marker runs these tests nowhere else)
    with IPRoute() as ipr:
        ipr.link("set", index=ipr.link_lookup(ifname="lo")[0], state="up")
    join = Join()
    rundir = Path(tempfile.mkdtemp(prefix="ovs", dir="/tmp"))
    with lab_node(inventory=joined(join), ovsdb_remote=f"unix:{rundir / 'db.sock'}") as node:
        ns = node.host_ns
        with (
            netdevsim.netdevsim_pf(ns, vfs=2) as dev,
            ovs_switch(ns, rundir=rundir) as switch,
        ):
            netdevsim.switchdev(dev)
            reps = netdevsim.representors(dev)
            rep, switch_id = reps[PORT]
            subprocess.run(
                ["ip", "-n", ns, "link", "add", BRIDGE, "type", "bridge", "vlan_filtering", "1"],
                check=True,
            )
            with IPRoute(netns=ns) as ipr:
                br = ipr.link_lookup(ifname=BRIDGE)[0]
                ipr.link("set", index=br, address=BRIDGE_MAC, mtu=1450, state="up")
                for ifname, _ in reps.values():
                    ipr.link("set", index=ipr.link_lookup(ifname=ifname)[0], mtu=1400, state="up")
            join.representor = Representor(rep, 0, 0, 1, dev.devlink, "devlink", switch_id)
            node.cluster.apply(policy(**GRANTED))
            republish(node)
            pub = node.lab.publication
            assert pub is not None
            (endpoint_id,) = [
                k
                for k, i in pub.inventory.items.items()
                if i.netdevs and i.netdevs[0].ifname == ENDPOINT
            ]
            yield Lab(node, dev, rep, switch, endpoint_id)


@dataclass
class Pod:
    claim: dict[str, Any]
    pod: dict[str, Any]

    @property
    def uid(self) -> str:
        return str(self.claim["metadata"]["uid"])

    @property
    def pod_uid(self) -> str:
        return str(self.pod["metadata"]["uid"])


def allocated(lab: Lab, name: str, cls: str) -> Pod:
    claim = lab.node.claim(f"{name}-claim", device_class=cls)
    pod = lab.node.pod(f"{name}-pod", f"{name}-claim")
    (claim,) = ClaimService(lab.node.cluster, NODE_NAME).allocate([claim], pod=pod)
    (result,) = claim["status"]["allocation"]["devices"]["results"]
    persona = lab.node.services.devices.personas().by_name()[result["device"]]
    assert persona.inventory_id == lab.endpoint_id, persona
    return Pod(claim, pod)


def release(lab: Lab, p: Pod) -> None:
    """Free the endpoint for the next test: the Pod and its claim go from the API server."""
    lab.node.cluster.delete(r.PODS, p.pod["metadata"]["name"], "default")
    lab.node.cluster.delete(r.RESOURCE_CLAIMS, p.claim["metadata"]["name"], "default")


def run_and_remove(lab: Lab, p: Pod, check: Any) -> None:
    """NodePrepare, RunPodSandbox, ``check``, Stop/Remove, NodeUnprepare; the lab node is
    exactly as before (links, the representor's port and OVSDB)."""
    baseline = lab.world()
    meta = p.claim["metadata"]
    lab.node.services.preparation.prepare("default", meta["name"], meta["uid"])
    assert lab.port() == {**baseline["port"], "up": False}  # kept down until attached
    with scratch_netns("dmbrs") as sandbox:
        name = p.pod["metadata"]["name"]
        sb = LabPod(f"sb-{name}", p.pod_uid, name, "default", netns_path(sandbox))
        lab.node.runtime.run_pod_sandbox(sb)
        with IPRoute(netns=sandbox) as ipr:
            net1 = by_name(ipr, "net1")
            assert net1 is not None and net1.kind == "veth"  # the VF endpoint stand-in
        check()
        lab.node.runtime.stop_pod_sandbox(sb.id)
        lab.node.runtime.remove_pod_sandbox(sb.id)
    lab.node.services.preparation.unprepare(meta["uid"])
    assert lab.world() == baseline


def test_agent_attaches_the_representor_to_the_approved_bridge_with_its_vlans(lab: Lab) -> None:
    cls = device_class(lab, "sw-bridge", BRIDGE_STEP)
    p = allocated(lab, "sw-bridge", cls)

    def attached() -> None:
        port = lab.port()
        assert port["master"] == lab.bridge_index()
        assert port["vlans"] == [(100, True, True), (200, False, False), (300, False, False)]
        assert port["up"] is True and port["mtu"] == 1450
        with IPRoute(netns=lab.ns) as ipr:
            br = by_name(ipr, BRIDGE)
            assert br is not None and br.mac == BRIDGE_MAC and br.mtu == 1450  # untouched

    run_and_remove(lab, p, attached)
    release(lab, p)


def test_agent_attaches_the_representor_to_the_approved_ovs_bridge_with_its_tag(lab: Lab) -> None:
    """ovs-cni through the whole agent: the representor becomes a Port of the approved OVS
    bridge with the claim's access tag, owned in OVSDB by the attachment's effect, in the
    kernel datapath; removal leaves every OVSDB row, the datapath and the port as before."""
    cls = device_class(lab, "sw-ovs", OVS_STEP)
    p = allocated(lab, "sw-ovs", cls)

    def attached() -> None:
        state = lab.switch.state()
        assert state["bridges"][OVS_BRIDGE][1] == [lab.rep]
        _, tag, trunks, external_ids = state["ports"][lab.rep]
        assert tag == 100 and trunks == [], (tag, trunks)
        assert str(external_ids.get("dmn-owner", "")).startswith("dmn:"), external_ids
        assert lab.rep in state["dp"]
        port = lab.port()
        assert port["up"] is True and port["mtu"] == 1450 and port["vlans"] == []

    run_and_remove(lab, p, attached)
    release(lab, p)


def _refused(lab: Lab, p: Pod) -> Refusal:
    before = lab.world()
    meta = p.claim["metadata"]
    with pytest.raises(Refusal) as err:
        lab.node.services.preparation.prepare("default", meta["name"], meta["uid"])
    assert lab.world() == before  # nothing changed
    assert lab.node.services.journal.preparations(meta["uid"]) == []
    return err.value


@pytest.mark.adversarial
def test_a_bridge_named_in_config_is_only_ever_an_alias(lab: Lab) -> None:
    """The workload names the real bridge (``tenantbr0``, which exists): it is looked up as
    an alias of the policy's grants, never as a netdev, and refused; a VLAN outside the
    grant is refused the same way; a name that is no DNS label never compiles."""
    for name, config, code, field_name in (
        ("sw-realname", {**BRIDGE_STEP["config"], "bridge": BRIDGE}, "E_BRIDGE_GRANT", "bridge"),
        ("sw-vlan", {**BRIDGE_STEP["config"], "trunk": [200, 999]}, "E_VLAN_DENIED", "trunk"),
    ):
        cls = device_class(lab, name, {**BRIDGE_STEP, "config": config})
        p = allocated(lab, name, cls)
        refusal = _refused(lab, p)
        assert refusal.code == code, refusal
        assert refusal.field.endswith(f"steps[port].config.{field_name}"), refusal
        release(lab, p)
    bad = topology("sw-badname", {**BRIDGE_STEP, "config": {**BRIDGE_STEP["config"]}}, "x")
    bad["spec"]["steps"][1]["config"]["bridge"] = "../tenant_br0"
    lab.node.cluster.apply(copy.deepcopy(bad))
    (topo,) = wait_settled(lab.node.cluster, ["sw-badname"], WAIT)
    assert topo.ready == "False", topo


# The whole agent (a coordinator child of the crash fork server) killed on the Linux-bridge
# path: in the bridge program's run (the representor attached, its VLANs not yet), after
# Ready, after the bridge program's undo on removal (detached, the VF still in the sandbox)
# and at the VF's move back. Every boundary of these opcodes is killed in their own program
# matrices (tests/crash_points.py); these show that the agent's recovery — grants and bridge
# re-resolved from the journal alone, the representor found by its recorded identity — and
# the runtime's retries finish each.
AGENT_KILLS = [
    ("stop", "after-undo:attach"),
    ("run", "after-apply:attach"),
    ("run", "coordinator:after-ready"),
    ("stop", "after-undoing:move"),
]
# By default only the two inside the bridge program (``:attach``): a kill after Ready is the
# coordinator's own boundary, killed with the whole agent on the host
# (tests/coordinator/test_crash.py), and one at the VF's move back is link-move's, each of
# whose boundaries the host-kernel program matrix kills (tests/kernel/test_program_crashes.py),
# with the representor already detached. The four kills were a third of the kernel lab's CI time:
# each costs a child, a recovery and a world read under TCG (24-36 s apiece with the machine
# otherwise idle, 72-239 s beside the host's tests). Of those two, each run takes its slice
# (tests/crash_points.py: one of them, the other on the next commit); ``DMN_CRASH_MATRIX=owned``
# kills at both, ``=full`` at all four.
DEFAULT_AGENT_KILLS = [k for k in AGENT_KILLS if k[1].endswith(":attach")]


@pytest.mark.crash
@pytest.mark.adversarial
@pytest.mark.parametrize(
    ("phase", "crash_at"),
    AGENT_KILLS if full_matrix() else rotated(DEFAULT_AGENT_KILLS, __name__),
)
def test_the_agent_killed_on_the_bridge_path_is_recovered_exactly(
    lab: Lab, phase: str, crash_at: str
) -> None:
    cls = lab.classes.get("bridge") or device_class(lab, "sw-crash", BRIDGE_STEP)
    lab.classes["bridge"] = cls
    name = f"sw-crash-{phase}-{crash_at.replace(':', '-')}"
    p = allocated(lab, name, cls)
    baseline = lab.world()
    meta = p.claim["metadata"]
    lab.node.services.preparation.prepare("default", meta["name"], meta["uid"])
    server = crash_fork_server(("coordinator",))
    with scratch_netns("dmbrk") as sandbox:
        sb = LabPod(f"sb-{name}", p.pod_uid, p.pod["metadata"]["name"], "default",
                    netns_path(sandbox))  # fmt: skip
        if phase == "run":
            call = {"action": "run_pod", "namespace": "default",
                    "pod_name": sb.name, "pod_uid": p.pod_uid, "sandbox": sb.id,
                    "netns": netns_path(sandbox)}  # fmt: skip
            assert killed(lab.node, call, crash_at, server)[-1] == crash_at
            lab.node.runtime.run_pod_sandbox(sb)  # the runtime's retry
        else:
            lab.node.runtime.run_pod_sandbox(sb)
        port = lab.port()
        assert port["master"] == lab.bridge_index(), port
        assert port["vlans"] == [(100, True, True), (200, False, False), (300, False, False)]
        assert port["up"] is True and port["mtu"] == 1450
        if phase == "stop":
            call = {"action": "stop_pod", "pod_uid": p.pod_uid, "sandbox": sb.id}
            assert killed(lab.node, call, crash_at, server)[-1] == crash_at
            # recovery finished the undo: nothing of the Pod is left on the bridge or in the
            # sandbox, and the representor is down again (as NodePrepare left it)
            assert lab.port() == {**baseline["port"], "up": False}
        lab.node.runtime.stop_pod_sandbox(sb.id)
        lab.node.runtime.remove_pod_sandbox(sb.id)
        att = lab.node.services.attachments.attachment(p.pod_uid, sb.id)
        assert att is not None and att.state is AttachmentState.REMOVED
    lab.node.services.preparation.unprepare(meta["uid"])
    assert lab.node.services.pins.list() == []
    assert lab.world() == baseline
    release(lab, p)
