"""``rdma/device-access`` and ``rdma/netns-assign`` on a real RDMA device: soft-RoCE (rdma_rxe),
and the node agent's RDMA path on it.

Substrate: the lab kernel's ``rdma_rxe`` over a veth pair in the VM's root namespace, created
by the test with iproute2's ``rdma link add`` (never by an executor). The executors speak
NETLINK_RDMA themselves (:mod:`dmn.host.rdma`). ``device-access`` runs in the
kernel's default shared netns mode, where the sandbox's namespace sees the device; the nodes it
grants are the ones the kernel names for this device, and a container-like process
(:mod:`tests.kernel_lab.vfio_probe` with ``-``) opens exactly those. ``netns-assign`` is
refused in shared mode; in exclusive mode the kernel refuses to move an rxe device
(EOPNOTSUPP: rxe cannot disassociate user contexts) — the move itself has no substrate here.

The agent's path (``rxe_node``: a veth pair and an rxe device over one end, all inside a scratch
host namespace): the inventory joins the rxe device to its link from the VM's real sysfs and
RDMA netlink; the coordinator's ``root_allocation`` verifies it again and hands it to the
prepare program, whose journaled exports connect receives as ``call.prepared.rdma``; NRI
CreateContainer then adds exactly its nodes. The builtin host-cni/sriov-cni move the netdev
first, and the kernel destroys an rxe device whose netdev leaves its namespace
(``test_rxe_goes_with_its_netdev``), so the end-to-end run uses an administrator's
verbs-only plugin (``plugins/rdma-verbs``: the link stays, the device's nodes are granted).
"""

from __future__ import annotations

import errno
import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from dmn.agent.coordinator.adapters import NriAdapter
from dmn.agent.coordinator.config import NodeConfig
from dmn.agent.coordinator.handles import InventoryDevices, RdmaFacts, root_allocation
from dmn.agent.coordinator.node_lock import NodeLock
from dmn.agent.coordinator.operations import NodeOperations, device_environment
from dmn.agent.coordinator.sandbox_attachment import SandboxAttachmentService
from dmn.agent.coordinator.verify import DriverResult, Refusal, VerifiedRoot
from dmn.agent.inventory import (
    Inventory,
    NetlinkRdma,
    Pyroute2Devlink,
    Pyroute2Links,
    ScanConfig,
    scan,
)
from dmn.agent.journal.keys import attachment_id
from dmn.agent.journal.records import AttachmentIdentity, AttachmentRecord, AttachmentState
from dmn.agent.journal.store import JournalStore
from dmn.agent.nri.handler import Container, PodSandbox
from dmn.agent.personas.build import build_personas
from dmn.agent.personas.model import Persona
from dmn.engine.binder import Call, bind_program
from dmn.engine.bound import BoundProgram
from dmn.engine.runner import Runner
from dmn.host.netns import NamespaceRef
from dmn.host.pins import NamespacePins
from dmn.host.rdma import RdmaError, open_in
from dmn.interpreter.loader import Plugin, load_builtin_plugins, load_plugin_dir
from dmn.opcodes.device_environment import DeviceEnvironment
from dmn.opcodes.executor import EffectContext, ExecutorError, RecoveryObservation
from dmn.vocabulary.handles import Handle, Provenance, Scope
from dmn.vocabulary.terms import Access, HandleType, ScopeKind
from tests.crash_fork_server import crash_fork_server
from tests.crash_points import crash_points, effect_kinds
from tests.fixtures.policies import policy
from tests.kernel.node import Node, unprivileged_server
from tests.kernel.scratch import netns_path, unique
from tests.kernel.world import EXECUTORS, World, world
from tests.kernel_lab.image import REPO_ROOT
from tests.waiting import wait_for

pytestmark = pytest.mark.kernel_lab

