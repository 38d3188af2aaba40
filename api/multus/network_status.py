"""Whether Multus attached a shadow network: its ``network-status`` annotation.

Multus writes, after a successful ADD, a JSON array with one object per attached network:
``name`` (``namespace/name`` of the NAD, or the cluster network's name), ``interface``,
``ips``, ``mac``, ``default`` and more. The CreateContainer gate holds a container until the
shadow's entry is there with the managed interface. Anything unreadable counts as not
attached: the gate then keeps waiting and reports ``E_MULTUS_NOT_ATTACHED``.
"""

from __future__ import annotations

from collections.abc import Mapping

from dmn.api.multus import lossless_json as lj
from dmn.api.multus.template import TemplateRef

NETWORK_STATUS_ANNOTATION = "k8s.v1.cni.cncf.io/network-status"


def attached(annotations: Mapping[str, str], shadow: TemplateRef, interface: str) -> bool:
    """True when exactly the shadow's network reports ``interface`` and no other one does."""
    text = annotations.get(NETWORK_STATUS_ANNOTATION)
    if text is None:
        return False
    try:
        elements = lj.parse_array_elements(text)
    except lj.JsonError:
        return False
    wanted = f"{shadow.namespace}/{shadow.name}"
    found = False
    for _, entry in elements:
        if not isinstance(entry, lj.Object):
            return False
        if entry.count("name") > 1 or entry.count("interface") > 1:
            return False
        if entry.get("interface") != interface:
            continue
        if entry.get("name") != wanted or found:
            return False
        found = True
    return found
