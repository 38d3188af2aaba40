"""Multus' network-status annotation: is the shadow's interface attached?"""

from __future__ import annotations

import json

import pytest

from dmn.api.multus.network_status import NETWORK_STATUS_ANNOTATION, attached
from dmn.api.multus.template import TemplateRef

SHADOW = TemplateRef("ai-workloads", "dmn-multus-0123456789abcdef0123456789abcdef")
PRIMARY = {"name": "k8s-pod-network", "interface": "eth0", "ips": ["10.244.0.5"], "default": True}
OURS = {
    "name": f"{SHADOW.namespace}/{SHADOW.name}",
    "interface": "net1",
    "ips": ["192.0.2.10"],
    "mac": "02:00:00:00:00:01",
    "dns": {},
}


def status(*items: object) -> dict[str, str]:
    return {NETWORK_STATUS_ANNOTATION: json.dumps(list(items))}


def test_attached_when_the_shadow_reports_the_interface() -> None:
    assert attached(status(PRIMARY, OURS), SHADOW, "net1")
    assert attached(
        {NETWORK_STATUS_ANNOTATION: json.dumps([PRIMARY, OURS], indent=2)}, SHADOW, "net1"
    )


@pytest.mark.parametrize(
    "annotations",
    [
        {},
        status(),
        status(PRIMARY),
        status(PRIMARY, {**OURS, "interface": "net2"}),
        status(PRIMARY, {**OURS, "name": SHADOW.name}),
        status(PRIMARY, {**OURS, "name": f"other/{SHADOW.name}"}),
        status(PRIMARY, {**OURS, "name": "ai-workloads/rail-a"}),
        status(PRIMARY, {"name": "x/y", "interface": "net1"}, OURS),
        status(PRIMARY, OURS, OURS),
        status(PRIMARY, OURS, 5),
        {NETWORK_STATUS_ANNOTATION: ""},
        {NETWORK_STATUS_ANNOTATION: "{"},
        {NETWORK_STATUS_ANNOTATION: json.dumps(OURS)},
        {
            NETWORK_STATUS_ANNOTATION: '[{"name":"a","name":"'
            + OURS["name"]
            + '","interface":"net1"}]'
        },
        {NETWORK_STATUS_ANNOTATION: "[" * 1000},
    ],
)
def test_not_attached(annotations: dict[str, str]) -> None:
    assert not attached(annotations, SHADOW, "net1")