ACCESS, ASSIGN = "rdma/device-access/v1", "rdma/netns-assign/v1"
IB = Path("/sys/class/infiniband")
VERBS_PLUGIN = Path(__file__).parent / "plugins" / "rdma-verbs" / "v1"
VERBS_CONFIG = {"rdmaNetns": "shared"}


def _read(path: Path) -> str:
    return path.read_text().strip()


@pytest.fixture(scope="module")
def rxe() -> Iterator[dict[str, str]]:
    for module in ("rdma_rxe", "ib_uverbs", "rdma_ucm"):
        subprocess.run(["modprobe", module], check=True, capture_output=True)
    a, b, name = unique("rxa"), unique("rxb"), unique("rxe")
    subprocess.run(["ip", "link", "add", a, "type", "veth", "peer", "name", b], check=True)
    try:
        subprocess.run(["ip", "link", "set", a, "up"], check=True)
        subprocess.run(["rdma", "link", "add", name, "type", "rxe", "netdev", a], check=True)
        wait_for(lambda: (IB / name).is_dir(), timeout=30)
        yield {"name": name, "guid": _read(IB / name / "node_guid"), "netdev": a}
        subprocess.run(["rdma", "link", "delete", name], check=False)
    finally:
        subprocess.run(["ip", "link", "del", a], check=False)


def rdma_handle(dev: dict[str, str], scope: Any, **observed: Any) -> Handle:
    observations: dict[str, Any] = {"rdmaDevice": dev["name"], "nodeGuid": dev["guid"]}
    observations.update(observed)
    return Handle(
        id=f"rdma-{dev['name']}",
        type=HandleType.RDMA_DEVICE,
        inventory_id=f"rdma/{dev['guid']}",
        scope=scope,
        accesses=frozenset({Access.READ, Access.DEVICE_ACCESS, Access.EXCLUSIVE_CONFIGURE}),
        provenance=Provenance(claim_uid="claim-rdma", request="rdma", device=dev["name"]),
        observations=observations,
    )


def env(w: World, tmp: Path, sandbox: str, others: tuple[str, ...] = ()) -> DeviceEnvironment:
    refs = tuple(NamespaceRef.at(netns_path(n)) for n in others)
    e = DeviceEnvironment(
        host=NamespaceRef.at("/proc/1/ns/net"),
        sandbox=NamespaceRef.at(netns_path(sandbox)),
        pins=lambda: refs,
        cdi_root=tmp / "cdi",
    )
    w.stack.callback(e.close)
    return e


def refused(code: str, call_: Any, *args: Any) -> None:
    with pytest.raises(ExecutorError) as err:
        call_(*args)
    assert err.value.code == code, err.value


def kernel_nodes(name: str) -> str:
    """The uverbs node of ``name`` and the rdma_cm node, as sysfs lists them."""
    verbs = next(
        p
        for p in Path("/sys/class/infiniband_verbs").iterdir()
        if (p / "ibdev").is_file() and _read(p / "ibdev") == name
    )
    cm = _read(Path("/sys/class/misc/rdma_cm/dev"))
    return f"/dev/infiniband/{verbs.name} {_read(verbs / 'dev')},/dev/infiniband/rdma_cm {cm}"


