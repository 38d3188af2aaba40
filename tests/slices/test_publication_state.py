"""The publication state file: saved atomically, restored only for its own node, and never a
reason to stop publishing when it is unreadable or cannot be written."""

from __future__ import annotations

from pathlib import Path

import pytest

from dmn.agent.slices.publication import NodePublication
from dmn.agent.slices.publication_state import load_publication, save_publication


def _publication(generation: int = 7) -> NodePublication:
    publication = NodePublication("n1")
    publication.publisher.generation = generation
    publication.publisher.digest = "d"
    return publication


def test_saved_state_comes_back_for_its_node_only(tmp_path: Path) -> None:
    path = tmp_path / "state" / "publication.json"
    assert save_publication(path, _publication())
    restored = load_publication(path, "n1")
    assert restored is not None and restored.publisher.generation == 7
    assert restored.publisher.digest == "d"
    assert load_publication(path, "n2") is None
    assert load_publication(tmp_path / "absent.json", "n1") is None
    assert not (tmp_path / "state" / "publication.json.tmp").exists()


@pytest.mark.adversarial
@pytest.mark.parametrize(
    "content", [b"", b"{", b"[]", b'{"nodeName": "n1"}', b'{"nodeName": "n1", "generation": "x"}']
)
def test_an_unreadable_state_is_ignored_never_fatal(tmp_path: Path, content: bytes) -> None:
    path = tmp_path / "publication.json"
    path.write_bytes(content)
    assert load_publication(path, "n1") is None


@pytest.mark.adversarial
def test_a_state_that_cannot_be_written_is_reported_not_raised(tmp_path: Path) -> None:
    blocker = tmp_path / "not-a-dir"
    blocker.write_text("x")
    assert save_publication(blocker / "publication.json", _publication()) is False
