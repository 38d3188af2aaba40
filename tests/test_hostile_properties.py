"""Generated hostile input that must never produce a traceback (issue 39).

Random argument vectors to every ``dmn`` command, random document bytes and YAML through
``lint``, ``compile`` and ``explain``, and random AdmissionReview bodies to the real webhook
server. Each command case runs in a forked child with a memory ceiling and a deadline, so a
case that would read without bound or never finish fails as such instead of taking the
machine down; each must end with a documented exit status (0, 1 or 2), and what it prints
with ``--format json`` must be JSON.
"""

from __future__ import annotations

import http.client
import json
import os
import resource
import signal
import ssl
import sys
import tempfile
import time
import traceback
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from dmn.cli import COMMANDS, main
from dmn.controller.webhook.server import WebhookServer
from dmn.opcodes.registry import default_registry
from tests.webhook.certs import ThrowawayCA

pytestmark = [pytest.mark.adversarial, pytest.mark.property]

ROOT = Path(__file__).resolve().parent.parent
#: Address space a case may add to the process it forks from.
HEADROOM = 768 * 1024 * 1024
#: Seconds a case may run: a guard against hangs, far above what any case needs.
DEADLINE = 60.0
TRACEBACK_EXIT = 99


def _vm_size() -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmSize:"):
            return int(line.split()[1]) * 1024
    return 0


def run_bounded(argv: list[str], scratch: Path) -> tuple[int, str, str]:
    """``dmn ARGV`` in a forked child (cwd ``scratch``) under a memory ceiling; its exit
    status, stdout and stderr. An exception escaping ``main`` is :data:`TRACEBACK_EXIT`
    with the traceback on stderr; a child past :data:`DEADLINE` is killed and fails."""
    out, err = scratch / "stdout", scratch / "stderr"
    pid = os.fork()
    if pid == 0:  # the child: never returns
        status = TRACEBACK_EXIT
        try:
            ceiling = _vm_size() + HEADROOM
            resource.setrlimit(resource.RLIMIT_AS, (ceiling, ceiling))
            os.chdir(scratch)
            devnull = os.open(os.devnull, os.O_RDONLY)
            os.dup2(devnull, 0)
            with out.open("w") as o, err.open("w") as e:
                sys.stdout, sys.stderr = o, e
                try:
                    status = main(argv)
                except BaseException:
                    e.write(traceback.format_exc())
                    status = TRACEBACK_EXIT
                o.flush()
                e.flush()
        finally:
            os._exit(status if isinstance(status, int) else TRACEBACK_EXIT)
    deadline = time.monotonic() + DEADLINE
    while True:
        done, wait_status = os.waitpid(pid, os.WNOHANG)
        if done:
            break
        if time.monotonic() > deadline:
            os.kill(pid, signal.SIGKILL)
            os.waitpid(pid, 0)
            pytest.fail(f"dmn {argv!r} did not finish within {DEADLINE} s")
        time.sleep(0.01)
    if os.WIFSIGNALED(wait_status):
        pytest.fail(f"dmn {argv!r} died of signal {os.WTERMSIG(wait_status)}")
    return os.WEXITSTATUS(wait_status), out.read_text(), err.read_text()


def asks_json(argv: list[str]) -> bool:
    """Whether ``argv`` asks for JSON output: the last ``--format`` before ``--`` says
    ``json`` (a bare ``json`` is a file name, e.g. ``dmn lint json``)."""
    wanted = None
    tokens = iter(argv)
    for token in tokens:
        if token == "--":
            break
        if token == "--format":
            wanted = next(tokens, None)
        elif token.startswith("--format="):
            wanted = token.removeprefix("--format=")
    return wanted == "json"


def assert_no_traceback(argv: list[str], status: int, stdout: str, stderr: str) -> None:
    assert status != TRACEBACK_EXIT and "Traceback" not in stderr, (argv, stderr)
    assert status in (0, 1, 2), (argv, status, stderr)
    if status != 0 and asks_json(argv) and argv[0] in ("lint", "compile", "explain"):
        json.loads(stdout)  # a failure asked for as JSON is JSON
    if status != 0 and not asks_json(argv) and stderr:
        assert "error[" in stderr or "usage:" in stderr or "warning[" in stderr, (argv, stderr)