def test_device_access_grants_exactly_this_devices_nodes(
    rxe: dict[str, str], tmp_path: Path
) -> None:
    with world() as w:
        sandbox = w.sandbox()
        e = env(w, tmp_path, sandbox)
        scope = e.scope_of(e.require_sandbox())
        ex = EXECUTORS[ACCESS]
        params = {"nodes": ["uverbs", "rdma_cm"]}
        c = EffectContext("op-rd", "rdma", {"rdma": (rdma_handle(rxe, scope),)}, params, e)
        before = ex.capture(c)
        assert ex.recover(c, before) is RecoveryObservation.NOT_APPLIED
        ex.apply(c, before)
        observed = ex.observe(c, before)
        assert observed.postconditions_ok, observed.detail
        granted = observed.outputs["rdma"][0]
        assert granted.observations["deviceNodes"] == kernel_nodes(rxe["name"])
        assert granted.scope == scope
        assert ex.recover(c, before) is RecoveryObservation.APPLIED
        spec = next((tmp_path / "cdi").iterdir())
        out = tmp_path / "probe.json"
        argv = ["ip", "netns", "exec", sandbox, "unshare", "--mount", "--propagation", "private"]
        argv += [sys.executable, "-m", "tests.kernel_lab.vfio_probe", str(spec), "-", str(out)]
        subprocess.run(argv, cwd=REPO_ROOT, check=True, capture_output=True, timeout=120)
        result = json.loads(out.read_text())
        wanted = sorted(n.split(" ")[0] for n in kernel_nodes(rxe["name"]).split(","))
        assert sorted(result["opened"]) == wanted and result["dev"] == wanted
        ex.undo(c, before, observed.outputs)
        assert list((tmp_path / "cdi").iterdir()) == []


@pytest.mark.adversarial
def test_device_access_refuses_other_devices_and_other_sandboxes(
    rxe: dict[str, str], tmp_path: Path
) -> None:
    with world() as w:
        sandbox, other = w.sandbox(), w.sandbox()
        e = env(w, tmp_path, sandbox, others=(other,))
        ex = EXECUTORS[ACCESS]
        scope = e.scope_of(e.require_sandbox())
        params = {"nodes": ["uverbs"]}
        look_alike = rdma_handle(rxe, scope, nodeGuid="0000:0000:0000:0001")
        c = EffectContext("o", "r", {"rdma": (look_alike,)}, params, e)
        refused("E_DEVICE_IDENTITY", ex.capture, c)
        gone = rdma_handle(rxe, scope, rdmaDevice="nosuchrxe0")
        refused("E_DEVICE_GONE", ex.capture, EffectContext("o", "r", {"rdma": (gone,)}, params, e))
        foreign = rdma_handle(rxe, e.scope_of(NamespaceRef.at(netns_path(other))))
        c = EffectContext("o", "r", {"rdma": (foreign,)}, params, e)
        refused("E_NOT_SAME_SANDBOX", ex.capture, c)
        assert not (tmp_path / "cdi").exists()


def test_netns_assign_needs_exclusive_mode_and_the_kernel_refuses_moving_rxe(
    rxe: dict[str, str], tmp_path: Path
) -> None:
    init = os.open("/proc/1/ns/net", os.O_RDONLY)
    try:
        with open_in(init) as nl:
            assert nl.netns_shared() is True  # the kernel's default
        with world() as w:
            sandbox = w.sandbox()
            e = env(w, tmp_path, sandbox)
            ex = EXECUTORS[ASSIGN]
            host_scope = e.scope_of(e.host)
            c = EffectContext("op-na", "netns", {"rdma": (rdma_handle(rxe, host_scope),)}, {}, e)
            refused("E_RDMA_NETNS_SHARED", ex.capture, c)
        # exclusive mode can only be entered while no other namespace exists (EBUSY
        # otherwise); the scratch namespaces above are gone once their last user is
        deadline = time.monotonic() + 60
        while True:
            try:
                with open_in(init) as nl:
                    nl.set_netns_shared(False)
                break
            except RdmaError as exc:
                if exc.errno != errno.EBUSY or time.monotonic() > deadline:
                    raise
                time.sleep(1)
        try:
            with world() as w:
                sandbox = w.sandbox()
                e = env(w, tmp_path, sandbox)
                ex = EXECUTORS[ASSIGN]
                handle = rdma_handle(rxe, e.scope_of(e.host))
                c = EffectContext("op-na", "netns", {"rdma": (handle,)}, {}, e)
                before = ex.capture(c)
                assert ex.recover(c, before) is RecoveryObservation.NOT_APPLIED
                refused("E_RDMA_NETNS_UNSUPPORTED", ex.apply, c, before)
                assert ex.recover(c, before) is RecoveryObservation.NOT_APPLIED
                ex.undo(c, before, {})  # nothing moved: nothing to do
                with open_in(init) as nl:
                    assert rxe["name"] in [d.name for d in nl.devices()]
        finally:
            deadline = time.monotonic() + 60
            while True:
                try:
                    with open_in(init) as nl:
                        nl.set_netns_shared(True)
                    break
                except RdmaError as exc:
                    if exc.errno != errno.EBUSY or time.monotonic() > deadline:
                        raise
                    time.sleep(1)
    finally:
        os.close(init)


