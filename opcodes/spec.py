"""Opcode specifications: the pure contract of each native effect (design §3.6).

A spec says what an opcode takes (typed, access-checked input ports and a strict
parameter model), what it yields (typed output ports), in which hooks it may run,
whether it can be undone, and how it is observed after an uncertain outcome. Specs
import no native library, so the interpreter, ``dmn lint`` and the controller can
load every spec without pyroute2, sysfs or OVSDB.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from pydantic import BaseModel

from dmn.vocabulary.terms import (
    Access,
    HandleType,
    Hook,
    LinkType,
    RecoveryStrategy,
    Reversibility,
    ScopeKind,
)


@dataclass(frozen=True, slots=True)
class PortSpec:
    """A typed port. For inputs, ``access`` is the access the handle must grant.

    For outputs, ``grants`` lists the accesses the produced handle carries, so the
    checker can prove that a later effect's input access is satisfied (for example a
    created bond grants ``ExclusiveMaster`` to ``linux/attach-master/v1``). ``scope`` is
    where the handle lives: ``host`` or ``sandbox`` (the call's verified sandbox; no
    opcode takes a namespace from a reference or a parameter). ``None`` means either.
    ``inherits`` names the input port whose handle this output continues (a moved or
    reconfigured link keeps the accesses it was granted): the output then carries what
    that input handle carried. Its ``grants`` are a sound lower bound for a reader that
    ignores ``inherits``, and never exceed ``Read`` plus the input port's required access,
    so both readings agree.
    """

    type: HandleType
    link_types: frozenset[LinkType] | None = None
    scope: ScopeKind | None = None
    access: Access | None = None
    min_items: int = 1
    max_items: int = 1
    grants: frozenset[Access] = frozenset()
    inherits: str | None = None


@dataclass(frozen=True, slots=True)
class OpcodeSpec:
    name: str
    summary: str
    parameters: type[BaseModel]
    inputs: Mapping[str, PortSpec]
    outputs: Mapping[str, PortSpec]
    hooks: frozenset[Hook]
    reversibility: Reversibility
    recovery: frozenset[RecoveryStrategy]
    requires: frozenset[str] = frozenset()
    postconditions: frozenset[str] = frozenset()
    mutates_parent: bool = False
    #: What the effect changes lives only in the running kernel (links, their addresses,
    #: their namespace): a reboot resets it. The runner writes the record before such an
    #: effect (intent, before-image, Undoing) without a sync of its own — it becomes durable
    #: with the operation's next synced commit — because a killed process loses no written
    #: record (RocksDB has handed it to the kernel's page cache) and a machine crash, the
    #: only thing that could lose it, also resets everything the record describes. Not part
    #: of the opcode contract (a runner policy, not something a program may rely on).
    boot_volatile: bool = False
    extra: Mapping[str, str] = field(default_factory=dict)
    #: What running the effect changes on the node, for operators and plugin authors
    #: (``dmn opcodes``, ``dmn explain``); every builtin spec has one (tested).
    changes: str = ""
    #: What undoing the recorded effect does on the node (removal, unprepare, recovery).
    undo: str = ""

    @property
    def family(self) -> str:
        return self.name.split("/", 1)[0]

    @property
    def version(self) -> str:
        return self.name.rsplit("/", 1)[-1]


class OpcodeRegistry:
    """A name → spec table. Immutable once built by :func:`default_registry`."""

    def __init__(self, specs: Iterable[OpcodeSpec] = ()) -> None:
        self._specs: dict[str, OpcodeSpec] = {}
        for spec in specs:
            self.register(spec)

    def register(self, spec: OpcodeSpec) -> None:
        if spec.name in self._specs:
            raise ValueError(f"opcode {spec.name} registered twice")
        self._specs[spec.name] = spec

    def get(self, name: str) -> OpcodeSpec | None:
        return self._specs.get(name)

    def names(self) -> list[str]:
        return sorted(self._specs)

    def __contains__(self, name: object) -> bool:
        return name in self._specs

    def __len__(self) -> int:
        return len(self._specs)
