"""Lease leader election between two candidates on the lab API server."""

from __future__ import annotations

import threading
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from dmn.api.cluster import Cluster, connect
from dmn.api.cluster import resources as r
from dmn.controller.leader import LeaderElector


class Clock:
    def __init__(self) -> None:
        self.now = datetime(2026, 1, 1, tzinfo=UTC)

    def __call__(self) -> datetime:
        return self.now


def test_one_leader_takeover_after_expiry_and_release(cluster: Cluster) -> None:
    clock = Clock()
    a = LeaderElector(
        cluster,
        name="le-test",
        namespace="default",
        identity="a",
        lease_duration=10,
        renew_deadline=7,
        clock=clock,
    )
    b = LeaderElector(
        cluster,
        name="le-test",
        namespace="default",
        identity="b",
        lease_duration=10,
        renew_deadline=7,
        clock=clock,
    )
    assert a.try_acquire_or_renew() is True
    assert b.try_acquire_or_renew() is False
    clock.now += timedelta(seconds=5)
    assert a.try_acquire_or_renew() is True  # renewal
    clock.now += timedelta(seconds=9)
    assert b.try_acquire_or_renew() is False  # b sees the renewed record now: valid
    clock.now += timedelta(seconds=9)
    assert b.try_acquire_or_renew() is False  # unchanged for 9 s of b's clock: still valid
    clock.now += timedelta(seconds=2)
    assert b.try_acquire_or_renew() is True  # unchanged for 11 s: expired, b takes over
    lease = cluster.get(r.LEASES, "le-test", "default")
    assert lease["spec"]["holderIdentity"] == "b"
    assert lease["spec"]["leaseTransitions"] == 1
    assert a.try_acquire_or_renew() is False
    b.release()
    assert a.try_acquire_or_renew() is True


def test_racing_candidates_one_wins(cluster: Cluster) -> None:
    results: dict[str, bool] = {}
    barrier = threading.Barrier(4)

    def run(identity: str) -> None:
        elector = LeaderElector(cluster, name="le-race", namespace="default", identity=identity)
        barrier.wait()
        results[identity] = elector.try_acquire_or_renew()

    threads = [threading.Thread(target=run, args=(f"c{i}",)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert sum(results.values()) == 1
    winner = next(k for k, v in results.items() if v)
    assert cluster.get(r.LEASES, "le-race", "default")["spec"]["holderIdentity"] == winner


def test_failing_renewals_give_up_before_anyone_may_take_over(cluster: Cluster) -> None:
    clock = Clock()
    a = LeaderElector(
        cluster,
        name="le-deadline",
        namespace="default",
        identity="a",
        lease_duration=10,
        renew_deadline=7,
        clock=clock,
    )
    assert a.try_acquire_or_renew() is True
    with Cluster(connect(url="http://127.0.0.1:1"), request_timeout=5) as dead:
        dead.api_client.configuration.retries = 0
        a.cluster = dead  # the API server becomes unreachable for the leader
        clock.now += timedelta(seconds=6)
        assert a.try_acquire_or_renew() is True  # within the renew deadline
        clock.now += timedelta(seconds=2)
        # 8 s since the last renewal: past the deadline, still 2 s before others may take over
        assert a.try_acquire_or_renew() is False


def test_deadline_must_sit_between_interval_and_duration(cluster: Cluster) -> None:
    with pytest.raises(ValueError):
        LeaderElector(
            cluster,
            name="x",
            namespace="default",
            identity="a",
            lease_duration=10,
            renew_deadline=10,
        )


def test_expiry_is_timed_on_the_candidates_clock_not_the_holders(cluster: Cluster) -> None:
    """A holder whose clock runs an hour behind writes renewTimes that look long expired;
    a candidate still waits until the record stops changing for a lease duration."""
    behind, here = Clock(), Clock()
    behind.now -= timedelta(hours=1)
    kwargs: dict[str, Any] = {"namespace": "default", "lease_duration": 10, "renew_deadline": 7}
    a = LeaderElector(cluster, name="le-skew", identity="a", clock=behind, **kwargs)
    b = LeaderElector(cluster, name="le-skew", identity="b", clock=here, **kwargs)
    assert a.try_acquire_or_renew() is True
    for _ in range(3):
        assert b.try_acquire_or_renew() is False
        behind.now += timedelta(seconds=5)
        here.now += timedelta(seconds=5)
        assert a.try_acquire_or_renew() is True  # a keeps renewing
    assert b.try_acquire_or_renew() is False  # b sees a's last renewal
    here.now += timedelta(seconds=11)  # ... and nothing since, for 11 s of b's clock
    assert b.try_acquire_or_renew() is True