# ------------------------------------------------------------------ the agent's RDMA path


@pytest.fixture
def rxe_node() -> Iterator[dict[str, Any]]:
    """A scratch host namespace holding a veth pair and an rxe device over its first end
    (created by the test with iproute2, never by the agent), torn down with the namespace."""
    for module in ("rdma_rxe", "ib_uverbs", "rdma_ucm"):
        subprocess.run(["modprobe", module], check=True, capture_output=True)
    with world() as w:
        a, b = w.veth(w.host)
        name = unique("rxn")
        host_exec = ["ip", "netns", "exec", w.host]
        subprocess.run([*host_exec, "rdma", "link", "add", name, "type", "rxe", "netdev", a],
                       check=True, capture_output=True)  # fmt: skip
        try:
            wait_for(lambda: (IB / name).is_dir(), timeout=30)
            ifindex = w.ipr(w.host).link_lookup(ifname=a)[0]
            yield {
                "world": w, "host": w.host, "link": a, "peer": b, "ifindex": ifindex,
                "name": name, "guid": _read(IB / name / "node_guid"),
            }  # fmt: skip
        finally:
            subprocess.run([*host_exec, "rdma", "link", "delete", name], check=False)


def node_inventory(node: dict[str, Any]) -> Inventory:
    """The agent's scan of the VM: the real /sys, rtnetlink and RDMA netlink of the host."""
    return scan(
        ScanConfig(
            sysfs_root=Path("/sys"),
            node_uid="lab-vm",
            links=Pyroute2Links(node["host"]),
            devlink=Pyroute2Devlink(),
            lab_links=[node["link"], node["peer"]],
            rdma=NetlinkRdma(node["host"]),
        )
    )


def item_of(inventory: Inventory, ifname: str) -> Any:
    return next(i for i in inventory.items.values() if i.netdevs and i.netdevs[0].ifname == ifname)


def rdma_persona(inventory: Inventory, node: dict[str, Any], plugin: str, mode: str) -> Persona:
    rdma_policy = policy(
        "lab-rdma",
        persona="kernel",
        plugin=plugin,
        mode=mode,
        selector={"kind": "Link", "rdmaCapable": True},
    )
    personas = build_personas(inventory, [rdma_policy], {})
    (persona,) = personas.personas  # only the link the rxe device belongs to
    assert persona.inventory_id == item_of(inventory, node["link"]).inventory_id
    return persona


def verbs_plugin() -> Plugin:
    plugin, diags = load_plugin_dir(VERBS_PLUGIN)
    assert plugin is not None and not diags, [str(d) for d in diags]
    return plugin


def verified_root(plugin: Plugin, config: dict[str, Any], persona: Persona) -> VerifiedRoot:
    result = DriverResult("net1", "lab-pool", persona.name, "", {}, None, 0)  # type: ignore[arg-type]
    return VerifiedRoot("rdma", plugin, config, result, persona)


