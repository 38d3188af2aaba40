"""Canonical normalization and the semantic digest of a compiled topology (design §4.5).

The digest covers exactly what gives the revision its meaning: the topology's UID, its
normalized spec (defaults filled, maps sorted, sets sorted, step array — presentation
order only — sorted by id, meaningful lists such as bond members kept in order), the
locked plugin contract digests, the contracts of every opcode the revision may run, and
the compiler version. Status, timestamps and resourceVersion never enter it.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from dmn.interpreter.canonical_json import canonical_json, sha256_digest

#: Bumped whenever compilation output for the same input may change.
COMPILER_VERSION = "dmn-topology-compiler/v1"


def normalize_spec(
    spec: Mapping[str, Any], configs: Mapping[str, Mapping[str, Any]]
) -> dict[str, Any]:
    """The normalized spec: ``configs`` are the per-step configs with defaults applied."""
    steps = []
    for step in spec.get("steps", []):
        out: dict[str, Any] = {
            "id": step["id"],
            "kind": step["kind"],
            "pluginRef": {"name": step["pluginRef"]["name"]},
            "config": dict(configs.get(step["id"], step.get("config", {}))),
        }
        if step.get("inputs"):
            out["inputs"] = {
                port: [{"from": r["from"]} for r in refs]
                if isinstance(refs, list)
                else {"from": refs["from"]}
                for port, refs in step["inputs"].items()
            }
        selectors = step.get("hardwareSelectors")
        if selectors:
            out["hardwareSelectors"] = sorted(
                ({"cel": {"expression": s["cel"]["expression"]}} for s in selectors),
                key=lambda s: s["cel"]["expression"],
            )
        steps.append(out)
    steps.sort(key=lambda s: s["id"])
    allow = sorted(set(spec.get("effectBudget", {}).get("allow", [])))
    return {"effectBudget": {"allow": allow}, "steps": steps}


def contract_digest(descriptor: Mapping[str, Any]) -> str:
    """The digest of one plugin contract: its complete descriptor spec."""
    return sha256_digest(dict(descriptor))


def _topology_digest(
    identity: tuple[str, str],
    normalized: Mapping[str, Any],
    plugin_contracts: Mapping[str, str],
    opcode_contracts_digest: str,
) -> str:
    key, value = identity
    return sha256_digest(
        {
            key: value,
            "spec": dict(normalized),
            "plugins": dict(sorted(plugin_contracts.items())),
            "opcodes": opcode_contracts_digest,
            "compiler": COMPILER_VERSION,
        }
    )


def semantic_digest(
    topology_uid: str,
    normalized: Mapping[str, Any],
    plugin_contracts: Mapping[str, str],
    opcode_contracts_digest: str,
) -> str:
    return _topology_digest(
        ("topologyUID", topology_uid), normalized, plugin_contracts, opcode_contracts_digest
    )


def naming_digest(
    topology_name: str,
    normalized: Mapping[str, Any],
    plugin_contracts: Mapping[str, str],
    opcode_contracts_digest: str,
) -> str:
    """The digest the revision and DeviceClass *names* are made from: the semantic digest's
    inputs with the topology's name in place of its UID.

    Why not the semantic digest: the UID exists only once the API server has created the
    topology, so ``dmn compile`` could never print the names the controller will use and
    an administrator could not know the class to put in a claim. The semantic digest
    (with the UID) stays the revision's identity: it is pinned in claims, and a revision
    found under the expected name with a different semantic digest (an earlier topology
    of the same name whose revision is still held) is a conflict, never adopted.
    """
    return _topology_digest(
        ("topologyName", topology_name), normalized, plugin_contracts, opcode_contracts_digest
    )


def encoded_size(values: Sequence[Any]) -> int:
    return sum(len(canonical_json(v)) for v in values)
