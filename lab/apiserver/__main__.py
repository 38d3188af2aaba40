"""``python -m dmn.lab.apiserver [--host H] [--port P]``: run the lab API server."""

from __future__ import annotations

import argparse
import logging

from .server import serve


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m dmn.lab.apiserver")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=6443)
    parser.add_argument("--tls-cert")
    parser.add_argument("--tls-key")
    args = parser.parse_args()
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s %(message)s")
    tls = (args.tls_cert, args.tls_key) if args.tls_cert and args.tls_key else None
    serve(args.host, args.port, tls=tls)


if __name__ == "__main__":
    main()
