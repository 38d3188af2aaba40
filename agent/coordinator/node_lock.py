"""Which keys of the node mutation lock each node service call owns, and why.

The lock itself is :class:`dmn.engine.mutation_lock.NodeMutationLock` (a reader/writer node
lock plus per-key locks taken in one global order); :class:`NodeLock` is the services' view
of it: the keys an operation needs, taken from what it names (a sandbox, a claim) and from
what the journal says the claim holds (its devices), and a lock timeout turned into a
retryable :class:`Refusal` (``E_NODE_LOCK_TIMEOUT``) that the kubelet and NRI adapters
answer with.

What each key protects (every journal decision that reads another record is made under the
keys of everything that could write that record):

* ``sandbox/<attachment id>`` — one attachment: its record (Connecting → Ready → Removing →
  Removed, and the Removed tombstone a Stop or Remove leaves before any Run), its namespace
  pin and the order of its status writes. RunPodSandbox, the container gate, device nodes,
  StopPodSandbox, RemovePodSandbox and the reconcile tick's retry of one attachment.
* ``claim/<uid>`` — one claim: its preparation record and holds, and every attachment's use
  of it. NodePrepare and NodeUnprepare take it; so do RunPodSandbox and the teardown of an
  attachment for each claim it names. So "attached to another live sandbox"
  (``E_CLAIM_IN_USE``) and "still attached" (``E_ATTACHED``) are judged while nothing else
  can attach or detach that claim.
* ``device/<inventory id>`` — one inventory item: an exclusive reservation, or the parent of
  shares (the share count ``E_SHARED_BUSY`` reads, and a shared parent's children, e.g. the
  macvlan/ipvlan family check of a connect). NodePrepare takes those of the roots it is
  about to reserve or share; NodeUnprepare, RunPodSandbox and teardown those the journal
  records for their claims (only the claim's own prepare and unprepare write them, and they
  hold the claim's key).
* ``operation/<id>`` — taken by the runner itself around each run, cleanup or recovery.

Node-wide passes take the lock exclusively and exclude everything above: recovery at start
and the resolution of an earlier boot's attachments, NRI Synchronize, journal retention, an
eswitch transition or restore (its drain check reads every reservation and share), closing
the services.

Order: a call takes the sandbox key first, then (once the record names them) the claims',
then their devices', then the runner its operation's — always upwards, which is what makes
it deadlock-free (see :mod:`dmn.engine.mutation_lock`). No API I/O, runtime call or status
write happens under any of it.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from contextlib import contextmanager

from dmn.agent.coordinator.verify import Refusal
from dmn.agent.journal.store import JournalStore
from dmn.engine.mutation_lock import (
    LockKey,
    MutationLockTimeout,
    NodeMutationLock,
    claim_key,
    device_key,
    sandbox_key,
)


class NodeLock:
    def __init__(self, lock: NodeMutationLock, journal: JournalStore) -> None:
        self.lock = lock
        self.journal = journal

    @contextmanager
    def hold(self, reason: str, keys: Iterable[LockKey] = ()) -> Iterator[None]:
        """An ordinary operation owning ``keys``; a timeout is a retryable Refusal."""
        try:
            with self.lock.hold(reason, keys):
                yield
        except MutationLockTimeout as exc:
            raise Refusal(exc.code, str(exc), retryable=True) from exc

    @contextmanager
    def exclusive(self, reason: str) -> Iterator[None]:
        """A node-wide pass; a timeout is a retryable Refusal."""
        try:
            with self.lock.exclusive(reason):
                yield
        except MutationLockTimeout as exc:
            raise Refusal(exc.code, str(exc), retryable=True) from exc

    def claims(self, claim_uids: Iterable[str]) -> list[LockKey]:
        """The keys of these claims and of every device the journal records them holding
        (share parents and exclusive reservations)."""
        uids = set(claim_uids)
        keys = {claim_key(uid) for uid in uids}
        for share in self.journal.shares():
            if share.claim_uid in uids:
                keys.add(device_key(share.parent_inventory_id))
        holders = tuple(f"prep/{uid}/" for uid in uids)
        for res in self.journal.reservations():
            if res.holder.startswith(holders):
                keys.add(device_key(res.resource))
        return sorted(keys)

    @staticmethod
    def sandbox(attachment: str) -> LockKey:
        return sandbox_key(attachment)
