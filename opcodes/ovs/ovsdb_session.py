"""One short, bounded OVSDB session over the ``ovs`` Python IDL (the I/O edge of ``ovs/*``).

Why the IDL and not ``ovs-vsctl``: executors run no shell commands, and the IDL gives atomic
multi-row transactions, set mutations (``Bridge.ports`` grows and shrinks without rewriting
other writers' ports) and inserts with a caller-chosen row UUID (``persist_uuid``, OVS 3.1+),
which is what lets the journal record the rows an effect will create *before* it creates them.

Contract: :class:`OvsdbSession` connects to the node's OVSDB remote (a node fact from the
environment, never workload config), fetches the ``Open_vSwitch`` schema from the server itself
(no schema file path), registers only the columns ``ovs/*`` reads or writes and waits for the
first complete snapshot (messages are parsed by :mod:`~dmn.opcodes.ovs.json_stream`: the
``ovs`` library's own Python lexer made each session cost seconds). :meth:`view` returns
that snapshot as plain dataclasses; :meth:`transact` commits one transaction (retrying when
the server says "try again") and optionally waits until ``ovs-vswitchd`` has applied it
(``cur_cfg`` reaches the incremented ``next_cfg``, as ``ovs-vsctl`` does). Every wait has a
deadline; a failure raises :class:`~dmn.opcodes.executor.ExecutorError` ``E_OVSDB``, never
hangs.
"""

from __future__ import annotations

import errno
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import ovs.db.idl
import ovs.jsonrpc
import ovs.poller
import ovs.stream

from dmn.opcodes.executor import ExecutorError
from dmn.opcodes.ovs.json_stream import use_for_ovsdb

use_for_ovsdb()

DATABASE = "Open_vSwitch"
COLUMNS: Mapping[str, tuple[str, ...]] = {
    "Open_vSwitch": ("bridges", "next_cfg", "cur_cfg"),
    "Bridge": ("name", "ports"),
    "Port": ("name", "interfaces", "tag", "trunks", "external_ids"),
    "Interface": ("name", "type", "ofport", "error", "external_ids"),
}
TIMEOUT_S = 15.0
TRY_AGAIN_LIMIT = 5


@dataclass(frozen=True, slots=True)
class BridgeRow:
    uuid: str
    name: str
    ports: frozenset[str]


@dataclass(frozen=True, slots=True)
class PortRow:
    uuid: str
    name: str
    interfaces: frozenset[str]
    tag: int | None
    trunks: tuple[int, ...]
    external_ids: Mapping[str, str]


@dataclass(frozen=True, slots=True)
class InterfaceRow:
    uuid: str
    name: str
    ofport: int | None
    error: str
    external_ids: Mapping[str, str]


@dataclass(frozen=True, slots=True)
class OvsdbView:
    """A consistent snapshot of the rows ``ovs/*`` cares about, keyed by row UUID."""

    bridges: Mapping[str, BridgeRow] = field(default_factory=dict)
    ports: Mapping[str, PortRow] = field(default_factory=dict)
    interfaces: Mapping[str, InterfaceRow] = field(default_factory=dict)

    def bridge_named(self, name: str) -> BridgeRow | None:
        return next((b for b in self.bridges.values() if b.name == name), None)

    def port_named(self, name: str) -> PortRow | None:
        return next((p for p in self.ports.values() if p.name == name), None)

    def interface_named(self, name: str) -> InterfaceRow | None:
        return next((i for i in self.interfaces.values() if i.name == name), None)

    def bridges_of_port(self, port_uuid: str) -> list[BridgeRow]:
        return [b for b in self.bridges.values() if port_uuid in b.ports]


def _optional(value: Any) -> Any:
    """The IDL gives an optional column as a list of zero or one value."""
    return value[0] if isinstance(value, list) and value else None


def _uuids(rows: Any) -> frozenset[str]:
    return frozenset(str(r.uuid) for r in rows)


def _fail(what: str, detail: str) -> ExecutorError:
    return ExecutorError("E_OVSDB", f"OVSDB {what}: {detail}")


