"""Namespace pins on the real kernel: bind mounts under a state dir, identity-checked."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest
from pyroute2 import IPRoute, netns

from dmn.host.netns import identity_of
from dmn.host.pins import NamespacePins, PinError
from tests.kernel.scratch import netns_path, scratch_netns, unique

pytestmark = pytest.mark.netns


@pytest.fixture
def pins(tmp_path: Path) -> Iterator[NamespacePins]:
    p = NamespacePins(tmp_path / "state", host_netns="/proc/self/ns/net")
    try:
        yield p
    finally:
        for ref in p.list():
            p.release(Path(ref.path).name, cleanup_verified=True)
        p.close()


def test_pin_keeps_the_namespace_alive_and_opens_by_identity(pins: NamespacePins) -> None:
    name = unique("dmpin")
    netns.create(name)
    try:
        ref = pins.pin("att-1", netns_path(name))
        assert (ref.identity.dev, ref.identity.inode) == (
            identity_of(netns_path(name)).dev,
            identity_of(netns_path(name)).inode,
        )
        assert pins.pin("att-1", netns_path(name)) == ref  # idempotent
    finally:
        netns.remove(name)  # the runtime's own handle is gone; our pin still holds it
    assert [r.path for r in pins.list()] == [ref.path]
    fd = pins.open("att-1", ref.identity)
    os.close(fd)
    env = pins.link_environment("att-1")
    assert env.sandbox == ref and [r.path for r in env.known()][1:] == [ref.path]
    env.close()
    with pytest.raises(PinError) as missing:
        pins.link_environment("att-none")
    assert missing.value.code == "E_PIN_MISSING"
    with IPRoute(netns=ref.path, flags=0) as ipr:
        ipr.link("add", ifname="pinned0", kind="veth", peer="pinned1")
        assert ipr.link_lookup(ifname="pinned0")
    with pytest.raises(PinError) as err:
        pins.release("att-1", cleanup_verified=False)
    assert err.value.code == "E_PIN_BUSY"
    pins.release("att-1", cleanup_verified=True)
    assert pins.list() == [] and not Path(ref.path).exists()


def test_refusals(pins: NamespacePins, tmp_path: Path) -> None:
    with pytest.raises(PinError) as err:
        pins.pin("att-h", "/proc/self/ns/net")
    assert err.value.code == "E_HOST_NETNS"
    with pytest.raises(PinError) as err:
        pins.pin("../escape", "/proc/self/ns/net")
    assert err.value.code == "E_PIN_ID"
    plain = tmp_path / "plain"
    plain.write_text("")
    with pytest.raises(PinError) as err:
        pins.pin("att-p", str(plain))
    assert err.value.code == "E_NOT_A_NETNS"
    with scratch_netns() as a, scratch_netns() as b:
        ref = pins.pin("att-2", netns_path(a))
        with pytest.raises(PinError) as err:
            pins.pin("att-2", netns_path(b))
        assert err.value.code == "E_PIN_CONFLICT"
        with pytest.raises(PinError) as err:
            pins.open("att-2", identity_of(netns_path(b)))
        assert err.value.code == "E_PIN_MISMATCH"
        pins.release("att-2", cleanup_verified=True)
        assert pins.ref("att-2") is None
        del ref


def test_a_bare_file_is_not_a_pin(pins: NamespacePins) -> None:
    with scratch_netns() as a:
        pins.pin("att-3", netns_path(a))
    pins.release("att-3", cleanup_verified=True)
    (pins.root / "att-4").write_text("")  # what survives a reboot: the file, not the mount
    assert pins.ref("att-4") is None and pins.list() == []
    (pins.root / "att-4").unlink()


def test_warm_pins_keep_sockets_across_calls_and_drop_them_with_the_pin(tmp_path: Path) -> None:
    """issue 15: with ``warm`` the sandbox's netlink sockets and fd outlive one call's
    environment, every call still proves the pin first, and releasing the pin closes them;
    a later call on the released pin is refused as before."""
    from dmn.opcodes.executor import ExecutorError

    pins = NamespacePins(tmp_path / "state", host_netns="/proc/self/ns/net", warm=True)
    assert pins.warm is not None
    with scratch_netns("dmwarm") as name:
        try:
            ref = pins.pin("att-w", netns_path(name))
            env = pins.link_environment("att-w")
            sock, fd = env.rtnl(ref), env.fd(ref)
            env.close()
            again = pins.link_environment("att-w")
            assert again.rtnl(ref) is sock and again.fd(ref) == fd  # warm, not reopened
            assert again.rtnl(ref).link_lookup(ifname="lo")  # and still usable
            again.close()
            key = (ref.identity.dev, ref.identity.inode)
            assert key in pins.warm.sockets and key in pins.warm.fds
            pins.release("att-w", cleanup_verified=True)
            assert key not in pins.warm.sockets and key not in pins.warm.fds
            late = pins.link_environment()
            with pytest.raises(ExecutorError) as gone:
                late.rtnl(ref)
            assert gone.value.code == "E_NETNS_GONE"
            late.close()
        finally:
            for r in pins.list():
                pins.release(Path(r.path).name, cleanup_verified=True)
            pins.close()
    assert pins.warm.sockets == {} and pins.warm.fds == {}


def test_warm_sockets_are_per_thread(tmp_path: Path) -> None:
    """pyroute2 binds a socket object to the thread that made it; the agent calls from the
    kubelet gRPC threads and the NRI thread, so warm sockets are kept per thread (a dead
    thread's are closed), and so are fds and readers (issue 13: calls run at once)."""
    import threading

    pins = NamespacePins(tmp_path / "state", host_netns="/proc/self/ns/net", warm=True)
    assert pins.warm is not None
    seen: list[int] = []

    def use(ref: object) -> None:
        env = pins.link_environment("att-t")
        seen.append(len(env.rtnl(env.sandbox).get_links()))
        env.close()

    with scratch_netns("dmthr") as name:
        try:
            ref = pins.pin("att-t", netns_path(name))
            use(ref)
            for _ in range(3):  # new threads (thread ids may be reused by the OS)
                t = threading.Thread(target=use, args=(ref,))
                t.start()
                t.join()
            use(ref)
            assert seen == [1] * 5
            assert len([s for s in pins.warm.by_thread.values() if s]) <= 2
        finally:
            for r in pins.list():
                pins.release(Path(r.path).name, cleanup_verified=True)
            pins.close()


@pytest.mark.adversarial
def test_a_pin_released_under_another_threads_call_keeps_its_fds_until_that_call_ends(
    tmp_path: Path,
) -> None:
    """Issue 13: calls of different Pods run at once. Thread T is inside an environment
    that opened the sandbox's fd and sockets when another thread releases that pin: T's
    entries stay open (the fd number is not closed under T, where it could be reused by an
    unrelated file) and T can finish its reads; they are closed when T leaves its last
    environment."""
    import threading

    pins = NamespacePins(tmp_path / "state", host_netns="/proc/self/ns/net", warm=True)
    assert pins.warm is not None
    inside, released, done = threading.Event(), threading.Event(), threading.Event()
    seen: list[object] = []

    def call() -> None:
        env = pins.link_environment("att-x")
        ref = env.sandbox
        assert ref is not None
        fd = env.fd(ref)
        env.rtnl(ref)
        inside.set()
        assert released.wait(30)
        os.fstat(fd)  # still this thread's open fd
        seen.append(len(env.rtnl(ref).get_links()))  # and its socket still answers
        key = (ref.identity.dev, ref.identity.inode)
        env.close()
        seen.append(key in pins.warm.fds or key in pins.warm.sockets)  # closed on leaving
        done.set()

    with scratch_netns("dmfx") as name:
        try:
            pins.pin("att-x", netns_path(name))
            t = threading.Thread(target=call)
            t.start()
            assert inside.wait(30)
            pins.release("att-x", cleanup_verified=True)
            released.set()
            assert done.wait(30)
            t.join(30)
            assert seen == [1, False]
        finally:
            for r in pins.list():
                pins.release(Path(r.path).name, cleanup_verified=True)
            pins.close()
