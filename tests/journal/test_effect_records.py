"""The executors' reference port over the journal: which recorded effects hold, from both
journals the runner writes through; an unreadable operation refuses the count."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import pytest
from rocksdict import Options, Rdict

from dmn.agent.journal import keys
from dmn.agent.journal.store import DB_DIR, JournalStore
from dmn.engine.effect_records import JournalEffectRecords
from dmn.engine.journal import MemoryJournal
from dmn.engine.runner import Runner
from dmn.opcodes.executor import ExecutorError
from tests.journal.programs import child_program
from tests.journal.world import World, world_executors


def _held(records: JournalEffectRecords, kind: str) -> list[tuple[str, str, str]]:
    return sorted((r.operation_id, r.effect_id, r.state) for r in records.held(kind))


@pytest.mark.parametrize("store", ["memory", "rocksdb"])
def test_applied_records_hold_until_undone(tmp_path: Path, store: str) -> None:
    journal = MemoryJournal() if store == "memory" else JournalStore.open(tmp_path)
    try:
        runner = Runner(journal, world_executors(World()))
        records = JournalEffectRecords(journal)
        runner.run("op1", "att/a", child_program("vlan10"))
        runner.run("op2", "att/b", child_program("vlan11"))
        assert _held(records, "test/create/v1") == [
            ("op1", "create", "Applied"),
            ("op2", "create", "Applied"),
        ]
        assert len(records.held("test/set/v1")) == 4
        before = records.held("test/create/v1")[0].before
        assert before == journal.load_operation("op1").effects[0].before  # type: ignore[union-attr]
        runner.cleanup("op1")
        assert _held(records, "test/create/v1") == [("op2", "create", "Applied")]
        assert records.held("test/none/v1") == []
    finally:
        if isinstance(journal, JournalStore):
            journal.close()


def test_an_unreadable_operation_refuses_the_count(tmp_path: Path) -> None:
    with JournalStore.open(tmp_path) as store:
        Runner(store, world_executors(World())).run("op1", "att/a", child_program())
    db = Rdict(str(tmp_path / DB_DIR), Options(raw_mode=True))
    db[keys.operation_key("op1")] = b"{not json"
    db.close()
    with JournalStore.open(tmp_path) as store:
        with pytest.raises(ExecutorError) as err:
            JournalEffectRecords(store).held("test/create/v1")
        assert err.value.code == "E_JOURNAL_CORRUPT"


def test_sections_over_one_object_never_overlap() -> None:
    records = JournalEffectRecords(MemoryJournal())
    inside: list[str] = []
    overlaps: list[tuple[str, str]] = []

    def section(name: str, who: str) -> None:
        with records.serialized(name):
            overlaps.extend((who, other) for other in inside if other.startswith(name))
            inside.append(f"{name}:{who}")
            time.sleep(0.05)
            inside.remove(f"{name}:{who}")

    threads = [
        threading.Thread(target=section, args=(name, who))
        for name in ("uplink-a", "uplink-b")
        for who in ("1", "2", "3")
    ]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert overlaps == [] and inside == []