class OvsdbSession:
    """One connection; use as a context manager (``close`` ends the IDL's socket)."""

    def __init__(self, remote: str, timeout: float = TIMEOUT_S) -> None:
        self.remote = remote
        self.timeout = timeout
        helper = ovs.db.idl.SchemaHelper(schema_json=self._schema())
        for table, columns in COLUMNS.items():
            helper.register_columns(table, list(columns))
        self.idl = ovs.db.idl.Idl(remote, helper)
        try:
            self._pump(lambda: self.idl.has_ever_connected() and self._synced(), "initial sync")
        except ExecutorError:
            self.idl.close()
            raise

    def __enter__(self) -> OvsdbSession:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        self.idl.close()

    def _deadline(self) -> float:
        return time.monotonic() + self.timeout

    def _schema(self) -> Any:
        """``get_schema`` over a plain JSON-RPC connection, bounded by the timeout."""
        deadline = self._deadline()
        err, stream = ovs.stream.Stream.open_block(
            ovs.stream.Stream.open(self.remote), int(self.timeout * 1000)
        )
        if err:
            raise _fail(f"connect {self.remote}", errno.errorcode.get(err, str(err)))
        conn = ovs.jsonrpc.Connection(stream)
        try:
            request = ovs.jsonrpc.Message.create_request("get_schema", [DATABASE])
            err = conn.send(request)
            while not err:
                conn.run()
                err, msg = conn.recv()
                if err == errno.EAGAIN:
                    remaining = deadline - time.monotonic()
                    if remaining <= 0:
                        raise _fail("get_schema", "no reply before the deadline")
                    poller = ovs.poller.Poller()
                    conn.wait(poller)
                    conn.recv_wait(poller)
                    poller.timer_wait(int(remaining * 1000) + 1)
                    poller.block()
                    err = 0
                    continue
                if err == 0 and msg is not None and msg.id == request.id:
                    if msg.type != ovs.jsonrpc.Message.T_REPLY:
                        raise _fail("get_schema", str(msg.error))
                    return msg.result
            raise _fail("get_schema", errno.errorcode.get(err, str(err)))
        finally:
            conn.close()

    def _synced(self) -> bool:
        return bool(self.idl.tables["Open_vSwitch"].rows)

    def _pump(self, done: Callable[[], bool], what: str, txn: Any = None) -> None:
        deadline = self._deadline()
        while True:
            self.idl.run()
            if done():
                return
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise _fail(what, f"not done within {self.timeout:.0f} s ({self.remote})")
            poller = ovs.poller.Poller()
            self.idl.wait(poller)
            if txn is not None:
                txn.wait(poller)
            poller.timer_wait(int(min(remaining, 0.5) * 1000) + 1)
            poller.block()

    def _root(self) -> Any:
        return next(iter(self.idl.tables["Open_vSwitch"].rows.values()))

    def view(self) -> OvsdbView:
        tables = self.idl.tables
        bridges = {
            str(u): BridgeRow(str(u), str(r.name), _uuids(r.ports))
            for u, r in tables["Bridge"].rows.items()
        }
        ports = {
            str(u): PortRow(
                str(u),
                str(r.name),
                _uuids(r.interfaces),
                _optional(r.tag),
                tuple(sorted(int(t) for t in r.trunks)),
                dict(r.external_ids),
            )
            for u, r in tables["Port"].rows.items()
        }
        interfaces = {
            str(u): InterfaceRow(
                str(u),
                str(r.name),
                _optional(r.ofport),
                str(_optional(r.error) or ""),
                dict(r.external_ids),
            )
            for u, r in tables["Interface"].rows.items()
        }
        return OvsdbView(bridges, ports, interfaces)

    def row(self, table: str, uuid: str) -> Any:
        """The IDL row (for writing inside :meth:`transact`), or None."""
        for u, r in self.idl.tables[table].rows.items():
            if str(u) == uuid:
                return r
        return None

    def transact(self, what: str, build: Callable[[Any], None], wait_applied: bool) -> None:
        """Commit ``build(txn)``; with ``wait_applied``, also wait for ovs-vswitchd."""
        for _ in range(TRY_AGAIN_LIMIT):
            txn = ovs.db.idl.Transaction(self.idl)
            build(txn)
            if wait_applied:
                self._root().increment("next_cfg")
            status = self._commit(txn, what)
            if status == ovs.db.idl.Transaction.TRY_AGAIN:
                self._pump(lambda: True, what)
                continue
            if status not in (ovs.db.idl.Transaction.SUCCESS, ovs.db.idl.Transaction.UNCHANGED):
                raise _fail(what, f"{status}: {txn.get_error()}")
            if wait_applied:
                self._wait_cfg(int(txn.get_increment_new_value()), what)
            return
        raise _fail(what, f"still conflicting after {TRY_AGAIN_LIMIT} attempts")

    def _wait_cfg(self, target: int, what: str) -> None:
        self._pump(lambda: int(self._root().cur_cfg) >= target, f"{what} (vswitchd)")

    def _commit(self, txn: Any, what: str) -> Any:
        first = txn.commit()  # sends it and detaches it from the IDL: run() may follow
        if first != ovs.db.idl.Transaction.INCOMPLETE:
            return first
        status: list[Any] = []

        def done() -> bool:
            s = txn.commit()
            if s != ovs.db.idl.Transaction.INCOMPLETE:
                status.append(s)
                return True
            return False

        try:
            self._pump(done, what, txn)
        except ExecutorError:
            txn.abort()
            raise
        return status[0]
