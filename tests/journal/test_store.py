"""The RocksDB journal store: single writer, schema refusal, modes, lookups, inspection."""

from __future__ import annotations

import json
import os
import shutil
import signal
import stat
import subprocess
import sys
from pathlib import Path

import pytest
from rocksdict import Options, Rdict

from dmn.agent.journal import keys
from dmn.agent.journal.records import (
    AttachedClaim,
    AttachmentIdentity,
    AttachmentRecord,
    AttachmentState,
    NamespacePin,
    PreparationRecord,
    PreparationState,
    Reservation,
    RevisionRef,
    ShareRef,
)
from dmn.agent.journal.store import (
    DB_DIR,
    JournalCorruptError,
    JournalError,
    JournalHeldError,
    JournalMissingError,
    JournalSchemaError,
    JournalStore,
    ReservationConflict,
    Retention,
)
from dmn.cli.journal import run as journal_cli
from dmn.engine.journal import OperationState
from dmn.engine.runner import Runner
from tests.journal.programs import child_program
from tests.journal.world import World, world_executors

ROOT = Path(__file__).resolve().parents[2]

HOLDER = """
import sys
from dmn.agent.journal.store import JournalStore
from dmn.agent.journal.records import PreparationRecord
from dmn.engine.runner import Runner
from tests.journal.programs import child_program
from tests.journal.world import World, world_executors
store = JournalStore.open(sys.argv[1])
with store.batch() as b:
    b.put_preparation(PreparationRecord("claim-1", "fp-1"))
Runner(store, world_executors(World())).run("op-held", "prep/claim-1/fp-1", child_program())
print("held", flush=True)
sys.stdin.readline()
"""


