"""Which attachment records name a claim: an in-memory index of the journal's ``att/`` family.

Why: the agent asks "which attachments hold claim X?" on every RunPodSandbox (a new
incarnation never takes a live one's claims), on every NodeUnprepare and when it looks for
sandboxes the runtime released. Answered by a scan, each of those decoded every attachment
record of the journal, Removed tombstones included, so a hook's cost grew with the node's
history (about 10 % of the agent's RunPodSandbox samples in ``benchmarks/pod_storm.py``).

Contract (kept by :class:`dmn.agent.journal.store.JournalStore`, the only user):

* The index is never stored. It is built from the records the store reads (one scan, the
  first time it is needed after open) and changed by the store's single write path with
  the outcome of each commit that touched ``att/`` keys, under the same lock as that
  commit — so after a crash or a restart there is nothing to repair: a new process builds
  it from what the database holds.
* It maps each attachment key to the claim UIDs of the record stored there, and each
  claim UID to those keys; :meth:`keys_naming` answers from it. The store decodes the
  records it returns and checks their claims again, so an answer is exactly what a scan
  would give (an undecodable record is isolated and never indexed, as a scan skips it).
* A commit whose outcome is unknown (a failed write) drops the index; the next lookup
  builds it again from what the database then shows.

This module is pure: no I/O, no locking (the store holds its lock around every call).
"""

from __future__ import annotations

from collections.abc import Iterable


class ClaimIndex:
    """Attachment keys by claim UID, and claim UIDs by attachment key."""

    def __init__(self) -> None:
        self._claims_of: dict[bytes, frozenset[str]] = {}
        self._keys_of: dict[str, set[bytes]] = {}

    def put(self, key: bytes, claims: Iterable[str]) -> None:
        """The record at ``key`` now names exactly ``claims``."""
        new = frozenset(claims)
        old = self._claims_of.get(key, frozenset())
        for uid in old - new:
            self._unlink(uid, key)
        for uid in new - old:
            self._keys_of.setdefault(uid, set()).add(key)
        if new:
            self._claims_of[key] = new
        else:
            self._claims_of.pop(key, None)

    def delete(self, key: bytes) -> None:
        """No record at ``key`` any more."""
        for uid in self._claims_of.pop(key, frozenset()):
            self._unlink(uid, key)

    def keys_naming(self, claim_uids: Iterable[str]) -> list[bytes]:
        """The keys of the records naming any of ``claim_uids``, in key (scan) order."""
        found: set[bytes] = set()
        for uid in claim_uids:
            found |= self._keys_of.get(uid, set())
        return sorted(found)

    def snapshot(self) -> dict[bytes, frozenset[str]]:
        """Every indexed key and its claims (tests compare it with a full scan)."""
        return dict(self._claims_of)

    def _unlink(self, uid: str, key: bytes) -> None:
        held = self._keys_of.get(uid)
        if held is not None:
            held.discard(key)
            if not held:
                del self._keys_of[uid]
