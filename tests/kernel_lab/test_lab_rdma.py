"""``rdma/device-access`` and ``rdma/netns-assign`` on a real RDMA device: soft-RoCE (rdma_rxe).

Substrate: the lab kernel's ``rdma_rxe`` over a veth pair in the VM's root namespace, created
by the test with iproute2's ``rdma link add`` (never by an executor). The executors speak
NETLINK_RDMA themselves (:mod:`dmn.opcodes.rdma.rdma_netlink`). ``device-access`` runs in the
kernel's default shared netns mode, where the sandbox's namespace sees the device; the nodes it
grants are the ones the kernel names for this device, and a container-like process
(:mod:`tests.kernel_lab.vfio_probe` with ``-``) opens exactly those. ``netns-assign`` is
refused in shared mode; in exclusive mode the kernel refuses to move an rxe device
(EOPNOTSUPP: rxe cannot disassociate user contexts) — the move itself has no substrate here.
"""

from __future__ import annotations

import errno
import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from dmn.opcodes.device_environment import DeviceEnvironment
from dmn.opcodes.executor import EffectContext, ExecutorError, RecoveryObservation
from dmn.opcodes.linux.netns import NamespaceRef
from dmn.opcodes.rdma.rdma_netlink import RdmaError, open_in
from dmn.vocabulary.handles import Handle, Provenance
from dmn.vocabulary.terms import Access, HandleType
from tests.kernel.scratch import netns_path, unique
from tests.kernel.world import EXECUTORS, World, world
from tests.kernel_lab.image import REPO_ROOT
from tests.waiting import wait_for

pytestmark = pytest.mark.kernel_lab

ACCESS, ASSIGN = "rdma/device-access/v1", "rdma/netns-assign/v1"
IB = Path("/sys/class/infiniband")


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
