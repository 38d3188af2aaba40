"""The DeviceExposurePolicies as one publication pass reads them, at a cost that does not
grow with the cluster.

Why: a pass needs the policies' specs (what to expose). Every node reading every policy
whole on every pass would cost the cluster nodes × policies reads every resync; the spec
only ever changes with the generation.

Contract: :meth:`PolicyReader.read` lists the policies as metadata only (names, UIDs,
generations) and fetches a policy whole only when its UID or generation is new to this
reader, or its copy is older than ``refresh_s`` (a bound on trusting the API server's
generation bookkeeping, not a need of the design); the pass still reads every policy afresh
in the sense that matters — a spec change always moves the generation, so the spec a pass
sees is never older than the list it made. The copy's status is whatever the fetch
returned; nothing on the node reads it (this node's reports live on its Node,
:mod:`dmn.agent.personas.status_report`). A policy deleted meanwhile is left out.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from dmn.api.cluster import Cluster, NotFound
from dmn.api.cluster import resources as r

Obj = dict[str, Any]

#: at most this long (seconds) between whole reads of one policy
REFRESH_S = 3600.0


@dataclass(frozen=True)
class _Copy:
    uid: str
    generation: object
    doc: Obj
    fetched: float


def _identity(obj: Obj) -> tuple[str, str, object]:
    meta = obj.get("metadata") or {}
    return str(meta.get("name", "")), str(meta.get("uid", "")), meta.get("generation")


class PolicyReader:
    def __init__(
        self,
        cluster: Cluster,
        refresh_s: float = REFRESH_S,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.cluster = cluster
        self.refresh_s = refresh_s
        self.clock = clock
        self._copies: dict[str, _Copy] = {}
        #: whole policies fetched so far (tests, metrics)
        self.fetches = 0

    def read(self) -> list[Obj]:
        """Every policy, whole, as of this call's list (see the module docstring). Raises
        ``NotFound`` when the resource is not served (the CRD is not installed)."""
        listed = self.cluster.list(r.DEVICE_EXPOSURE_POLICIES, metadata_only=True)
        now = self.clock()
        kept: dict[str, _Copy] = {}
        out: list[Obj] = []
        for item in listed.items:
            name, uid, generation = _identity(item)
            copy = self._copies.get(name)
            fresh = (
                copy is not None
                and (copy.uid, copy.generation) == (uid, generation)
                and now - copy.fetched < self.refresh_s
            )
            if not fresh:
                try:
                    doc = self.cluster.get(r.DEVICE_EXPOSURE_POLICIES, name)
                except NotFound:
                    continue
                self.fetches += 1
                _, uid, generation = _identity(doc)
                copy = _Copy(uid, generation, doc, now)
            assert copy is not None
            kept[name] = copy
            out.append(copy.doc)
        self._copies = kept
        return out
