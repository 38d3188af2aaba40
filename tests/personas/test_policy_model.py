"""The strict DeviceExposurePolicy model (seed 000 §7.2)."""

from __future__ import annotations

from typing import Any

import pytest
from pydantic import BaseModel, ValidationError

from dmn.api import policy as policy_module
from dmn.api.policy import DeviceExposurePolicy

SEED_EXAMPLE: dict[str, Any] = {
    "apiVersion": "networking.dra-multi-network.schseba.github.io/v1alpha1",
    "kind": "DeviceExposurePolicy",
    "metadata": {"name": "pf-macvlan"},
    "spec": {
        "nodeSelector": {
            "matchLabels": {"dra-multi-network.schseba.github.io/node-pool": "secondary"}
        },
        "priority": 200,
        "selector": {"kind": "PF", "pciAddresses": ["0000:18:00.0"]},
        "action": "Expose",
        "exposure": {
            "persona": "macvlan",
            "plugin": "macvlan-cni",
            "mode": "bridge",
            "allowMultipleAllocations": True,
            "capacity": {"children": {"value": "64", "default": "1", "validValues": ["1"]}},
            "compatibility": [
                {"scope": "Interface", "domain": "interface-mode", "groups": ["macvlan"]},
                {"scope": "SriovFamily", "domain": "pf-access", "groups": ["host-retained"]},
            ],
            "effectPermissions": ["linux/create-macvlan/v1"],
        },
    },
}


def with_spec(**changes: Any) -> dict[str, Any]:
    doc = {**SEED_EXAMPLE, "spec": {**SEED_EXAMPLE["spec"], **changes}}
    return doc


def test_seed_example_round_trips() -> None:
    p = DeviceExposurePolicy.model_validate(SEED_EXAMPLE)
    assert p.to_api()["spec"] == SEED_EXAMPLE["spec"]


@pytest.mark.parametrize(
    ("doc", "where"),
    [
        (with_spec(surprise=1), "surprise"),
        (with_spec(selector={"kind": "PF", "pciAddresses": ["18:00.0"]}), "pciAddresses"),
        (with_spec(priority="200"), "priority"),  # strict: no coercion
        (with_spec(selector={"kind": "Bond"}), "kind"),
        (with_spec(selector={"vendors": ["15b3"]}), "vendors"),
    ],
)
def test_strict_rejections_point_at_the_field(doc: dict[str, Any], where: str) -> None:
    with pytest.raises(ValidationError) as err:
        DeviceExposurePolicy.model_validate(doc)
    assert where in str(err.value)


def test_more_than_two_groups_per_domain_is_rejected() -> None:
    exposure = dict(SEED_EXAMPLE["spec"]["exposure"])
    exposure["compatibility"] = [{"scope": "Interface", "domain": "d", "groups": ["a", "b", "c"]}]
    with pytest.raises(ValidationError):
        DeviceExposurePolicy.model_validate(with_spec(exposure=exposure))


def test_every_field_is_documented() -> None:
    """The CRD generator copies these descriptions; none may be missing."""
    for value in vars(policy_module).values():
        if (
            isinstance(value, type)
            and issubclass(value, BaseModel)
            and value.__module__ == policy_module.__name__
        ):
            assert value.__doc__, value.__name__
            for name, field in value.model_fields.items():
                assert field.description, f"{value.__name__}.{name}"
