"""The node journal store: RocksDB through rocksdict, synchronous, single writer.

Contract:

* **Durable commits.** Every write is one ``WriteBatch`` written with ``sync=True`` (one
  WAL fdatasync; ``use_fsync`` is off, so RocksDB syncs data, not metadata, per commit).
  :attr:`JournalStore.commits` counts them; the runner's budget is two per effect and two
  per operation.
* **Single writer.** A writer takes an exclusive ``flock`` on ``<state_dir>/journal.lock``
  before touching the database; a second process gets :class:`JournalHeldError` ("journal
  is held by another agent (pid N)"), never RocksDB's own LOCK message.
* **Private files.** The state directory and database directory are 0700; database files
  are created under umask 077 and re-chmodded 0600 on open and close.
* **Schema version.** ``meta/schema`` holds the layout version (:mod:`.schema`). A store
  written by a newer build is refused with :class:`JournalSchemaError` after a read-only
  probe: nothing is rewritten or deleted. An older store is migrated by the writer when it
  opens, in one synced commit together with the new version marker; a read-only view of an
  older store shows its records migrated in memory and writes nothing.
* **Attachments by claim.** :meth:`JournalStore.attachments_naming` answers "which
  attachment records name these claims" from an in-memory index (:mod:`.claim_index`),
  never stored: built from one scan on first use, changed under one lock with each commit
  that touches ``att/``, dropped when a commit fails; the answer is exactly a scan's.
* **Read-only inspection.** :meth:`JournalStore.open_read_only` opens the database
  read-only (falling back to a RocksDB secondary instance) without the writer lock, so
  ``dmn journal show`` works while an agent holds the journal.

The store implements :class:`dmn.engine.journal.Journal` for the runner and offers
typed access to the coordinator's records (:mod:`dmn.agent.journal.records`); the key
layout is documented in :mod:`dmn.agent.journal.keys`. Group coordinator writes with
:meth:`JournalStore.batch` to keep one synced commit per state transition.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import json
import logging
import os
import shutil
import tempfile
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

from rocksdict import AccessType, Options, Rdict, WriteBatch, WriteOptions

from dmn.agent.journal import keys
from dmn.agent.journal.claim_index import ClaimIndex
from dmn.agent.journal.records import (
    AttachmentIdentity,
    AttachmentRecord,
    AttachmentState,
    NamespacePin,
    PreparationRecord,
    PreparationState,
    Reservation,
    ShareRef,
)
from dmn.agent.journal.schema import OLDEST_MIGRATABLE, SCHEMA_VERSION, migrate
from dmn.engine.journal import (
    UNFINISHED_STATES,
    EffectRecord,
    EffectState,
    Fence,
    OperationRecord,
    OperationState,
)
from dmn.interpreter.canonical_json import canonical_json
from dmn.observability.journal_observer import JournalObserver
from dmn.observability.metrics import JOURNAL_COMMIT_FAILURES

_log = logging.getLogger(__name__)

_R = TypeVar("_R")

DB_DIR = "journal.db"
LOCK_FILE = "journal.lock"
_ATT = b"att/"


class JournalError(Exception):
    """A journal could not be opened or written; ``code`` is a stable reason code."""

    code = "E_JOURNAL"


class JournalHeldError(JournalError):
    code = "E_JOURNAL_HELD"


class JournalSchemaError(JournalError):
    code = "E_JOURNAL_SCHEMA"


class JournalMissingError(JournalError):
    code = "E_JOURNAL_MISSING"


class JournalCorruptError(JournalError):
    """A stored record (or the schema marker) cannot be decoded; names the key."""

    code = "E_JOURNAL_CORRUPT"


class JournalWriteError(JournalError):
    """A commit failed (ENOSPC, EIO, ...: rocksdict raises a bare ``Exception``). The store
    is failed from then on: every later write raises :class:`JournalFailedError`."""

    code = "E_JOURNAL_WRITE"


class JournalFailedError(JournalError):
    """A write refused because an earlier commit failed. Sticky on purpose: RocksDB keeps a
    background error after a failed WAL write and what reached the disk is unknown, so the
    agent must stop mutating and restart into recovery rather than carry on."""

    code = "E_JOURNAL_FAILED"


class JournalNotResolvableError(JournalError):
    """``dmn journal resolve`` named no Quarantined effect (unknown operation or effect,
    or an effect that is not Quarantined); nothing was changed."""

    code = "E_JOURNAL_NOT_QUARANTINED"


class ReservationConflict(JournalError):
    code = "E_RESERVED"


def _options() -> Options:
    opts = Options(raw_mode=True)
    opts.create_if_missing(True)
    opts.set_use_fsync(False)
    opts.set_keep_log_file_num(4)
    return opts


def _dumps(value: Any) -> bytes:
    return canonical_json(value)


def _loads(raw: bytes, key: bytes) -> Any:
    try:
        return json.loads(raw)
    except ValueError as exc:  # JSONDecodeError and UnicodeDecodeError
        raise JournalCorruptError(f"record {key!r} is not JSON: {exc}") from None


def _decode(from_json: Callable[[Any], _R], key: bytes, data: Any) -> _R:
    """Build a typed record; a malformed one is a reason-coded error naming its key."""
    try:
        return from_json(data)
    except Exception as exc:  # stored data is untrusted: any decoding failure is corruption
        raise JournalCorruptError(
            f"record {key!r} is malformed ({type(exc).__name__}: {exc})"
        ) from None


def _version(raw: bytes | None) -> int:
    """The schema version in ``meta/schema`` (0 when absent)."""
    if raw is None:
        return 0
    data = _loads(raw, keys.SCHEMA)
    version = data.get("version") if isinstance(data, dict) else None
    if not isinstance(version, int) or isinstance(version, bool):
        raise JournalCorruptError(f"record {keys.SCHEMA!r} holds no integer version: {data!r}")
    return version


def _damage(exc: Exception) -> bool:
    """RocksDB's own verdict that a file of the database is missing or damaged."""
    return str(exc).startswith("Corruption")


