"""Digests of builtin contracts and of bound builtin programs, as one JSON object.

Run as ``python -m tests.programs.digests``; ``test_digest_stability`` runs it in fresh
interpreters with different ``PYTHONHASHSEED`` values (set and dict iteration order
differs between them) and compares with the digests computed in the test process.
"""

from __future__ import annotations

import json
import sys

from dmn.engine.binder import Call, bind_program
from dmn.engine.bound import BoundProgram
from dmn.interpreter.loader import load_builtin_plugins
from dmn.vocabulary.handles import Handle, NamespaceIdentity, Provenance, Scope
from dmn.vocabulary.terms import Access, HandleType, LinkType, ScopeKind

SANDBOX = Scope(ScopeKind.SANDBOX, NamespaceIdentity(dev=4, inode=4026532999, boot_id="boot-1"))
RW = frozenset({Access.READ, Access.EXCLUSIVE_CONFIGURE, Access.EXCLUSIVE_MASTER})


def _handle(name: str, type_: HandleType, accesses: frozenset[Access], scope: Scope) -> Handle:
    return Handle(
        id=f"h:{name}",
        type=type_,
        inventory_id=f"inv:{name}",
        scope=scope,
        accesses=accesses,
        link_type=LinkType.ETHERNET if type_ is HandleType.KERNEL_INTERFACE else None,
        provenance=Provenance(claim_uid="c-1", request="net", pool="node-1", device=name),
        observations={"ifName": name, "ifIndex": 7, "up": True},
    )


def digests() -> dict[str, str]:
    plugins = load_builtin_plugins()
    out = {f"contract:{name}": p.contract_digest for name, p in sorted(plugins.items())}
    netdev = _handle("vf0", HandleType.KERNEL_INTERFACE, RW, Scope(ScopeKind.HOST))
    members = tuple(
        _handle(f"m{i}", HandleType.KERNEL_INTERFACE, RW | {Access.ATTACH_MEMBER}, SANDBOX)
        for i in range(4)
    )
    parent = _handle("p0", HandleType.KERNEL_INTERFACE, RW | {Access.CREATE_CHILD}, SANDBOX)
    eth = {"ifName": "net1", "mtu": 1500, "up": True}
    calls = {
        "host-cni/connect": Call(
            config={"mode": "kernel", **eth}, prepared={"interface": (netdev,)}, sandbox=SANDBOX
        ),
        "bond-cni/connect": Call(
            config={
                **eth,
                "mode": "active-backup",
                "monitorIntervalMs": 100,
                "failOverMac": "active",
            },
            inputs={"members": members},
            sandbox=SANDBOX,
        ),
        "vlan-cni/connect": Call(
            config={**eth, "vlanId": 100}, inputs={"parent": (parent,)}, sandbox=SANDBOX
        ),
    }
    for label, call in calls.items():
        name, hook = label.split("/")
        bound = bind_program(plugins[name], hook, call)
        assert isinstance(bound, BoundProgram), bound
        out[f"bound:{label}"] = bound.digest
    return out


if __name__ == "__main__":
    sys.stdout.write(json.dumps(digests(), sort_keys=True) + "\n")
