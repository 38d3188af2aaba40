"""Journal write failures and undecodable records (issue 13, deliverable 6).

A full disk is real: the journal lives on a small tmpfs this test mounts (root) and
unmounts, and is filled until RocksDB's commit fails with ENOSPC. Before: rocksdict raised
a bare ``Exception`` and the next write was tried again as if nothing happened. Now: the
failed commit is a reason-coded :class:`JournalWriteError`, and the store refuses every
later write (:class:`JournalFailedError`) even after space returns, so the agent stops
mutating and restarts into recovery; reads keep working.
"""

from __future__ import annotations

import os
import subprocess
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from rocksdict import Options, Rdict

from dmn.agent.journal.records import (
    AttachedClaim,
    AttachmentIdentity,
    AttachmentRecord,
    PreparationRecord,
    RevisionRef,
)
from dmn.agent.journal.store import (
    DB_DIR,
    JournalFailedError,
    JournalStore,
    JournalWriteError,
)
from dmn.engine.runner import Runner
from tests.journal.programs import child_program
from tests.journal.world import World, world_executors

pytestmark = pytest.mark.adversarial


@pytest.fixture
def small_tmpfs(tmp_path: Path) -> Iterator[Path]:
    if os.geteuid() != 0:
        pytest.fail("mounting a tmpfs needs root (the test suite runs as root)")
    mnt = tmp_path / f"tmpfs-{uuid.uuid4().hex[:8]}"
    mnt.mkdir()
    subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=16m,mode=0700", "tmpfs", str(mnt)], check=True
    )
    try:
        yield mnt
    finally:
        subprocess.run(["umount", "-l", str(mnt)], check=True)


def _fill(path: Path) -> Path:
    """Fill the filesystem of ``path`` to the last byte; returns the filler file."""
    filler = path / "filler"
    with open(filler, "wb", buffering=0) as f:
        try:
            while True:
                f.write(b"\0" * 65536)
        except OSError:
            pass
        try:
            while True:
                f.write(b"\0" * 512)
        except OSError:
            pass
    return filler


def test_enospc_commit_is_reason_coded_and_the_store_refuses_writes_after_it(
    small_tmpfs: Path,
) -> None:
    state = small_tmpfs / "state"
    store = JournalStore.open(state)
    try:
        with store.batch() as b:
            b.put_preparation(PreparationRecord("claim-ok", "fp"))
        assert store.writable() == (True, "")
        filler = _fill(small_tmpfs)
        big = "x" * 200_000  # larger than anything RocksDB's WAL buffer can still take
        with pytest.raises(JournalWriteError) as failed:
            for i in range(64):
                with store.batch() as b:
                    b.put_preparation(PreparationRecord(f"claim-{i}", "fp", error=big))
        assert failed.value.code == "E_JOURNAL_WRITE"
        assert "commit failed" in str(failed.value)
        ok, reason = store.writable()
        assert not ok and reason.startswith("last commit failed")
        filler.unlink()  # space returns: the store still refuses (what reached disk is unknown)
        with pytest.raises(JournalFailedError) as refused, store.batch() as b:
            b.put_preparation(PreparationRecord("claim-after", "fp"))
        assert refused.value.code == "E_JOURNAL_FAILED"
        assert "restart the agent" in str(refused.value)
        with pytest.raises(JournalFailedError):
            Runner(store, world_executors(World())).run("op-after", "att/a", child_program())
        assert store.get_preparation("claim-ok", "fp") is not None  # reads still work
    finally:
        store.close()
    with JournalStore.open(state) as reopened:  # a restart recovers: writable again
        assert reopened.get_preparation("claim-ok", "fp") is not None
        assert reopened.get_preparation("claim-after", "fp") is None
        with reopened.batch() as b:
            b.put_preparation(PreparationRecord("claim-later", "fp"))
        assert reopened.writable() == (True, "")