def test_inventory_joins_rxe_to_its_link_from_real_sysfs_and_rdma_netlink(
    rxe_node: dict[str, Any],
) -> None:
    """The scan reads the rxe device from the VM's /sys/class/infiniband (name, GUID, link
    layer, its uverbs node) and joins it to the veth end the kernel associates its port with
    (RDMA netlink PORT_GET in the host namespace: the netdev's ifindex); the peer gets none.
    Asked from another namespace the kernel names no netdev for that port, so nothing joins
    by a name seen elsewhere. A kernel persona of the link carries the RDMA grant."""
    inventory = node_inventory(rxe_node)
    item = item_of(inventory, rxe_node["link"])
    (dev,) = item.rdma
    assert (dev.name, dev.node_guid, dev.link_layer) == (
        rxe_node["name"], rxe_node["guid"], "Ethernet",
    )  # fmt: skip
    assert dev.netdev_ifindexes == (rxe_node["ifindex"],)
    uverbs = kernel_nodes(rxe_node["name"]).split(",")[0].split(" ")[0]
    assert uverbs in dev.char_devices
    assert item_of(inventory, rxe_node["peer"]).rdma == ()
    assert not any(
        dev.name == r.name for i in inventory.items.values() if i is not item for r in i.rdma
    )
    elsewhere = NetlinkRdma().port_netdevs()  # the VM's root namespace
    assert rxe_node["name"] not in [p.rdma_device for p in elsewhere]
    persona = rdma_persona(inventory, rxe_node, "host-cni", "kernel")
    assert HandleType.RDMA_DEVICE in [g.type for g in persona.grants] and persona.rdma_capable


class _Forged:
    """A DeviceView whose RDMA facts a test replaces (what a corrupted scan would say)."""

    def __init__(self, base: InventoryDevices, rdma: tuple[RdmaFacts, ...]) -> None:
        self._base, self._rdma = base, rdma

    def personas(self) -> Any:
        return self._base.personas()

    def link(self, inventory_id: str) -> Any:
        return self._base.link(inventory_id)

    def function(self, inventory_id: str) -> Any:
        return self._base.function(inventory_id)

    def rdma(self, inventory_id: str) -> tuple[RdmaFacts, ...]:
        return self._rdma


@pytest.mark.adversarial
def test_agent_hands_the_verified_rdma_device_or_refuses(
    rxe_node: dict[str, Any], tmp_path: Path
) -> None:
    """``root_allocation`` (what NodePrepare builds each root's call from) gives host-cni with
    rdmaAccess the link and its RDMA device, re-verified over RDMA netlink; without
    rdmaAccess no RDMA handle. A scan whose GUID differs, a device joined to another link and
    a persona without the RDMA grant are refused before anything runs."""
    inventory = node_inventory(rxe_node)
    persona = rdma_persona(inventory, rxe_node, "host-cni", "kernel")
    devices = InventoryDevices(lambda: build_personas(inventory, [], {}), lambda: inventory)
    host_cni = load_builtin_plugins()["host-cni"]
    config = {"mode": "kernel", "ifName": "net1", "mtu": 1500, "up": True, "rdmaAccess": True}
    pins = NamespacePins(tmp_path / "state", host_netns=netns_path(rxe_node["host"]))
    env = pins.link_environment()
    try:
        allocation = root_allocation(env, devices, verified_root(host_cni, config, persona), "c")
        assert sorted(allocation) == ["interface", "rdma"]
        (rdma,) = allocation["rdma"]
        assert rdma.type is HandleType.RDMA_DEVICE and rdma.inventory_id == persona.inventory_id
        assert rdma.observations["rdmaDevice"] == rxe_node["name"]
        assert rdma.observations["nodeGuid"] == rxe_node["guid"]
        assert {Access.EXCLUSIVE_CONFIGURE, Access.DEVICE_ACCESS} <= rdma.accesses
        plain = {**config, "rdmaAccess": False}
        assert sorted(
            root_allocation(env, devices, verified_root(host_cni, plain, persona), "c")
        ) == ["interface"]
        root = verified_root(host_cni, config, persona)
        forged = [
            RdmaFacts(rxe_node["name"], "0000:0000:0000:0001", (rxe_node["ifindex"],)),
            RdmaFacts(rxe_node["name"], rxe_node["guid"], (rxe_node["ifindex"] + 1000,)),
        ]
        for facts, code in zip(forged, ("E_DEVICE_IDENTITY", "E_DEVICE_GONE"), strict=True):
            with pytest.raises(Refusal) as err:
                root_allocation(env, _Forged(devices, (facts,)), root, "c")
            assert err.value.code == code, err.value
        no_grant = replace(
            persona, grants=tuple(g for g in persona.grants if g.type is not HandleType.RDMA_DEVICE)
        )
        with pytest.raises(Refusal) as err:
            root_allocation(env, devices, verified_root(host_cni, config, no_grant), "c")
        assert err.value.code == "E_PLUGIN_UNSUPPORTED", err.value
    finally:
        env.close()
        pins.close()


