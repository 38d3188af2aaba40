"""``dmn inventory``: scan this node (read-only) and show what it would publish.

    dmn inventory [--sysfs /sys] [--node-uid UID] [--node-ip IP]... [--protect BDF]...
                  [--policy FILE]... [--node-name NAME] [--label k=v]... [--slices]

Prints JSON: the inventory, and with ``--policy`` the personas and findings the policies
produce; ``--slices`` adds the ResourceSlices of the pool. Nothing is changed on the
node. Bad input (unreadable or invalid policy files) is reported with a reason code and
exit status 2, never a traceback.
"""

from __future__ import annotations

import argparse
import json
import socket
import sys
from pathlib import Path
from typing import Any

from pydantic import ValidationError
from ruamel.yaml import YAML
from ruamel.yaml.error import YAMLError

from dmn.agent.inventory.scan import ScanConfig, scan
from dmn.api.policy import DeviceExposurePolicy
from dmn.cli.command_line import CommandParser, run_command
from dmn.host.inventory_sources import NetlinkRdma, Pyroute2Devlink, Pyroute2Links


def _fail(code: str, message: str) -> int:
    sys.stderr.write(f"dmn inventory: error[{code}]: {message}\n")
    return 2


def _load_policies(paths: list[Path]) -> list[DeviceExposurePolicy] | tuple[str, str]:
    yaml = YAML(typ="safe")
    out: list[DeviceExposurePolicy] = []
    for path in paths:
        try:
            docs = [d for d in yaml.load_all(path.read_text()) if d is not None]
        except OSError as exc:
            return "E_IO", f"{path}: {exc.strerror}"
        except YAMLError as exc:
            return "E_SYNTAX", f"{path}: {exc}"
        for doc in docs:
            try:
                out.append(DeviceExposurePolicy.model_validate(doc))
            except ValidationError as exc:
                first = exc.errors()[0]
                where = ".".join(str(p) for p in first["loc"])
                return "E_SCHEMA", f"{path}: {where}: {first['msg']}"
    return out


def run(argv: list[str]) -> int:
    parser = CommandParser(prog="dmn inventory", description=__doc__.split("\n\n")[0])
    parser.add_argument("--sysfs", type=Path, default=Path("/sys"))
    parser.add_argument("--node-uid", default="")
    parser.add_argument("--node-name", default=socket.gethostname())
    parser.add_argument("--node-ip", action="append", default=[])
    parser.add_argument("--protect", action="append", default=[], help="PCI address to protect")
    parser.add_argument("--policy", action="append", type=Path, default=[])
    parser.add_argument("--label", action="append", default=[], help="node label k=v")
    parser.add_argument("--slices", action="store_true")
    return run_command(parser, argv, _scan)


def _scan(args: argparse.Namespace) -> int:
    loaded = _load_policies(args.policy)
    if isinstance(loaded, tuple):
        return _fail(*loaded)
    labels = dict(item.split("=", 1) for item in args.label if "=" in item)
    inventory = scan(
        ScanConfig(
            sysfs_root=args.sysfs,
            node_uid=args.node_uid or args.node_name,
            links=Pyroute2Links(),
            devlink=Pyroute2Devlink(),
            rdma=NetlinkRdma(),
            node_ips=args.node_ip,
            protected_pci_addresses=args.protect,
        )
    )
    out: dict[str, Any] = {"inventory": inventory.to_json()}
    if loaded:
        from dmn.agent.personas.build import build_personas
        from dmn.agent.slices.build import build_slices

        personas = build_personas(inventory, loaded, labels)
        out["personas"] = [p.to_device() for p in personas.personas]
        out["findings"] = [f.to_json() for f in personas.findings]
        if args.slices:
            out["slices"] = build_slices(personas, args.node_name, 1)
    sys.stdout.write(json.dumps(out, indent=2, sort_keys=True) + "\n")
    return 0
