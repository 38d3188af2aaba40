"""The port through which ``ip/pool-addresses`` takes addresses from IPPools (design §5.7).

Why a port: the opcode layer sits below the API layer, so an executor may not import the
allocation client; the node gives it this interface through the executor environment
(:attr:`~dmn.opcodes.device_environment.DeviceEnvironment.address_pools`), implemented over
the API server by ``dmn.api.ipam.node_pools``. Who holds an address is
:class:`ClaimOwner` — the ResourceClaim the agent verified and the node — plus the effect's
operation key (``<operation>/<effect>``); it is never read from configuration.

Contract: :meth:`AddressPools.subnets` reads a pool (one entry per family, its prefix
length, gateway and routes); :meth:`AddressPools.allocate` is idempotent per owner,
operation key, pool and family (a retry adopts what a lost response created);
:meth:`AddressPools.release` deletes one lease by name and UID (a lease gone or held by
another object under the name is released already); :meth:`AddressPools.held` lists every
lease of one owner and operation key. Refusals are :class:`PoolRefusal` values with reason
codes; an API server that cannot be reached raises ``ExecutorError`` ``E_IPAM_UNAVAILABLE``
(nothing was decided). Pure: imports no native or cluster library.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Protocol


@dataclass(frozen=True, slots=True)
class ClaimOwner:
    """The verified ResourceClaim (namespace, name, UID) and the node that holds it."""

    namespace: str
    name: str
    uid: str
    node_name: str

    def to_json(self) -> dict[str, str]:
        return {
            "namespace": self.namespace,
            "name": self.name,
            "uid": self.uid,
            "nodeName": self.node_name,
        }

    @classmethod
    def from_json(cls, data: Any) -> ClaimOwner:
        return cls(
            str(data["namespace"]), str(data["name"]), str(data["uid"]), str(data["nodeName"])
        )


@dataclass(frozen=True, slots=True)
class PoolRoute:
    """A route the pool gives its addresses: through ``gateway``, or on-link when None."""

    destination: str
    gateway: str | None


@dataclass(frozen=True, slots=True)
class PoolSubnet:
    family: int
    prefix_length: int
    gateway: str | None
    routes: tuple[PoolRoute, ...]


@dataclass(frozen=True, slots=True)
class PoolLease:
    """One address held: the allocation object's name and UID, its pool, address, family."""

    name: str
    uid: str
    pool: str
    address: str
    family: int

    def encode(self) -> str:
        return f"{self.name}@{self.uid}={self.pool}/{self.family}/{self.address}"

    @classmethod
    def decode(cls, text: str) -> PoolLease:
        head, _, tail = text.partition("=")
        name, _, uid = head.partition("@")
        pool, family, address = tail.split("/", 2)
        return cls(name, uid, pool, address, int(family))


@dataclass(frozen=True, slots=True)
class PoolRefusal:
    code: str
    message: str


class AddressPools(Protocol):
    def subnets(self, pool: str) -> tuple[PoolSubnet, ...] | PoolRefusal: ...

    def allocate(
        self, pool: str, family: int, address: str | None, owner: ClaimOwner, operation: str
    ) -> PoolLease | PoolRefusal:
        """An address for ``owner`` under ``operation``, which holds nothing in ``pool``
        when this is called: the runner applies an effect only after a fresh intent, or
        after a recovery that found nothing held under its key (``held``)."""
        ...

    def release(self, lease: PoolLease) -> PoolRefusal | None: ...

    def held(self, owner: ClaimOwner, operation: str) -> tuple[PoolLease, ...]: ...