def test_rxe_goes_with_its_netdev(rxe_node: dict[str, Any]) -> None:
    """Why the builtin host-cni/sriov-cni rdmaAccess path is not run on rxe: moving the netdev
    into another namespace (their connect's first effect) makes the kernel unregister the rxe
    device built on it (rdma_rxe handles NETDEV_UNREGISTER, which a namespace move sends)."""
    w: World = rxe_node["world"]
    sandbox = w.sandbox()
    ipr = w.ipr(rxe_node["host"])
    ipr.link("set", index=rxe_node["ifindex"], net_ns_fd=sandbox)
    wait_for(lambda: not (IB / rxe_node["name"]).exists(), timeout=60)


def _agent(
    tmp: Path, host: str
) -> tuple[NamespacePins, JournalStore, NodeOperations, SandboxAttachmentService]:
    state_dir, cdi = tmp / "agent", tmp / "cdi"
    pins = NamespacePins(state_dir, host_netns=netns_path(host))
    journal = JournalStore.open(state_dir)
    runner = Runner(journal, EXECUTORS, env_factory=lambda op: device_environment(pins, cdi))
    ops = NodeOperations(runner, pins, cdi)
    config = NodeConfig("lab-vm", "lab-vm", state_dir, host_netns=netns_path(host), cdi_root=cdi)
    attachments = SandboxAttachmentService(
        config, None, journal, pins, ops, None, lambda: "boot", NodeLock(runner.lock, journal),
    )  # fmt: skip
    return pins, journal, ops, attachments


