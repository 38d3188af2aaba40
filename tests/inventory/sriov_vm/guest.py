"""Inside the SR-IOV inventory VM: create VFs, configure the NIC, scan the real /sys.

Runs as ``python -m tests.inventory.sriov_vm.guest <run-dir>`` in a throwaway VM (never on
the host): it enables two VFs on the emulated NVMe controller (the only SR-IOV capable
device QEMU 7.2 emulates), enslaves the emulated e1000e NIC to bond0 which carries the
node IP and the default route,
then writes ``inventory.json`` (the scan) and ``sysfs.json`` (raw facts to compare with)
into the shared run folder.
"""

from __future__ import annotations

import contextlib
import json
import os
import sys
import time
import traceback
from pathlib import Path

from pyroute2 import IPRoute

from dmn.agent.inventory import Pyroute2Devlink, Pyroute2Links, ScanConfig, scan
from dmn.host.kernel_events import ChangeMonitor

NODE_IP = "192.0.2.15"


def _unbind(address: str) -> None:
    """Unbind the function if a driver holds it; one that lets go meanwhile is what we want
    (once in CI the ``driver`` link vanished between the check and the write)."""
    driver = Path("/sys/bus/pci/devices") / address / "driver"
    with contextlib.suppress(FileNotFoundError):
        (driver / "unbind").write_text(address + "\n")


def main(run_dir: Path) -> int:
    # no udevd in this VM: listen to raw kernel uevents while the VFs appear
    reasons: list[str] = []
    monitor = ChangeMonitor(reasons.append, uevent_source="kernel", debounce=0.5, resync=3600)
    monitor.start()
    pci = Path("/sys/bus/pci/devices")
    sriov = [d for d in sorted(pci.iterdir()) if (d / "sriov_totalvfs").exists()]
    for dev in sriov:
        # the VFs appear unbound: no driver probes them while the script decides their fate
        autoprobe = dev / "sriov_drivers_autoprobe"
        if autoprobe.exists():
            autoprobe.write_text("0\n")
        (dev / "sriov_numvfs").write_text("2\n")
    vfs = sorted(os.path.basename(os.readlink(v)) for d in sriov for v in d.glob("virtfn*"))
    if len(vfs) == 2:
        unbound, vfio = vfs
        _unbind(unbound)
        _unbind(vfio)
        (pci / vfio / "driver_override").write_text("vfio-pci\n")
        Path("/sys/bus/pci/drivers_probe").write_text(vfio + "\n")
    net = Path("/sys/class/net")
    deadline = time.time() + 90  # generous: TCG on a loaded host is slow; qemu is capped
    while time.time() < deadline and not any((n / "device").exists() for n in net.iterdir()):
        time.sleep(0.2)
    nic = next(n.name for n in sorted(net.iterdir()) if (n / "device").exists())
    with IPRoute() as ipr:  # the node's management bond: bond0 over the NIC
        ipr.link("add", ifname="bond0", kind="bond", bond_mode=1, bond_miimon=100)
        names = {link.get("IFLA_IFNAME"): link["index"] for link in ipr.get_links()}
        bond, member = names["bond0"], names[nic]
        ipr.link("set", index=member, state="down")
        ipr.link("set", index=member, master=bond)
        ipr.link("set", index=bond, state="up")
        ipr.addr("add", index=bond, address=NODE_IP, prefixlen=24)
        ipr.route("add", dst="0.0.0.0/0", gateway="192.0.2.1", oif=bond)
    deadline = time.time() + 60
    wanted = ("udev:pci:add", "rtnl:RTM_NEWLINK")
    while time.time() < deadline and not all(any(w in r for r in reasons) for w in wanted):
        time.sleep(0.2)
    monitor.stop()
    raw = {
        d.name: {
            "virtfn": sorted(
                (e.name, os.path.basename(os.readlink(d / e.name)))
                for e in d.iterdir()
                if e.name.startswith("virtfn")
            ),
            "physfn": os.path.basename(os.readlink(d / "physfn"))
            if (d / "physfn").exists()
            else "",
            "iommu_group": os.path.basename(os.readlink(d / "iommu_group"))
            if (d / "iommu_group").exists()
            else "",
            "real": os.path.realpath(d),
        }
        for d in sorted(pci.iterdir())
    }
    inventory = scan(
        ScanConfig(
            sysfs_root=Path("/sys"),
            node_uid="sriov-vm",
            links=Pyroute2Links(),
            devlink=Pyroute2Devlink(),
            node_ips=[NODE_IP],
        )
    )
    (run_dir / "sysfs.json").write_text(
        json.dumps({"nic": nic, "pci": raw, "watch": reasons}, indent=1)
    )
    (run_dir / "inventory.json").write_text(json.dumps(inventory.to_json(), indent=1))
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main(Path(sys.argv[1])))
    except Exception:  # report, then let stage2 power off with a failing status
        print("SRIOV-VM-ERROR " + traceback.format_exc(), flush=True)
        sys.exit(1)
