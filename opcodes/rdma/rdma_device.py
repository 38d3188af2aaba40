"""An ``RdmaDevice/v1`` handle found again in a namespace by the identity the kernel gives it.

The inventory observes ``rdmaDevice`` (the ibdev name) and ``nodeGuid``; a name can be reused
by another device, the node GUID with the device index cannot be forged by a tenant. A device
is located by name in the namespace's RDMA netlink view and must carry the observed GUID
(``E_DEVICE_IDENTITY``); afterwards it is followed by its recorded index and GUID only.
"""

from __future__ import annotations

import re
from typing import Any

from dmn.host.rdma import RdmaDev, RdmaNetlink
from dmn.opcodes.executor import ExecutorError
from dmn.vocabulary.handles import Handle

IBDEV_PATTERN = r"^[A-Za-z0-9_.-]{1,63}$"


def locate(nl: RdmaNetlink, handle: Handle) -> RdmaDev:
    name = str(handle.observations.get("rdmaDevice", "") or "")
    if not re.fullmatch(IBDEV_PATTERN, name):
        raise ExecutorError("E_DEVICE_IDENTITY", f"handle {handle.id} observes no RDMA device")
    found = next((d for d in nl.devices() if d.name == name), None)
    if found is None:
        raise ExecutorError("E_DEVICE_GONE", f"no RDMA device {name} in this namespace")
    guid = handle.observations.get("nodeGuid")
    if guid is not None and str(guid).lower() != found.node_guid:
        raise ExecutorError(
            "E_DEVICE_IDENTITY", f"{name} has node GUID {found.node_guid}, not {guid}"
        )
    return found


def to_json(dev: RdmaDev) -> dict[str, Any]:
    return {"index": dev.index, "name": dev.name, "nodeGuid": dev.node_guid}


def from_json(data: Any) -> RdmaDev:
    return RdmaDev(int(data["index"]), str(data["name"]), str(data["nodeGuid"]))


def find(nl: RdmaNetlink, recorded: RdmaDev) -> RdmaDev | None:
    """The recorded device (same index and GUID) if this namespace sees it."""
    return next(
        (d for d in nl.devices() if (d.index, d.node_guid) == (recorded.index, recorded.node_guid)),
        None,
    )