def test_agent_rdma_claim_to_container_device_nodes(
    rxe_node: dict[str, Any], tmp_path: Path
) -> None:
    """End to end through the agent's parts on rxe: the scan and a policy make a kernel
    persona with the RDMA grant; ``root_allocation`` hands the verified RDMA handle to the
    prepare program, the journal records it in the operation's exports, connect gets it as
    ``call.prepared.rdma`` (netns-assign in shared mode, device-access), NRI CreateContainer
    of the Ready sandbox returns exactly the device's uverbs and the rdma_cm nodes, and a
    container-like process given only those opens them. Undo leaves no CDI spec and the rxe
    device as it was."""
    w: World = rxe_node["world"]
    sandbox = w.sandbox()
    inventory = node_inventory(rxe_node)
    plugin = verbs_plugin()
    persona = rdma_persona(inventory, rxe_node, "rdma-verbs", "verbs")
    devices = InventoryDevices(lambda: build_personas(inventory, [], {}), lambda: inventory)
    root = verified_root(plugin, VERBS_CONFIG, persona)
    pins, journal, ops, attachments = _agent(tmp_path, rxe_node["host"])
    identity = AttachmentIdentity("lab-vm", "boot", "pod-uid", "sandbox-1")
    att = attachment_id(identity)
    cdi = tmp_path / "cdi"
    try:
        env = pins.link_environment()
        try:
            allocation = root_allocation(env, devices, root, "claim-uid")
        finally:
            env.close()
        done: list[str] = []
        prep_call = Call(config=VERBS_CONFIG, operation_id="prep", allocation=allocation)
        ops.run_or_refuse(
            "prep", "claim/claim-uid", ops.bind(plugin, "prepare", prep_call), {}, done,
            failed=("E_PREPARE_FAILED", "rdma"),
        )  # fmt: skip
        recorded = journal.load_operation("prep")
        assert recorded is not None
        (handed,) = recorded.result["rdma"]
        assert handed.observations["rdmaDevice"] == rxe_node["name"]
        assert handed.observations["nodeGuid"] == rxe_node["guid"]
        ref = pins.pin(att, netns_path(sandbox))
        conn_call = Call(
            config=VERBS_CONFIG,
            operation_id="conn",
            prepared=dict(recorded.result),  # what RunPodSandbox reads back from the journal
            sandbox=Scope(ScopeKind.SANDBOX, ref.identity),
        )
        ops.run_or_refuse(
            "conn", f"attachment/{att}", ops.bind(plugin, "connect", conn_call), {}, done,
            failed=("E_CONNECT_FAILED", "rdma"), attachment=att,
        )  # fmt: skip
        with journal.batch() as b:
            b.put_attachment(AttachmentRecord(identity, AttachmentState.READY, operations=["conn"]))
        nri = NriAdapter(attachments, None)  # type: ignore[arg-type]
        pod = PodSandbox(id="sandbox-1", name="p", uid="pod-uid", namespace="default")
        adjustment = nri.create_container(pod, Container("c1", "sandbox-1", "app"))
        expected = []
        for entry in kernel_nodes(rxe_node["name"]).split(","):
            path, numbers = entry.split(" ")
            major, minor = numbers.split(":")
            expected.append((path, "c", int(major), int(minor)))
        assert [(d.path, d.type, d.major, d.minor) for d in adjustment.devices] == expected
        nodes = [
            {"path": d.path, "type": d.type, "major": d.major, "minor": d.minor}
            for d in adjustment.devices
        ]
        given = tmp_path / "nri-devices.json"
        given.write_text(json.dumps({"devices": [{"containerEdits": {"deviceNodes": nodes}}]}))
        out = tmp_path / "probe.json"
        argv = ["ip", "netns", "exec", sandbox, "unshare", "--mount", "--propagation", "private"]
        argv += [sys.executable, "-m", "tests.kernel_lab.vfio_probe", str(given), "-", str(out)]
        subprocess.run(argv, cwd=REPO_ROOT, check=True, capture_output=True, timeout=120)
        result = json.loads(out.read_text())
        wanted = sorted(e[0] for e in expected)
        assert sorted(result["opened"]) == wanted and result["dev"] == wanted
        assert attachments.device_nodes("pod-uid", "sandbox-2") == ()
        assert len(list(cdi.glob("*.json"))) == 1
        assert ops.undo(reversed(done))
        assert list(cdi.glob("*.json")) == []
        assert _read(IB / rxe_node["name"] / "node_guid") == rxe_node["guid"]
    finally:
        if pins.ref(att) is not None:
            pins.release(att, cleanup_verified=True)
        pins.close()
        journal.close()


def _verbs(plugin: Plugin, hook: str, call_: Call) -> BoundProgram:
    bound = bind_program(plugin, hook, call_)
    assert isinstance(bound, BoundProgram), [str(d) for d in bound]
    return bound


