"""The node mutation lock's contract (dmn.engine.mutation_lock), with real threads.

Every claim here is proved by the order in which threads get in (events and recorded
sequences), never by how long anything took: disjoint keys are inside at the same time,
one key serialises, a node-wide pass excludes everything and is not starved, waits are
bounded and leave nothing taken, and a call that would break the key order is refused
before it waits.
"""

from __future__ import annotations

import random
import threading
from collections.abc import Callable
from functools import partial

import pytest

from dmn.engine.mutation_lock import (
    LockKey,
    LockOrderError,
    MutationLockTimeout,
    NodeMutationLock,
    claim_key,
    device_key,
    operation_key,
    sandbox_key,
)
from tests.waiting import wait_for

pytestmark = pytest.mark.adversarial

WAIT = 30.0


def _in_thread(target: Callable[[], None]) -> threading.Thread:
    t = threading.Thread(target=target, daemon=True)
    t.start()
    return t


def test_disjoint_keys_are_held_at_the_same_time() -> None:
    """A holds claim a and does not leave until B, holding claim b, got in: both inside."""
    lock = NodeMutationLock(timeout=WAIT)
    a_in, b_in = threading.Event(), threading.Event()
    seen: list[str] = []

    def a() -> None:
        with lock.hold("prepare a", [claim_key("a"), device_key("nic-a")]):
            a_in.set()
            assert b_in.wait(WAIT), "B never got in while A was inside"
            seen.append("a-saw-b")

    def b() -> None:
        assert a_in.wait(WAIT)
        with lock.hold("prepare b", [claim_key("b"), device_key("nic-b")]):
            b_in.set()

    ta, tb = _in_thread(a), _in_thread(b)
    ta.join(WAIT)
    tb.join(WAIT)
    assert seen == ["a-saw-b"]
    assert lock.holder == ""


@pytest.mark.parametrize(
    "first,second",
    [
        ([claim_key("c")], [claim_key("c")]),  # the same claim
        ([sandbox_key("s")], [sandbox_key("s"), claim_key("x")]),  # the same sandbox
        ([claim_key("a"), device_key("pf0")], [claim_key("b"), device_key("pf0")]),  # parent
    ],
    ids=["claim", "sandbox", "shared-parent"],
)
def test_a_shared_key_serialises(first: list[LockKey], second: list[LockKey]) -> None:
    """B asks while A holds a key B needs: B gets in only after A left (order recorded),
    and with a short bound it gives up naming A."""
    lock = NodeMutationLock(timeout=WAIT)
    a_in, release = threading.Event(), threading.Event()
    order: list[str] = []

    def a() -> None:
        with lock.hold("A", first):
            order.append("A in")
            a_in.set()
            assert release.wait(WAIT)
            order.append("A out")

    ta = _in_thread(a)
    assert a_in.wait(WAIT)
    with pytest.raises(MutationLockTimeout) as busy, lock.hold("B", second, timeout=0.05):
        pass
    assert busy.value.code == "E_NODE_LOCK_TIMEOUT" and "by A" in str(busy.value)

    def b() -> None:
        with lock.hold("B", second):
            order.append("B in")

    tb = _in_thread(b)
    wait_for(lambda: "B" in lock.waiting, timeout=WAIT, what="B to wait for the lock")
    release.set()
    ta.join(WAIT)
    tb.join(WAIT)
    assert order == ["A in", "A out", "B in"]


def test_a_node_wide_pass_excludes_everything_and_is_not_starved() -> None:
    """While an ordinary operation is inside, a pass waits; an operation arriving after the
    pass started waiting gets in only after the pass (writer preference); the pass itself
    keeps everyone out until it ends."""
    lock = NodeMutationLock(timeout=WAIT)
    order: list[str] = []
    inside, release = threading.Event(), threading.Event()

    def op1() -> None:
        with lock.hold("op1", [claim_key("a")]):
            order.append("op1 in")
            inside.set()
            assert release.wait(WAIT)
            order.append("op1 out")

    def pass_() -> None:
        with lock.exclusive("synchronize"):
            order.append("pass in")
            with lock.hold("nested", [claim_key("z")]):  # a pass owns every key already
                order.append("pass nested")
            order.append("pass out")

    def op2() -> None:
        with lock.hold("op2", [claim_key("b")]):  # a disjoint key: only the pass blocks it
            order.append("op2 in")

    t1 = _in_thread(op1)
    assert inside.wait(WAIT)
    tp = _in_thread(pass_)
    wait_for(lambda: lock.passes_waiting == 1, timeout=WAIT, what="the pass to wait")
    t2 = _in_thread(op2)
    wait_for(lambda: "op2" in lock.waiting, timeout=WAIT, what="op2 to wait")
    release.set()
    for t in (t1, tp, t2):
        t.join(WAIT)
    assert order == ["op1 in", "op1 out", "pass in", "pass nested", "pass out", "op2 in"]


