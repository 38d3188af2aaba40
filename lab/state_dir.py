"""The lab's state directory: where a running lab leaves what its clients need.

Layout (all files are owned by the lab; nothing outside the directory is written):

* ``apiserver.json`` — every API object, saved when the lab stops, restored on ``up``;
* ``kubeconfig`` — a kubeconfig for the running lab (context ``dmn-lab``, no auth);
* ``lab.pid`` — the pid of the process running the lab, present while it runs;
* ``lab.log`` — the log of a detached lab;
* ``sysfs/`` — the lab node's (empty) sysfs root.

The default directory is ``$DMN_LAB_STATE_DIR``, else ``$XDG_STATE_HOME/dmn-lab``, else
``~/.local/state/dmn-lab``.
"""

from __future__ import annotations

import contextlib
import os
from dataclasses import dataclass
from pathlib import Path

import yaml

CONTEXT = "dmn-lab"


def default_state_dir() -> Path:
    explicit = os.environ.get("DMN_LAB_STATE_DIR")
    if explicit:
        return Path(explicit)
    base = os.environ.get("XDG_STATE_HOME") or str(Path.home() / ".local" / "state")
    return Path(base) / "dmn-lab"


@dataclass(frozen=True)
class StateDir:
    root: Path

    @property
    def apiserver_state(self) -> Path:
        return self.root / "apiserver.json"

    @property
    def kubeconfig(self) -> Path:
        return self.root / "kubeconfig"

    @property
    def pid_file(self) -> Path:
        return self.root / "lab.pid"

    @property
    def log_file(self) -> Path:
        return self.root / "lab.log"

    @property
    def sysfs(self) -> Path:
        return self.root / "sysfs"

    def create(self) -> None:
        self.root.mkdir(parents=True, exist_ok=True)

    def write_kubeconfig(self, url: str) -> Path:
        """Write a kubeconfig for ``url`` (atomically) and return its path."""
        doc = {
            "apiVersion": "v1",
            "kind": "Config",
            "clusters": [{"name": CONTEXT, "cluster": {"server": url}}],
            "users": [{"name": CONTEXT, "user": {}}],
            "contexts": [{"name": CONTEXT, "context": {"cluster": CONTEXT, "user": CONTEXT}}],
            "current-context": CONTEXT,
            "preferences": {},
        }
        return _write_atomic(self.kubeconfig, yaml.safe_dump(doc, sort_keys=False))

    def server_url(self) -> str | None:
        """The URL in the kubeconfig, or None when there is none (lab never started)."""
        try:
            doc = yaml.safe_load(self.kubeconfig.read_text())
            return str(doc["clusters"][0]["cluster"]["server"])
        except (OSError, yaml.YAMLError, KeyError, IndexError, TypeError):
            return None

    def write_pid(self, pid: int) -> None:
        _write_atomic(self.pid_file, f"{pid}\n")

    def running_pid(self) -> int | None:
        """The pid of the running lab, or None (no pid file, or a stale one)."""
        try:
            pid = int(self.pid_file.read_text().strip())
        except (OSError, ValueError):
            return None
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return None
        except PermissionError:
            return pid
        return pid

    def clear_runtime(self, pid: int) -> None:
        """Remove the pid file and kubeconfig if they still belong to ``pid``."""
        try:
            if int(self.pid_file.read_text().strip()) != pid:
                return
        except (OSError, ValueError):
            return
        for path in (self.pid_file, self.kubeconfig):
            with contextlib.suppress(FileNotFoundError):
                path.unlink()


def _write_atomic(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    temporary = path.with_name(path.name + ".tmp")
    temporary.write_text(text)
    os.replace(temporary, path)
    return path
