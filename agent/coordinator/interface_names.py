"""Distinct interface names for the claims of one Pod.

Two claims made from one ResourceClaimTemplate (or from two topologies that both say
``ifName: net1``) would create two interfaces of one name in one sandbox, and the second
connect would fail at execution with ``E_NAME_TAKEN``. Instead the node renames, before it
binds anything, every step whose configured ``ifName`` an earlier claim of the same Pod
already uses: the first claim in the Pod's order keeps its names, a later one takes the next
free name of the same stem (``net1`` → ``net2``, ``net1.10`` → ``net1.11``), never one any
claim of the Pod configures. The result depends only on the claims, their order in the Pod
and their revisions' configuration, so a retried RunPodSandbox (or one after an agent
restart) gets the same names.

A name that cannot be made distinct within the kernel's 15 bytes is left as configured: the
connect then refuses it exactly as before. Names within one claim are the topology's own
business (compilation checks them) and are never changed.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from typing import Any

IFNAMSIZ = 15
IFNAME_KEY = "ifName"
_TRIES = 256


def _candidates(name: str) -> Iterator[str]:
    stem = name.rstrip("0123456789")
    digits = name[len(stem) :]
    start = int(digits) if digits else 0
    for n in range(start + 1, start + 1 + _TRIES):
        candidate = f"{stem}{n}"
        if len(candidate.encode()) > IFNAMSIZ:
            return
        yield candidate


def distinct_interface_names(
    claims: Sequence[Sequence[tuple[str, Mapping[str, Any]]]],
) -> list[dict[str, str]]:
    """For each claim (in the Pod's order; each a sequence of ``(step id, config)``), the
    steps whose ``ifName`` must change and their new names."""
    configured = [
        [(step, c.get(IFNAME_KEY)) for step, c in steps if isinstance(c.get(IFNAME_KEY), str)]
        for steps in claims
    ]
    reserved = {str(name) for steps in configured for _, name in steps}
    used: set[str] = set()
    out: list[dict[str, str]] = []
    for steps in configured:
        renames: dict[str, str] = {}
        mine: set[str] = set()
        for step, name in steps:
            assert isinstance(name, str)
            if name in used:
                new = next((c for c in _candidates(name) if c not in reserved | used), None)
                if new is not None:
                    renames[step] = new
                    reserved.add(new)
                    mine.add(new)
                    continue
            mine.add(name)
        used |= mine
        out.append(renames)
    return out
