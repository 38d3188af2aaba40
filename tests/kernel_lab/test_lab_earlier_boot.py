"""Hardware moved into a sandbox, then a reboot (issue 13, deliverable 2), on netdevsim.

A netdevsim port is a device with a parent on a bus (IFLA_PARENT_DEV_NAME
``netdevsim<id>``), like a NIC's PCI function. It is moved into a sandbox by
``linux/link-move/v1`` (the before-image records its parent device). The reboot is staged as
the agent sees one: the sandbox is gone, the kernel gave the device back to the host under
another name and another ifindex, and the journal's records carry the earlier boot's id.
Undo finds the device by its parent device, renames it home and restores the before-image
(name, MTU, alias, addresses, admin state). Another device in the host (a second netdevsim
device, another parent) is never touched; with the recorded device nowhere in the host the
effect is E_LINK_LOST (the runner quarantines it).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from dmn.host.rtnetlink.links import by_name
from dmn.opcodes.executor import EffectContext, ExecutorError
from dmn.vocabulary.terms import Access
from tests.kernel.world import EXECUTORS, World, drive, host_handle, link, world
from tests.kernel_lab import netdevsim

pytestmark = [pytest.mark.kernel_lab, pytest.mark.adversarial]

MOVE = "linux/link-move/v1"
EARLIER = "00000000-0000-4000-8000-0000000e0b07"


def of_earlier_boot(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: EARLIER if k == "bootID" else of_earlier_boot(v) for k, v in value.items()}
    if isinstance(value, list):
        return [of_earlier_boot(v) for v in value]
    return value


@pytest.fixture
def devices() -> Iterator[tuple[World, netdevsim.NetdevsimPf, netdevsim.NetdevsimPf]]:
    with (
        world() as w,
        netdevsim.netdevsim_pf(w.host, vfs=0) as dev,
        netdevsim.netdevsim_pf(w.host, vfs=0) as other,
    ):
        yield w, dev, other


def test_hardware_of_an_earlier_boot_is_found_by_its_parent_device_and_restored(
    devices: tuple[World, netdevsim.NetdevsimPf, netdevsim.NetdevsimPf],
) -> None:
    w, dev, other = devices
    host = w.ipr(w.host)
    index = host.link_lookup(ifname=dev.pf)[0]
    host.link("set", index=index, mtu=1400, ifalias="uplink-nsim", state="up")
    host.addr("add", index=index, address="192.0.2.33", prefixlen=28)
    original = link(host, dev.pf)
    assert original.parent_dev == f"netdevsim{dev.dev_id}"
    bystander = link(host, other.pf)
    sandbox = w.sandbox()
    env = w.env(sandbox)
    moved = drive(
        env,
        MOVE,
        {"interface": (host_handle(host, dev.pf, Access.EXCLUSIVE_CONFIGURE),)},
        {"ifName": "net2"},
    )
    assert moved.before["identity"]["parentDev"] == original.parent_dev
    # the reboot as the agent sees it: the device is back in the host, renamed by the
    # system, configured differently, at another ifindex; the records are of another boot
    sb = w.ipr(sandbox)
    returned = link(sb, "net2")
    # this boot gave the device's old ifindex to another link (a veth, never touched)
    host.link("add", ifname="squat0", index=original.index, kind="veth", peer="squat1")
    squatter = link(host, "squat0")
    sb.link("set", index=returned.index, state="down")
    sb.link("set", index=returned.index, net_ns_fd=w.host, ifname="eth7")
    back = link(host, "eth7")
    host.link("set", index=back.index, mtu=1500, ifalias="")
    later = w.env()
    ctx = EffectContext("op1", "e1", moved.ctx.inputs, moved.ctx.parameters, later)
    before = of_earlier_boot(moved.before)

    EXECUTORS[MOVE].undo(ctx, before, {})

    home = link(host, dev.pf)
    assert home.parent_dev == original.parent_dev and home.index != original.index
    assert link(host, "squat0") == squatter
    assert (home.mtu, home.alias, home.up, home.addresses) == (
        original.mtu,
        original.alias,
        original.up,
        original.addresses,
    )
    assert by_name(host, "eth7") is None
    after = link(host, other.pf)
    assert (after.name, after.mtu, after.alias, after.up) == (
        bystander.name,
        bystander.mtu,
        bystander.alias,
        bystander.up,
    )


def test_hardware_of_an_earlier_boot_not_in_the_host_is_lost_not_guessed(
    devices: tuple[World, netdevsim.NetdevsimPf, netdevsim.NetdevsimPf],
) -> None:
    w, dev, other = devices
    host = w.ipr(w.host)
    sandbox = w.sandbox()
    env = w.env(sandbox)
    moved = drive(
        env,
        MOVE,
        {"interface": (host_handle(host, dev.pf, Access.EXCLUSIVE_CONFIGURE),)},
        {"ifName": "net2"},
    )
    bystander = link(host, other.pf)
    # the device is still in some namespace (not the host) after the "reboot"
    later = w.env()
    ctx = EffectContext("op1", "e1", moved.ctx.inputs, moved.ctx.parameters, later)
    with pytest.raises(ExecutorError) as err:
        EXECUTORS[MOVE].undo(ctx, of_earlier_boot(moved.before), {})
    assert err.value.code == "E_LINK_LOST"
    assert link(host, other.pf) == bystander
    assert link(w.ipr(sandbox), "net2").parent_dev == f"netdevsim{dev.dev_id}"
