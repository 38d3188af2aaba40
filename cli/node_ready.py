"""``dmn node-ready``: the node agent's readiness probe (the facts and their file are
:mod:`dmn.agent.readiness`'s; this is only the command that reads them).

Exits 0 if the file is fresh and every fact holds; otherwise prints one reason-coded line
and exits 1. It imports nothing heavy, so a probe costs one small Python start.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from dmn.agent.readiness import DEFAULT_MAX_AGE, DEFAULT_STATE_DIR, check
from dmn.cli.command_line import CommandParser, run_command


def run(argv: list[str]) -> int:
    """``dmn node-ready``: exit 0 if this node's agent reports ready, else 1 with a reason."""
    parser = CommandParser(prog="dmn node-ready", description=run.__doc__)
    parser.add_argument("--state-dir", type=Path, default=Path(DEFAULT_STATE_DIR))
    parser.add_argument("--max-age", type=float, default=DEFAULT_MAX_AGE)
    return run_command(parser, argv, _probe)


def _probe(args: argparse.Namespace) -> int:
    ok, reason = check(args.state_dir, args.max_age)
    (sys.stdout if ok else sys.stderr).write(f"dmn node-ready: {reason}\n")
    return 0 if ok else 1
