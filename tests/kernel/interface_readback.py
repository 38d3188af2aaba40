"""Reading a link's per-interface settings back from inside a namespace, by other paths than
the executors' (for the sysctl/ethtool tests and their crash matrix): sysctls with ``cat``
under ``ip netns exec``, features with the legacy ethtool ioctl (pyroute2's ``Ethtool``) in a
process started in the namespace."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

HOST_TUNED = Path(__file__).parent / "plugins/host-tuned/v1"
"""The test plugin whose connect moves a device in and runs both opcodes on it."""

_IOCTL_FEATURES = (
    "import json, sys\n"
    "from pyroute2.ethtool import Ethtool\n"
    "e = Ethtool()\n"
    "f = e.get_features(sys.argv[1])\n"
    "print(json.dumps({k: v.enable for k, v in f.features.items() if k}))\n"
)


def sysctl_in(ns: str, family: str, name: str, key: str) -> int:
    done = subprocess.run(
        ["ip", "netns", "exec", ns, "cat", f"/proc/sys/net/{family}/conf/{name}/{key}"],
        capture_output=True,
        text=True,
        check=True,
    )
    return int(done.stdout)


def features_in(ns: str, name: str) -> dict[str, bool]:
    """Every feature's active state by the ethtool ioctl, in a process inside ``ns``."""
    done = subprocess.run(
        ["ip", "netns", "exec", ns, sys.executable, "-c", _IOCTL_FEATURES, name],
        capture_output=True,
        text=True,
        check=True,
    )
    features: dict[str, bool] = json.loads(done.stdout)
    return features
