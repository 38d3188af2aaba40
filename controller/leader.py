"""Leader election with a ``coordination.k8s.io/v1`` Lease (the client-go protocol).

A candidate takes the Lease when it is absent, released (no holder), already its own, or
expired: its record has not changed for ``leaseDurationSeconds`` *as this candidate
observed it* (client-go's observedTime), so the decision never compares this machine's
clock with the holder's ``renewTime``. It renews every ``renew_interval``. All
writes carry the Lease's resourceVersion, so two candidates racing for an expired Lease
cannot both win (the loser gets 409 Conflict). Losing the Lease (a failed renewal past
the deadline, or another holder) calls ``on_lost`` — the controller stops reconciling.

The leader's own deadline is ``renew_deadline`` (shorter than ``lease_duration``, as
client-go's RenewDeadline): when renewals keep failing, it gives up leadership *before*
any other candidate may consider the Lease expired, so two leaders never overlap; clock
skew between replicas does not matter because every candidate times expiry on its own
clock from when it saw the record change. A candidate that starts while another holds the
Lease therefore waits one full ``lease_duration`` before taking over a dead holder.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any

from dmn.api.cluster import AlreadyExists, ApiFailure, Cluster, Conflict, NotFound
from dmn.api.cluster import resources as r

log = logging.getLogger(__name__)


def _now() -> datetime:
    return datetime.now(UTC)


def _fmt(t: datetime) -> str:
    return t.strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def _parse(text: str | None) -> datetime | None:
    if not text:
        return None
    text = text.replace("Z", "+00:00")
    try:
        return datetime.fromisoformat(text)
    except ValueError:
        return None


class LeaderElector:
    def __init__(
        self,
        cluster: Cluster,
        *,
        name: str,
        namespace: str,
        identity: str,
        lease_duration: float = 15.0,
        renew_deadline: float = 10.0,
        renew_interval: float = 2.0,
        clock: Callable[[], datetime] = _now,
    ) -> None:
        if not renew_interval < renew_deadline < lease_duration:
            raise ValueError("need renew_interval < renew_deadline < lease_duration")
        self.cluster = cluster
        self.name = name
        self.namespace = namespace
        self.identity = identity
        self.lease_duration = lease_duration
        self.renew_deadline = renew_deadline
        self.renew_interval = renew_interval
        self.clock = clock
        self.is_leader = False
        self._last_renew: datetime | None = None
        self._observed: tuple[Any, ...] | None = None
        self._observed_at: datetime | None = None

    def _spec(self, acquired: datetime | None, transitions: int) -> dict[str, Any]:
        now = self.clock()
        return {
            "holderIdentity": self.identity,
            "leaseDurationSeconds": int(self.lease_duration),
            "acquireTime": _fmt(acquired or now),
            "renewTime": _fmt(now),
            "leaseTransitions": transitions,
        }

    def try_acquire_or_renew(self) -> bool:
        """One attempt; True if this candidate holds the Lease afterwards."""
        try:
            lease = self.cluster.get(r.LEASES, self.name, self.namespace)
        except NotFound:
            body = {
                "metadata": {"name": self.name, "namespace": self.namespace},
                "spec": self._spec(None, 0),
            }
            try:
                self.cluster.create(r.LEASES, body, self.namespace)
            except (AlreadyExists, Conflict):
                return self._set(False)
            return self._set(True)
        except ApiFailure as exc:
            log.warning("lease read failed name=%s error=%s", self.name, exc)
            return self._keep_if_still_valid()
        spec = lease.get("spec") or {}
        holder = spec.get("holderIdentity")
        duration = float(spec.get("leaseDurationSeconds") or self.lease_duration)
        record = (
            holder,
            spec.get("renewTime"),
            spec.get("acquireTime"),
            spec.get("leaseDurationSeconds"),
            spec.get("leaseTransitions"),
        )
        now = self.clock()
        if record != self._observed or self._observed_at is None:
            self._observed, self._observed_at = record, now
        expired = self._observed_at + timedelta(seconds=duration) < now
        if holder not in (None, "", self.identity) and not expired:
            return self._set(False)
        transitions = int(spec.get("leaseTransitions") or 0)
        acquired = _parse(spec.get("acquireTime")) if holder == self.identity else None
        if holder != self.identity:
            transitions += 1
        lease["spec"] = self._spec(acquired, transitions)
        try:
            self.cluster.replace(r.LEASES, lease)
        except Conflict:
            return self._set(False)
        except ApiFailure as exc:
            log.warning("lease renew failed name=%s error=%s", self.name, exc)
            return self._keep_if_still_valid()
        return self._set(True)

    def _keep_if_still_valid(self) -> bool:
        """After a failed read or write: leader only until the deadline counted from the
        last *successful* renewal (a failure never extends it)."""
        valid = (
            self.is_leader
            and self._last_renew is not None
            and self._last_renew + timedelta(seconds=self.renew_deadline) > self.clock()
        )
        return self._set(valid, renewed=False)

    def _set(self, leader: bool, *, renewed: bool = True) -> bool:
        if leader and renewed:
            self._last_renew = self.clock()
        if leader != self.is_leader:
            log.info(
                "leadership changed lease=%s identity=%s leader=%s",
                self.name,
                self.identity,
                leader,
            )
        self.is_leader = leader
        return leader

    def run(
        self,
        stop: threading.Event,
        on_started: Callable[[], None],
        on_lost: Callable[[], None],
        retry_interval: float = 2.0,
    ) -> None:
        """Block until leader (then ``on_started``), keep renewing; ``on_lost`` on loss."""
        while not stop.is_set():
            if self.try_acquire_or_renew():
                break
            stop.wait(retry_interval)
        if stop.is_set():
            return
        on_started()
        while not stop.wait(self.renew_interval):
            if not self.try_acquire_or_renew():
                on_lost()
                return

    def release(self) -> None:
        """Give the Lease up (on clean shutdown) so a successor need not wait for expiry."""
        if not self.is_leader:
            return
        try:
            lease = self.cluster.get(r.LEASES, self.name, self.namespace)
            if (lease.get("spec") or {}).get("holderIdentity") == self.identity:
                lease["spec"]["holderIdentity"] = ""
                lease["spec"]["leaseDurationSeconds"] = 1
                self.cluster.replace(r.LEASES, lease)
        except ApiFailure as exc:
            log.info("lease release failed name=%s error=%s", self.name, exc)
        self.is_leader = False
