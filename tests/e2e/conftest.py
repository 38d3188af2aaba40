"""One upstream lab per pytest session for the ``e2e`` tests (started on first use).

The lab is brought down at the end of the session, also after failures; the session's
state directory is a short path under /tmp (unix socket paths must fit sockaddr_un).
Never skipped: without the built components the fixture fails with the build command.
"""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from dmn.api.cluster import Cluster
from dmn.lab.upstream.cluster import UpstreamLab


@pytest.fixture(scope="session")
def upstream_lab() -> Iterator[UpstreamLab]:
    root = Path(tempfile.mkdtemp(prefix="dmn-e2e-", dir="/tmp"))
    lab = UpstreamLab(root)
    try:
        lab.up()
        yield lab
    finally:
        problems = lab.down()
        shutil.rmtree(root, ignore_errors=True)
        assert not problems, problems


@pytest.fixture
def admin(upstream_lab: UpstreamLab) -> Iterator[Cluster]:
    cluster = upstream_lab.admin()
    try:
        yield cluster
    finally:
        cluster.close()
