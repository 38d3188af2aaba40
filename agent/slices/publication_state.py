"""The node's publication state on disk, so a restarted agent keeps what it promised.

Why: the scheduler may allocate a device from a slice and the agent restart before kubelet
asks it to prepare. Without its earlier state the restarted agent re-declares the allocated
device from the inventory and policies it reads now — a policy changed in between gives the
pinned device another capacity or attributes than the ones it was allocated under — and
starts its pool generation from whatever slices it happens to find. With this file it
restores :class:`~dmn.agent.slices.NodePublication` (generation, digest, degradation and the
last declarations), so pinned devices keep their declaration and generations only move
forward.

Contract: :func:`load_publication` returns the saved state of ``node_name``, or None when
there is none, it belongs to another node or it cannot be read (logged: the agent then
publishes as a fresh one, which is safe — it only loses the pins' old declarations).
:func:`save_publication` replaces the file atomically (temporary file, fsync, rename, fsync
of the directory) and reports failure instead of raising (a full disk must not stop
publication: the slices are already written). The path is the agent's state directory,
never configuration a workload can set.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
from pathlib import Path

from dmn.agent.slices.publication import NodePublication

log = logging.getLogger(__name__)

STATE_FILE = "publication.json"
MAX_STATE_BYTES = 64 * 1024 * 1024


def load_publication(path: Path, node_name: str) -> NodePublication | None:
    """The state saved at ``path`` for ``node_name``, or None (see the module contract)."""
    try:
        if path.stat().st_size > MAX_STATE_BYTES:
            log.warning("event=publication-state-ignored path=%s reason=too-large", path)
            return None
        data = json.loads(path.read_text())
    except FileNotFoundError:
        return None
    except (OSError, ValueError) as exc:
        log.warning("event=publication-state-ignored path=%s reason=%s", path, exc)
        return None
    if not isinstance(data, dict) or data.get("nodeName") != node_name:
        log.warning("event=publication-state-ignored path=%s reason=another-node", path)
        return None
    try:
        return NodePublication.from_json(data)
    except (KeyError, TypeError, ValueError) as exc:
        log.warning("event=publication-state-ignored path=%s reason=%s", path, exc)
        return None


def save_publication(path: Path, publication: NodePublication) -> bool:
    """Replace the saved state with ``publication``'s; False (logged) when it could not."""
    temporary = path.with_name(path.name + ".tmp")
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        data = json.dumps(publication.to_json(), sort_keys=True).encode()
        fd = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with open(fd, "wb") as out:
            out.write(data)
            out.flush()
            os.fsync(out.fileno())
        os.replace(temporary, path)
        directory = os.open(path.parent, os.O_RDONLY)
        try:
            os.fsync(directory)
        finally:
            os.close(directory)
        return True
    except OSError as exc:
        log.error("event=publication-state-not-saved path=%s error=%s", path, exc)
        with contextlib.suppress(OSError):
            temporary.unlink()
        return False