def test_a_bounded_wait_takes_nothing() -> None:
    """A waiter that gives up on its second key releases the first it took (and its shared
    hold): a pass and the first key's next holder get in at once."""
    lock = NodeMutationLock(timeout=WAIT)
    held, release = threading.Event(), threading.Event()

    def owner() -> None:
        with lock.hold("owner", [device_key("pf0")]):
            held.set()
            assert release.wait(WAIT)

    t = _in_thread(owner)
    assert held.wait(WAIT)
    with (
        pytest.raises(MutationLockTimeout, match="device/pf0 by owner"),
        lock.hold("both", [claim_key("c"), device_key("pf0")], timeout=0.05),
    ):
        pass
    got: list[str] = []

    def other() -> None:
        with lock.hold("other", [claim_key("c")], timeout=0.05):
            got.append("claim c was free")

    _in_thread(other).join(WAIT)
    assert got == ["claim c was free"]
    release.set()
    t.join(WAIT)
    with lock.exclusive("pass", timeout=0.05):
        assert lock.holder == "pass"
    assert lock.holder == ""


def test_a_pass_that_gives_up_lets_the_waiting_operations_in() -> None:
    lock = NodeMutationLock(timeout=WAIT)
    held, release = threading.Event(), threading.Event()

    def slow() -> None:
        with lock.hold("slow prepare", [claim_key("a")]):
            held.set()
            assert release.wait(WAIT)

    t = _in_thread(slow)
    assert held.wait(WAIT)
    with (
        pytest.raises(MutationLockTimeout, match="slow prepare"),
        lock.exclusive("retention", 0.05),
    ):
        pass
    with lock.hold("after", [claim_key("b")], timeout=0.05):  # not blocked by a dead pass
        pass
    release.set()
    t.join(WAIT)


def test_key_order_is_enforced_before_waiting() -> None:
    """Nested holds may only add keys that sort after every key the thread owns; taking an
    owned key again is re-entrant; shared never upgrades to exclusive."""
    lock = NodeMutationLock(timeout=WAIT)
    with lock.hold("stop", [sandbox_key("s1")]):
        with lock.hold("stop", [sandbox_key("s1"), claim_key("c1")]):  # re-entrant + higher
            with lock.hold("run", [operation_key("op")]):
                assert lock.owned() == {sandbox_key("s1"), claim_key("c1"), operation_key("op")}
            with pytest.raises(LockOrderError):
                lock.hold("wrong", [sandbox_key("s2")]).__enter__()
            with pytest.raises(LockOrderError):
                lock.hold("wrong", [claim_key("c0")]).__enter__()
        assert lock.owned() == {sandbox_key("s1")}
        with pytest.raises(LockOrderError):
            lock.exclusive("upgrade").__enter__()
    assert lock.owned() == frozenset() and lock.holder == ""


def test_holder_names_the_outermost_reason() -> None:
    lock = NodeMutationLock(timeout=0.05)
    with lock.hold("outer", [claim_key("k")]), lock.hold("inner", [operation_key("o")]):
        assert lock.holder == "outer"
        errors: list[MutationLockTimeout] = []

        def other() -> None:
            try:
                with lock.hold("other", [claim_key("k")]):
                    pass
            except MutationLockTimeout as exc:
                errors.append(exc)

        _in_thread(other).join(WAIT)
        assert errors and "outer" in str(errors[0])
    assert lock.holder == ""


def test_random_nested_acquisitions_never_deadlock() -> None:
    """Threads take random key sets in the allowed nesting (sandbox, then claims, then
    devices, then an operation) over a small key space, with passes mixed in; every one
    finishes with the default bound never reached (a deadlock would time out), and no key
    is ever owned by two threads at once."""
    lock = NodeMutationLock(timeout=WAIT)
    owners: dict[LockKey, int] = {}
    guard = threading.Lock()
    failures: list[BaseException] = []

    def enter(keys: list[LockKey]) -> None:
        with guard:
            for k in keys:
                assert k not in owners, f"{k} owned twice"
                owners[k] = threading.get_ident()

    def leave(keys: list[LockKey]) -> None:
        with guard:
            for k in keys:
                del owners[k]

    def worker(seed: int) -> None:
        rnd = random.Random(seed)
        try:
            for _ in range(150):
                if rnd.random() < 0.05:
                    with lock.exclusive("pass"), guard:
                        assert not owners, "a pass ran beside an operation"
                    continue
                levels = [
                    [sandbox_key(f"s{rnd.randrange(3)}")],
                    [claim_key(f"c{i}") for i in rnd.sample(range(4), rnd.randrange(1, 3))],
                    [device_key(f"d{rnd.randrange(3)}")],
                    [operation_key(f"o{rnd.randrange(3)}")],
                ]
                start = rnd.randrange(len(levels))
                _nested(lock, levels[start:], enter, leave)
        except BaseException as exc:  # reported by the main thread
            failures.append(exc)

    threads = [_in_thread(partial(worker, s)) for s in range(6)]
    for t in threads:
        t.join(WAIT * 4)
    assert not failures, failures[:1]
    assert lock.holder == "" and not owners


def _nested(
    lock: NodeMutationLock,
    levels: list[list[LockKey]],
    enter: Callable[[list[LockKey]], None],
    leave: Callable[[list[LockKey]], None],
) -> None:
    if not levels:
        return
    keys = levels[0]
    with lock.hold("random", keys):
        enter(keys)
        try:
            _nested(lock, levels[1:], enter, leave)
        finally:
            leave(keys)
