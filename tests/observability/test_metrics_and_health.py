"""Metrics, probes and JSON logs, through the real journal store, runner and HTTP server."""

from __future__ import annotations

import json
import logging
import socket
import urllib.error
import urllib.request
from pathlib import Path

import pytest
from prometheus_client import REGISTRY
from prometheus_client.parser import text_string_to_metric_families

from dmn.agent.journal.store import JournalStore
from dmn.engine.runner import Runner
from dmn.observability import health as health_module
from dmn.observability.health import HealthServer
from dmn.observability.json_logs import JsonFormatter, fields_of
from tests.journal.programs import child_program
from tests.journal.world import World, world_executors


def _value(name: str, **labels: str) -> float:
    return REGISTRY.get_sample_value(name, labels) or 0.0


def _get(port: int, path: str) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=5) as response:
            return response.status, response.read().decode()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode()


def test_journal_commits_time_hooks_and_count_effect_outcomes(tmp_path: Path) -> None:
    applied = _value("dmn_effects_total", opcode="test/set/v1", state="Applied")
    undone = _value("dmn_effects_total", opcode="test/create/v1", state="Undone")
    hooks = _value(
        "dmn_hook_duration_seconds_count", hook="connect", plugin="test-cni", outcome="Completed"
    )
    removes = _value(
        "dmn_hook_duration_seconds_count", hook="remove", plugin="test-cni", outcome="Undone"
    )
    commits = _value("dmn_journal_commit_duration_seconds_count")
    store = JournalStore.open(tmp_path)
    try:
        runner = Runner(store, world_executors(World()))
        runner.run("op-metrics", "att/metrics", child_program())
        runner.cleanup("op-metrics")
        assert store.writable() == (True, "")
    finally:
        store.close()
    assert store.writable()[0] is False  # closed
    assert _value("dmn_effects_total", opcode="test/set/v1", state="Applied") == applied + 2
    assert _value("dmn_effects_total", opcode="test/create/v1", state="Undone") == undone + 1
    assert (
        _value(
            "dmn_hook_duration_seconds_count",
            hook="connect",
            plugin="test-cni",
            outcome="Completed",
        )
        == hooks + 1
    )
    assert (
        _value(
            "dmn_hook_duration_seconds_count", hook="remove", plugin="test-cni", outcome="Undone"
        )
        == removes + 1
    )
    assert _value("dmn_journal_commit_duration_seconds_count") >= commits + 4


def test_metrics_endpoint_and_probes_with_their_conditions() -> None:
    state = {"nri": False}

    def nri() -> tuple[bool, str]:
        return (True, "") if state["nri"] else (False, "not synchronized")

    def broken() -> tuple[bool, str]:
        raise RuntimeError("boom")

    server = HealthServer(
        "127.0.0.1",
        0,
        liveness={"journal-writable": lambda: (True, "")},
        readiness={"nri-connected": nri},
    ).start()
    try:
        code, body = _get(server.port, "/metrics")
        assert code == 200
        names = {f.name for f in text_string_to_metric_families(body)}
        assert {
            "dmn_effects",
            "dmn_journal_commit_duration_seconds",
            "dmn_reconciles",
            "dmn_nri_reconnects",
            "dmn_published_devices",
        } <= names
        assert _get(server.port, "/livez") == (200, "[+]journal-writable ok\nok\n")
        assert _get(server.port, "/readyz") == (503, "[-]nri-connected not synchronized\nfailed\n")
        state["nri"] = True
        assert _get(server.port, "/readyz")[0] == 200
        server.readiness["broken"] = broken
        code, body = _get(server.port, "/readyz")
        assert code == 503 and "[-]broken RuntimeError: boom" in body
        assert _get(server.port, "/nope")[0] == 404
    finally:
        server.stop()


def test_json_log_lines_carry_the_ids_of_the_message() -> None:
    assert fields_of('event=refused claim=abc pod="ns/p" code=E_RESERVED x') == {
        "event": "refused",
        "claim": "abc",
        "pod": "ns/p",
        "code": "E_RESERVED",
    }
    record = logging.LogRecord(
        "dmn.engine.runner",
        logging.WARNING,
        __file__,
        1,
        "operation=%s effect=%s event=undo-failed",
        ("op-1", "create"),
        None,
    )
    record.claim = "uid-1"
    line = json.loads(JsonFormatter().format(record))
    assert line["level"] == "warning" and line["logger"] == "dmn.engine.runner"
    assert line["operation"] == "op-1" and line["effect"] == "create"
    assert line["claim"] == "uid-1" and line["msg"].startswith("operation=op-1")
    assert line["ts"].endswith("Z")


@pytest.mark.parametrize("port", [0])
def test_two_servers_do_not_share_a_port(port: int) -> None:
    a = HealthServer("127.0.0.1", port).start()
    b = HealthServer("127.0.0.1", port).start()
    try:
        assert a.port != b.port
    finally:
        a.stop()
        b.stop()


@pytest.mark.adversarial
def test_idle_and_trickling_clients_do_not_stop_the_probes() -> None:
    """More idle connections than the server has workers, and clients trickling a request
    head, do not stop ``/livez`` (the stdlib server it was gave each a thread, with no
    read deadline); the oldest that never completed a request are closed for new ones."""
    server = HealthServer("127.0.0.1", 0, liveness={"ok": lambda: (True, "")}).start()
    held: list[socket.socket] = []
    try:
        for i in range(health_module.LIMITS.max_connections + 10):
            sock = socket.create_connection(("127.0.0.1", server.port), timeout=30)
            if i % 2:
                sock.sendall(b"GET /livez HTTP/1.1\r\nHost: x\r\nX-Pad: aaa")
            held.append(sock)
        assert _get(server.port, "/livez")[0] == 200
        held[0].settimeout(30)
        assert held[0].recv(1) == b""  # closed to make room
    finally:
        for sock in held:
            sock.close()
        server.stop()
