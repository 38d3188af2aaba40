"""Resource bounds of the kubelet-facing gRPC servers (DRA and registration sockets).

Why: any local process that can open the sockets can also open many connections, send
half a request and stall, send an oversized message, or never read. None of that may
starve the kubelet's own calls or grow the agent without limit (issue 39). The servers
are ``grpc.aio`` servers, so a call costs a coroutine — not a thread — until its request
has fully arrived; handler threads are taken only for complete requests. What remains
is bounded here:

* ``max_receive_message_length`` bounds the bytes one call can make us buffer; a larger
  message is refused with RESOURCE_EXHAUSTED before it is read in full.
* ``maximum_concurrent_rpcs`` bounds the calls held at once (so the buffered bytes, at
  most calls x message length); beyond it a call is refused at once with
  RESOURCE_EXHAUSTED instead of queueing memory.
* ``max_concurrent_streams`` (HTTP/2 SETTINGS) bounds what one connection holds, so a
  single connection cannot take every call slot; the kubelet's client queues its own
  calls beyond it instead of failing.
* ``max_watch_streams`` bounds the long-lived health streams (each holds a call slot for
  its lifetime); beyond it a watch is refused with RESOURCE_EXHAUSTED.
* keepalive pings find peers that stopped reading or vanished (no ack within
  ``keepalive_timeout``: the connection is closed, its calls cancelled), and
  ``max_connection_idle`` closes connections with no call at all; grpc clients, the
  kubelet's included, reconnect transparently on their next call.
* ``handler_workers`` bounds the threads that run complete requests.

The defaults leave wide headroom over the kubelet's real traffic: a NodePrepareResources
request carries the claims of one pod (a pod references at most a few dozen claims, each
a few hundred bytes), and the kubelet holds one connection with a handful of calls and
one health stream.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class ServerBounds:
    max_receive_message_length: int = 256 << 10
    max_send_message_length: int = 4 << 20
    maximum_concurrent_rpcs: int = 256
    max_concurrent_streams: int = 32
    max_watch_streams: int = 16
    handler_workers: int = 8
    keepalive_time: float = 60.0
    keepalive_timeout: float = 20.0
    max_connection_idle: float = 300.0

    def __post_init__(self) -> None:
        for name in (
            "max_receive_message_length",
            "max_send_message_length",
            "maximum_concurrent_rpcs",
            "max_concurrent_streams",
            "max_watch_streams",
            "handler_workers",
        ):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be at least 1")
        for name in ("keepalive_time", "keepalive_timeout", "max_connection_idle"):
            if getattr(self, name) <= 0:
                raise ValueError(f"{name} must be positive")

    def grpc_options(self) -> list[tuple[str, int]]:
        """Channel arguments of a server (names from grpc core's grpc_types.h)."""
        return [
            ("grpc.max_receive_message_length", self.max_receive_message_length),
            ("grpc.max_send_message_length", self.max_send_message_length),
            ("grpc.max_concurrent_streams", self.max_concurrent_streams),
            ("grpc.keepalive_time_ms", int(self.keepalive_time * 1000)),
            ("grpc.keepalive_timeout_ms", int(self.keepalive_timeout * 1000)),
            ("grpc.keepalive_permit_without_calls", 1),
            ("grpc.max_connection_idle_ms", int(self.max_connection_idle * 1000)),
        ]


#: The DRA socket: the kubelet's prepare/unprepare calls, health checks, health streams.
DRA_BOUNDS = ServerBounds()
#: The registration socket: two tiny calls per registration.
REGISTRATION_BOUNDS = ServerBounds(
    max_receive_message_length=16 << 10,
    max_send_message_length=64 << 10,
    maximum_concurrent_rpcs=64,
    max_concurrent_streams=8,
    max_watch_streams=1,
    handler_workers=2,
)
