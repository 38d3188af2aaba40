"""The health of the devices this node published, judged from the node's inventory.

Why: the kubelet shows a device's health in the status of every Pod that holds it
(``status.containerStatuses[].allocatedResourcesStatus``, feature ResourceHealthStatus,
beta and on by default in v1.37) when the driver streams it over DRAResourceHealth. This
module decides what to stream; :mod:`dmn.agent.kubelet.health` streams it.

Contract (pure: no I/O). One :class:`~dmn.agent.kubelet.handler.DeviceHealth` per
published persona, judged by what the persona's grants need from its inventory item:

* a kernel netdev (``KernelInterface``, ``SharedParent``): HEALTHY while the item's netdev
  is in the node's namespace with operstate UP, or UNKNOWN-operstate (drivers without
  carrier reporting, e.g. dummy links, which the kernel marks DOWN when they go down);
  UNHEALTHY when it is down (any other operstate), has no netdev or the item left the
  inventory. Exception: an *allocated exclusive* kernel device whose netdev is not in the
  node's namespace is UNKNOWN — preparing a Pod moves it into the Pod's namespace, where
  the node's inventory cannot see it;
* ``VfioDevice``: HEALTHY while the function is present and bound to vfio-pci, a kernel
  driver or none (preparing rebinds it), UNHEALTHY when another userspace driver holds it;
* ``RdmaDevice``: HEALTHY while the item has an RDMA device;
* ``HostRepresentor``: HEALTHY while the item's representor exists;
* ``PciFunction``: HEALTHY while the item is present.

A fact the scan could not establish (an :class:`~dmn.agent.inventory.facts.Unknown` link
state) makes the device UNKNOWN, never HEALTHY. Several grants combine to the worst
(UNHEALTHY over UNKNOWN over HEALTHY). ``last_updated`` is the time the device's status
last *changed* (taken from ``previous`` when it did not).

The same verdicts keep the scheduler away: :func:`device_taints` gives every UNHEALTHY
device a ``NoSchedule`` taint (:data:`UNHEALTHY_TAINT_KEY`) in the published slice, so no new
claim is allocated it unless it tolerates the taint; Pods already using it keep running
(``NoSchedule``, never ``NoExecute``: a link that comes back must not have cost them their
network). UNKNOWN taints nothing — an exclusive link inside a Pod is not sick.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from dmn.agent.inventory.facts import Binding, Inventory, InventoryItem
from dmn.agent.kubelet.handler import MAX_HEALTH_MESSAGE, DeviceHealth, Health
from dmn.agent.personas.model import Persona
from dmn.api.identity import DRIVER
from dmn.host.rtnetlink.links import LinkState
from dmn.vocabulary.terms import HandleType

#: Operstates of a usable link: UP, and UNKNOWN (the driver does not report carrier; an
#: administratively down link reads DOWN). RFC 2863 names, as rtnetlink reports them.
_USABLE_OPERSTATES = frozenset({"UP", "UNKNOWN"})
_NETDEV_GRANTS = frozenset({HandleType.KERNEL_INTERFACE, HandleType.SHARED_PARENT})
_RANK = {Health.HEALTHY: 0, Health.UNKNOWN: 1, Health.UNHEALTHY: 2}

Verdict = tuple[Health, str]

#: The taint every unhealthy published device carries (a label name under our driver's
#: domain; tolerations name it to ask for such a device anyway).
UNHEALTHY_TAINT_KEY = f"{DRIVER}/unhealthy"


def _netdev_verdict(persona: Persona, item: InventoryItem | None, allocated: bool) -> Verdict:
    moved = allocated and not persona.allow_multiple_allocations
    netdevs = item.netdevs if item is not None else ()
    if not netdevs:
        if moved:
            return Health.UNKNOWN, (
                "allocated and not in the node's network namespace (a prepared Pod holds "
                "it); its link state is not observable from the node"
            )
        if item is None:
            return Health.UNHEALTHY, f"inventory item {persona.inventory_id} is gone from the node"
        return Health.UNHEALTHY, f"inventory item {persona.inventory_id} has no netdev"
    verdicts: list[Verdict] = []
    for netdev in netdevs:
        state = netdev.state
        if not isinstance(state, LinkState):
            reason = f"link {netdev.ifname}: state unknown: {state.reason}"
            verdicts.append((Health.UNKNOWN, reason))
            continue
        operstate = state.operstate.upper()
        if operstate in _USABLE_OPERSTATES:
            verdicts.append((Health.HEALTHY, f"link {netdev.ifname} is {operstate.lower()}"))
        else:
            verdicts.append(
                (Health.UNHEALTHY, f"link {netdev.ifname} is not usable (operstate {operstate})")
            )
    return _worst(verdicts)


def _grant_verdict(
    grant: HandleType, persona: Persona, item: InventoryItem | None, allocated: bool
) -> Verdict:
    if grant in _NETDEV_GRANTS:
        return _netdev_verdict(persona, item, allocated)
    if item is None:
        return Health.UNHEALTHY, f"inventory item {persona.inventory_id} is gone from the node"
    if grant is HandleType.VFIO_DEVICE:
        # a kernel-bound function is rebound to vfio-pci when it is prepared
        if item.binding in (Binding.VFIO, Binding.KERNEL, Binding.UNBOUND):
            return Health.HEALTHY, f"{item.pci_address} is present ({item.binding.value})"
        return Health.UNHEALTHY, f"{item.pci_address} is bound to a userspace driver"
    if grant is HandleType.RDMA_DEVICE:
        if item.rdma:
            return Health.HEALTHY, f"RDMA device {item.rdma[0].name} is present"
        return Health.UNHEALTHY, f"{item.pci_address} has no RDMA device"
    if grant is HandleType.HOST_REPRESENTOR:
        if item.representor is not None:
            return Health.HEALTHY, f"representor {item.representor.ifname} is present"
        return Health.UNHEALTHY, f"{item.pci_address} has no representor"
    return Health.HEALTHY, f"inventory item {persona.inventory_id} is present"


def _worst(verdicts: Iterable[Verdict]) -> Verdict:
    got = list(verdicts)
    if not got:
        return Health.UNKNOWN, "nothing to judge the device by"
    health = max((h for h, _ in got), key=_RANK.__getitem__)
    message = "; ".join(dict.fromkeys(m for h, m in got if h is health))
    return health, message


def persona_health(persona: Persona, inventory: Inventory, allocated: bool) -> Verdict:
    """The health and message of one published persona (see the module contract)."""
    item = inventory.items.get(persona.inventory_id)
    grants = [g.type for g in persona.grants] or [HandleType.PCI_FUNCTION]
    return _worst(_grant_verdict(g, persona, item, allocated) for g in grants)


def device_health(
    personas: Iterable[Persona],
    inventory: Inventory,
    pool: str,
    allocated: frozenset[str],
    now: int,
    previous: Mapping[str, DeviceHealth] | None = None,
) -> list[DeviceHealth]:
    """The full health list of ``pool``'s published ``personas`` (sorted by name)."""
    previous = previous or {}
    out: list[DeviceHealth] = []
    for persona in sorted(personas, key=lambda p: p.name):
        health, message = persona_health(persona, inventory, persona.name in allocated)
        message = message if len(message) <= MAX_HEALTH_MESSAGE else message[:1021] + "..."
        before = previous.get(persona.name)
        unchanged = before is not None and (before.health, before.message) == (health, message)
        stamp = before.last_updated if unchanged and before is not None else now
        out.append(DeviceHealth(pool, persona.name, health, stamp, message))
    return out


def device_taints(
    personas: Iterable[Persona], inventory: Inventory, allocated: frozenset[str]
) -> dict[str, list[dict[str, str]]]:
    """Taints by device name for the slice: ``NoSchedule`` on each UNHEALTHY device."""
    return {
        persona.name: [{"key": UNHEALTHY_TAINT_KEY, "effect": "NoSchedule"}]
        for persona in personas
        if persona_health(persona, inventory, persona.name in allocated)[0] is Health.UNHEALTHY
    }
