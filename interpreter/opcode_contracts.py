"""The contract of an opcode as JSON, so revisions pin the executor semantics they were
compiled against: a changed parameter schema, port or recovery contract yields a new
digest and therefore a new revision (design §4.1)."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from dmn.interpreter.canonical_json import sha256_digest
from dmn.opcodes.spec import OpcodeRegistry, OpcodeSpec, PortSpec


def _port(port: PortSpec) -> dict[str, Any]:
    return {
        "type": port.type.value,
        "linkTypes": sorted(t.value for t in port.link_types) if port.link_types else None,
        "scope": port.scope.value if port.scope else None,
        "access": port.access.value if port.access else None,
        "minItems": port.min_items,
        "maxItems": port.max_items,
    }


_CACHE: dict[int, tuple[OpcodeSpec, dict[str, Any]]] = {}


def opcode_contract(spec: OpcodeSpec) -> dict[str, Any]:
    """The contract JSON of ``spec`` (memoised per spec object: specs are immutable)."""
    hit = _CACHE.get(id(spec))
    if hit is not None and hit[0] is spec:
        return hit[1]
    contract = _contract(spec)
    _CACHE[id(spec)] = (spec, contract)
    return contract


def _contract(spec: OpcodeSpec) -> dict[str, Any]:
    return {
        "name": spec.name,
        "parameters": spec.parameters.model_json_schema(),
        "inputs": {k: _port(v) for k, v in sorted(spec.inputs.items())},
        "outputs": {k: _port(v) for k, v in sorted(spec.outputs.items())},
        "hooks": sorted(h.value for h in spec.hooks),
        "reversibility": spec.reversibility.value,
        "recovery": sorted(r.value for r in spec.recovery),
        "requires": sorted(spec.requires),
        "postconditions": sorted(spec.postconditions),
        "mutatesParent": spec.mutates_parent,
    }


def opcode_contracts_digest(registry: OpcodeRegistry | None, names: Iterable[str]) -> str:
    """Digest over the contracts of ``names`` (unknown names are recorded as missing)."""
    contracts: dict[str, Any] = {}
    for name in sorted(set(names)):
        spec = registry.get(name) if registry is not None else None
        contracts[name] = opcode_contract(spec) if spec is not None else None
    return sha256_digest(contracts)


#: Hex digits of an opcode's contract digest in a node's capability report: enough to tell
#: contracts apart, short enough that a report of every opcode stays a few KiB.
SHORT_DIGEST_LEN = 16


def opcode_contract_digests(
    registry: OpcodeRegistry, names: Iterable[str] | None = None
) -> dict[str, str]:
    """Opcode name -> short digest of its contract, for ``names`` (default: every opcode the
    registry holds). A revision pins these for what it uses; a node reports them for what
    it can run; equal digests mean the node's executor has the contract the revision was
    compiled against."""
    wanted = sorted(set(names)) if names is not None else sorted(registry.names())
    out: dict[str, str] = {}
    for name in wanted:
        spec = registry.get(name)
        if spec is not None:
            digest = sha256_digest(opcode_contract(spec)).removeprefix("sha256:")
            out[name] = digest[:SHORT_DIGEST_LEN]
    return out