def test_an_undecodable_record_is_isolated_and_the_rest_is_served(tmp_path: Path) -> None:
    with JournalStore.open(tmp_path) as store:
        with store.batch() as b:
            b.put_preparation(PreparationRecord("claim-a", "fp"))
            b.put_preparation(PreparationRecord("claim-c", "fp"))
        Runner(store, world_executors(World())).run("op-good", "att/a", child_program())
        Runner(store, world_executors(World())).run("op-bad", "att/b", child_program())
    db = Rdict(str(tmp_path / DB_DIR), Options(raw_mode=True))
    db[b"prep/claim-b/fp"] = b"\xff not json"  # written raw, as a torn or foreign write would
    db[b"op/op-bad/e/00000"] = b"{"
    db.close()
    with JournalStore.open(tmp_path) as store:
        assert [p.claim_uid for p in store.preparations()] == ["claim-a", "claim-c"]
        assert [op.operation_id for op in store.operations()] == ["op-good"]
        assert store.unfinished_operations() == []
        corrupt = sorted(store.corrupt)
        assert corrupt == [b"op/op-bad", b"op/op-bad/e/00000", b"prep/claim-b/fp"]
        assert "not JSON" in store.corrupt[b"prep/claim-b/fp"]
        # the rest is writable: isolation does not fail the store
        with store.batch() as b:
            b.put_preparation(PreparationRecord("claim-d", "fp"))
        assert store.writable() == (True, "")


def test_failed_fsync_is_reason_coded_sticky_and_a_reopen_recovers(tmp_path: Path) -> None:
    """Issue 13 (deliverable 6), the injected fsync failure: the kernel fails the WAL's
    fdatasync with EIO (see tests/journal/failing_disk.py for why this trick). The first
    small commit after the disk fails is a JournalWriteError, the failure listeners hear
    it once, every later write is refused; after repair a reopened store has what was
    committed before and is writable."""
    from tests.journal.failing_disk import failing_disk

    heard: list[str] = []
    with failing_disk(tmp_path) as disk:
        state = disk.mount / "state"
        store = JournalStore.open(state)
        store.failure_listeners.append(lambda exc: heard.append(exc.code))
        try:
            with store.batch() as b:
                b.put_preparation(PreparationRecord("claim-ok", "fp"))
            disk.fill()
            with pytest.raises(JournalWriteError) as failed, store.batch() as b:
                b.put_preparation(PreparationRecord("claim-lost", "fp"))
            assert "fdatasync" in str(failed.value) or "Input/output" in str(failed.value)
            assert heard == ["E_JOURNAL_WRITE"]
            with pytest.raises(JournalFailedError), store.batch() as b:
                b.put_preparation(PreparationRecord("claim-after", "fp"))
            assert heard == ["E_JOURNAL_WRITE"]  # once
            assert not store.writable()[0]
        finally:
            store.close()  # the filesystem went read-only: close must not raise
        disk.repair()
        with JournalStore.open(state) as reopened:
            assert reopened.get_preparation("claim-ok", "fp") is not None
            assert reopened.get_preparation("claim-after", "fp") is None
            with reopened.batch() as b:
                b.put_preparation(PreparationRecord("claim-later", "fp"))
            assert reopened.writable() == (True, "")


def test_a_failed_attachment_commit_leaves_lookups_exact(small_tmpfs: Path) -> None:
    """The claim index (``dmn.agent.journal.claim_index``) follows commits in memory; a
    commit that failed may or may not have reached the database, so the index is dropped
    and the next lookup rebuilds it from what reads show: lookups by claim still agree
    with a scan of every attachment record."""

    def attachment(sandbox: str, error: str = "") -> AttachmentRecord:
        claim = AttachedClaim("c1", "fp", "ns", "n", RevisionRef("rev"))
        return AttachmentRecord(
            AttachmentIdentity("node", "boot", "pod", sandbox), claims=[claim], error=error
        )

    def by_scan(store: JournalStore) -> list[AttachmentRecord]:
        return [r for r in store.attachments() if any(c.claim_uid == "c1" for c in r.claims)]

    store = JournalStore.open(small_tmpfs / "state")
    try:
        with store.batch() as b:
            b.put_attachment(attachment("ok"))
        assert [r.identity.sandbox_id for r in store.attachments_naming(["c1"])] == ["ok"]
        filler = _fill(small_tmpfs)
        big = "x" * 200_000
        with pytest.raises(JournalWriteError):
            for i in range(64):
                with store.batch() as b:
                    b.put_attachment(attachment(f"s{i}", error=big))
        assert store._claim_index is None
        assert store.attachments_naming(["c1"]) == by_scan(store)
        filler.unlink()
    finally:
        store.close()
    with JournalStore.open(small_tmpfs / "state") as reopened:
        assert reopened.attachments_naming(["c1"]) == by_scan(reopened)
        assert "ok" in {r.identity.sandbox_id for r in reopened.attachments_naming(["c1"])}
