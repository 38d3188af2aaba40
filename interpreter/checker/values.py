"""What a reference grants a program: handle type, link types, accesses, item counts."""

from __future__ import annotations

from dataclasses import dataclass, replace

from dmn.interpreter.documents import InputPort
from dmn.vocabulary.terms import Access, HandleType, LinkType, ScopeKind

#: Accesses a shared-parent grant must never be used for.
_MUTATING_ACCESSES = frozenset(
    {Access.EXCLUSIVE_CONFIGURE, Access.EXCLUSIVE_MASTER, Access.ATTACH_MEMBER}
)


@dataclass(frozen=True, slots=True)
class ValueType:
    """The static type of a reference: what handles it denotes and how many."""

    type: HandleType
    link_types: frozenset[LinkType] | None
    accesses: frozenset[Access]
    min_items: int = 1
    max_items: int = 1
    scope: ScopeKind | None = None

    def one(self) -> ValueType:
        return replace(self, min_items=1, max_items=1)

    @property
    def shared(self) -> bool:
        """A shared-parent grant: CreateChild is the only mutation it permits."""
        return self.type is HandleType.SHARED_PARENT or (
            Access.CREATE_CHILD in self.accesses and not (self.accesses & _MUTATING_ACCESSES)
        )

    def describe(self) -> str:
        links = "/".join(sorted(lt.value for lt in self.link_types)) if self.link_types else ""
        return f"{self.type.value}" + (f" ({links})" if links else "")


def port_value_type(port: InputPort) -> ValueType:
    """What a descriptor input/allocation port grants the program."""
    return ValueType(
        type=HandleType(port.type),
        link_types=frozenset({LinkType(port.link_type)}) if port.link_type else None,
        accesses=frozenset({Access.READ, *(Access(a) for a in port.accesses())}),
        min_items=port.min_items,
        max_items=port.max_items,
    )
