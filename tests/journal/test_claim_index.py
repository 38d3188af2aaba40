"""The journal's in-memory claim index (``dmn.agent.journal.claim_index``) answers
:meth:`JournalStore.attachments_naming` exactly as a scan of every attachment record
would: after every commit (synced or not, puts, deletes, retention), after a reopen, after
a SIGKILL of the writer at any point of a stream of commits, with writers and readers in
several threads, and for claim UIDs and sandbox ids a tenant chose to look alike."""

from __future__ import annotations

import json
import random
import signal
import subprocess
import sys
import threading
from pathlib import Path

import pytest
from rocksdict import Options, Rdict

from dmn.agent.journal import keys
from dmn.agent.journal.records import (
    AttachedClaim,
    AttachmentIdentity,
    AttachmentRecord,
    AttachmentState,
    RevisionRef,
)
from dmn.agent.journal.store import DB_DIR, JournalStore

ROOT = Path(__file__).resolve().parents[2]

CLAIMS = ["c1", "c10", "c1/0", "c%2F", "c2", "c3"]  # prefixes and escapes of each other
SANDBOXES = ["s1", "s1/x", "s%2F", "s10", "s2"]


def _claim(uid: str) -> AttachedClaim:
    return AttachedClaim(uid, "fp", "ns", f"name-{uid}", RevisionRef("rev", "uid", "sha256:0"))


def _record(rng: random.Random) -> AttachmentRecord:
    identity = AttachmentIdentity(
        "node", "boot", rng.choice(["pod-a", "pod/b"]), rng.choice(SANDBOXES)
    )
    return AttachmentRecord(
        identity,
        state=rng.choice(list(AttachmentState)),
        claims=[_claim(u) for u in rng.sample(CLAIMS, rng.randint(0, 3))],
    )


def _by_scan(store: JournalStore, uids: set[str]) -> list[AttachmentRecord]:
    return [r for r in store.attachments() if uids & {c.claim_uid for c in r.claims}]


def _assert_agrees(store: JournalStore) -> None:
    for uid in CLAIMS:
        assert store.attachments_naming([uid]) == _by_scan(store, {uid}), uid
    pair = {"c1", "c2"}
    assert store.attachments_naming(pair) == _by_scan(store, pair)
    assert store.attachments_naming(["c"]) == [] and store.attachments_naming([]) == []


def _random_batch(store: JournalStore, rng: random.Random) -> None:
    with store.batch(sync=rng.random() < 0.7) as b:
        for _ in range(rng.randint(1, 3)):
            rec = _record(rng)
            if rng.random() < 0.3:
                b.delete_attachment(rec.identity)
            else:
                b.put_attachment(rec)


def test_lookups_agree_with_a_scan_after_every_commit_and_a_reopen(tmp_path: Path) -> None:
    rng = random.Random(15)
    with JournalStore.open(tmp_path) as store:
        _assert_agrees(store)  # built on first use from an empty journal
        for i in range(120):
            _random_batch(store, rng)
            _assert_agrees(store)
            if i % 40 == 39:  # retention drops Removed records through the same write path
                store.forget_terminal()
                _assert_agrees(store)
        before = {u: store.attachments_naming([u]) for u in CLAIMS}
        assert any(before.values())
    with JournalStore.open(tmp_path) as store:  # rebuilt from what the database holds
        _assert_agrees(store)
        assert {u: store.attachments_naming([u]) for u in CLAIMS} == before
    with JournalStore.open_read_only(tmp_path) as view:
        _assert_agrees(view)


def test_a_claim_change_of_a_record_moves_its_key(tmp_path: Path) -> None:
    ident = AttachmentIdentity("node", "boot", "pod", "s1")
    with JournalStore.open(tmp_path) as store:
        _assert_agrees(store)
        with store.batch() as b:
            b.put_attachment(AttachmentRecord(ident, claims=[_claim("c1"), _claim("c2")]))
        with store.batch() as b:
            b.put_attachment(AttachmentRecord(ident, claims=[_claim("c3")]))
        assert store.attachments_naming(["c1"]) == [] and store.attachments_naming(["c2"]) == []
        assert [r.identity for r in store.attachments_naming(["c3"])] == [ident]
        with store.batch() as b:  # a delete and a put of one key in one batch: the put wins
            b.delete_attachment(ident)
            b.put_attachment(AttachmentRecord(ident, claims=[_claim("c1")]))
        assert [r.identity for r in store.attachments_naming(["c1"])] == [ident]
        assert store._claim_index is not None
        assert set(store._claim_index.snapshot().values()) == {frozenset({"c1"})}


@pytest.mark.adversarial
def test_an_undecodable_record_is_isolated_as_a_scan_isolates_it(tmp_path: Path) -> None:
    good = AttachmentIdentity("node", "boot", "pod", "s1")
    with JournalStore.open(tmp_path) as store, store.batch() as b:
        b.put_attachment(AttachmentRecord(good, claims=[_claim("c1")]))
    bad = keys.attachment_key(AttachmentIdentity("node", "boot", "pod", "s2"))
    db = Rdict(str(tmp_path / DB_DIR), Options(raw_mode=True))
    db[bad] = b'{"identity": {"nodeUID": "node"}, "claims": [{"claimUID": "c1"}]'  # cut short
    db.close()
    with JournalStore.open(tmp_path) as store:
        assert [r.identity for r in store.attachments_naming(["c1"])] == [good]
        assert bad in store.corrupt
        _assert_agrees(store)


