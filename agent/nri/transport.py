"""asyncio transport: the NRI multiplexed trunk, and ttrpc client/server on its connections.

Why asyncio (and not threads) on the plugin side: one trunk carries two logical ttrpc
connections in both directions; requests from the runtime, our own RegisterPlugin call,
per-hook deadlines, reconnect backoff and a clean shutdown are all waits on the same
socket. An event loop expresses "wait for this frame or this deadline or that close" with
``asyncio.wait_for`` and cancellation, without a lock per connection or a thread per
stream, and a hung hook can be abandoned (answered with DEADLINE_EXCEEDED) while the
socket keeps being served. Blocking coordinator work runs in a thread pool
(see :mod:`dmn.agent.nri.plugin`), so the loop never blocks on netlink or the journal.

Writes of one ttrpc message are emitted as one ``writer.write`` of all its mux frames, so
frames of two messages never interleave on the trunk.

Bounds (issue 39), so a runtime that stalls, floods or stops reading costs a reconnect,
never unbounded memory or a hung plugin (:class:`TrunkBounds`): frames are bounded in
size by the framing modules (mux and ttrpc both refuse a header announcing more than the
Go peer's maximum before buffering it); a frame started and not finished within
``frame_timeout`` ends the trunk; a write the peer does not drain within
``write_timeout`` ends the trunk; more than ``max_in_flight`` unanswered requests end the
trunk (the Go mux likewise closes a trunk whose read queue overflows). An idle trunk
with no partial frame may stay idle forever: the runtime sends only when it has events.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from dmn.agent.nri import mux
from dmn.agent.nri.ttrpc_frame import (
    TYPE_DATA,
    TYPE_REQUEST,
    TYPE_RESPONSE,
    Code,
    FrameReader,
    TtrpcError,
    TtrpcProtocolError,
    decode_request,
    decode_response,
    encode_frame,
    encode_request,
    encode_response,
)

log = logging.getLogger(__name__)

Sink = Callable[[bytes], None]


class TrunkStalled(TtrpcProtocolError):
    """The peer left a frame unfinished, or our writes undrained, for too long."""


@dataclass(frozen=True)
class TrunkBounds:
    frame_timeout: float = 10.0
    write_timeout: float = 10.0
    max_in_flight: int = 64

    def __post_init__(self) -> None:
        if self.frame_timeout <= 0 or self.write_timeout <= 0 or self.max_in_flight < 1:
            raise ValueError("trunk bounds must be positive")


class MuxTransport:
    """One trunk socket; reassembles each logical connection and hands bytes to its sink."""

    def __init__(
        self,
        reader: asyncio.StreamReader,
        writer: asyncio.StreamWriter,
        bounds: TrunkBounds | None = None,
    ) -> None:
        self._reader = reader
        self._writer = writer
        self.bounds = bounds or TrunkBounds()
        self._demux = mux.Demultiplexer()
        self._sinks: dict[int, Sink] = {}
        self._partial: list[Callable[[], int]] = [lambda: self._demux.pending]
        self.closed = asyncio.Event()
        self.error: BaseException | None = None

    def attach(self, conn_id: int, sink: Sink, pending: Callable[[], int] | None = None) -> None:
        """Route ``conn_id``'s bytes to ``sink``; ``pending`` counts the bytes it holds of
        an unfinished frame (the frame deadline covers them too)."""
        self._sinks[conn_id] = sink
        if pending is not None:
            self._partial.append(pending)

    async def send(self, conn_id: int, data: bytes) -> None:
        if self.closed.is_set():
            raise TtrpcError(Code.UNAVAILABLE, "connection closed")
        self._writer.write(mux.encode(conn_id, data))
        try:
            await asyncio.wait_for(self._writer.drain(), self.bounds.write_timeout)
        except TimeoutError:
            self.fail(TrunkStalled(f"peer did not read for {self.bounds.write_timeout}s"))
            raise TtrpcError(Code.UNAVAILABLE, "peer does not read") from None

    def _mid_frame(self) -> bool:
        return any(pending() for pending in self._partial)

    async def _read(self) -> bytes:
        if not self._mid_frame():
            return await self._reader.read(65536)
        try:
            return await asyncio.wait_for(self._reader.read(65536), self.bounds.frame_timeout)
        except TimeoutError:
            raise TrunkStalled(
                f"peer left a frame unfinished for {self.bounds.frame_timeout}s"
            ) from None

    async def run(self) -> None:
        """Read the trunk until EOF or error; always ends with the transport closed."""
        try:
            while True:
                data = await self._read()
                if not data:
                    break
                for conn_id, payload in self._demux.feed(data):
                    sink = self._sinks.get(conn_id)
                    if sink is not None:
                        sink(payload)
        except (OSError, mux.MuxProtocolError, TtrpcProtocolError) as exc:
            self.fail(exc)
        finally:
            self.close()

    def fail(self, exc: BaseException) -> None:
        """End the trunk for a broken or abusive peer (the plugin reconnects)."""
        if self.error is None:
            self.error = exc
            log.warning("nri trunk failed error=%s", exc)
        # abort, not close: close() keeps the socket open until a peer that does not read
        # has taken our buffered bytes, i.e. forever
        self._writer.transport.abort()
        self.close()

    def close(self) -> None:
        if not self.closed.is_set():
            self.closed.set()
            with contextlib.suppress(Exception):
                self._writer.close()


Handler = Callable[[bytes, int], Awaitable[bytes]]
"""A ttrpc method: (request payload, timeout_nano from the caller) -> response payload.
Raise :class:`TtrpcError` to answer with a status."""


class TtrpcServer:
    """Serves unary requests arriving on one logical connection of a :class:`MuxTransport`."""

    def __init__(
        self,
        transport: MuxTransport,
        conn_id: int,
        services: dict[str, dict[str, Handler]],
    ) -> None:
        self._transport = transport
        self._conn_id = conn_id
        self._services = services
        self._frames = FrameReader()
        self._tasks: set[asyncio.Task[None]] = set()
        self._last_stream = 0
        transport.attach(conn_id, self._feed, lambda: self._frames.pending)

    def _feed(self, data: bytes) -> None:
        for frame in self._frames.feed(data):
            if len(self._tasks) >= self._transport.bounds.max_in_flight:
                raise TtrpcProtocolError(
                    f"more than {self._transport.bounds.max_in_flight} requests unanswered"
                )
            if frame.type != TYPE_REQUEST:
                # Unary-only server: data frames would belong to streams we never opened.
                log.debug(
                    "ttrpc server ignores frame type=%d stream=%d", frame.type, frame.stream_id
                )
                continue
            if frame.stream_id <= self._last_stream:
                task = asyncio.get_running_loop().create_task(
                    self._reply(
                        frame.stream_id,
                        encode_response(
                            code=Code.INVALID_ARGUMENT,
                            message="StreamID cannot be re-used and must increment",
                        ),
                    )
                )
            else:
                self._last_stream = frame.stream_id
                task = asyncio.get_running_loop().create_task(
                    self._serve(frame.stream_id, frame.data)
                )
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)

    async def _serve(self, stream_id: int, data: bytes) -> None:
        try:
            req = decode_request(data)
        except Exception as exc:  # malformed protobuf from the peer
            reply = encode_response(code=Code.INVALID_ARGUMENT, message=f"bad request: {exc}")
        else:
            method = self._services.get(req.service, {}).get(req.method)
            if req.service not in self._services:
                reply = encode_response(code=Code.UNIMPLEMENTED, message=f"service {req.service}")
            elif method is None:
                reply = encode_response(code=Code.UNIMPLEMENTED, message=f"method {req.method}")
            else:
                try:
                    reply = encode_response(await method(req.payload, req.timeout_nano))
                except TtrpcError as exc:
                    reply = encode_response(code=exc.code, message=exc.message)
                except Exception as exc:
                    log.exception(
                        "ttrpc handler failed service=%s method=%s", req.service, req.method
                    )
                    reply = encode_response(code=Code.INTERNAL, message=str(exc))
        await self._reply(stream_id, reply)

    async def _reply(self, stream_id: int, reply: bytes) -> None:
        with contextlib.suppress(TtrpcError, OSError):
            await self._transport.send(self._conn_id, encode_frame(stream_id, TYPE_RESPONSE, reply))

    def cancel(self) -> None:
        for task in list(self._tasks):
            task.cancel()


class TtrpcClient:
    """Issues unary calls on one logical connection; client streams use odd ids."""

    def __init__(self, transport: MuxTransport, conn_id: int) -> None:
        self._transport = transport
        self._conn_id = conn_id
        self._frames = FrameReader()
        self._next_stream = 1
        self._pending: dict[int, asyncio.Future[bytes]] = {}
        transport.attach(conn_id, self._feed, lambda: self._frames.pending)

    def _feed(self, data: bytes) -> None:
        for frame in self._frames.feed(data):
            fut = self._pending.pop(frame.stream_id, None)
            if fut is None or fut.done():
                continue
            if frame.type == TYPE_RESPONSE:
                fut.set_result(frame.data)
            elif frame.type == TYPE_DATA:
                fut.set_exception(TtrpcError(Code.INTERNAL, "unexpected stream data on unary call"))

    async def call(
        self, service: str, method: str, payload: bytes, timeout: float | None = None
    ) -> bytes:
        stream_id = self._next_stream
        self._next_stream += 2
        fut: asyncio.Future[bytes] = asyncio.get_running_loop().create_future()
        self._pending[stream_id] = fut
        timeout_nano = int(timeout * 1e9) if timeout else 0
        frame = encode_frame(
            stream_id, TYPE_REQUEST, encode_request(service, method, payload, timeout_nano)
        )
        closed: asyncio.Future[bool] = asyncio.ensure_future(self._transport.closed.wait())
        try:
            await self._transport.send(self._conn_id, frame)
            waiters: set[asyncio.Future[Any]] = {fut, closed}
            done, _ = await asyncio.wait(
                waiters, timeout=timeout, return_when=asyncio.FIRST_COMPLETED
            )
            if fut in done:
                return decode_response(fut.result())
            if closed in done:
                raise TtrpcError(Code.UNAVAILABLE, "connection closed")
            raise TtrpcError(
                Code.DEADLINE_EXCEEDED, f"{service}/{method} timed out after {timeout}s"
            )
        finally:
            self._pending.pop(stream_id, None)
            closed.cancel()
