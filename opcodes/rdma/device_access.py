"""Executor of ``rdma/device-access/v1``: grant the sandbox exactly its RDMA device's char nodes.

Capture: the handle is scoped to the call's sandbox (``E_NOT_SAME_SANDBOX`` otherwise) and its
device — the recorded index and GUID after ``rdma/netns-assign``, else the observed name and
GUID — is visible from that sandbox's namespace. For each requested kind the kernel names the
character device serving it (``RDMA_NLDEV_CMD_GET_CHARDEV``, asked inside the sandbox's
namespace: ``uverbs`` of this device, ``umad`` of its port 1, the global ``rdma_cm``), and the
node ``/dev/infiniband/<name>`` must be a character device with that ``major:minor``
(``E_RDMA_NODE``). Never every uverbs/umad node: only this device's.

Apply writes the CDI spec of those nodes (:mod:`dmn.opcodes.cdi_spec`, kind ``.../rdma``),
with the RDMA device's name and its nodes' paths as ``DMN_RDMA_<DEVICE>_DEVICE`` and
``DMN_RDMA_<DEVICE>_CHAR_DEVICES`` (comma-separated) environment edits; the
output handle carries them in ``deviceNodes`` for NRI CreateContainer. Nothing in the kernel
changes; undo removes the spec only while it holds this effect's bytes.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from dmn.host.rdma import RdmaDev, RdmaError, RdmaNetlink, open_in
from dmn.opcodes import cdi_spec
from dmn.opcodes.cdi_spec import GrantSpec
from dmn.opcodes.device_environment import cdi_root, dev_root
from dmn.opcodes.effect_handles import environment, single
from dmn.opcodes.executor import EffectContext, ExecutorError, Observed, RecoveryObservation
from dmn.opcodes.granted_nodes import DeviceNode, encode, verified
from dmn.opcodes.rdma import rdma_device, specs
from dmn.opcodes.spec import OpcodeSpec
from dmn.vocabulary.handles import Handle

_CHARDEV_NAME = r"^(uverbs|umad|issm|rdma_cm)[0-9]*$"


def _node(nl: RdmaNetlink, dev: RdmaDev, kind: str, root: Path) -> DeviceNode:
    try:
        if kind == "rdma_cm":
            major, minor, name = nl.chardev("rdma_cm")
        elif kind == "umad":
            major, minor, name = nl.chardev("umad", dev.index, port=1)
        else:
            major, minor, name = nl.chardev(kind, dev.index)
    except RdmaError as exc:
        raise ExecutorError("E_RDMA_NODE", f"{dev.name} has no {kind} node: {exc}") from exc
    if not re.fullmatch(_CHARDEV_NAME, name):
        raise ExecutorError("E_RDMA_NODE", f"the kernel named the {kind} node {name!r}")
    return verified(root, f"infiniband/{name}", (major, minor), "E_RDMA_NODE")


class DeviceAccess:
    """``rdma/device-access/v1``: a CDI spec for exactly this device's nodes."""

    spec: OpcodeSpec = specs.DEVICE_ACCESS

    def capture(self, ctx: EffectContext) -> Any:
        env = environment(ctx)
        sandbox = env.require_sandbox()
        handle = single(ctx, "rdma")
        if env.ref_for_scope(handle.scope).identity != sandbox.identity:
            raise ExecutorError("E_NOT_SAME_SANDBOX", f"{handle.id} is not in the call's sandbox")
        with open_in(env.fd(sandbox)) as nl:
            index = handle.observations.get("rdmaIndex")
            dev = rdma_device.locate(nl, handle)
            if isinstance(index, int) and index != dev.index:
                raise ExecutorError(
                    "E_DEVICE_IDENTITY", f"{dev.name} is device {dev.index}, not {index}"
                )
            kinds = [str(k) for k in ctx.parameters["nodes"]]
            nodes = [_node(nl, dev, kind, dev_root(ctx.env)) for kind in kinds]
        return {
            "device": rdma_device.to_json(dev),
            "nodes": [n.to_json() for n in nodes],
            "sandbox": env.scope_of(sandbox).to_json(),
        }

    def _spec(self, ctx: EffectContext, before: Any) -> GrantSpec:
        nodes = tuple(DeviceNode.from_json(n) for n in before["nodes"])
        env = {
            "DEVICE": str(before["device"]["name"]),
            "CHAR_DEVICES": ",".join(n.path for n in nodes),
        }
        return GrantSpec.of(cdi_root(ctx.env), "rdma", ctx.alias, nodes, env)

    def apply(self, ctx: EffectContext, before: Any) -> None:
        self._spec(ctx, before).write()

    def observe(self, ctx: EffectContext, before: Any) -> Observed:
        spec = self._spec(ctx, before)
        why = "" if spec.holds() else f"{spec.path} does not hold this grant"
        base = single(ctx, "rdma")
        observations = dict(base.observations)
        nodes = tuple(DeviceNode.from_json(n) for n in before["nodes"])
        observations["deviceNodes"] = encode(nodes)
        observations["cdiDevice"] = cdi_spec.qualified_name("rdma", ctx.alias)
        granted = Handle(
            id=base.id,
            type=base.type,
            inventory_id=base.inventory_id,
            scope=base.scope,
            accesses=base.accesses,
            link_type=base.link_type,
            provenance=base.provenance,
            observations=observations,
        )
        return Observed(not why, {"rdma": (granted,)}, why)

    def recover(self, ctx: EffectContext, before: Any) -> RecoveryObservation:
        return self._spec(ctx, before).observe()

    def undo(
        self, ctx: EffectContext, before: Any, outputs: Mapping[str, tuple[Handle, ...]]
    ) -> None:
        self._spec(ctx, before).remove(ctx.effect_id)
