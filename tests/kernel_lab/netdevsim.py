"""netdevsim devices for device-opcode tests in the kernel lab (the module is built by
``extra_modules.py``): an SR-IOV PF whose VF settings, devlink eswitch mode and representors
the kernel really implements.

:func:`netdevsim_pf` creates one netdevsim bus device from inside a namespace the test owns
(netdevsim puts the device's netdevs and devlink instance in the writer's namespace), renames
its PF netdev to a unique name, enables VFs, and deletes the bus device on exit even when the
test fails — which removes every netdev and representor it made.
"""

from __future__ import annotations

import itertools
import os
import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pyroute2 import IPRoute

from tests.kernel.scratch import unique
from tests.waiting import wait_for

BUS = Path("/sys/bus/netdevsim")
_ids = itertools.count(100 + os.getpid() % 500)


@dataclass(frozen=True)
class NetdevsimPf:
    dev_id: int
    pf: str
    netns: str

    @property
    def device(self) -> Path:
        return BUS / "devices" / f"netdevsim{self.dev_id}"

    @property
    def devlink(self) -> str:
        return f"netdevsim/netdevsim{self.dev_id}"


def load() -> None:
    if not BUS.is_dir():
        subprocess.run(["modprobe", "netdevsim"], check=True, capture_output=True)


def _free_id() -> int:
    while True:
        dev_id = next(_ids)
        if not (BUS / "devices" / f"netdevsim{dev_id}").exists():
            return dev_id


def _pf_index(ipr: Any, parent: str, timeout: float = 20.0) -> int:
    def index() -> int | None:
        for msg in ipr.get_links():
            if msg.get_attr("IFLA_PARENT_DEV_NAME") == parent:
                return int(msg["index"])
        return None

    found = wait_for(index, timeout=timeout, interval=0.1, what=f"a netdev of {parent}")
    assert found is not None
    return found


def create(netns: str, vfs: int) -> NetdevsimPf:
    load()
    dev_id = _free_id()
    subprocess.run(
        ["ip", "netns", "exec", netns, "sh", "-c", f"echo '{dev_id} 1' > {BUS}/new_device"],
        check=True,
        capture_output=True,
    )
    name = unique("nsimpf")
    with IPRoute(netns=netns) as ipr:
        index = _pf_index(ipr, f"netdevsim{dev_id}")
        ipr.link("set", index=index, ifname=name)
    dev = NetdevsimPf(dev_id, name, netns)
    if vfs:
        (dev.device / "sriov_numvfs").write_text(f"{vfs}\n")
    return dev


def destroy(dev: NetdevsimPf) -> None:
    if dev.device.exists():
        (BUS / "del_device").write_text(f"{dev.dev_id}\n")


@contextmanager
def netdevsim_pf(netns: str, vfs: int = 4) -> Iterator[NetdevsimPf]:
    dev = create(netns, vfs)
    try:
        yield dev
    finally:
        destroy(dev)


def switchdev(dev: NetdevsimPf) -> None:
    """Put the device's eswitch in switchdev mode (creates one representor per VF)."""
    subprocess.run(
        ["ip", "netns", "exec", dev.netns, "devlink", "dev", "eswitch", "set", dev.devlink,
         "mode", "switchdev"],
        check=True, capture_output=True,
    )  # fmt: skip


def representors(dev: NetdevsimPf, timeout: float = 20.0) -> dict[str, tuple[str, str]]:
    """``{port name: (ifname, switch ID)}`` of the device's VF representors (``pf0vfN``)."""
    with IPRoute(netns=dev.netns) as ipr:
        pf = ipr.link("get", ifname=dev.pf)[0]
        switch = str(pf.get_attr("IFLA_PHYS_SWITCH_ID") or "").replace(":", "").lower()

        def listed() -> dict[str, tuple[str, str]]:
            out = {}
            for msg in ipr.get_links():
                sid = str(msg.get_attr("IFLA_PHYS_SWITCH_ID") or "").replace(":", "").lower()
                port = str(msg.get_attr("IFLA_PHYS_PORT_NAME") or "")
                if switch and sid == switch and "vf" in port:
                    out[port] = (str(msg.get_attr("IFLA_IFNAME")), sid)
            return out

        try:
            return wait_for(listed, timeout=timeout, interval=0.1, what="VF representors")
        except AssertionError:
            return {}
