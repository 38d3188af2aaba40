"""A coordinator in a child process that SIGKILLs itself at one runner boundary.

Forked by :mod:`tests.crash_fork_server` (``child: coordinator``), or run alone as
``python -m tests.coordinator.crash_child <request.json>``: the request names the lab API
server, the agent's state dir, host namespace and ``--ovsdb-remote``, the node's personas
and their link and representor facts (as the parent's agent saw them), the call (prepare,
unprepare, run_pod, stop_pod or synchronize) and the boundary to die at (a runner boundary
or a coordinator commit's, ``coordinator:...``).
Every boundary passed is appended to ``out`` first, so the parent knows where it died.
"""

from __future__ import annotations

import json
import os
import signal
import sys
from pathlib import Path
from typing import Any

from dmn.agent.coordinator import NodeConfig, NodeServices
from dmn.agent.coordinator.handles import FunctionFacts, LinkFacts, RdmaFacts, RepresentorFacts
from dmn.agent.personas.model import Persona, PersonaSet
from dmn.api.cluster import Cluster, connect


class Devices:
    """The parent agent's device view as the request carried it (personas, and the link and
    representor facts of its inventory): the child scans nothing."""

    def __init__(self, req: dict[str, Any]) -> None:
        self._personas = PersonaSet(tuple(Persona.from_json(p) for p in req["personas"]), {}, ())
        self._links = {k: LinkFacts(**v) for k, v in req["links"].items()}
        self._representors = {
            k: RepresentorFacts(**v) for k, v in req.get("representors", {}).items()
        }

    def personas(self) -> PersonaSet:
        return self._personas

    def link(self, inventory_id: str) -> LinkFacts | None:
        return self._links.get(inventory_id)

    def function(self, inventory_id: str) -> FunctionFacts | None:
        return None

    def rdma(self, inventory_id: str) -> tuple[RdmaFacts, ...]:
        return ()

    def representor(self, inventory_id: str) -> RepresentorFacts | None:
        return self._representors.get(inventory_id)


def main() -> int:
    return child(json.loads(Path(sys.argv[1]).read_text()))


def child(req: dict[str, Any]) -> int:
    out = Path(req["out"])

    def boundary(name: str) -> None:
        with out.open("a") as f:
            f.write(name + "\n")
        if name == req["crash_at"]:
            os.kill(os.getpid(), signal.SIGKILL)

    config = NodeConfig(
        node_name=req["node_name"],
        node_uid=req["node_uid"],
        state_dir=Path(req["state_dir"]),
        host_netns=req["host_netns"],
        **({"ovsdb_remote": req["ovsdb_remote"]} if req.get("ovsdb_remote") else {}),
    )
    services = NodeServices.open(
        config, Cluster(connect(url=req["url"])), Devices(req), boundary=boundary
    )
    services.start()
    call = req["call"]
    action = call["action"]
    if action == "prepare":
        services.preparation.prepare(call["namespace"], call["name"], call["uid"])
    elif action == "unprepare":
        services.preparation.unprepare(call["uid"])
    elif action == "stop_pod":
        services.attachments.stop_pod(call["pod_uid"], call["sandbox"])
    elif action == "synchronize":
        services.reconcile.synchronize([tuple(s) for s in call["live"]])
    else:
        services.attachments.run_pod(
            call["namespace"], call["pod_name"], call["pod_uid"], call["sandbox"], call["netns"]
        )
    services.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
