"""The controller's verdict on an object just applied (``dmn lab apply``).

The API server admitting a NetworkTopology or NetworkPlugin does not mean the controller
accepts it: the controller compiles or checks it afterwards and reports ``Ready=False`` with
reason-coded ``status.diagnostics``. :func:`controller_verdict` waits briefly for the Ready
condition of the applied generation and returns the rejection, so ``apply`` can fail with the
reason code instead of printing "applied" for an object that will never work.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from dmn.api.cluster import Cluster, NotFound
from dmn.api.cluster import resources as r

#: kinds whose Ready condition the controller sets from its own check
JUDGED = {"NetworkTopology": r.NETWORK_TOPOLOGIES, "NetworkPlugin": r.NETWORK_PLUGINS}


@dataclass(frozen=True)
class Rejection:
    code: str
    message: str


def _ready(obj: dict[str, Any]) -> dict[str, Any] | None:
    for cond in (obj.get("status") or {}).get("conditions") or []:
        if cond.get("type") == "Ready":
            return dict(cond)
    return None


def rejection(obj: dict[str, Any]) -> Rejection | bool | None:
    """The verdict in ``obj``'s status: a :class:`Rejection`, None when accepted, False when
    the controller has not judged this generation yet."""
    cond = _ready(obj)
    if cond is None or cond.get("observedGeneration") != obj["metadata"].get("generation"):
        return False
    if cond.get("status") == "True":
        return None
    diagnostics = (obj.get("status") or {}).get("diagnostics") or []
    code = str(diagnostics[0].get("code")) if diagnostics else str(cond.get("reason", "E_INVALID"))
    return Rejection(code, str(cond.get("message", "")))


def controller_verdict(
    cluster: Cluster,
    applied: dict[str, Any],
    timeout: float = 10.0,
    clock: Callable[[], float] = time.monotonic,
) -> Rejection | None:
    """Wait up to ``timeout`` for the controller to judge ``applied`` (a NetworkTopology or
    NetworkPlugin); its rejection, or None when accepted, not judged in time, or another kind."""
    res = JUDGED.get(str(applied.get("kind")))
    if res is None:
        return None
    name = applied["metadata"]["name"]
    deadline = clock() + timeout
    obj = applied
    while True:
        verdict = rejection(obj)
        if verdict is not False:
            return verdict if isinstance(verdict, Rejection) else None
        if clock() >= deadline:
            return None
        time.sleep(0.1)
        try:
            obj = cluster.get(res, name)
        except NotFound:
            return None
