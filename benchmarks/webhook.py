"""How fast the admission webhook answers, the way kube-apiserver calls it.

Measures, in one run, against the real :class:`WebhookServer` on loopback with a throwaway
CA (no API server: builtin plugins):

* ``kept-alive``: reviews of an example topology over one kept-alive HTTPS connection, as
  the API server sends them (each connection waits in the reception thread between reviews);
* ``new connection``: the same review on a fresh connection each time (TCP and TLS
  handshake included), what a client without keep-alive pays;
* ``kept-alive, Nagle on``: the kept-alive row with ``TCP_NODELAY`` off on the server's
  connections (the webhook's behaviour before it set it): the response's body waits for
  the client's delayed ACK of its head;
* ``idle connections``: the kept-alive review while ``--idle`` other connections (more than
  the server's workers) sit idle and open — it must not slow down.

Each row: median milliseconds per review over ``--reviews`` reviews, and the ratio to the
kept-alive row. Usage: ``python benchmarks/webhook.py [--reviews 200] [--idle 16] [--json]``.
"""

from __future__ import annotations

import argparse
import contextlib
import http.client
import json
import ssl
import statistics
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from dmn.controller.webhook import server as server_module
from dmn.controller.webhook.server import WebhookServer
from dmn.opcodes.registry import default_registry
from tests.controller.support import example
from tests.webhook.certs import ThrowawayCA
from tests.webhook.test_admission import G, req


@contextlib.contextmanager
def _webhook(directory: Path) -> Iterator[tuple[WebhookServer, ssl.SSLContext]]:
    ca = ThrowawayCA()
    (directory / "ca.crt").write_bytes(ca.pem())
    ca.issue(directory / "tls.crt", directory / "tls.key")
    server = WebhookServer(
        None,
        default_registry(),
        cert_file=str(directory / "tls.crt"),
        key_file=str(directory / "tls.key"),
    )
    server.start()
    try:
        yield server, ssl.create_default_context(cafile=str(directory / "ca.crt"))
    finally:
        server.stop()


def _connect(server: WebhookServer, ctx: ssl.SSLContext) -> http.client.HTTPSConnection:
    host, port = server.url.removeprefix("https://").split(":")
    return http.client.HTTPSConnection(host, int(port), context=ctx, timeout=60)


def _review(conn: http.client.HTTPSConnection, body: str) -> None:
    conn.request("POST", "/validate", body, {"Content-Type": "application/json"})
    resp = conn.getresponse()
    data = json.loads(resp.read())
    if resp.status != 200 or "response" not in data:
        raise RuntimeError(f"the webhook did not review: {resp.status} {data}")


def _median_ms(once: Callable[[], None], n: int) -> float:
    times = []
    for _ in range(n):
        start = time.perf_counter()
        once()
        times.append(time.perf_counter() - start)
    return statistics.median(times) * 1000


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--reviews", type=int, default=200)
    parser.add_argument("--idle", type=int, default=16)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    body = json.dumps(
        {
            "apiVersion": "admission.k8s.io/v1",
            "kind": "AdmissionReview",
            "request": req("NetworkTopology", G, "CREATE", example("vfio")),
        }
    )
    rows: dict[str, float] = {}
    with tempfile.TemporaryDirectory() as tmp, _webhook(Path(tmp)) as (server, ctx):
        kept = _connect(server, ctx)
        _review(kept, body)
        rows["kept-alive"] = _median_ms(lambda: _review(kept, body), args.reviews)

        def fresh() -> None:
            conn = _connect(server, ctx)
            try:
                _review(conn, body)
            finally:
                conn.close()

        rows["new connection"] = _median_ms(fresh, args.reviews)
        idle = [_connect(server, ctx) for _ in range(args.idle)]
        for conn in idle:
            conn.request("GET", "/healthz")
            conn.getresponse().read()
        rows["idle connections"] = _median_ms(lambda: _review(kept, body), args.reviews)
        for conn in idle:
            conn.close()
        kept.close()
    nagle = server_module._Handler.disable_nagle_algorithm
    try:
        server_module._Handler.disable_nagle_algorithm = False
        with tempfile.TemporaryDirectory() as tmp, _webhook(Path(tmp)) as (server, ctx):
            kept = _connect(server, ctx)
            _review(kept, body)
            rows["kept-alive, Nagle on"] = _median_ms(lambda: _review(kept, body), args.reviews)
            kept.close()
    finally:
        server_module._Handler.disable_nagle_algorithm = nagle
    base = rows["kept-alive"]
    results: list[dict[str, Any]] = [
        {"row": name, "median_ms": round(ms, 3), "ratio": round(ms / base, 2)}
        for name, ms in rows.items()
    ]
    if args.json:
        print(json.dumps(results, indent=2))
    else:
        for row in results:
            print(f"{row['row']:<24} {row['median_ms']:>9.3f} ms  x{row['ratio']}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
