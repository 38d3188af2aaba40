"""The interface the kubelet DRA adapter calls — implemented by the agent's coordinator.

``prepare``/``unprepare`` receive the whole batch the kubelet sent and return one result per
claim UID. A failing claim is reported in its own result (``error``); the adapter turns a
missing result or an exception into per-claim errors too, so the kubelet never sees an
RPC-level failure for the batch (kubernetes staging/src/k8s.io/kubelet/pkg/apis/dra/v1/
api.proto: "Failures for individual claims can be reported inside
NodePrepareResourcesResponse"; every claim of the request must have an entry).
Calls arrive on gRPC worker threads and may run concurrently.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from enum import Enum
from typing import Protocol


@dataclass(frozen=True)
class ClaimRef:
    namespace: str
    uid: str
    name: str


@dataclass(frozen=True)
class PreparedDevice:
    pool_name: str
    device_name: str
    request_names: tuple[str, ...] = ()
    cdi_device_ids: tuple[str, ...] = ()
    # DRAConsumableCapacity share of a multi-allocatable device (v1 only; dropped on v1beta1).
    share_id: str | None = None


@dataclass(frozen=True)
class PrepareResult:
    devices: tuple[PreparedDevice, ...] = ()
    error: str = ""


@dataclass(frozen=True)
class UnprepareResult:
    error: str = ""


class Health(Enum):
    """The DRAResourceHealth ``HealthStatus`` values (same numbers in v1 and v1alpha1)."""

    UNKNOWN = 0
    HEALTHY = 1
    UNHEALTHY = 2


#: The kubelet keeps at most this many characters of a health message (v1.37
#: ``truncateHealthMessage``: longer ones become 1021 characters plus "...").
MAX_HEALTH_MESSAGE = 1024


@dataclass(frozen=True)
class DeviceHealth:
    """One device's health for the DRAResourceHealth stream: ``last_updated`` (unix
    seconds) is when the agent last determined this status, ``message`` why."""

    pool_name: str
    device_name: str
    health: Health
    last_updated: int
    message: str = ""


class DraHandler(Protocol):
    def prepare(self, claims: Sequence[ClaimRef]) -> Mapping[str, PrepareResult]: ...

    def unprepare(self, claims: Sequence[ClaimRef]) -> Mapping[str, UnprepareResult]: ...
