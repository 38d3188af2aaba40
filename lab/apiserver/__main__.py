"""``python -m dmn.lab.apiserver [--host H] [--port P] [--state FILE] [--tls-cert C --tls-key K]``.

Runs the lab API server in the foreground; SIGINT or SIGTERM stop it (saving ``--state``).
"""

from __future__ import annotations

import argparse
import logging
import signal
from types import FrameType

from .server import serve


def _interrupt(signum: int, frame: FrameType | None) -> None:
    raise KeyboardInterrupt


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m dmn.lab.apiserver")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=6443)
    parser.add_argument("--state", help="JSON file to restore objects from and save them to")
    parser.add_argument("--tls-cert")
    parser.add_argument("--tls-key")
    args = parser.parse_args()
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s %(message)s")
    signal.signal(signal.SIGTERM, _interrupt)
    tls = (args.tls_cert, args.tls_key) if args.tls_cert and args.tls_key else None
    serve(args.host, args.port, tls=tls, state=args.state)


if __name__ == "__main__":
    main()
