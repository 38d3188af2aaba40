"""The agent's test-only fault point (``dmn.agent.coordinator.fault_points``): inert unless
the environment names a boundary, armed only by its trigger file, one-shot, and the IPPool
port's boundaries pass every call through unchanged."""

from __future__ import annotations

from pathlib import Path

from dmn.agent.coordinator import fault_points
from dmn.agent.coordinator.fault_points import FaultPoint, PoolBoundaries
from dmn.opcodes.address_pools import ClaimOwner, PoolLease, PoolRefusal, PoolSubnet


def test_unset_or_empty_environment_builds_no_hook(tmp_path: Path) -> None:
    (tmp_path / fault_points.TRIGGER_FILE).touch()
    assert fault_points.from_environment(tmp_path, {}) is None
    assert fault_points.from_environment(tmp_path, {fault_points.FAULT_POINT_ENV: " "}) is None


def test_kills_once_at_a_matching_boundary_while_armed(tmp_path: Path) -> None:
    env = {fault_points.FAULT_POINT_ENV: "after-apply:*pool"}
    hook = fault_points.from_environment(tmp_path, env)
    assert isinstance(hook, FaultPoint)
    kills: list[str] = []
    hook._kill = lambda: kills.append("killed")
    hook("after-apply:net1.pool")  # not armed: no trigger file
    assert kills == []
    trigger = tmp_path / fault_points.TRIGGER_FILE
    trigger.touch()
    hook("after-apply:net1.create")  # armed, another boundary
    hook("ipam:before-allocate")
    assert kills == [] and trigger.exists()
    hook("after-apply:net1.pool")
    assert kills == ["killed"] and not trigger.exists()  # consumed before the kill
    hook("after-apply:net1.pool")
    assert kills == ["killed"]  # one-shot: a restarted agent with the same env runs on


def test_action_is_kill_stop_or_stall_and_nothing_else(tmp_path: Path) -> None:
    point = {fault_points.FAULT_POINT_ENV: "coordinator:before-run-pod"}
    for action in ("", "kill", "stop", "stall"):
        env = {**point, fault_points.FAULT_ACTION_ENV: action}
        hook = fault_points.from_environment(tmp_path, env)
        assert isinstance(hook, FaultPoint) and hook.action == (action or "kill")
    bad = {**point, fault_points.FAULT_ACTION_ENV: "reboot"}
    assert fault_points.from_environment(tmp_path, bad) is None


def test_stall_sleeps_this_thread_once(tmp_path: Path) -> None:
    env = {
        fault_points.FAULT_POINT_ENV: "coordinator:*",
        fault_points.FAULT_ACTION_ENV: "stall",
    }
    hook = fault_points.from_environment(tmp_path, env)
    assert isinstance(hook, FaultPoint)
    slept: list[float] = []
    hook._sleep = slept.append
    (tmp_path / fault_points.TRIGGER_FILE).touch()
    hook("coordinator:before-run-pod")
    hook("coordinator:before-run-pod")
    assert slept == [fault_points.STALL_S]


class _Pools:
    def __init__(self) -> None:
        self.calls: list[str] = []

    def subnets(self, pool: str) -> tuple[PoolSubnet, ...] | PoolRefusal:
        self.calls.append("subnets")
        return (PoolSubnet(4, 24, None, ()),)

    def allocate(
        self, pool: str, family: int, address: str | None, owner: ClaimOwner, operation: str
    ) -> PoolLease | PoolRefusal:
        self.calls.append("allocate")
        if address == "refuse":
            return PoolRefusal("E_IPPOOL_EXHAUSTED", "full")
        return PoolLease("p-1", "u", pool, "10.0.0.1", family)

    def release(self, lease: PoolLease) -> PoolRefusal | None:
        self.calls.append("release")
        return None

    def held(self, owner: ClaimOwner, operation: str) -> tuple[PoolLease, ...]:
        self.calls.append("held")
        return ()


def test_pool_boundaries_surround_allocate_and_release_only() -> None:
    inner = _Pools()
    seen: list[str] = []
    pools = PoolBoundaries(inner, lambda name: seen.append(name))
    owner = ClaimOwner("ns", "c", "uid", "node")
    assert pools.subnets("p") == (PoolSubnet(4, 24, None, ()),)
    lease = pools.allocate("p", 4, None, owner, "op/e")
    assert isinstance(lease, PoolLease)
    refused = pools.allocate("p", 4, "refuse", owner, "op/e")
    assert isinstance(refused, PoolRefusal)
    assert pools.release(lease) is None
    assert pools.held(owner, "op/e") == ()
    assert inner.calls == ["subnets", "allocate", "allocate", "release", "held"]
    assert seen == [
        fault_points.BEFORE_ALLOCATE,
        fault_points.AFTER_ALLOCATE,
        fault_points.BEFORE_ALLOCATE,  # refused: no allocation, so no after-allocate
        fault_points.BEFORE_RELEASE,
        fault_points.AFTER_RELEASE,
    ]
