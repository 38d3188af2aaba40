"""The files the lab ships: the Helm chart (generated CRDs, builtin NetworkPlugin CRs) and the
example topologies, read as package data through :mod:`importlib.resources`.

In a checkout ``dmn/charts`` and ``dmn/examples`` are links to the repository's folders; a
built wheel carries copies as package data of ``dmn``, so ``dmn lab`` works the same from an
installed wheel as from the source tree. Only plain files on disk are supported (no zip
imports): the lab hands these paths to YAML readers and globs.
"""

from __future__ import annotations

from importlib import resources
from pathlib import Path


def data_root() -> Path:
    """The folder holding ``charts/`` and ``examples/`` of this installation."""
    return Path(str(resources.files("dmn")))


def chart_dir() -> Path:
    return data_root() / "charts" / "dra-multi-network"


def examples_dir() -> Path:
    return data_root() / "examples"
