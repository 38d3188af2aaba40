"""Hostile input to every ``dmn`` command (issue 39): files that are not regular files,
huge files, bad state directories and random argument vectors and bytes. Every case runs
the real command in a child process with a memory ceiling, and must end with a reason code
and a documented exit status — never a traceback, never a hang, never an unbounded read."""

from __future__ import annotations

import json
import os
import resource
import subprocess
import sys
from pathlib import Path

import pytest
from rocksdict import Options, Rdict

ROOT = Path(__file__).resolve().parent.parent
TOPOLOGY = ROOT / "examples" / "topologies" / "shared-macvlan.yaml"
#: Address space a command may use: a read of /dev/zero or a 4-GiB file breaks it.
MEMORY_CEILING = 1536 * 1024 * 1024

pytestmark = pytest.mark.adversarial


def _ceiling() -> None:
    resource.setrlimit(resource.RLIMIT_AS, (MEMORY_CEILING, MEMORY_CEILING))


def dmn(*argv: str, cwd: Path = ROOT) -> subprocess.CompletedProcess[str]:
    """``dmn ARGV`` in a child with the memory ceiling; a hang fails the test by timeout."""
    return subprocess.run(
        [sys.executable, "-m", "dmn", *argv],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=cwd,
        stdin=subprocess.DEVNULL,
        preexec_fn=_ceiling,
    )


def assert_clean_refusal(proc: subprocess.CompletedProcess[str], status: int, code: str) -> None:
    assert "Traceback" not in proc.stderr + proc.stdout, proc.stderr
    assert proc.returncode == status, proc.stderr + proc.stdout
    assert f"[{code}]" in proc.stderr + proc.stdout or f'"{code}"' in proc.stdout, proc.stderr


@pytest.fixture
def fifo(tmp_path: Path) -> Path:
    path = tmp_path / "pipe.yaml"
    os.mkfifo(path)
    return path


@pytest.fixture
def huge(tmp_path: Path) -> Path:
    """A 4-GiB sparse file: costs no disk, and reading it would cost 4 GiB."""
    path = tmp_path / "huge.yaml"
    with path.open("wb") as f:
        f.truncate(4 << 30)
    return path


