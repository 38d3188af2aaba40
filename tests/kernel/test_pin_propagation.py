"""Whether the agent's namespace pins outlive its container: the state directory's mount
propagation decides, on the real kernel.

A container here is what runc makes of the chart's hostPath mount: a child process in a
mount namespace of its own, in which the (shared) host state directory is ``Bidirectional``
(left shared, in the host's peer group) or ``HostToContainer`` (made a slave: the host's
mounts reach it, its own do not reach the host). The child pins a namespace with the
agent's own :class:`NamespacePins` and exits, which destroys its mount namespace — the
container's death. Then the host, and a second container, look for the pin.
"""

from __future__ import annotations

import ctypes
import os
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from dmn.host.pins import MS_BIND, MS_REC, MS_SHARED, NamespacePins, _c, _mount, _umount
from tests.kernel.scratch import netns_path, scratch_netns

pytestmark = pytest.mark.netns

CLONE_NEWNS = 0x00020000
MS_SLAVE = 1 << 19


@pytest.fixture
def host_state(tmp_path: Path) -> Iterator[Path]:
    """The host's state directory on a shared mount (as the lab's and a node's are)."""
    state = tmp_path / "state"
    state.mkdir()
    _mount(str(state), str(state), MS_BIND)
    assert _c().mount(b"none", str(state).encode(), None, MS_SHARED | MS_REC, None) == 0
    try:
        yield state
    finally:
        _umount(str(state))  # lazily, with everything a container propagated below it


def _in_container(state: Path, propagation: str, body: Callable[[NamespacePins], bool]) -> bool:
    """Run ``body`` in a forked child with its own mount namespace (a container whose
    state directory has ``propagation``); the child's exit ends that namespace."""
    pid = os.fork()
    if pid == 0:  # the container
        code = 1
        try:
            if ctypes.CDLL(None, use_errno=True).unshare(CLONE_NEWNS) != 0:
                os._exit(3)
            if propagation == "HostToContainer":
                flags = MS_SLAVE | MS_REC
                assert _c().mount(b"none", str(state).encode(), None, flags, None) == 0
            code = 0 if body(NamespacePins(state, host_netns="/proc/self/ns/net")) else 1
        finally:
            os._exit(code)
    _, status = os.waitpid(pid, 0)
    assert os.WIFEXITED(status) and os.WEXITSTATUS(status) in (0, 1), status
    return os.WEXITSTATUS(status) == 0


@pytest.mark.parametrize(
    ("propagation", "survives"), [("Bidirectional", True), ("HostToContainer", False)]
)
def test_a_pin_outlives_its_container_only_with_bidirectional_propagation(
    host_state: Path, propagation: str, survives: bool
) -> None:
    with scratch_netns("dmpp") as name:

        def pin(pins: NamespacePins) -> bool:
            pins.pin("att-1", netns_path(name))
            return pins.ref("att-1") is not None

        assert _in_container(host_state, propagation, pin)  # pinned inside the container
        host = NamespacePins(host_state, host_netns="/proc/self/ns/net")
        assert (host.ref("att-1") is not None) is survives
        assert (host_state / "netns" / "att-1").exists()  # the bare file stays either way
        again = _in_container(host_state, propagation, lambda p: p.ref("att-1") is not None)
        assert again is survives  # what the next container of the agent finds