@pytest.fixture(scope="module")
def scratch() -> Iterator[Path]:
    """Hostile files: a FIFO, a directory, a 4-GiB sparse file, an empty file, a topology."""
    with tempfile.TemporaryDirectory(prefix="dmn-hostile-") as d:
        root = Path(d)
        os.mkfifo(root / "pipe.yaml")
        (root / "dir").mkdir()
        with (root / "huge.yaml").open("wb") as f:
            f.truncate(4 << 30)
        (root / "empty.yaml").write_bytes(b"")
        (root / "doc.yaml").write_bytes(b"kind: NetworkTopology\n")
        yield root


PATHS = [
    str(ROOT / "examples" / "topologies" / "shared-macvlan.yaml"),
    str(ROOT / "examples" / "plugins"),
    "pipe.yaml",
    "dir",
    "huge.yaml",
    "empty.yaml",
    "doc.yaml",
    "/dev/zero",
    "/dev/null",
    "missing.yaml",
    "/proc/self/mem",
    "",
]
TOKENS = [
    "--format",
    "--format=json",
    "json",
    "human",
    "markdown",
    "text",
    "yaml",
    "--plugins",
    "--state-dir",
    "--operation",
    "--effect",
    "--reason",
    "show",
    "resolve",
    "forget",
    "linux",
    "linux/link-move/v1",
    "NetworkTopology",
    "NetworkPlugin",
    "HookProgram",
    "--",
    "-",
    "--format=",
]
#: Commands that only read: run with any arguments. The rest (node, controller, generate,
#: lab, inventory, node-ready) act on the machine; their random vectors carry a bad flag,
#: so they must stop at the usage error.
READERS = ["lint", "compile", "explain", "opcodes", "schema", "journal"]
ACTORS = sorted(set(COMMANDS) - set(READERS))
_token = st.one_of(
    st.sampled_from(TOKENS),
    st.sampled_from(PATHS),
    st.text(alphabet=st.characters(blacklist_categories=("Cs",)), max_size=12),
)


@settings(max_examples=150, deadline=None, suppress_health_check=list(HealthCheck))
@given(command=st.sampled_from(READERS), rest=st.lists(_token, max_size=6))
def test_random_argument_vectors_never_trace_back(
    scratch: Path, command: str, rest: list[str]
) -> None:
    argv = [command, *rest]
    status, stdout, stderr = run_bounded(argv, scratch)
    assert_no_traceback(argv, status, stdout, stderr)
    assert not (scratch / "journal.db").exists()  # a read created nothing


@settings(max_examples=60, deadline=None, suppress_health_check=list(HealthCheck))
@given(
    command=st.sampled_from(ACTORS),
    rest=st.lists(_token.filter(lambda t: t not in ("-h", "--help", "--")), max_size=4),
)
def test_acting_commands_stop_at_a_bad_flag(scratch: Path, command: str, rest: list[str]) -> None:
    argv = [command, *rest, "--no-such-flag-for-hostile-test"]
    status, stdout, stderr = run_bounded(argv, scratch)
    assert_no_traceback(argv, status, stdout, stderr)
    assert status == 2, (argv, stderr)


@settings(max_examples=30, deadline=None, suppress_health_check=list(HealthCheck))
@given(name=st.text(min_size=1, max_size=12).filter(lambda n: n not in COMMANDS))
def test_an_unknown_command_is_a_usage_error(scratch: Path, name: str) -> None:
    if name.startswith("-") or name == "help":
        return
    status, _, stderr = run_bounded([name], scratch)
    assert status == 2 and "error[E_USAGE]" in stderr and "Traceback" not in stderr