def _open_error(db_dir: Path, exc: Exception) -> JournalError:
    """Why RocksDB refused to open ``db_dir``: :class:`JournalCorruptError` for a missing or
    damaged table file (a missing one once read as "schema version 0"), else
    :class:`JournalError`."""
    if _damage(exc):
        return JournalCorruptError(f"journal {db_dir} is damaged: {exc}")
    return JournalError(f"cannot open journal {db_dir}: {exc}")


def _split(raw: bytes) -> list[str]:
    try:
        return keys.split(raw)
    except UnicodeDecodeError:
        raise JournalCorruptError(f"key {raw!r} is not UTF-8") from None


def _chmod_private(db_dir: Path) -> None:
    with contextlib.suppress(FileNotFoundError):
        os.chmod(db_dir, 0o700)
        for entry in os.scandir(db_dir):
            if entry.is_file(follow_symlinks=False):
                with contextlib.suppress(FileNotFoundError):
                    os.chmod(entry.path, 0o600)


@dataclass(frozen=True, slots=True)
class Retention:
    """How long terminal records are kept (see :meth:`JournalStore.collect_terminal`):
    at most ``max_age`` seconds after a collection first saw them terminal, and at most
    ``max_count`` of them (the most recently seen)."""

    max_age: float = 3600.0
    max_count: int = 1000


class JournalBatch:
    """Writes to apply in one synced commit (coordinator records; see :meth:`batch`)."""

    def __init__(self) -> None:
        self.puts: dict[bytes, bytes] = {}
        self.deletes: set[bytes] = set()

    def _put(self, key: bytes, value: Any) -> None:
        self.deletes.discard(key)
        self.puts[key] = _dumps(value)

    def _delete(self, key: bytes) -> None:
        self.puts.pop(key, None)
        self.deletes.add(key)

    def put_preparation(self, rec: PreparationRecord) -> None:
        self._put(keys.key("prep", rec.claim_uid, rec.allocation_fingerprint), rec.to_json())

    def delete_preparation(self, claim_uid: str, fingerprint: str) -> None:
        self._delete(keys.key("prep", claim_uid, fingerprint))

    def put_attachment(self, rec: AttachmentRecord) -> None:
        self._put(keys.attachment_key(rec.identity), rec.to_json())

    def delete_attachment(self, identity: AttachmentIdentity) -> None:
        self._delete(keys.attachment_key(identity))

    def put_share(self, ref: ShareRef) -> None:
        self._put(
            keys.key("share", ref.parent_inventory_id, ref.claim_uid, ref.share_id), ref.to_json()
        )

    def delete_share(self, parent_inventory_id: str, claim_uid: str, share_id: str) -> None:
        self._delete(keys.key("share", parent_inventory_id, claim_uid, share_id))

    def put_reservation(self, res: Reservation) -> None:
        self._put(keys.key("resv", res.resource), res.to_json())

    def delete_reservation(self, resource: str) -> None:
        self._delete(keys.key("resv", resource))

    def put_pin(self, pin: NamespacePin) -> None:
        self._put(keys.pin_key(pin.attachment), pin.to_json())

    def delete_pin(self, attachment: str) -> None:
        self._delete(keys.pin_key(attachment))

    def put_fence(self, fence: Fence) -> None:
        self._put(keys.key("fence", fence.scope), fence.to_json())

    def delete_fence(self, scope: str) -> None:
        """Only when the scope can never run again (e.g. its Pod sandbox is gone)."""
        self._delete(keys.key("fence", scope))


