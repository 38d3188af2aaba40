"""Every document diagnostic carries a real position (issue 39): a bad character is
reported where it was injected (not at 1:1), every position lies inside the document,
and a value reached through a YAML alias is placed at that alias, so two uses of one bad
anchor are two positions. Through ``dmn lint``, ``dmn compile`` and ``dmn explain`` as a
user runs them, each case in a bounded child process."""

from __future__ import annotations

import json
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from dmn.interpreter.source import load_yaml_documents
from tests.test_hostile_properties import ROOT, assert_no_traceback, run_bounded

pytestmark = [pytest.mark.adversarial, pytest.mark.property]

TOPOLOGIES = sorted((ROOT / "examples" / "topologies").glob("*.yaml"))
COMMANDS = ["lint", "compile", "explain"]
#: Characters YAML does not allow (C0 and C1 controls, DEL, a noncharacter) and a lone
#: surrogate, which becomes bytes that are not UTF-8.
BAD = ["\x00", "\x01", "\x08", "\x0b", "\x1b", "\x7f", "\x80", "\x9f", "\ufffe", "\ud800"]


@pytest.fixture(scope="module")
def scratch() -> Iterator[Path]:
    with tempfile.TemporaryDirectory(prefix="dmn-positions-") as d:
        yield Path(d)


def _diagnostics(scratch: Path, command: str, text: str) -> list[dict[str, object]]:
    (scratch / "doc.yaml").write_bytes(text.encode("utf-8", "surrogatepass"))
    argv = [command, "doc.yaml", "--format", "json"]
    if command != "lint":
        argv += ["--plugins", str(ROOT / "examples" / "plugins")]
    status, stdout, stderr = run_bounded(argv, scratch)
    assert_no_traceback(argv, status, stdout, stderr)
    found = json.loads(stdout)
    if isinstance(found, dict):  # explain's plan: the document was clean
        return []
    assert isinstance(found, list), stdout
    return [d for d in found if isinstance(d, dict) and "line" in d]


def _position(text: str, offset: int) -> tuple[int, int]:
    """1-based line and column (in characters) of ``text[offset]``."""
    return text.count("\n", 0, offset) + 1, offset - (text.rfind("\n", 0, offset) + 1) + 1


def _inside(text: str, line: int, column: int) -> bool:
    """A position on a line of the document, at most one past its end (an error at the
    end of a line or of the file)."""
    lines = text.split("\n")
    return 1 <= line <= len(lines) and 1 <= column <= len(lines[line - 1]) + 1


@settings(max_examples=30, deadline=None, suppress_health_check=list(HealthCheck))
@given(
    command=st.sampled_from(COMMANDS),
    source=st.sampled_from(TOPOLOGIES),
    bad=st.sampled_from(BAD),
    where=st.floats(min_value=0, max_value=1),
)
def test_an_injected_bad_character_is_reported_where_it_is(
    scratch: Path, command: str, source: Path, bad: str, where: float
) -> None:
    text = source.read_text()
    offset = int(where * len(text))
    hostile = text[:offset] + bad + text[offset:]
    found = _diagnostics(scratch, command, hostile)
    assert [d["code"] for d in found] == ["E_SYNTAX"], found
    assert (found[0]["line"], found[0]["column"]) == _position(hostile, offset), found


_edit = st.tuples(
    st.floats(min_value=0, max_value=1),
    st.integers(min_value=0, max_value=12),
    st.text(alphabet=st.sampled_from(list(" :-[]{}&*!|>'\"#,\nabz019")), max_size=8),
)


@settings(max_examples=40, deadline=None, suppress_health_check=list(HealthCheck))
@given(
    command=st.sampled_from(COMMANDS),
    source=st.sampled_from(TOPOLOGIES),
    edits=st.lists(_edit, min_size=1, max_size=4),
)
def test_every_reported_position_lies_inside_the_document(
    scratch: Path,
    command: str,
    source: Path,
    edits: list[tuple[float, int, str]],
) -> None:
    """Random edits (a slice cut, YAML punctuation and text put in its place) of a real
    topology: whatever goes wrong, each diagnostic about the file points into it."""
    text = source.read_text()
    for where, cut, put in edits:
        at = int(where * len(text))
        text = text[:at] + put + text[at + cut :]
    for d in _diagnostics(scratch, command, text):
        if d.get("file") == "doc.yaml":
            assert _inside(text, int(d["line"]), int(d["column"])), (d, text)  # type: ignore[call-overload]


ALIASED = """\
apiVersion: networking.dra-multi-network.schseba.github.io/v1alpha1
kind: NetworkTopology
metadata:
  name: shared-macvlan
spec:
  effectBudget:
    allow: [share/hold-parent/v1, linux/create-macvlan/v2]
  steps:
    - id: net1
      kind: Allocation
      pluginRef: &ref {name: macvlan-cni}
      config: &cfg {mode: bridge, ifName: net1, mtu: 99999999, up: true}
    - id: net2
      kind: Allocation
      pluginRef: *ref
      config: *cfg
"""


@pytest.mark.parametrize("command", COMMANDS)
def test_an_error_under_an_alias_is_placed_at_each_use(scratch: Path, command: str) -> None:
    found = _diagnostics(scratch, command, ALIASED)
    mtu = [(d["line"], d["column"]) for d in found if "99999999" in str(d["message"])]
    # the anchor's own value where it is written, the alias's use where *cfg stands
    assert sorted(mtu) == [(12, 54), (16, 15)], found


def test_alias_positions_follow_document_order_through_nested_anchors() -> None:
    text = "a: &a {x: 1, y: &b [1, 2]}\nb: *b\nc: [*a, {k: *b}]\nd:\n  e: *a\n"
    (doc,), problems = load_yaml_documents(text, "t.yaml")
    assert problems == []
    spans = {path: (info.span.line, info.span.column) for path, info in doc.source.nodes.items()}
    assert spans[("a", "y")] == (1, 17)  # the anchored value itself: where it is written
    assert spans[("b",)] == spans[("b", 0)] == (2, 4)
    assert spans[("c", 0)] == spans[("c", 0, "x")] == spans[("c", 0, "y", 1)] == (3, 5)
    assert spans[("c", 1, "k")] == spans[("c", 1, "k", 0)] == (3, 13)
    assert spans[("d", "e")] == spans[("d", "e", "y")] == (5, 6)
    assert doc.source.nodes[("d", "e")].key_span is not None
    assert doc.source.nodes[("d", "e")].key_span.line == 5  # type: ignore[union-attr]


def test_an_alias_bomb_is_a_limit_at_the_alias_that_crosses_it() -> None:
    """Seven levels of ten aliases each expand to ten million nodes: E_LIMIT at the first
    alias past the bound, nothing composed, so no cascade of misplaced errors follows."""
    lines = ["a0: &a0 [x, x, x, x, x, x, x, x, x, x]"]
    lines += [f"a{i}: &a{i} [" + ", ".join([f"*a{i - 1}"] * 10) + "]" for i in range(1, 8)]
    docs, problems = load_yaml_documents("\n".join(lines) + "\n", "bomb.yaml")
    assert docs == []
    assert [(p.code.name, p.line) for p in problems] == [("E_LIMIT", 6)]
    assert "aliases expanded" in problems[0].message
