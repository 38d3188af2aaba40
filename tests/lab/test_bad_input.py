"""Bad input and a missing lab: reason codes on stderr, no traceback, exit status 2."""

from __future__ import annotations

import socket
from pathlib import Path

import pytest

from dmn.cli import lab as cli
from dmn.lab.cluster import LabCluster, LabError
from dmn.lab.manifests import ManifestError, load
from dmn.lab.state_dir import StateDir
from tests.lab.support import dmn_lab, no_traceback


def _run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str]:
    rc = cli.run(list(argv))
    return rc, capsys.readouterr().err


@pytest.mark.parametrize(
    ("text", "code", "where"),
    [
        ("a: [\n", "E_SYNTAX", ":2:1"),
        ("- just\n- a list\n", "E_MANIFEST", "a manifest must be a mapping"),
        ("apiVersion: v1\nkind: ConfigMap\nmetadata: {}\n", "E_MANIFEST", "metadata.name"),
        ("kind: ConfigMap\nmetadata: {name: x}\n", "E_MANIFEST", "apiVersion"),
    ],
)
def test_bad_manifest_is_reason_coded(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], text: str, code: str, where: str
) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text(text)
    with pytest.raises(ManifestError) as info:
        load(bad)
    assert info.value.code == code and where in info.value.message
    # the manifest is read before the lab is looked for: the user sees the file's problem
    rc, err = _run(capsys, "apply", "-f", str(bad), "--state-dir", str(tmp_path / "none"))
    assert rc == 2 and f"error[{code}]" in err and str(bad) in err


def test_missing_file(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    rc, err = _run(capsys, "apply", "-f", str(tmp_path / "nope.yaml"), "--state-dir", str(tmp_path))
    assert rc == 2 and "error[E_IO]" in err and "nope.yaml" in err


def test_directory_reads_every_manifest_in_order(tmp_path: Path) -> None:
    (tmp_path / "b.yaml").write_text("apiVersion: v1\nkind: ConfigMap\nmetadata: {name: b}\n")
    (tmp_path / "a.yml").write_text(
        "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: a1}\n---\n"
        "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: a2}\n"
    )
    (tmp_path / "notes.txt").write_text("ignored")
    assert [m.name for m in load(tmp_path)] == ["a1", "a2", "b"]


@pytest.mark.parametrize(
    "argv",
    [["get", "topology"], ["get", "topology", "x", "-o", "yaml"], ["down"]],
)
def test_lab_not_running(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], argv: list[str]
) -> None:
    rc, err = _run(capsys, *argv, "--state-dir", str(tmp_path))
    assert rc == 2 and "error[E_LAB_NOT_RUNNING]" in err


def test_apply_without_a_lab(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    good = tmp_path / "cm.yaml"
    good.write_text("apiVersion: v1\nkind: ConfigMap\nmetadata: {name: x}\n")
    rc, err = _run(capsys, "apply", "-f", str(good), "--state-dir", str(tmp_path / "s"))
    assert rc == 2 and "error[E_LAB_NOT_RUNNING]" in err


def test_stale_pid_file_is_not_a_running_lab(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    state = StateDir(tmp_path)
    state.write_pid(2**22 + 12345)  # above the default pid_max: no such process
    state.write_kubeconfig("http://127.0.0.1:1")
    assert state.running_pid() is None
    rc, err = _run(capsys, "get", "claims", "--state-dir", str(tmp_path))
    assert rc == 2 and "E_LAB_NOT_RUNNING" in err


def test_unknown_kind(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    rc, err = _run(capsys, "get", "frobnicators", "--state-dir", str(tmp_path))
    assert rc == 2 and "error[E_UNKNOWN_KIND]" in err


def test_port_in_use_is_a_start_error(tmp_path: Path) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        with pytest.raises(LabError) as info:
            LabCluster(StateDir(tmp_path), port=port).start()
    assert info.value.code == "E_LAB_START"


def test_cli_subprocess_reports_without_traceback(tmp_path: Path) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text("kind: [\n")
    for argv in (
        ["apply", "-f", str(bad), "--state-dir", str(tmp_path)],
        ["get", "topologies", "--state-dir", str(tmp_path)],
        ["down", "--state-dir", str(tmp_path)],
    ):
        result = dmn_lab(*argv)
        no_traceback(result)
        assert result.returncode == 2 and "dmn lab: error[" in result.stderr


def test_detached_start_failure_is_reported_with_the_log(tmp_path: Path) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = str(taken.getsockname()[1])
        result = dmn_lab("up", "--detach", "--port", port, "--state-dir", str(tmp_path))
    no_traceback(result)
    assert result.returncode == 2 and "error[E_LAB_START]" in result.stderr
    assert "E_LAB_START" in (tmp_path / "lab.log").read_text()
    assert StateDir(tmp_path).running_pid() is None


@pytest.mark.adversarial
@pytest.mark.parametrize(
    ("data", "code", "where"),
    [
        (b"", "E_EMPTY", ":1:1"),
        (b"# only a comment\n", "E_EMPTY", ":1:1"),
        (("[" * 5000 + "]" * 5000).encode(), "E_LIMIT", ":1:101: document nests deeper"),
        (
            b"a: &a [x, x, x, x, x, x, x, x, x]\n"
            + b"".join(
                b"k%d: &k%d [*a, *a, *a, *a, *a, *a, *a, *a, *a]\n" % (i, i) for i in range(30)
            ),
            "E_LIMIT",
            "aliases",
        ),
        (b"apiVersion: v1\nkind: ConfigMap\nmetadata: {name: \xff}\n", "E_SYNTAX", ":3:18"),
        (b"n: " + b"9" * 5000 + b"\n", "E_LIMIT", ":1:4: integer literal with 5000 digits"),
        (b"a: 1\na: 2\n", "E_DUPLICATE_KEY", ":2:1"),
    ],
    ids=["empty", "comment-only", "deep", "bomb", "not-utf8", "big-int", "duplicate-key"],
)
def test_every_manifest_goes_through_the_bounded_loader(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], data: bytes, code: str, where: str
) -> None:
    """Deep nesting, alias bombs, bad bytes: one reason-coded line at the exact place."""
    bad = tmp_path / "bad.yaml"
    bad.write_bytes(data)
    with pytest.raises(ManifestError) as info:
        load(bad)
    assert info.value.code == code and where in info.value.message, info.value.message
    for command in ("apply", "delete"):
        rc, err = _run(capsys, command, "-f", str(bad), "--state-dir", str(tmp_path / "none"))
        assert rc == 2 and err.count("\n") == 1 and f"error[{code}]" in err, err
        assert "Traceback" not in err


def test_oversized_file_is_refused_before_it_is_read(tmp_path: Path) -> None:
    big = tmp_path / "big.yaml"
    with big.open("wb") as f:
        f.truncate(10 * 1024 * 1024)  # 10 MB of NULs: never parsed
    with pytest.raises(ManifestError) as info:
        load(big)
    assert info.value.code == "E_LIMIT" and "10485760 bytes" in info.value.message


def test_directory_without_manifests_is_empty_input(tmp_path: Path) -> None:
    (tmp_path / "notes.txt").write_text("not a manifest")
    with pytest.raises(ManifestError) as info:
        load(tmp_path)
    assert info.value.code == "E_EMPTY"
