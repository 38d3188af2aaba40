"""Journal schema version 2: a version-1 store (written in the shape the version-1 agent
wrote) is read in memory by ``dmn journal show`` and migrated once by the writer; newer
versions are still refused and unmigratable records change nothing."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from rocksdict import Options, Rdict

from dmn.agent.journal import keys
from dmn.agent.journal.records import (
    AttachedClaim,
    AttachmentIdentity,
    AttachmentState,
    PreparationState,
    PreparedDevice,
    RevisionRef,
)
from dmn.agent.journal.schema import SCHEMA_VERSION
from dmn.agent.journal.store import DB_DIR, JournalCorruptError, JournalSchemaError, JournalStore
from dmn.cli.journal import run as journal_cli
from dmn.engine.journal import OperationState
from dmn.engine.runner import Runner
from dmn.interpreter.canonical_json import canonical_json
from tests.journal.programs import child_program
from tests.journal.world import World, world_executors

DIGEST_A = "sha256:" + "a" * 64
DIGEST_B = "sha256:" + "b" * 64
IDENT = AttachmentIdentity("node-uid", "boot-1", "pod-a", "sandbox/1")
OLD_IDENT = AttachmentIdentity("node-uid", "boot-0", "pod-a", "sandbox-0")


def _v1_records() -> dict[bytes, dict[str, Any]]:
    """What the version-1 agent wrote (its ``to_json``): devices from the dataclass's
    ``__dict__``, attachment claims as free-form objects, revisions comma-joined."""
    return {
        keys.key("prep", "claim-1", "fp-1"): {
            "claimUID": "claim-1",
            "allocationFingerprint": "fp-1",
            "state": "Prepared",
            "revision": "topo-r1",
            "contractDigest": DIGEST_A,
            "operations": ["prep-1-net1"],
            "devices": [
                {"request": "net1", "pool": "node-a", "device": "eth1-macvlan", "share_id": "s1"}
            ],
            "error": "",
        },
        keys.key("prep", "claim-2", "fp-2"): {
            "claimUID": "claim-2",
            "allocationFingerprint": "fp-2",
            "state": "Prepared",
            "revision": "topo-r2",
            "contractDigest": DIGEST_B,
            "operations": ["prep-2-net1"],
            "devices": [{"request": "net1", "pool": "node-a", "device": "eth2", "share_id": ""}],
            "error": "",
        },
        keys.key("prep", "claim-3", "fp-3"): {  # failed before any device was recorded
            "claimUID": "claim-3",
            "allocationFingerprint": "fp-3",
            "state": "Released",
            "revision": "topo-r1",
            "contractDigest": DIGEST_A,
            "operations": [],
            "devices": [],
            "error": "E_PREPARE_FAILED: root net1: boom",
        },
        keys.attachment_key(IDENT): {
            "identity": IDENT.to_json(),
            "state": "Ready",
            "claims": [
                {"claimUID": "claim-1", "fingerprint": "fp-1", "namespace": "ns", "name": "c1"},
                {"claimUID": "claim-2", "fingerprint": "fp-2", "namespace": "ns", "name": "c2"},
            ],
            "revision": "topo-r1,topo-r2",
            "operations": ["conn-1", "conn-2"],
            "error": "",
        },
        keys.attachment_key(OLD_IDENT): {  # the two keys the version-1 docstring promised
            "identity": OLD_IDENT.to_json(),
            "state": "Removed",
            "claims": [{"claimUID": "claim-1", "fingerprint": "fp-1"}],
            "revision": "",
            "operations": [],
            "error": "",
        },
    }


def _v1_store(state_dir: Path, extra: dict[bytes, Any] | None = None) -> None:
    """A real store: an operation written by the runner, version-1 coordinator records and
    the version-1 schema marker."""
    with JournalStore.open(state_dir) as store:
        Runner(store, world_executors(World())).run("op1", "claim/claim-1", child_program())
    db = Rdict(str(state_dir / DB_DIR), Options(raw_mode=True))
    for k, v in {**_v1_records(), **(extra or {})}.items():
        db[k] = canonical_json(v)
    db[keys.SCHEMA] = b'{"version":1}'
    db.close()


def _files(db_dir: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(db_dir.iterdir()) if p.is_file()}


def _check_migrated(store: JournalStore) -> None:
    p1 = store.get_preparation("claim-1", "fp-1")
    assert p1 is not None and p1.state is PreparationState.PREPARED
    assert p1.revision == RevisionRef("topo-r1", "", DIGEST_A)
    assert p1.devices == [PreparedDevice("net1", "node-a", "eth1-macvlan", "s1")]
    assert p1.operations == ["prep-1-net1"]
    p2 = store.get_preparation("claim-2", "fp-2")
    assert p2 is not None and p2.devices == [PreparedDevice("net1", "node-a", "eth2", "")]
    p3 = store.get_preparation("claim-3", "fp-3")
    assert p3 is not None and p3.state is PreparationState.RELEASED and p3.devices == []
    assert p3.error.startswith("E_PREPARE_FAILED")
    att = store.get_attachment(IDENT)
    assert att is not None and att.state is AttachmentState.READY
    assert att.claims == [
        AttachedClaim("claim-1", "fp-1", "ns", "c1", RevisionRef("topo-r1", "", DIGEST_A)),
        AttachedClaim("claim-2", "fp-2", "ns", "c2", RevisionRef("topo-r2", "", DIGEST_B)),
    ]
    assert att.operations == ["conn-1", "conn-2"]
    old = store.get_attachment(OLD_IDENT)
    assert old is not None and old.state is AttachmentState.REMOVED
    # no namespace or name was recorded: empty, and the revision comes from the preparation
    assert old.claims == [
        AttachedClaim("claim-1", "fp-1", "", "", RevisionRef("topo-r1", "", DIGEST_A))
    ]
    assert len(store.preparations()) == 3 and len(store.attachments()) == 2
    op = store.load_operation("op1")
    assert op is not None and op.state is OperationState.COMPLETED


def test_read_only_view_of_a_version_1_store_is_migrated_in_memory(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    _v1_store(tmp_path)
    before = _files(tmp_path / DB_DIR)
    with JournalStore.open_read_only(tmp_path) as store:
        assert store.schema_version == 1
        _check_migrated(store)
    assert journal_cli(["show", "--state-dir", str(tmp_path), "--format", "json"]) == 0
    dump = json.loads(capsys.readouterr().out)
    assert dump["schemaVersion"] == 1
    assert dump["attachments"][0]["claims"][0]["revision"]["digest"] in (DIGEST_A, DIGEST_B)
    assert journal_cli(["show", "--state-dir", str(tmp_path)]) == 0
    assert "(schema v1)" in capsys.readouterr().out
    assert _files(tmp_path / DB_DIR) == before  # inspection never writes


def test_writer_migrates_a_version_1_store_in_one_commit(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    _v1_store(tmp_path)
    with JournalStore.open(tmp_path) as store:
        assert store.commits == 1  # records and the new marker: one synced commit
        assert store.schema_version == SCHEMA_VERSION == 2
        _check_migrated(store)
    # stored in the new shape: a second open migrates nothing, reads the same
    db = Rdict(str(tmp_path / DB_DIR), Options(raw_mode=True))
    stored = json.loads(db[keys.key("prep", "claim-1", "fp-1")])
    db.close()
    assert stored["revision"] == {"name": "topo-r1", "uid": "", "digest": DIGEST_A}
    assert "contractDigest" not in stored and "share_id" not in stored["devices"][0]
    with JournalStore.open(tmp_path) as store:
        assert store.commits == 0
        _check_migrated(store)
    assert journal_cli(["show", "--state-dir", str(tmp_path)]) == 0
    assert "(schema v2)" in capsys.readouterr().out


def test_newer_versions_are_still_refused_after_migration(tmp_path: Path) -> None:
    _v1_store(tmp_path)
    JournalStore.open(tmp_path).close()
    db = Rdict(str(tmp_path / DB_DIR), Options(raw_mode=True))
    db[keys.SCHEMA] = b'{"version":3}'
    db.close()
    before = _files(tmp_path / DB_DIR)
    with pytest.raises(JournalSchemaError, match="schema version 3"):
        JournalStore.open(tmp_path)
    with pytest.raises(JournalSchemaError):
        JournalStore.open_read_only(tmp_path)
    assert _files(tmp_path / DB_DIR) == before


@pytest.mark.parametrize(
    ("key", "value"),
    [
        (  # two claims, three revision names: the claims' revisions are not knowable
            keys.attachment_key(AttachmentIdentity("n", "b", "p", "s")),
            {
                "identity": AttachmentIdentity("n", "b", "p", "s").to_json(),
                "state": "Ready",
                "claims": [
                    {"claimUID": "claim-1", "fingerprint": "fp-1"},
                    {"claimUID": "claim-2", "fingerprint": "fp-2"},
                ],
                "revision": "a,b,c",
                "operations": [],
            },
        ),
        (keys.key("prep", "x", "y"), {"claimUID": "x", "state": "Prepared", "devices": [{}]}),
    ],
)
def test_an_unmigratable_record_is_corrupt_and_nothing_changes(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], key: bytes, value: Any
) -> None:
    _v1_store(tmp_path, {key: value})
    before = _files(tmp_path / DB_DIR)
    with pytest.raises(JournalCorruptError, match="not a version-1 record"):
        JournalStore.open(tmp_path)
    assert journal_cli(["show", "--state-dir", str(tmp_path)]) == 1
    err = capsys.readouterr().err
    assert "E_JOURNAL_CORRUPT" in err and "Traceback" not in err
    assert _files(tmp_path / DB_DIR) == before
    with pytest.raises(JournalCorruptError):
        JournalStore.open_read_only(tmp_path)