class JournalStore:
    """One node journal. Use :meth:`open` (writer) or :meth:`open_read_only` (inspection)."""

    def __init__(
        self,
        db: Rdict,
        state_dir: Path,
        *,
        read_only: bool,
        lock_fd: int | None = None,
        secondary_dir: str | None = None,
    ) -> None:
        self._db = db
        self.state_dir = state_dir
        self.read_only = read_only
        self._lock_fd = lock_fd
        self._secondary_dir = secondary_dir
        self._sync = WriteOptions()
        self._sync.sync = True
        self._nosync = WriteOptions()
        self._nosync.sync = False
        self.commits = 0
        self._commits_lock = threading.Lock()  # writers of several threads count here
        self._closed = False
        #: the error of the first failed commit (None while every commit succeeded); sticky:
        #: once set every write is refused and liveness/readiness report the journal failed
        self.write_error: str | None = None
        #: called once, with the error, when the first commit fails (the agent stops and
        #: exits non-zero from there; a listener must not raise or block)
        self.failure_listeners: list[Callable[[JournalWriteError], None]] = []
        #: records that could not be decoded, by key: scans skip them (isolated, logged) so
        #: one bad record does not fail every scan; ``dmn journal show`` reports them
        self.corrupt: dict[bytes, str] = {}
        self.observer = JournalObserver()
        # read-only view of an older store: migrated values by key (never written)
        self._migrated: dict[bytes, bytes] = {}
        # attachment keys by claim (:mod:`.claim_index`): built on first use, changed with
        # every commit touching att/ under this lock, dropped when a commit failed
        self._index_lock = threading.Lock()
        self._claim_index: ClaimIndex | None = None

    # ------------------------------------------------------------------ opening

    @classmethod
    def open(cls, state_dir: str | os.PathLike[str], *, create: bool = True) -> JournalStore:
        """Open (creating if needed) the journal under ``state_dir`` as its single writer.

        With ``create=False`` (the operator's ``dmn journal`` commands) a state dir without
        a journal is :class:`JournalMissingError` and nothing is created: a mistyped path
        once got a new empty journal and "forgot 0 terminal records", exit 0."""
        root = Path(state_dir)
        if not create and not (root / DB_DIR / "CURRENT").is_file():
            raise JournalMissingError(f"no journal at {root} (expected {root / DB_DIR})")
        root.mkdir(mode=0o700, parents=True, exist_ok=True)
        lock_fd = os.open(root / LOCK_FILE, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
        try:
            fcntl.flock(lock_fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError as exc:
            holder = os.pread(lock_fd, 64, 0).decode("ascii", "replace").strip()
            os.close(lock_fd)
            if exc.errno in (errno.EWOULDBLOCK, errno.EAGAIN, errno.EACCES):
                raise JournalHeldError(
                    f"journal {root} is held by another agent (pid {holder or 'unknown'})"
                ) from None
            raise
        try:
            os.ftruncate(lock_fd, 0)
            os.pwrite(lock_fd, f"{os.getpid()}\n".encode("ascii"), 0)
            db_dir = root / DB_DIR
            version, migrated = SCHEMA_VERSION, None
            if (db_dir / "CURRENT").exists():
                version, migrated = cls._probe_schema(db_dir)
            elif db_dir.exists() and any(db_dir.iterdir()):
                raise JournalError(
                    f"{db_dir} exists but holds no journal (no CURRENT); refusing to create one "
                    "over it (a missing journal is not proof of a clean host)"
                )
            old_umask = os.umask(0o077)
            try:
                db = Rdict(str(db_dir), _options())
            except Exception as exc:
                raise _open_error(db_dir, exc) from exc
            finally:
                os.umask(old_umask)
            _chmod_private(db_dir)
            store = cls(db, root, read_only=False, lock_fd=lock_fd)
            raw = db.get(keys.SCHEMA)
            if raw is None:
                store._write({keys.SCHEMA: _dumps({"version": SCHEMA_VERSION})}, set())
            elif migrated is not None:
                puts = {**migrated, keys.SCHEMA: _dumps({"version": SCHEMA_VERSION})}
                store._write(puts, set())
                _log.info(
                    "journal=%s event=migrated from=%d to=%d records=%d",
                    db_dir,
                    version,
                    SCHEMA_VERSION,
                    len(puts) - 1,
                )
            _log.info("journal=%s event=opened pid=%d", db_dir, os.getpid())
            return store
        except BaseException:
            os.close(lock_fd)
            raise

    @classmethod
    def open_read_only(cls, state_dir: str | os.PathLike[str]) -> JournalStore:
        """Open for inspection without the writer lock; works while an agent holds it."""
        root = Path(state_dir)
        db_dir = root / DB_DIR
        if not (db_dir / "CURRENT").exists():
            raise JournalMissingError(f"no journal at {root} (expected {db_dir})")
        try:
            db = Rdict(str(db_dir), Options(raw_mode=True), access_type=AccessType.read_only())
            store = cls(db, root, read_only=True)
        except Exception as exc:
            if _damage(exc):  # do not fall back to a secondary instance: it opens, reads nothing
                raise _open_error(db_dir, exc) from None
            secondary = tempfile.mkdtemp(prefix="dmn-journal-secondary-")
            try:
                db = Rdict(
                    str(db_dir),
                    Options(raw_mode=True),
                    access_type=AccessType.secondary(secondary),
                )
                db.try_catch_up_with_primary()
            except Exception as exc:
                shutil.rmtree(secondary, ignore_errors=True)
                raise JournalError(f"cannot open journal {db_dir} read-only: {exc}") from exc
            store = cls(db, root, read_only=True, secondary_dir=secondary)
        try:
            version = cls._stored_version(db, db_dir)
            if version == 0:  # open() writes the marker first: none readable is damage
                raise JournalCorruptError(
                    f"journal {db_dir} has no readable schema marker (a table file missing or "
                    "unreadable?); refusing to show it"
                )
            cls._check_version(version, db_dir)
            if version < SCHEMA_VERSION:
                store._migrated = store._migration(version)
        except JournalError:
            store.close()
            raise
        return store

    def _migration(self, version: int) -> dict[bytes, bytes]:
        """The encoded records a ``version`` store needs rewritten (see :mod:`.schema`)."""
        if version < OLDEST_MIGRATABLE:
            raise JournalSchemaError(
                f"journal {self.state_dir / DB_DIR} has schema version {version}, which this "
                "agent cannot migrate; refusing to open it (nothing was changed)"
            )
        records = {k: v for family in (b"prep/", b"att/") for k, v in self._scan(family)}
        try:
            changed = migrate(version, records)
        except ValueError as exc:
            raise JournalCorruptError(f"cannot migrate: {exc}") from None
        return {k: _dumps(v) for k, v in changed.items()}

    @classmethod
    def _probe_schema(cls, db_dir: Path) -> tuple[int, dict[bytes, bytes] | None]:
        """The stored schema version and, for an older store, the records its migration
        rewrites — both read without writing, so a refusal changes no file. A database
        with keys but no schema marker is not a journal of ours: refused, never adopted."""
        try:
            db = Rdict(str(db_dir), Options(raw_mode=True), access_type=AccessType.read_only())
        except Exception as exc:
            raise _open_error(db_dir, exc) from exc
        probe = cls(db, db_dir.parent, read_only=True)
        try:
            version = cls._stored_version(db, db_dir)
            cls._check_version(version, db_dir)
            if version == 0 or version == SCHEMA_VERSION:
                return version, None
            return version, probe._migration(version)
        finally:
            probe.close()

    @staticmethod
    def _stored_version(db: Rdict, db_dir: Path) -> int:
        raw = db.get(keys.SCHEMA)
        if raw is None:
            it = db.iter()
            it.seek_to_first()
            foreign = it.valid()
            del it
            if foreign:
                raise JournalError(
                    f"{db_dir} is a RocksDB database without a journal schema marker; "
                    "refusing to adopt it (nothing was changed)"
                )
        return _version(raw)

    @staticmethod
    def _check_version(version: int, db_dir: Path) -> None:
        if version > SCHEMA_VERSION:
            raise JournalSchemaError(
                f"journal {db_dir} has schema version {version}, newer than this agent "
                f"supports ({SCHEMA_VERSION}); refusing to open it (nothing was changed)"
            )

    @property
    def schema_version(self) -> int:
        return _version(self._db.get(keys.SCHEMA))

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        try:
            self._db.close()
        except Exception as exc:  # e.g. the flush on close after ENOSPC: the WAL still has it
            _log.error("journal=%s event=close_failed error=%r", self.state_dir, str(exc))
        if not self.read_only:
            try:
                _chmod_private(self.state_dir / DB_DIR)
            except OSError as exc:  # e.g. the filesystem went read-only after an I/O error
                _log.error("journal=%s event=chmod_failed error=%r", self.state_dir, str(exc))
        if self._lock_fd is not None:
            os.close(self._lock_fd)
            self._lock_fd = None
        if self._secondary_dir is not None:
            shutil.rmtree(self._secondary_dir, ignore_errors=True)

    def __enter__(self) -> JournalStore:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # ------------------------------------------------------------------ low level

    def _write(self, puts: dict[bytes, bytes], deletes: set[bytes], sync: bool = True) -> None:
        if self.read_only:
            raise JournalError("journal was opened read-only")
        if self.write_error is not None:
            raise JournalFailedError(
                f"journal {self.state_dir} refuses writes after a failed commit "
                f"({self.write_error}); restart the agent to run recovery"
            )
        batch = WriteBatch(raw_mode=True)
        for k in deletes:
            batch.delete(k)
        for k, v in puts.items():
            batch.put(k, v)
        touches = any(k.startswith(_ATT) for k in deletes) or any(k.startswith(_ATT) for k in puts)
        failed: Exception | None = None
        with self._index_lock if touches else contextlib.nullcontext():
            try:
                self._db.write(batch, self._sync if sync else self._nosync)
            except Exception as exc:  # rocksdict raises a bare Exception for IO errors
                failed = exc
                if touches:
                    self._claim_index = None  # which of its att/ keys were written is unknown
            else:
                if touches and self._claim_index is not None:
                    self._index_commit(self._claim_index, puts, deletes)
        if failed is not None:
            self.write_error = f"{type(failed).__name__}: {failed}"
            JOURNAL_COMMIT_FAILURES.inc()
            _log.error("journal=%s event=commit_failed error=%r", self.state_dir, self.write_error)
            failure = JournalWriteError(f"journal {self.state_dir} commit failed: {failed}")
            for listener in list(self.failure_listeners):
                try:
                    listener(failure)
                except Exception:  # a listener never hides the failure from the writer
                    _log.exception("journal=%s event=failure_listener_failed", self.state_dir)
            raise failure from failed
        if sync:
            with self._commits_lock:
                self.commits += 1

    def _index_commit(
        self, index: ClaimIndex, puts: dict[bytes, bytes], deletes: set[bytes]
    ) -> None:
        """Apply a written commit's ``att/`` keys to the index (deletes first, as the batch)."""
        for k in deletes:
            if k.startswith(_ATT):
                index.delete(k)
        for k, v in puts.items():
            if not k.startswith(_ATT):
                continue
            try:
                rec = _decode(AttachmentRecord.from_json, k, _loads(v, k))
            except JournalCorruptError:
                index.delete(k)  # a scan skips it too
            else:
                index.put(k, (c.claim_uid for c in rec.claims))

    def _indexed(self) -> ClaimIndex:
        """The claim index, built from one scan of ``att/`` if needed (hold the lock)."""
        if self._claim_index is None:
            index = ClaimIndex()
            for k, v in self._scan(_ATT):
                try:
                    rec = _decode(AttachmentRecord.from_json, k, v)
                except JournalCorruptError as exc:
                    self._isolate(k, exc)
                else:
                    index.put(k, (c.claim_uid for c in rec.claims))
            self._claim_index = index
        return self._claim_index

    def writable(self) -> tuple[bool, str]:
        """Health condition: open as the writer and the last write succeeded."""
        if self._closed:
            return False, "journal is closed"
        if self.read_only:
            return False, "journal is open read-only"
        if self.write_error is not None:
            return False, f"last commit failed: {self.write_error}"
        return True, ""

    def _get(self, key: bytes) -> Any:
        raw = self._migrated.get(key) or self._db.get(key)
        return _loads(raw, key) if raw is not None else None

    def _isolate(self, key: bytes, exc: JournalError) -> None:
        """Note an undecodable record; scans go on without it."""
        if key not in self.corrupt:
            _log.warning(
                "journal=%s event=record_isolated key=%r error=%r", self.state_dir, key, str(exc)
            )
        self.corrupt[key] = str(exc)

    def _scan(self, prefix: bytes, *, strict: bool = False) -> Iterator[tuple[bytes, Any]]:
        """Records under ``prefix``. An undecodable one is isolated and skipped, unless
        ``strict`` (parts of one record, e.g. an operation's effects: a gap would misstate
        its progress), where it raises :class:`JournalCorruptError`."""
        it = self._db.iter()
        it.seek(prefix)
        while it.valid():
            k = it.key()
            if not k.startswith(prefix):
                break
            try:
                value = _loads(self._migrated.get(k) or it.value(), k)
            except JournalCorruptError as exc:
                if strict:
                    raise
                self._isolate(k, exc)
            else:
                yield k, value
            it.next()

    def _get_record(self, key: bytes, from_json: Callable[[Any], _R]) -> _R | None:
        data = self._get(key)
        return _decode(from_json, key, data) if data is not None else None

    def _records(self, prefix: bytes, from_json: Callable[[Any], _R]) -> list[_R]:
        out = []
        for k, v in self._scan(prefix):
            try:
                out.append(_decode(from_json, k, v))
            except JournalCorruptError as exc:
                self._isolate(k, exc)
        return out

    @contextlib.contextmanager
    def batch(self, *, sync: bool = True) -> Iterator[JournalBatch]:
        """Collect coordinator writes and commit them as one synced commit on exit.

        ``sync=False`` (group commit, issue 15): the batch is written to the WAL without its
        own fdatasync and becomes durable with the next synced commit, which persists every
        earlier WAL record too (the WAL is replayed in order: a later synced record is never
        present without it). Only for a record whose loss in a crash is a state recovery
        already handles (e.g. a pin marked mounted: the intent record before the mount
        already proves it ours)."""
        b = JournalBatch()
        yield b
        self.write(b, sync=sync)

    def write(self, batch: JournalBatch, *, sync: bool = True) -> None:
        if batch.puts or batch.deletes:
            self._write(dict(batch.puts), set(batch.deletes), sync)

    # ------------------------------------------------------------------ Journal protocol

    def load_operation(self, operation_id: str) -> OperationRecord | None:
        key = keys.operation_key(operation_id)
        header = self._get(key)
        if header is None:
            return None
        effects = [v for _, v in self._scan(keys.effect_prefix(operation_id), strict=True)]
        return _decode(lambda h: OperationRecord.from_json(h, effects), key, header)

    def commit(
        self,
        operation: OperationRecord | None,
        effects: Sequence[EffectRecord] = (),
        fences: Sequence[Fence] = (),
        *,
        header: bool = True,
        sync: bool = True,
    ) -> None:
        puts: dict[bytes, bytes] = {}
        deletes: set[bytes] = set()
        if operation is not None:
            op_id = operation.operation_id
            if header:
                puts[keys.operation_key(op_id)] = _dumps(operation.header_json())
                puts[keys.key("opscope", operation.scope, op_id)] = b"{}"
                open_key = keys.key("open", op_id)
                if operation.state in UNFINISHED_STATES:
                    if self._db.get(open_key) is None:
                        seq = int(self._db.latest_sequence_number())
                        puts[open_key] = _dumps({"seq": seq})
                else:
                    deletes.add(open_key)
            for e in effects:
                puts[keys.effect_key(op_id, e.index)] = _dumps(e.to_json())
        for f in fences:
            puts[keys.key("fence", f.scope)] = _dumps(f.to_json())
        started = time.perf_counter()
        self._write(puts, deletes, sync)
        self.observer.committed(operation, effects, time.perf_counter() - started)

    def fence(self, scope: str) -> Fence | None:
        return self._get_record(keys.key("fence", scope), Fence.from_json)

    def unfinished_operations(self) -> list[OperationRecord]:
        found = []
        for k, v in self._scan(b"open/"):
            try:
                found.append((_decode(lambda d: int(d["seq"]), k, v), _split(k)[1]))
            except JournalCorruptError as exc:
                self._isolate(k, exc)
        out = []
        for _, op_id in sorted(found):
            op = self._load_isolated(op_id)
            if op is not None and op.state in UNFINISHED_STATES:
                out.append(op)
        return out

    def _load_isolated(self, operation_id: str) -> OperationRecord | None:
        """:meth:`load_operation`, with an undecodable operation isolated (None)."""
        try:
            return self.load_operation(operation_id)
        except JournalCorruptError as exc:
            self._isolate(keys.operation_key(operation_id), exc)
            return None

    # ------------------------------------------------------------------ operations (reads)

    def operation_ids(self, scope: str | None = None) -> list[str]:
        pfx, at = (keys.prefix("opscope", scope), 2) if scope is not None else (b"op/", 1)
        out = []
        for k, _ in self._scan(pfx):
            try:
                parts = _split(k)
            except JournalCorruptError as exc:
                self._isolate(k, exc)
                continue
            if scope is not None or len(parts) == 2:  # op/<id>, not op/<id>/effect/...
                out.append(parts[at])
        return out

    def operations(self, scope: str | None = None) -> list[OperationRecord]:
        ops = (self._load_isolated(i) for i in self.operation_ids(scope))
        return [op for op in ops if op is not None]

    def forget_operation(self, operation_id: str) -> bool:
        """Garbage-collect an Undone operation (one commit). Completed, unfinished and
        Quarantined operations are the authority for cleanup or inspection and are never
        forgotten: returns False and changes nothing for them (or for an unknown id)."""
        op = self.load_operation(operation_id)
        if op is None or op.state is not OperationState.UNDONE:
            return False
        deletes = {
            keys.operation_key(operation_id),
            keys.key("opscope", op.scope, operation_id),
            keys.key("open", operation_id),
        }
        deletes |= {keys.effect_key(operation_id, e.index) for e in op.effects}
        self._write({}, deletes)
        return True

    def resolve_effect(self, operation_id: str, effect: str, reason: str) -> OperationRecord:
        """Mark a Quarantined effect resolved after an operator's manual action (one commit).

        ``effect`` is the effect's id or index. The effect becomes Undone with the operator's
        reason kept in its note (ahead of the quarantine note it replaces); once no effect
        of the operation is Quarantined, the operation becomes Undone and so collectable by
        :meth:`forget_terminal`. Raises :class:`JournalNotResolvableError` (nothing changed)
        unless the named effect is Quarantined, and ``ValueError`` for an empty reason."""
        if not reason.strip():
            raise ValueError("a resolution needs a reason")
        op = self.load_operation(operation_id)
        if op is None:
            raise JournalNotResolvableError(f"no operation {operation_id!r} in the journal")
        found = [e for e in op.effects if effect in (e.id, str(e.index))]
        if not found or found[0].state is not EffectState.QUARANTINED:
            state = found[0].state.value if found else "absent"
            raise JournalNotResolvableError(
                f"effect {effect!r} of operation {operation_id!r} is not Quarantined ({state})"
            )
        target = found[0]
        target.state = EffectState.UNDONE
        target.note = f"resolved by operator: {reason.strip()} (quarantined: {target.note})"
        if all(e.state is not EffectState.QUARANTINED for e in op.effects):
            op.state = OperationState.UNDONE
        self.commit(op, [target])
        _log.info(
            "journal=%s event=effect_resolved operation=%s effect=%s reason=%r",
            self.state_dir,
            operation_id,
            target.id,
            reason,
        )
        return op

    def terminal_records(self) -> list[list[bytes]]:
        """Records no cleanup, recovery or inspection needs any more, as units (the head
        key first, then the keys that go with it): a Removed attachment or Released
        preparation whose operations are all Undone (or gone), with those operations; an
        Undone operation no record names. Quarantined, Completed and unfinished
        operations, and records naming them, are kept.

        Only what is proven terminal: an operation whose record exists but cannot be decoded
        is not "gone" (it may be Quarantined: ``dmn journal forget`` once dropped a
        preparation naming one), and while any preparation or attachment record is
        undecodable no Undone operation counts as unnamed."""
        ops = {op.operation_id: op for op in self.operations()}
        unreadable, unknown = self._unreadable_operations()

        def undone(op_ids: Sequence[str]) -> bool:
            return all(
                ops[i].state is OperationState.UNDONE
                if i in ops
                else i not in unreadable and not unknown
                for i in op_ids
            )

        def op_keys(op_id: str) -> list[bytes]:
            op = ops.get(op_id)
            if op is None:
                return []
            return [
                keys.operation_key(op_id),
                keys.key("opscope", op.scope, op_id),
                keys.key("open", op_id),
                *(keys.effect_key(op_id, e.index) for e in op.effects),
            ]

        heads: list[tuple[bytes, list[str]]] = []
        live: set[str] = set()
        for prep in self.preparations():
            if prep.state is PreparationState.RELEASED and undone(prep.operations):
                key = keys.key("prep", prep.claim_uid, prep.allocation_fingerprint)
                heads.append((key, prep.operations))
            else:
                live.update(prep.operations)
        for att in self.attachments():
            if att.state is AttachmentState.REMOVED and undone(att.operations):
                heads.append((keys.attachment_key(att.identity), att.operations))
            else:
                live.update(att.operations)
        names_unknown = any(k.startswith((b"prep/", b"att/")) for k in self.corrupt)
        claimed: set[str] = set(live)
        units: list[list[bytes]] = []
        for key, op_ids in heads:
            mine = [i for i in op_ids if i not in claimed]
            claimed.update(mine)
            units.append([key, *(k for i in mine for k in op_keys(i))])
        for op_id, op in ops.items():
            if op.state is OperationState.UNDONE and op_id not in claimed and not names_unknown:
                units.append(op_keys(op_id))
        return units

    def _unreadable_operations(self) -> tuple[set[str], bool]:
        """The ids of operations with an undecodable record seen so far, and whether some
        such record's key names no id at all (then no absent operation is proven gone)."""
        ids: set[str] = set()
        unknown = False
        for k in list(self.corrupt):
            if k.startswith(b"op/"):
                try:
                    ids.add(_split(k)[1])
                except (JournalCorruptError, IndexError):
                    unknown = True
        return ids, unknown

    def forget_terminal(self) -> int:
        """Drop every unit :meth:`terminal_records` names in one commit; returns how many
        (preparations, attachments, lone operations) were dropped."""
        return self.collect_terminal(Retention(max_age=0.0, max_count=0), time.time())

    def collect_terminal(self, retention: Retention, now: float) -> int:
        """Retention of terminal records (one commit): each unit of
        :meth:`terminal_records` is stamped the first time a collection sees it
        (``retain/<head key>``), dropped once older than ``retention.max_age`` seconds,
        and beyond the ``retention.max_count`` most recently stamped. Returns how many units
        were dropped. Stamps of units that are gone are dropped too."""
        units = {u[0]: u for u in self.terminal_records()}
        stamps: dict[bytes, float] = {}
        puts: dict[bytes, bytes] = {}
        deletes: set[bytes] = set()
        for k, v in self._scan(b"retain/"):
            head = k[len(b"retain/") :]
            if head not in units:
                deletes.add(k)
                continue
            since = v.get("since") if isinstance(v, dict) else None
            stamps[head] = float(since) if isinstance(since, (int, float)) else now
        for head in units:
            if head not in stamps:
                stamps[head] = now
                puts[b"retain/" + head] = _dumps({"since": now})
        newest_first = sorted(units, key=lambda h: stamps[h], reverse=True)
        doomed = [
            h
            for rank, h in enumerate(newest_first)
            if rank >= retention.max_count or now - stamps[h] >= retention.max_age
        ]
        for head in doomed:
            puts.pop(b"retain/" + head, None)
            deletes.add(b"retain/" + head)
            deletes.update(units[head])
        if puts or deletes:
            self._write(puts, deletes)
        if doomed:
            _log.info("journal=%s event=terminal_collected units=%d", self.state_dir, len(doomed))
        return len(doomed)

    def effects_of_kind(self, kind: str) -> list[tuple[str, EffectRecord]]:
        """Every effect of opcode ``kind`` as (operation id, record), for the executors'
        reference port (``dmn.engine.effect_records``). Raises :class:`JournalCorruptError`
        when any operation record is undecodable: a count that skipped it could drop a
        reference it holds."""
        ops = self.operations()
        unreadable = sorted(k for k in self.corrupt if k.startswith(b"op/"))
        if unreadable:
            raise JournalCorruptError(f"operation records unreadable: {unreadable[:3]!r}")
        return [(op.operation_id, e) for op in ops for e in op.effects if e.kind == kind]

    def quarantined_effects(self) -> list[tuple[str, EffectRecord]]:
        """Every Quarantined effect as (operation id, record)."""
        out = []
        for op in self.operations():
            out += [(op.operation_id, e) for e in op.effects if e.state is EffectState.QUARANTINED]
        return out

    def fences(self) -> list[Fence]:
        return self._records(b"fence/", Fence.from_json)

    # ------------------------------------------------------------------ coordinator records

    def get_preparation(self, claim_uid: str, fingerprint: str) -> PreparationRecord | None:
        return self._get_record(
            keys.key("prep", claim_uid, fingerprint), PreparationRecord.from_json
        )

    def preparations(self, claim_uid: str | None = None) -> list[PreparationRecord]:
        pfx = keys.prefix("prep", claim_uid) if claim_uid is not None else b"prep/"
        return self._records(pfx, PreparationRecord.from_json)

    def get_attachment(self, identity: AttachmentIdentity) -> AttachmentRecord | None:
        return self._get_record(keys.attachment_key(identity), AttachmentRecord.from_json)

    def attachments(self, pod_uid: str | None = None) -> list[AttachmentRecord]:
        recs = self._records(_ATT, AttachmentRecord.from_json)
        return [r for r in recs if pod_uid is None or r.identity.pod_uid == pod_uid]

    def attachments_naming(self, claim_uids: Iterable[str]) -> list[AttachmentRecord]:
        """The attachment records (any state) naming any of ``claim_uids``, in key order:
        exactly ``[r for r in attachments() if r names one]``, but only those records are
        read and decoded (:mod:`.claim_index`); an undecodable one is isolated, as a scan
        isolates it."""
        wanted = set(claim_uids)
        with self._index_lock:
            found = self._indexed().keys_naming(wanted)
        out = []
        for k in found:
            try:
                rec = self._get_record(k, AttachmentRecord.from_json)
            except JournalCorruptError as exc:
                self._isolate(k, exc)
                continue
            if rec is not None and any(c.claim_uid in wanted for c in rec.claims):
                out.append(rec)
        return out

    def shares(self, parent_inventory_id: str | None = None) -> list[ShareRef]:
        pfx = (
            keys.prefix("share", parent_inventory_id)
            if parent_inventory_id is not None
            else b"share/"
        )
        return self._records(pfx, ShareRef.from_json)

    def reservation(self, resource: str) -> Reservation | None:
        return self._get_record(keys.key("resv", resource), Reservation.from_json)

    def reservations(self) -> list[Reservation]:
        return self._records(b"resv/", Reservation.from_json)

    def reserve(self, reservations: Sequence[Reservation]) -> None:
        """Take all exclusive reservations or none (one commit); re-reserving by the same
        holder is a no-op, another holder raises :class:`ReservationConflict`."""
        batch = JournalBatch()
        for res in reservations:
            held = self.reservation(res.resource)
            if held is not None and held.holder != res.holder:
                raise ReservationConflict(
                    f"{res.resource} is reserved by {held.holder}, not {res.holder}"
                )
            if held is None:
                batch.put_reservation(res)
        self.write(batch)

    def pins(self) -> list[NamespacePin]:
        return self._records(b"pin/", NamespacePin.from_json)

    def get_pin(self, attachment: str) -> NamespacePin | None:
        return self._get_record(keys.pin_key(attachment), NamespacePin.from_json)

    def dump(self) -> dict[str, Any]:
        """Everything, as JSON, for ``dmn journal show``."""
        return {
            "stateDir": str(self.state_dir),
            "schemaVersion": self.schema_version,
            "preparations": [p.to_json() for p in self.preparations()],
            "attachments": [a.to_json() for a in self.attachments()],
            "operations": [op.to_json() for op in self.operations()],
            "quarantined": [
                {"operationID": op_id, **e.to_json()} for op_id, e in self.quarantined_effects()
            ],
            "fences": [f.to_json() for f in self.fences()],
            "shares": [s.to_json() for s in self.shares()],
            "reservations": [r.to_json() for r in self.reservations()],
            "pins": [p.to_json() for p in self.pins()],
            "unfinished": [op.operation_id for op in self.unfinished_operations()],
            "corrupt": [
                {"key": k.decode("utf-8", "backslashreplace"), "error": msg}
                for k, msg in sorted(self.corrupt.items())
            ],
        }


__all__ = [
    "DB_DIR",
    "LOCK_FILE",
    "JournalBatch",
    "JournalCorruptError",
    "JournalError",
    "JournalFailedError",
    "JournalHeldError",
    "JournalMissingError",
    "JournalNotResolvableError",
    "JournalSchemaError",
    "JournalStore",
    "JournalWriteError",
    "OperationState",
    "ReservationConflict",
    "Retention",
]