_scalar = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(2**70), max_value=2**70),
    st.text(max_size=20),
    st.sampled_from(["NetworkTopology", "NetworkPlugin", "HookProgram", "Allocation", "v1"]),
)
_value = st.recursive(
    _scalar,
    lambda children: st.one_of(
        st.lists(children, max_size=4),
        st.dictionaries(
            st.sampled_from(
                ["kind", "apiVersion", "metadata", "name", "spec", "steps", "config", "id"]
            )
            | st.text(max_size=8),
            children,
            max_size=4,
        ),
    ),
    max_leaves=25,
)
_documents = st.one_of(
    st.binary(max_size=400),
    st.lists(
        st.fixed_dictionaries(
            {
                "apiVersion": st.sampled_from(
                    [
                        "networking.dra-multi-network.schseba.github.io/v1alpha1",
                        "effects.dra-multi-network.schseba.github.io/v1alpha1",
                        "v1",
                    ]
                ),
                "kind": st.sampled_from(["NetworkTopology", "NetworkPlugin", "HookProgram", "X"]),
                "metadata": st.fixed_dictionaries({"name": _scalar}),
                "spec": _value,
            }
        )
        | _value,
        min_size=1,
        max_size=3,
    ).map(lambda docs: yaml.safe_dump_all(docs).encode()),
    st.sampled_from(
        [
            b"a: &a [" + b"*a," * 50 + b"]\n",
            b"[" * 200 + b"]" * 200,
            b"x: " + b"9" * 5000 + b"\n",
            b"\xff\xfe\x00kind: NetworkTopology\n",
            b"---\nkind: NetworkTopology\n---\nkind: NetworkTopology\n",
        ]
    ),
)


@settings(max_examples=120, deadline=None, suppress_health_check=list(HealthCheck))
@given(command=st.sampled_from(["lint", "compile", "explain"]), data=_documents)
def test_random_documents_never_trace_back(scratch: Path, command: str, data: bytes) -> None:
    (scratch / "random.yaml").write_bytes(data)
    argv = [command, "random.yaml", "--format", "json"]
    status, stdout, stderr = run_bounded(argv, scratch)
    assert_no_traceback(argv, status, stdout, stderr)
    json.loads(stdout)


@pytest.fixture(scope="module")
def webhook() -> Iterator[tuple[WebhookServer, Path]]:
    with tempfile.TemporaryDirectory(prefix="dmn-hostile-pki-") as d:
        pki = Path(d)
        ca = ThrowawayCA()
        (pki / "ca.crt").write_bytes(ca.pem())
        ca.issue(pki / "tls.crt", pki / "tls.key")
        server = WebhookServer(
            None,
            default_registry(),
            cert_file=str(pki / "tls.crt"),
            key_file=str(pki / "tls.key"),
        )
        server.start()
        try:
            yield server, pki / "ca.crt"
        finally:
            server.stop()


_request = st.fixed_dictionaries(
    {},
    optional={
        "uid": _scalar,
        "kind": st.one_of(
            _value,
            st.fixed_dictionaries(
                {
                    "group": st.sampled_from(
                        ["networking.dra-multi-network.schseba.github.io", "resource.k8s.io", ""]
                    ),
                    "version": st.sampled_from(["v1alpha1", "v1", "v1beta1"]),
                    "kind": st.sampled_from(
                        ["NetworkTopology", "NetworkPlugin", "DeviceClass", "Pod", "X"]
                    ),
                }
            ),
        ),
        "operation": st.one_of(st.sampled_from(["CREATE", "UPDATE", "DELETE", "create"]), _value),
        "userInfo": st.one_of(_value, st.fixed_dictionaries({"username": _scalar})),
        "object": _value,
        "oldObject": _value,
    },
)


@settings(max_examples=150, deadline=None, suppress_health_check=list(HealthCheck))
@given(
    body=st.one_of(
        _request.map(
            lambda r: {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": r}
        ),
        _value,
    )
)
def test_random_reviews_are_answered_never_dropped(
    webhook: tuple[WebhookServer, Path], body: Any
) -> None:
    """Every body gets an HTTP answer (a string ``kind`` or ``userInfo`` once closed the
    connection unanswered); a denial carries a reason code."""
    server, ca_file = webhook
    host, port = server.url.removeprefix("https://").split(":")
    ctx = ssl.create_default_context(cafile=str(ca_file))
    conn = http.client.HTTPSConnection(host, int(port), context=ctx, timeout=60)
    try:
        conn.request("POST", "/validate", json.dumps(body), {"Content-Type": "application/json"})
        resp = conn.getresponse()
        answer = json.loads(resp.read())
    finally:
        conn.close()
    assert resp.status in (200, 400), answer
    if resp.status == 200:
        response = answer["response"]
        if not response["allowed"]:
            assert "E_" in response["status"]["message"], response