def _holder(state_dir: Path) -> subprocess.Popen[str]:
    proc = subprocess.Popen(
        [sys.executable, "-c", HOLDER, str(state_dir)],
        cwd=ROOT,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    assert proc.stdout is not None and proc.stdout.readline().strip() == "held"
    return proc


def test_second_writer_process_gets_a_clear_error(tmp_path: Path) -> None:
    proc = _holder(tmp_path)
    try:
        with pytest.raises(JournalHeldError) as err:
            JournalStore.open(tmp_path)
        assert f"held by another agent (pid {proc.pid})" in str(err.value)
        assert "LOCK" not in str(err.value)
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait()
    # the kernel drops the flock with the process: a new agent takes over and recovers
    with JournalStore.open(tmp_path) as store:
        assert store.load_operation("op-held").state is OperationState.COMPLETED


def test_read_only_inspection_while_an_agent_holds_the_journal(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    proc = _holder(tmp_path)
    try:
        assert journal_cli(["show", "--state-dir", str(tmp_path), "--format", "json"]) == 0
        dump = json.loads(capsys.readouterr().out)
        assert [p["claimUID"] for p in dump["preparations"]] == ["claim-1"]
        [op] = dump["operations"]
        assert op["operationID"] == "op-held" and op["state"] == "Completed"
        assert [e["state"] for e in op["effects"]] == ["Applied"] * 3
        assert journal_cli(["show", "--state-dir", str(tmp_path)]) == 0
        text = capsys.readouterr().out
        assert "op-held  Completed  test-cni@v1 connect" in text
        # through the real CLI entry point, in another process
        out = subprocess.run(
            [sys.executable, "-m", "dmn", "journal", "show", "--state-dir", str(tmp_path)],
            cwd=ROOT,
            capture_output=True,
            text=True,
            check=True,
        ).stdout
        assert "preparations (1)" in out
    finally:
        assert proc.stdin is not None
        proc.stdin.write("\n")
        proc.stdin.close()
        proc.wait()


def test_show_missing_journal_is_a_clear_error(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert journal_cli(["show", "--state-dir", str(tmp_path / "none")]) == 1
    assert "error[E_JOURNAL_MISSING]" in capsys.readouterr().err
    with pytest.raises(JournalMissingError):
        JournalStore.open_read_only(tmp_path / "none")
    assert journal_cli(["bogus"]) == 2


def _files(db_dir: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(db_dir.iterdir()) if p.is_file()}


def test_newer_schema_is_refused_and_nothing_changes(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    with JournalStore.open(tmp_path) as store:
        Runner(store, world_executors(World())).run("op1", "att/a", child_program())
    db = Rdict(str(tmp_path / DB_DIR), Options(raw_mode=True))
    db[keys.SCHEMA] = b'{"version":99}'
    db.close()
    before = _files(tmp_path / DB_DIR)
    with pytest.raises(JournalSchemaError) as err:
        JournalStore.open(tmp_path)
    assert "schema version 99" in str(err.value) and "nothing was changed" in str(err.value)
    with pytest.raises(JournalSchemaError):
        JournalStore.open_read_only(tmp_path)
    assert journal_cli(["show", "--state-dir", str(tmp_path)]) == 1
    assert "E_JOURNAL_SCHEMA" in capsys.readouterr().err
    assert _files(tmp_path / DB_DIR) == before
    # the refusal released the writer lock
    db = Rdict(str(tmp_path / DB_DIR), Options(raw_mode=True))
    db[keys.SCHEMA] = b'{"version":1}'
    db.close()
    with JournalStore.open(tmp_path) as store:
        assert store.load_operation("op1") is not None


def test_files_are_private_and_commits_synchronous(tmp_path: Path) -> None:
    with JournalStore.open(tmp_path / "state") as store:
        assert store._sync.sync is True  # every commit is a synced WriteBatch
        Runner(store, world_executors(World())).run("op1", "att/a", child_program())
    db_dir = tmp_path / "state" / DB_DIR
    assert stat.S_IMODE(os.stat(tmp_path / "state").st_mode) == 0o700
    assert stat.S_IMODE(os.stat(db_dir).st_mode) == 0o700
    modes = {p.name: stat.S_IMODE(p.stat().st_mode) for p in db_dir.iterdir()}
    assert modes and set(modes.values()) == {0o600}, modes
    lock = tmp_path / "state" / "journal.lock"
    assert stat.S_IMODE(lock.stat().st_mode) == 0o600


CLAIM = AttachedClaim("c", "f", "ns", "claim-c", RevisionRef("rev-1", "rev-uid", "sha256:0"))


def test_coordinator_records_and_lookups(tmp_path: Path) -> None:
    ident = AttachmentIdentity("node-uid", "boot/1", "pod-a", "sandbox-1")
    other = AttachmentIdentity("node-uid", "boot/1", "pod-a", "sandbox-2")
    with JournalStore.open(tmp_path) as store:
        base = store.commits
        with store.batch() as b:
            b.put_preparation(PreparationRecord("claim/1", "fp-a", operations=["op-p1"]))
            b.put_preparation(PreparationRecord("claim/1", "fp-b"))
            b.put_preparation(PreparationRecord("claim/10", "fp-a"))
            b.put_attachment(AttachmentRecord(ident, claims=[CLAIM]))
            b.put_attachment(AttachmentRecord(other, state=AttachmentState.READY))
            b.put_share(ShareRef("pf0", "claim/1", "share-1", "fp-a", "macvlan-parent"))
            b.put_share(ShareRef("pf0", "claim/2", "share-2"))
            b.put_share(ShareRef("pf01", "claim/3", "share-3"))
            b.put_pin(NamespacePin(keys.attachment_id(ident), "/run/netns/x", 4, 4026532000, "b"))
        assert store.commits - base == 1  # one batch, one synced commit
        prep = store.get_preparation("claim/1", "fp-a")
        assert prep is not None and prep.operations == ["op-p1"]
        assert prep.state is PreparationState.PREPARING
        assert [p.allocation_fingerprint for p in store.preparations("claim/1")] == ["fp-a", "fp-b"]
        assert store.get_attachment(ident).claims == [CLAIM]
        assert store.get_attachment(other).state is AttachmentState.READY
        assert len(store.attachments(pod_uid="pod-a")) == 2
        assert {s.claim_uid for s in store.shares("pf0")} == {"claim/1", "claim/2"}
        assert store.get_pin(keys.attachment_id(ident)).inode == 4026532000
        store.reserve([Reservation("pf1", "prep/claim/1/fp-a"), Reservation("rd:0000:3b", "x")])
        store.reserve([Reservation("pf1", "prep/claim/1/fp-a")])  # same holder: no-op
        with pytest.raises(ReservationConflict):
            store.reserve([Reservation("pf2", "y"), Reservation("pf1", "prep/other")])
        assert store.reservation("pf2") is None  # all or nothing
        with store.batch() as b:
            b.delete_share("pf0", "claim/2", "share-2")
            b.delete_reservation("pf1")
        assert {s.share_id for s in store.shares("pf0")} == {"share-1"}
        assert store.reservation("pf1") is None


def test_an_unsynced_batch_rides_with_the_next_synced_commit(tmp_path: Path) -> None:
    """``batch(sync=False)`` costs no synced commit of its own; a later synced commit
    persists it too (WAL order), so it is there after a reopen."""
    with JournalStore.open(tmp_path) as store:
        base = store.commits
        with store.batch(sync=False) as b:
            b.put_reservation(Reservation("rides", "h"))
        assert store.commits == base and store.reservation("rides") is not None
        with store.batch() as b:
            b.put_reservation(Reservation("synced", "h"))
        assert store.commits == base + 1
    with JournalStore.open(tmp_path) as store:
        assert store.reservation("rides") is not None and store.reservation("synced") is not None


def test_key_escaping_keeps_prefix_scans_exact() -> None:
    assert keys.key("prep", "a/b", "c%d") == b"prep/a%2Fb/c%25d"
    assert keys.split(keys.key("prep", "a/b", "c%d")) == ["prep", "a/b", "c%d"]
    assert not keys.key("prep", "claim/10", "x").startswith(keys.prefix("prep", "claim/1"))


SYNC_PROBE = """
import os, sys
from dmn.agent.journal.store import JournalStore
from dmn.agent.journal.records import Reservation
from dmn.engine.runner import Runner
from tests.journal.programs import child_program
from tests.journal.world import World, world_executors
store = JournalStore.open(sys.argv[1])
runner = Runner(store, world_executors(World()))
os.write(2, b"BEGIN-COMMITS\\n")
for i in range(5):
    with store.batch() as b:
        b.put_reservation(Reservation(f"r{i}", "h"))
runner.run("op1", "att/a", child_program())
os.write(2, b"END-COMMITS\\n")
print(store.commits - 1)
store.close()
"""


@pytest.mark.skipif(shutil.which("strace") is None, reason="needs strace")
def test_each_commit_is_exactly_one_fdatasync(tmp_path: Path) -> None:
    trace = tmp_path / "strace.txt"
    proc = subprocess.run(
        [
            *("strace", "-f", "-e", "trace=fsync,fdatasync,sync_file_range,write"),
            *("-o", str(trace), sys.executable, "-c", SYNC_PROBE, str(tmp_path / "state")),
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=True,
    )
    commits = int(proc.stdout.strip())
    # 5 batches, then a 3-effect run: 3 before-images (the first with the intent, later ones
    # with the previous outcome) + completion with the last outcome = N + 1 (issue 15)
    assert commits == 5 + 3 + 1
    lines = trace.read_text().splitlines()
    begin = next(i for i, line in enumerate(lines) if "BEGIN-COMMITS" in line)
    end = next(i for i, line in enumerate(lines) if "END-COMMITS" in line)
    syncs = [line for line in lines[begin:end] if "sync" in line.split("(")[0]]
    assert len(syncs) == commits, syncs
    assert all("fdatasync(" in line for line in syncs)


def test_corrupt_journal_is_a_clear_error_and_never_recreated(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    with JournalStore.open(tmp_path) as store:
        Runner(store, world_executors(World())).run("op1", "att/a", child_program())
    db_dir = tmp_path / DB_DIR
    (db_dir / "CURRENT").write_text("MANIFEST-999999\n")
    before = _files(db_dir)
    with pytest.raises(JournalError) as err:
        JournalStore.open(tmp_path)
    assert "cannot open journal" in str(err.value)
    assert journal_cli(["show", "--state-dir", str(tmp_path)]) == 1
    assert "error[E_JOURNAL]" in capsys.readouterr().err
    assert _files(db_dir) == before
    # a database directory without CURRENT is not silently replaced by an empty journal
    (db_dir / "CURRENT").unlink()
    with pytest.raises(JournalError):
        JournalStore.open(tmp_path)
    assert not (db_dir / "CURRENT").exists()


def test_only_undone_operations_can_be_forgotten(tmp_path: Path) -> None:
    world = World()
    with JournalStore.open(tmp_path) as store:
        runner = Runner(store, world_executors(world))
        runner.run("done", "att/a", child_program("c1"))
        world.fail = {"apply": "up"}
        runner.run("failed", "att/b", child_program("c2"))
        world.fail = {"apply": "up", "undo": "mtu"}
        runner.run("stuck", "att/c", child_program("c3"))
        assert store.load_operation("stuck").state is OperationState.QUARANTINED
        assert not store.forget_operation("done")  # completed: cleanup authority
        assert not store.forget_operation("stuck")  # quarantined: kept for inspection
        assert not store.forget_operation("ghost")
        assert store.forget_operation("failed")
        assert store.load_operation("failed") is None
        assert store.operation_ids() == ["done", "stuck"]
        assert store.operations("att/b") == []
        assert [op_id for op_id, _ in store.quarantined_effects()] == ["stuck"]


@pytest.mark.parametrize(
    ("key", "value", "needle"),
    [
        (b"meta/schema", b"garbage", "meta/schema"),
        (b"meta/schema", b'{"v":1}', "no integer version"),
        (b"op/x", b'{"a":1}', "op/x"),
        (b"prep/a/b", b"not json", "prep/a/b"),
        (b"open/x", b'{"seq":"zz"}', "open/x"),
        (b"op/\xff\xfe", b"{}", "not UTF-8"),
    ],
)
def test_corrupt_records_are_reason_coded_never_a_traceback(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], key: bytes, value: bytes, needle: str
) -> None:
    with JournalStore.open(tmp_path) as store:
        Runner(store, world_executors(World())).run("op1", "att/a", child_program())
    db = Rdict(str(tmp_path / DB_DIR), Options(raw_mode=True))
    db[key] = value
    db.close()
    before = _files(tmp_path / DB_DIR)  # inspection and refusals leave the files as they were
    if key == keys.SCHEMA:  # no journal without a schema: show and the writer refuse
        assert journal_cli(["show", "--state-dir", str(tmp_path), "--format", "json"]) == 1
        (diag,) = json.loads(capsys.readouterr().out)  # JSON was asked: the failure too
        assert diag["code"] == "E_JOURNAL_CORRUPT" and needle in diag["message"]
        assert journal_cli(["show", "--state-dir", str(tmp_path)]) == 1
        err = capsys.readouterr().err
        assert "error[E_JOURNAL_CORRUPT]" in err and needle in err and "Traceback" not in err
        with pytest.raises(JournalCorruptError):
            JournalStore.open(tmp_path)
        assert _files(tmp_path / DB_DIR) == before
        return
    # any other record is isolated: show lists it and everything else, reason-coded
    assert journal_cli(["show", "--state-dir", str(tmp_path), "--format", "json"]) == 0
    out, err = capsys.readouterr()
    assert "warning[E_JOURNAL_CORRUPT]" in err and needle in err and "Traceback" not in err
    dump = json.loads(out)
    assert [c["key"] for c in dump["corrupt"]] and needle in json.dumps(dump["corrupt"])
    assert dump["operations"] and dump["operations"][0]["operationID"] == "op1"
    with JournalStore.open(tmp_path) as store:
        assert store.operations()[0].operation_id == "op1"
        assert needle in json.dumps(store.dump()["corrupt"])


def test_foreign_rocksdb_is_not_adopted(tmp_path: Path) -> None:
    db = Rdict(str(tmp_path / DB_DIR), Options(raw_mode=True))
    db[b"hello"] = b"world"
    db.close()
    before = _files(tmp_path / DB_DIR)
    with pytest.raises(JournalError, match="without a journal schema marker"):
        JournalStore.open(tmp_path)
    with pytest.raises(JournalError, match="without a journal schema marker"):
        JournalStore.open_read_only(tmp_path)
    assert _files(tmp_path / DB_DIR) == before


def test_cli_bad_inputs_exit_cleanly(tmp_path: Path) -> None:
    """Through the real entry point: every bad input is one reason-coded line, exit 1 or 2."""
    (tmp_path / "garbage" / DB_DIR).mkdir(parents=True)
    (tmp_path / "garbage" / DB_DIR / "CURRENT").write_text("nonsense\n")
    (tmp_path / "afile").write_text("x")
    cases = [
        (["show", "--state-dir", str(tmp_path / "none")], 1, "E_JOURNAL_MISSING"),
        (["show", "--state-dir", str(tmp_path / "afile")], 1, "E_JOURNAL_MISSING"),
        (["show", "--state-dir", str(tmp_path / "garbage")], 1, "error[E_JOURNAL_CORRUPT]"),
        (["show", "--state-dir", str(tmp_path), "--format", "yaml"], 2, "invalid choice"),
        (["show"], 2, "--state-dir"),
        ([], 2, "required"),
    ]
    for argv, code, needle in cases:
        proc = subprocess.run(
            [sys.executable, "-m", "dmn", "journal", *argv],
            cwd=ROOT,
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert proc.returncode == code, (argv, proc.stderr)
        assert needle in proc.stderr and "Traceback" not in proc.stderr, (argv, proc.stderr)


def _cli(*argv: str) -> int:
    return journal_cli(list(argv))


@pytest.mark.adversarial
def test_operator_resolves_quarantine_and_forgets_terminal_records_never_while_held(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    state = str(tmp_path)
    with JournalStore.open(tmp_path) as store:
        world = World()
        runner = Runner(store, world_executors(world))
        world.fail = {"apply": "up"}
        runner.run("failed", "prep/claim-r/fp", child_program("c2"))
        world.fail = {"apply": "up", "undo": "mtu"}
        runner.run("stuck", "prep/claim-p/fp", child_program("c3"))
        with store.batch() as b:
            b.put_preparation(
                PreparationRecord(
                    "claim-r", "fp", state=PreparationState.RELEASED, operations=["failed"]
                )
            )
            b.put_preparation(
                PreparationRecord(
                    "claim-p", "fp", state=PreparationState.RELEASED, operations=["stuck"]
                )
            )
        [(_, quarantined)] = store.quarantined_effects()
    resolve = ("resolve", "--state-dir", state, "--operation", "stuck")
    proc = _holder(tmp_path)  # an agent holds the journal: both commands are refused
    try:
        assert _cli(*resolve, "--effect", quarantined.id, "--reason", "deleted by hand") == 1
        assert "error[E_JOURNAL_HELD]" in capsys.readouterr().err
        assert _cli("forget", "--state-dir", state) == 1
        assert "error[E_JOURNAL_HELD]" in capsys.readouterr().err
    finally:
        assert proc.stdin is not None
        proc.stdin.close()
        proc.wait(timeout=30)
    with JournalStore.open_read_only(tmp_path) as store:  # nothing changed
        assert [op_id for op_id, _ in store.quarantined_effects()] == ["stuck"]
        assert store.load_operation("failed") is not None
    # a Quarantined effect is never forgotten, nor the preparation that names it
    assert _cli("forget", "--state-dir", state) == 0
    assert "forgot 1 terminal records" in capsys.readouterr().out  # claim-r with "failed"
    assert _cli(*resolve, "--effect", "no-such-effect", "--reason", "x") == 1
    assert "error[E_JOURNAL_NOT_QUARANTINED]" in capsys.readouterr().err
    assert _cli(*resolve, "--effect", quarantined.id, "--reason", "  ") == 2
    assert _cli(*resolve, "--effect", quarantined.id, "--reason", "deleted c3 by hand") == 0
    with JournalStore.open(tmp_path) as store:
        op = store.load_operation("stuck")
        assert op is not None and op.state is OperationState.UNDONE
        [effect] = [e for e in op.effects if e.id == quarantined.id]
        assert effect.note.startswith("resolved by operator: deleted c3 by hand")
        assert store.quarantined_effects() == []
        assert store.get_preparation("claim-r", "fp") is None
        assert store.load_operation("failed") is None
        assert store.get_preparation("claim-p", "fp") is not None
        with pytest.raises(JournalError) as again:  # resolved once; never twice
            store.resolve_effect("stuck", quarantined.id, "again")
        assert again.value.code == "E_JOURNAL_NOT_QUARANTINED"
    assert _cli("forget", "--state-dir", state) == 0
    capsys.readouterr()
    with JournalStore.open(tmp_path) as store:
        assert store.get_preparation("claim-p", "fp") is None
        assert store.load_operation("stuck") is None
        assert store.load_operation("op-held") is not None  # Completed: cleanup authority


def test_retention_collects_terminal_records_by_age_and_count(tmp_path: Path) -> None:
    def removed(i: int) -> AttachmentRecord:
        ident = AttachmentIdentity("node", "boot", f"pod-{i}", f"sb-{i}")
        return AttachmentRecord(ident, state=AttachmentState.REMOVED)

    with JournalStore.open(tmp_path) as store:
        with store.batch() as b:
            for i in range(3):
                b.put_attachment(removed(i))
            live = AttachmentRecord(AttachmentIdentity("node", "boot", "pod-live", "sb-live"))
            b.put_attachment(live)
        keep = Retention(max_age=100.0, max_count=5)
        assert store.collect_terminal(keep, now=1000.0) == 0  # first seen: stamped, kept
        with store.batch() as b:
            for i in range(3, 6):
                b.put_attachment(removed(i))
        assert store.collect_terminal(keep, now=1050.0) == 1  # 6 > max_count: oldest one goes
        assert len(store.attachments()) == 6
        assert store.collect_terminal(keep, now=1100.0) == 2  # the rest of t=1000 aged out
        assert sorted(a.identity.pod_uid for a in store.attachments()) == [
            "pod-3",
            "pod-4",
            "pod-5",
            "pod-live",
        ]
        assert store.collect_terminal(keep, now=1200.0) == 3
        assert [a.identity.pod_uid for a in store.attachments()] == ["pod-live"]
        assert store.collect_terminal(keep, now=9999.0) == 0  # live records are never collected
        assert store.get_attachment(live.identity) is not None


@pytest.mark.adversarial
def test_forget_keeps_a_preparation_whose_quarantined_operation_record_is_corrupt(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Only what is proven terminal is dropped: with the operation record of a Released
    preparation's Quarantined operation undecodable (the quarantined effect itself
    intact), ``forget`` once took the operation for gone and dropped the preparation —
    the only record left naming the Quarantined effect's claim."""
    with JournalStore.open(tmp_path) as store:
        world = World()
        runner = Runner(store, world_executors(world))
        world.fail = {"apply": "up", "undo": "mtu"}
        runner.run("stuck", "prep/claim-p/fp", child_program("c3"))
        world.fail = {"apply": "up"}
        runner.run("failed", "prep/claim-r/fp", child_program("c2"))
        with store.batch() as b:
            for claim, op in (("claim-p", "stuck"), ("claim-r", "failed")):
                b.put_preparation(
                    PreparationRecord(claim, "fp", state=PreparationState.RELEASED, operations=[op])
                )
    db = Rdict(str(tmp_path / DB_DIR), Options(raw_mode=True))
    db[keys.operation_key("stuck")] = b"{not json"
    db.close()
    assert _cli("forget", "--state-dir", str(tmp_path)) == 0
    assert "forgot 1 terminal records" in capsys.readouterr().out  # claim-r with "failed"
    with JournalStore.open_read_only(tmp_path) as store:
        assert store.get_preparation("claim-p", "fp") is not None
        assert store.get_preparation("claim-r", "fp") is None
        assert keys.operation_key("stuck") in store.corrupt or store.operations() == []


@pytest.mark.adversarial
def test_forget_keeps_lone_undone_operations_while_a_record_that_may_name_them_is_corrupt(
    tmp_path: Path,
) -> None:
    with JournalStore.open(tmp_path) as store:
        world = World()
        world.fail = {"apply": "up"}
        Runner(store, world_executors(world)).run("failed", "att/a", child_program("c2"))
    db = Rdict(str(tmp_path / DB_DIR), Options(raw_mode=True))
    db[keys.key("att", "node", "boot", "pod", "sandbox")] = b"\xff garbage"
    db.close()
    assert _cli("forget", "--state-dir", str(tmp_path)) == 0
    with JournalStore.open_read_only(tmp_path) as store:
        assert store.load_operation("failed") is not None