@pytest.mark.crash
def test_agent_rdma_path_crash_at_every_boundary(rxe_node: dict[str, Any], tmp_path: Path) -> None:
    """SIGKILL the RDMA prepare (the journaled handle), connect (netns-assign shared +
    device-access) and connect's cleanup at every journal boundary, with the real executors in a
    child process; after recovery and cleanup from the journal alone no CDI spec is left, the
    rxe device is there with its GUID and the kernel is still in shared RDMA netns mode."""
    w: World = rxe_node["world"]
    sandbox = w.sandbox()
    inventory = node_inventory(rxe_node)
    plugin = verbs_plugin()
    persona = rdma_persona(inventory, rxe_node, "rdma-verbs", "verbs")
    devices = InventoryDevices(lambda: build_personas(inventory, [], {}), lambda: inventory)
    node = Node(tmp_path / "state", rxe_node["host"], cdi_root=tmp_path / "cdi")
    env = node.pins.link_environment()
    try:
        allocation = root_allocation(
            env, devices, verified_root(plugin, VERBS_CONFIG, persona), "claim-uid"
        )
    finally:
        env.close()

    def prepare(op: str) -> BoundProgram:
        return _verbs(
            plugin, "prepare", Call(config=VERBS_CONFIG, operation_id=op, allocation=allocation)
        )

    def settle(op: str) -> None:
        with node.runner() as r:
            for res in r.recover():
                assert res.state.value in ("Undone", "Completed"), res
            assert r.cleanup(op).state.value == "Undone"

    def unchanged() -> bool:
        init = os.open("/proc/1/ns/net", os.O_RDONLY)
        try:
            with open_in(init) as nl:
                shared = nl.netns_shared()
        finally:
            os.close(init)
        return shared and _read(IB / rxe_node["name"] / "node_guid") == rxe_node["guid"]

    server = crash_fork_server()
    try:
        ref = node.pin("rdma", sandbox)
        # prepare changes nothing in the kernel: its boundaries are those of the journaled
        # RDMA handle (its cleanup, an undo of no effect, is left out to save VM time)
        program = prepare("rp-survey")
        names = node.survey("rp-survey", program)
        for index in crash_points(names["run"], effect_kinds(program), __name__):
            op = f"rp-run{index}"
            passed = node.killed_at(server, index, "run", op, prepare(op))
            assert passed and passed[-1] == names["run"][index], ("run", index, passed)
            settle(op)
            assert unchanged(), ("run", index, passed)
        prep = node.run("rp-prep", prepare("rp-prep"))

        def connect(op: str) -> BoundProgram:
            return _verbs(plugin, "connect", Call(
                config=VERBS_CONFIG, operation_id=op, prepared=dict(prep.exports),
                sandbox=Scope(ScopeKind.SANDBOX, ref.identity),
            ))  # fmt: skip

        program = connect("rp-conn-survey")
        conn = node.survey("rp-conn-survey", program, ref)
        assert list((tmp_path / "cdi").glob("*.json")) == [] and unchanged()
        # the unprivileged agent (only the chart's capabilities) runs connect and its cleanup
        unprivileged = replace(node, server=unprivileged_server())
        unprivileged.run("rp-conn-unpriv", connect("rp-conn-unpriv"), sandbox=ref)
        assert len(list((tmp_path / "cdi").glob("*.json"))) == 1 and unchanged()
        unprivileged.cleanup("rp-conn-unpriv")
        assert list((tmp_path / "cdi").glob("*.json")) == [] and unchanged()
        for phase in ("conn-run", "conn-cleanup"):
            action = phase.removeprefix("conn-")
            for index in crash_points(conn[action], effect_kinds(program), __name__):
                op = f"rp-{phase}{index}"
                program = connect(op)
                if action == "cleanup":
                    node.run(op, program, sandbox=ref)
                passed = node.killed_at(server, index, action, op, program, sandbox=ref)
                assert passed and passed[-1] == conn[action][index], (phase, index, passed)
                settle(op)
                assert list((tmp_path / "cdi").glob("*.json")) == [], (phase, index, passed)
                assert unchanged(), (phase, index, passed)
        node.cleanup("rp-prep")
        # prepare: intent and completion (no effect); connect: intent, 2 effects x
        # (before-image, apply, outcome), completion; its undo 2 x 2
        assert len(names["run"]) >= 2 and len(conn["run"]) >= 7, (names, conn)
        assert len(conn["cleanup"]) >= 4, conn
    finally:
        server.close()
        node.release_pins()
