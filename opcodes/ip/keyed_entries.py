"""The lifecycle ``ip/routes`` and ``ip/neighbours`` share: kernel entries that are known
by a key and attributes, none of which only the kernel writes.

* ``capture`` finds the link from the granted handle (:mod:`granted_link`), computes the
  entries to add (each through the link's ifindex) and refuses (``exists_code``) when an
  entry holds one of their keys that this effect may not write over — an entry this
  effect did not add is never adopted. An entry the namespace already has that serves
  this link as well (:meth:`KeyedEntries.shares`: for a route, the same route through the
  same gateway out of another of the sandbox's links) is recorded as ``shared``: not added,
  not adopted, never removed by this effect.
* ``apply`` proves the link, refuses again if a key was taken since, and adds the entries
  in order; if the kernel refuses one, the entries this call added are deleted first.
* ``observe``: every recorded entry is in the namespace exactly as recorded.
* ``undo`` deletes, in the recorded namespace and only while the link proves to be the
  recorded one, each entry that matches every recorded attribute. An entry that is gone is
  left gone; one with the key and other attributes was changed by someone else and is left
  in place, and undo then raises ``not_owned_code`` (quarantined) after the others are gone.
  A namespace that is gone took the entries with it; a link that is gone, its entries.
* ``recover``: Applied when every entry is there as recorded, NotApplied when none of
  their keys holds an entry this effect could have added, Uncertain otherwise.

Limit (stated, not hidden): these entries carry nothing a tenant cannot write, so a tenant
that deletes one of ours and adds it again with every attribute identical is not told
apart; undo then deletes that identical entry.
"""

from __future__ import annotations

import logging
from collections.abc import Hashable
from typing import Any, Generic, Protocol, TypeVar

from dmn.host.errors import HostError
from dmn.host.rtnetlink.links import LinkState
from dmn.opcodes.effect_handles import Outputs, environment
from dmn.opcodes.executor import EffectContext, ExecutorError, Observed, RecoveryObservation
from dmn.opcodes.ip.granted_link import (
    captured,
    continued,
    proven,
    proven_for_recovery,
    proven_for_undo,
    proven_or_refused,
)

_log = logging.getLogger("dmn.opcodes.ip.executors")


class Entry(Protocol):
    @property
    def key(self) -> Hashable: ...

    def to_json(self) -> dict[str, Any]: ...


E = TypeVar("E", bound=Entry)


class KeyedEntries(Generic[E]):
    """Subclasses name the entry kind and its kernel reads and writes."""

    what: str = ""
    exists_code: str = ""
    not_owned_code: str = ""

    def wanted(self, ctx: EffectContext, link: LinkState) -> list[E]:
        raise NotImplementedError

    def from_json(self, data: dict[str, Any]) -> E:
        raise NotImplementedError

    def live(self, ipr: Any, link: LinkState, entries: list[E]) -> dict[Hashable, E]:
        raise NotImplementedError

    def add(self, ipr: Any, entry: E, over: E | None) -> None:
        """Add ``entry``; ``over`` is what holds its key now and may be written over."""
        raise NotImplementedError

    def delete(self, ipr: Any, entry: E) -> bool:
        raise NotImplementedError

    def blocks(self, found: E) -> bool:
        """Whether an entry holding a key refuses the effect (default: any does)."""
        return True

    def shares(self, found: E, entry: E, link: LinkState) -> bool:
        """Whether ``found``, holding ``entry``'s key through another link, already does
        what ``entry`` asks for this link (default: never)."""
        return False

    def describe(self, entry: E) -> str:
        return str(entry.key)

    def _recorded(self, before: Any) -> list[E]:
        return [self.from_json(e) for e in before["entries"]]

    def _refuse_taken(self, live: dict[Hashable, E], entries: list[E]) -> None:
        for entry in entries:
            found = live.get(entry.key)
            if found is not None and self.blocks(found):
                raise ExecutorError(
                    self.exists_code,
                    f"{self.what} {self.describe(found)} exists; one this effect did not "
                    "add is never adopted",
                )

    def capture(self, ctx: EffectContext) -> Any:
        env, ref, link, record = captured(ctx)
        wanted = self.wanted(ctx, link)
        live = self.live(env.rtnl(ref), link, wanted)
        entries: list[E] = []
        shared: list[E] = []
        for entry in wanted:
            found = live.get(entry.key)
            held = found is not None and self.shares(found, entry, link)
            (shared if held else entries).append(entry)
        self._refuse_taken(live, entries)
        return {
            **record,
            "entries": [e.to_json() for e in entries],
            "shared": [e.to_json() for e in shared],
        }

    def apply(self, ctx: EffectContext, before: Any) -> None:
        env = environment(ctx)
        ref, link = proven_or_refused(env, before)
        ipr = env.rtnl(ref)
        entries = self._recorded(before)
        live = self.live(ipr, link, entries)
        self._refuse_taken(live, entries)
        added: list[E] = []
        try:
            for entry in entries:
                self.add(ipr, entry, live.get(entry.key))
                added.append(entry)
        except HostError as exc:
            for entry in reversed(added):
                try:
                    self.delete(ipr, entry)
                except HostError:
                    _log.warning("event=take-back-failed entry=%s", self.describe(entry))
            if exc.code == "E_NETLINK_17":
                raise ExecutorError(
                    self.exists_code, f"a {self.what} appeared while adding: {exc}"
                ) from exc
            raise

    def observe(self, ctx: EffectContext, before: Any) -> Observed:
        env = environment(ctx)
        ref, link = proven(env, before)
        if link is None:
            return Observed(False, detail="link is gone")
        entries = self._recorded(before)
        live = self.live(env.rtnl(ref), link, entries)
        problems = [
            f"{self.describe(e)} {'missing' if e.key not in live else 'differs'}"
            for e in entries
            if live.get(e.key) != e
        ]
        out = continued(ctx, env, ref, link)
        return Observed(not problems, {"interface": (out,)}, "; ".join(problems))

    def recover(self, ctx: EffectContext, before: Any) -> RecoveryObservation:
        env = environment(ctx)
        proof = proven_for_recovery(env, before)
        if proof is None:
            return RecoveryObservation.UNCERTAIN
        ref, link = proof
        entries = self._recorded(before)
        live = self.live(env.rtnl(ref), link, entries)
        if all(live.get(e.key) == e for e in entries):
            return RecoveryObservation.APPLIED
        if not any(e.key in live and self.blocks(live[e.key]) for e in entries):
            return RecoveryObservation.NOT_APPLIED
        return RecoveryObservation.UNCERTAIN

    def undo(self, ctx: EffectContext, before: Any, outputs: Outputs) -> None:
        env = environment(ctx)
        proof = proven_for_undo(env, before, ctx.effect_id)
        if proof is None:
            return
        ref, link = proof
        ipr = env.rtnl(ref)
        entries = self._recorded(before)
        live = self.live(ipr, link, entries)
        refused: list[str] = []
        for entry in reversed(entries):
            found = live.get(entry.key)
            if found is None or (found != entry and not self.blocks(found)):
                _log.info(
                    "effect=%s event=undo-skip entry=%s reason=gone",
                    ctx.effect_id,
                    self.describe(entry),
                )
                continue
            if found != entry:
                refused.append(f"{self.describe(entry)} was changed by someone else")
                continue
            self.delete(ipr, entry)
        if refused:
            raise ExecutorError(
                self.not_owned_code, "left in place, not proven ours: " + "; ".join(refused)
            )
