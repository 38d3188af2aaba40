"""A TCP proxy in front of an API server that a test can stall: a brownout, for real sockets.

While :meth:`StallingProxy.stall` is in effect, bytes in flight are held (not dropped) in
both directions on every connection and new connections are accepted but not forwarded,
so a client's request neither fails fast nor completes: what a stuck or overloaded API
server looks like to the agent. :meth:`resume` lets everything through again.
"""

from __future__ import annotations

import socket
import threading
from collections.abc import Iterator
from contextlib import contextmanager, suppress


class StallingProxy:
    def __init__(self, upstream: tuple[str, int]) -> None:
        self.upstream = upstream
        self._open = threading.Event()
        self._open.set()
        self._closed = threading.Event()
        self._listener = socket.create_server(("127.0.0.1", 0))
        self._sockets: list[socket.socket] = []
        self._lock = threading.Lock()
        self.accepted = 0  # client connections, forwarded or (while stalled) not yet
        self.connections = 0
        self.held = 0  # chunks that waited for resume()
        threading.Thread(target=self._accept, name="stalling-proxy", daemon=True).start()

    @property
    def url(self) -> str:
        host, port = self._listener.getsockname()[:2]
        return f"http://{host}:{port}"

    def stall(self) -> None:
        self._open.clear()

    def resume(self) -> None:
        self._open.set()

    def close(self) -> None:
        self._closed.set()
        self._open.set()
        self._listener.close()
        with self._lock:
            for s in self._sockets:
                with suppress(OSError):
                    s.shutdown(socket.SHUT_RDWR)
                s.close()

    def _accept(self) -> None:
        while not self._closed.is_set():
            try:
                client, _ = self._listener.accept()
            except OSError:
                return
            with self._lock:
                self.accepted += 1
            threading.Thread(target=self._connect, args=(client,), daemon=True).start()

    def _connect(self, client: socket.socket) -> None:
        self._open.wait()
        if self._closed.is_set():
            client.close()
            return
        try:
            server = socket.create_connection(self.upstream)
        except OSError:
            client.close()
            return
        with self._lock:
            self.connections += 1
            self._sockets += [client, server]
        for a, b in ((client, server), (server, client)):
            threading.Thread(target=self._pump, args=(a, b), daemon=True).start()

    def _pump(self, src: socket.socket, dst: socket.socket) -> None:
        try:
            while True:
                data = src.recv(65536)
                if not data:
                    break
                if not self._open.is_set():
                    with self._lock:
                        self.held += 1
                    self._open.wait()
                if self._closed.is_set():
                    break
                dst.sendall(data)
        except OSError:
            pass
        finally:
            for s in (src, dst):
                with suppress(OSError):
                    s.shutdown(socket.SHUT_RDWR)


@contextmanager
def stalling_proxy(url: str) -> Iterator[StallingProxy]:
    host, port = url.removeprefix("http://").rstrip("/").rsplit(":", 1)
    proxy = StallingProxy((host, int(port)))
    try:
        yield proxy
    finally:
        proxy.close()