WRITER = """
import random, sys
from dmn.agent.journal.store import JournalStore
from tests.journal.test_claim_index import _random_batch
store = JournalStore.open(sys.argv[1])
rng = random.Random(int(sys.argv[2]))
n = 0
while True:
    _random_batch(store, rng)
    n += 1
    if n % 10 == 0:
        print(n, flush=True)
"""


@pytest.mark.crash
@pytest.mark.parametrize("seed", [1, 2, 3])
def test_a_writer_killed_mid_stream_leaves_an_index_the_reopen_rebuilds_exactly(
    tmp_path: Path, seed: int
) -> None:
    """SIGKILL while commits stream (some unsynced): the index is never stored, so the
    reopened store's index is built from what survived and agrees with a scan of it."""
    proc = subprocess.Popen(
        [sys.executable, "-c", WRITER, str(tmp_path), str(seed)],
        stdout=subprocess.PIPE,
        text=True,
        cwd=ROOT,
    )
    assert proc.stdout is not None
    for _ in range(seed * 3):  # killed after 30, 60 or 90 commits (and a few more)
        assert proc.stdout.readline()
    proc.send_signal(signal.SIGKILL)
    proc.wait(timeout=30)
    with JournalStore.open(tmp_path) as store:
        assert store.attachments()  # the stream left records behind
        _assert_agrees(store)


def test_readers_and_writers_in_several_threads(tmp_path: Path) -> None:
    """A record that is never touched is always found while two threads put and delete
    other keys naming the same claims, and the index agrees with a scan after."""
    stays = AttachmentIdentity("node", "boot", "pod", "stays")
    with JournalStore.open(tmp_path) as store:
        with store.batch() as b:
            b.put_attachment(AttachmentRecord(stays, claims=[_claim("c1")]))
        _assert_agrees(store)
        stop = threading.Event()
        missed: list[int] = []

        def churn(n: int) -> None:
            rng = random.Random(n)
            while not stop.is_set():
                ident = AttachmentIdentity("node", "boot", "pod", rng.choice(SANDBOXES))
                with store.batch(sync=False) as b:
                    if rng.random() < 0.5:
                        b.put_attachment(
                            AttachmentRecord(ident, claims=[_claim(rng.choice(CLAIMS))])
                        )
                    else:
                        b.delete_attachment(ident)

        def read() -> None:
            for _ in range(400):
                found = {r.identity for r in store.attachments_naming(["c1"])}
                if stays not in found:
                    missed.append(1)

        writers = [threading.Thread(target=churn, args=(n,)) for n in range(2)]
        reader = threading.Thread(target=read)
        for t in (*writers, reader):
            t.start()
        reader.join()
        stop.set()
        for t in writers:
            t.join()
        assert missed == []
        _assert_agrees(store)


def test_a_commit_and_its_index_change_are_one_step_for_other_writers(tmp_path: Path) -> None:
    """Thread A deletes a record and is held between its write and its index change;
    thread B puts the same key meanwhile. B must wait for A's index change (one lock over
    both): otherwise B's write and index change land first, A's stale delete then removes
    the key from the index and a record in the database is missed by every lookup."""
    ident = AttachmentIdentity("node", "boot", "pod", "s1")
    with JournalStore.open(tmp_path) as store:
        with store.batch() as b:
            b.put_attachment(AttachmentRecord(ident, claims=[_claim("c1")]))
        _assert_agrees(store)
        in_a, release = threading.Event(), threading.Event()
        real = store._index_commit

        def held(index, puts, deletes):  # type: ignore[no-untyped-def]
            if threading.current_thread().name == "A":
                in_a.set()
                release.wait(10)
            real(index, puts, deletes)

        store._index_commit = held  # type: ignore[method-assign]

        def a() -> None:
            with store.batch() as b:
                b.delete_attachment(ident)

        def b() -> None:
            with store.batch() as batch:
                batch.put_attachment(AttachmentRecord(ident, claims=[_claim("c1")]))

        ta, tb = threading.Thread(target=a, name="A"), threading.Thread(target=b, name="B")
        ta.start()
        assert in_a.wait(10)
        tb.start()
        tb.join(0.3)  # B waits on the lock A holds (without it B finished here)
        release.set()
        ta.join()
        tb.join()
        assert [r.identity for r in store.attachments_naming(["c1"])] == [ident]
        _assert_agrees(store)


def test_the_hook_path_reads_only_the_records_naming_its_claims(tmp_path: Path) -> None:
    """What the index is for: a lookup decodes the records it returns, not the journal's
    other attachment records (here 200 Removed tombstones of other claims)."""
    with JournalStore.open(tmp_path) as store:
        with store.batch() as b:
            for i in range(200):
                ident = AttachmentIdentity("node", "boot", f"pod-{i}", "s")
                b.put_attachment(
                    AttachmentRecord(ident, AttachmentState.REMOVED, claims=[_claim(f"old-{i}")])
                )
            b.put_attachment(
                AttachmentRecord(
                    AttachmentIdentity("node", "boot", "pod", "s"), claims=[_claim("c1")]
                )
            )
        store.attachments_naming(["c1"])  # builds the index (one scan)
        decoded: list[bytes] = []
        real = store._get_record

        def counting(key: bytes, from_json):  # type: ignore[no-untyped-def]
            decoded.append(key)
            return real(key, from_json)

        store._get_record = counting  # type: ignore[method-assign]
        assert len(store.attachments_naming(["c1"])) == 1
        assert len(decoded) == 1
        assert json.loads(store._db.get(decoded[0]))["claims"][0]["claimUID"] == "c1"