@pytest.mark.parametrize("command", ["lint", "compile", "explain"])
@pytest.mark.parametrize("target", ["fifo", "/dev/zero", "/dev/urandom", "dir", "huge"])
def test_a_file_that_cannot_be_read_in_bounds_is_refused(
    command: str, target: str, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    """``dmn compile /dev/zero`` read 8 GB, ``explain`` of a FIFO blocked for ever."""
    if target in ("fifo", "huge"):
        path = str(request.getfixturevalue(target))
    elif target == "dir":
        path = str(tmp_path)
    else:
        path = target
    if command == "lint" and target == "dir":
        pytest.skip("lint reads a directory's YAML files")
    proc = dmn(command, path, "--format", "json")
    expected = "E_LIMIT" if target == "huge" else "E_IO"
    assert_clean_refusal(proc, 1 if target == "huge" else 2, expected)
    (diag,) = json.loads(proc.stdout)
    assert diag["code"] == expected and diag["file"] == path


@pytest.mark.parametrize("command", ["lint", "compile", "explain"])
@pytest.mark.parametrize("entry", ["fifo", "huge"])
def test_a_plugins_directory_with_such_an_entry_is_refused(
    command: str, entry: str, request: pytest.FixtureRequest
) -> None:
    """``--plugins DIR`` read every ``*.yaml`` under DIR: a FIFO there hung lint too."""
    bad = request.getfixturevalue(entry)
    proc = dmn(command, str(TOPOLOGY), "--plugins", str(bad.parent), "--format", "json")
    assert_clean_refusal(
        proc, 1 if entry == "huge" else 2, "E_LIMIT" if entry == "huge" else "E_IO"
    )
    assert str(bad) in {d["file"] for d in json.loads(proc.stdout)}


def test_a_directory_loop_under_plugins_ends(tmp_path: Path) -> None:
    loop = tmp_path / "plugins" / "a"
    loop.mkdir(parents=True)
    (loop / "up").symlink_to("..")
    proc = dmn("compile", str(TOPOLOGY), "--plugins", str(tmp_path / "plugins"))
    assert "Traceback" not in proc.stderr
    assert proc.returncode == 0, proc.stderr


JOURNAL_COMMANDS = {
    "show": ["show"],
    "resolve": ["resolve", "--operation", "op", "--effect", "e", "--reason", "by hand"],
    "forget": ["forget"],
}


@pytest.mark.parametrize("command", sorted(JOURNAL_COMMANDS))
@pytest.mark.parametrize("where", ["missing", "a file", "under a file", "/dev/null"])
def test_journal_commands_on_a_state_dir_without_a_journal_create_nothing(
    command: str, where: str, tmp_path: Path
) -> None:
    """``resolve``/``forget`` on a mistyped path created an empty journal there and exited
    0 (``resolve`` said E_JOURNAL_NOT_QUARANTINED); a state dir that is a file gave a
    traceback."""
    (tmp_path / "afile").write_text("x")
    state = {
        "missing": tmp_path / "typo",
        "a file": tmp_path / "afile",
        "under a file": tmp_path / "afile" / "state",
        "/dev/null": Path("/dev/null"),
    }[where]
    before = sorted(p.name for p in tmp_path.rglob("*"))
    proc = dmn("journal", *JOURNAL_COMMANDS[command], "--state-dir", str(state))
    assert_clean_refusal(proc, 1, "E_JOURNAL_MISSING")
    assert len(proc.stderr.strip().splitlines()) == 1
    assert sorted(p.name for p in tmp_path.rglob("*")) == before


def _flushed_journal(state: Path) -> list[Path]:
    """A journal with one operation, its records in a table file (not only the WAL)."""
    code = (
        "import sys; from dmn.agent.journal.store import JournalStore;"
        "from dmn.engine.runner import Runner;"
        "from tests.journal.programs import child_program;"
        "from tests.journal.world import World, world_executors;"
        "s = JournalStore.open(sys.argv[1]);"
        "Runner(s, world_executors(World())).run('op', 'att/x', child_program());"
        "s.close()"
    )
    subprocess.run([sys.executable, "-c", code, str(state)], cwd=ROOT, check=True, timeout=120)
    db = Rdict(str(state / "journal.db"), Options(raw_mode=True))
    db.flush()
    db.close()
    tables = sorted((state / "journal.db").glob("*.sst"))
    assert tables
    return tables


@pytest.mark.parametrize("command", sorted(JOURNAL_COMMANDS))
@pytest.mark.parametrize("damage", ["missing table", "damaged table"])
def test_journal_commands_on_a_damaged_journal_say_corrupt(
    command: str, damage: str, tmp_path: Path
) -> None:
    """A missing table file read as "schema version 0" (E_JOURNAL_SCHEMA); now every
    command names the damage, E_JOURNAL_CORRUPT, and changes nothing."""
    for table in _flushed_journal(tmp_path):
        if damage == "missing table":
            table.unlink()
        else:
            data = bytearray(table.read_bytes())
            for i in range(64, len(data) - 64, 7):
                data[i] ^= 0x55
            table.write_bytes(data)
    proc = dmn("journal", *JOURNAL_COMMANDS[command], "--state-dir", str(tmp_path))
    assert_clean_refusal(proc, 1, "E_JOURNAL_CORRUPT")
    assert len(proc.stderr.strip().splitlines()) == 1


def test_journal_show_failure_with_format_json_is_a_json_diagnostic(tmp_path: Path) -> None:
    proc = dmn("journal", "show", "--state-dir", str(tmp_path), "--format", "json")
    assert_clean_refusal(proc, 1, "E_JOURNAL_MISSING")
    (diag,) = json.loads(proc.stdout)
    assert diag["code"] == "E_JOURNAL_MISSING" and proc.stderr == ""


LINK_TUNE = ROOT / "examples" / "plugins" / "link-tune" / "v1"
MTU_LINE = "      mtu: {type: integer, minimum: 576, maximum: 9000}\n"


def _plugin(tmp_path: Path, properties: str) -> tuple[Path, int]:
    """The link-tune example plugin with ``properties`` (YAML lines) in place of its ``mtu``
    property line; the plugin directory and the 1-based line the first one lands on."""
    target = tmp_path / "link-tune" / "v1"
    target.mkdir(parents=True)
    text = (LINK_TUNE / "plugin.yaml").read_text()
    assert MTU_LINE in text
    (target / "plugin.yaml").write_text(text.replace(MTU_LINE, properties))
    (target / "connect.yaml").write_text((LINK_TUNE / "connect.yaml").read_text())
    return target, text[: text.index(MTU_LINE)].count("\n") + 1


@pytest.mark.parametrize(
    ("properties", "code", "column", "needle"),
    [
        (
            "      mtu: {type: integer, minimum: 576, maximum: 9000}\n"
            "      tag: {type: string, minLength: 400000000}\n",
            "E_LIMIT",
            None,
            "string length 400000000",
        ),
        (
            "      mtu: {type: integer, minimum: 576, maximum: 9223372036854775808}\n",
            "E_LIMIT",
            51,
            "outside int64",
        ),
        (
            "      mtu: {type: integer, enum: [-9223372036854775809]}\n",
            "E_LIMIT",
            None,
            "outside int64",
        ),
        (
            "      mtu: {type: integer, minimum: 576, maximum: 9000, default: 99999}\n",
            "E_SCHEMA",
            66,
            "default 99999 is greater than the maximum 9000",
        ),
        (
            "      mtu: {type: integer, minimum: 576, maximum: 9000}\n"
            "      tags: {type: array, items: {type: string}, maxItems: 400000000}\n",
            "E_LIMIT",
            None,
            "item count 400000000",
        ),
    ],
)
def test_schema_numbers_are_bounded_at_the_field(
    tmp_path: Path, properties: str, code: str, column: int | None, needle: str
) -> None:
    """A 1-KB plugin whose ``minLength: 400000000`` cost lint 1.6 GB, an int64 overflow
    (a traceback), a ``default`` its own ``maximum`` refuses (accepted, compiled into the
    revision): each is one diagnostic at its keyword, under the memory ceiling."""
    plugin, line = _plugin(tmp_path, properties)
    proc = dmn("lint", str(plugin), "--format", "json")
    assert_clean_refusal(proc, 1, code)
    (diag,) = json.loads(proc.stdout)
    assert diag["code"] == code and needle in diag["message"], diag
    assert diag["file"].endswith("plugin.yaml") and diag["line"] in (line, line + 1)
    if column is not None:
        assert diag["column"] == column


def test_many_costly_patterns_are_refused_each_within_bounds(tmp_path: Path) -> None:
    """100 distinct ``\\pL{300}`` patterns cost lint 20 s and 395 MB (each accepted under
    RE2's 8-MiB default); each is now E_PATTERN at its own field."""
    properties = "      mtu: {type: integer, minimum: 576, maximum: 9000}\n" + "".join(
        f"      p{i}: {{type: string, pattern: '\\pL{{300}}{'x' * i}'}}\n" for i in range(100)
    )
    plugin, line = _plugin(tmp_path, properties)
    proc = dmn("lint", str(plugin), "--format", "json")
    assert_clean_refusal(proc, 1, "E_PATTERN")
    diags = json.loads(proc.stdout)
    assert {d["code"] for d in diags} == {"E_PATTERN"}
    assert sorted(d["line"] for d in diags) == list(range(line + 1, line + 101))
