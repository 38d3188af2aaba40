"""A real-executor crash step, run in a child of :mod:`tests.crash_fork_server` (``"child":
"kernel"``): open the journal and namespace pins, run (or clean up) one operation over the
real executors and SIGKILL itself at the requested journal boundary.

Request: ``state_dir``, ``host`` (host netns path), ``sandbox``
(NamespaceRef JSON or null), ``action`` (``run``/``cleanup``), ``op``, ``scope``, ``program``
(BoundProgram JSON, for run), ``crash_at`` (boundary index), ``out`` (file that receives the
boundary names passed), optionally ``bridge_grants`` (approved bridges),
``allowed_drivers`` and ``cdi_root`` (for device executors), ``ovs_grants`` and
``ovsdb_remote`` (for the OVS executor), ``sysfs_views`` ([dev, inode, tree] per
namespace: recorded sysfs trees for the IPoIB executor). Reply: ``{"signal": n}`` or
``{"exit": code}``.
"""

from __future__ import annotations

import os
import signal
from pathlib import Path
from typing import Any

from dmn.agent.journal.store import JournalStore
from dmn.engine.bound import BoundProgram
from dmn.engine.effect_records import JournalEffectRecords
from dmn.engine.runner import Runner
from dmn.host.netns import LinkEnvironment, NamespaceRef
from dmn.host.netns_sysfs import RecordedNetnsSysfs
from dmn.host.pins import NamespacePins
from dmn.opcodes.address_pools import ClaimOwner
from dmn.opcodes.device_environment import BridgeGrant, DeviceEnvironment, OvsBridgeGrant
from tests.kernel.node import ipam_facts
from tests.kernel.world import EXECUTORS


def child(req: dict[str, Any]) -> int:
    out = open(req["out"], "w")  # noqa: SIM115 - lives until SIGKILL or exit
    seen = [0]

    def hook(name: str) -> None:
        out.write(name + "\n")
        out.flush()
        if seen[0] == req["crash_at"]:
            os.kill(os.getpid(), signal.SIGKILL)
        seen[0] += 1

    pins = NamespacePins(Path(req["state_dir"]), host_netns=req["host"])

    grants = {g.alias: g for g in map(BridgeGrant.from_json, req.get("bridge_grants") or ())}

    device: dict[str, Any] = {}
    if req.get("allowed_drivers"):
        device["allowed_drivers"] = frozenset(req["allowed_drivers"])
    if req.get("cdi_root"):
        device["cdi_root"] = Path(req["cdi_root"])
    if req.get("ovs_grants"):
        ovs = map(OvsBridgeGrant.from_json, req["ovs_grants"])
        device["ovs_bridge_grants"] = {g.alias: g for g in ovs}
    if req.get("ovsdb_remote"):
        device["ovsdb_remote"] = req["ovsdb_remote"]
    if req.get("sysfs_views"):
        trees = {(int(d), int(i)): Path(t) for d, i, t in req["sysfs_views"]}
        device["netns_sysfs"] = RecordedNetnsSysfs(trees)

    if req.get("ipam_url"):
        device.update(ipam_facts(req["ipam_url"]))
    owner = ClaimOwner.from_json(req["claim_owner"]) if req.get("claim_owner") else None

    def env(sandbox: NamespaceRef | None) -> LinkEnvironment:
        host = NamespaceRef.at(req["host"])
        if req.get("ipam_url"):
            return DeviceEnvironment(
                host=host,
                sandbox=sandbox,
                pins=pins.list,
                claim_owner=owner if sandbox is not None else None,
                **device,
            )
        if grants or device:
            return DeviceEnvironment(
                host=host, sandbox=sandbox, pins=pins.list, bridge_grants=grants, **device
            )
        return LinkEnvironment(host=host, sandbox=sandbox, pins=pins.list)

    sandbox = NamespaceRef.from_json(req["sandbox"]) if req.get("sandbox") else None
    journal = JournalStore.open(req["state_dir"])
    if grants:
        device["effect_records"] = JournalEffectRecords(journal)
    runner = Runner(journal, EXECUTORS, boundary=hook, env_factory=lambda op: env(None))
    if req["action"] == "run":
        program = BoundProgram.from_json(req["program"])
        runner.run(req["op"], req["scope"], program, env=env(sandbox))
    else:
        runner.cleanup(req["op"])
    journal.close()
    return 0
