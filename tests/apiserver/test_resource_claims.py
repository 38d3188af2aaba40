"""ResourceClaim update rules the DRA flow depends on (allocation, reservedFor, spec)."""

from __future__ import annotations

import json

import pytest
from kubernetes import client
from kubernetes.client.exceptions import ApiException

CLAIM = {
    "metadata": {"name": "c"},
    "spec": {"devices": {"requests": [{"name": "net", "exactly": {"deviceClassName": "dc"}}]}},
}
ALLOCATION = {
    "devices": {
        "results": [
            {"request": "net", "driver": "dra.example.com", "pool": "node-1", "device": "vf-0"}
        ]
    }
}
POD = {"resource": "pods", "name": "p", "uid": "11111111-1111-1111-1111-111111111111"}


def causes(exc: ApiException) -> list[tuple[str, str]]:
    details = json.loads(exc.body)["details"]
    return [(c["field"], c["reason"]) for c in details["causes"]]


@pytest.fixture
def claims(api: client.ApiClient, ns: str) -> client.ResourceV1Api:
    resource = client.ResourceV1Api(api)
    resource.create_namespaced_resource_claim(ns, CLAIM)
    return resource


def patch_status(claims: client.ResourceV1Api, ns: str, status: dict) -> None:
    claims.patch_namespaced_resource_claim_status(
        "c", ns, {"status": status}, _content_type="application/merge-patch+json"
    )


def test_reservation_needs_an_allocation(claims: client.ResourceV1Api, ns: str) -> None:
    with pytest.raises(ApiException) as err:
        patch_status(claims, ns, {"reservedFor": [POD]})
    assert err.value.status == 422 and causes(err.value) == [
        ("status.reservedFor", "FieldValueForbidden")
    ]
    patch_status(claims, ns, {"allocation": ALLOCATION, "reservedFor": [POD]})


def test_allocation_is_immutable_once_set(claims: client.ResourceV1Api, ns: str) -> None:
    patch_status(claims, ns, {"allocation": ALLOCATION})
    changed = json.loads(json.dumps(ALLOCATION))
    changed["devices"]["results"][0]["device"] = "vf-1"
    with pytest.raises(ApiException) as err:
        patch_status(claims, ns, {"allocation": changed})
    assert causes(err.value) == [("status.allocation", "FieldValueInvalid")]
    patch_status(claims, ns, {"allocation": None})  # deallocation is allowed


def test_reservations_are_unique_and_results_name_requests(
    claims: client.ResourceV1Api, ns: str
) -> None:
    with pytest.raises(ApiException) as err:
        patch_status(
            claims, ns, {"allocation": ALLOCATION, "reservedFor": [POD, dict(POD, name="q")]}
        )
    assert causes(err.value) == [("status.reservedFor[1]", "FieldValueDuplicate")]
    wrong = json.loads(json.dumps(ALLOCATION))
    wrong["devices"]["results"][0]["request"] = "nope"
    with pytest.raises(ApiException) as err:
        patch_status(claims, ns, {"allocation": wrong})
    assert causes(err.value) == [
        ("status.allocation.devices.results[0].request", "FieldValueInvalid")
    ]


def test_spec_is_immutable(claims: client.ResourceV1Api, ns: str) -> None:
    with pytest.raises(ApiException) as err:
        claims.patch_namespaced_resource_claim(
            "c",
            ns,
            {
                "spec": {
                    "devices": {
                        "requests": [{"name": "other", "exactly": {"deviceClassName": "dc"}}]
                    }
                }
            },
            _content_type="application/merge-patch+json",
        )
    assert causes(err.value) == [("spec", "FieldValueInvalid")]


def _entry(**network: object) -> dict:
    return {"driver": "dra.example.com", "pool": "node-1", "device": "vf-0", "networkData": network}


def test_device_status_names_an_allocated_device_and_keeps_network_data_limits(
    claims: client.ResourceV1Api, ns: str
) -> None:
    """As upstream: an entry for a device the claim was not allocated is invalid; networkData
    ips are unique canonical CIDRs, at most 16; names and addresses keep their lengths."""
    with pytest.raises(ApiException) as err:
        patch_status(claims, ns, {"devices": [_entry(interfaceName="net1")]})
    assert causes(err.value) == [("status.devices[0]", "FieldValueInvalid")]
    good = _entry(
        interfaceName="net1",
        ips=["10.0.0.2/24", "fd00::2/64"],
        hardwareAddress="02:42:ac:11:00:02",
    )
    patch_status(claims, ns, {"allocation": ALLOCATION, "devices": [good]})
    bad = _entry(
        interfaceName="n" * 257,
        hardwareAddress="a" * 129,
        ips=["10.0.0.2/24", "10.0.0.2/24", "10.0.0.3", "FD00::2/64", "nope"],
    )
    with pytest.raises(ApiException) as err:
        patch_status(claims, ns, {"devices": [bad]})
    assert causes(err.value) == [
        ("status.devices[0].networkData.interfaceName", "FieldValueTooLong"),
        ("status.devices[0].networkData.hardwareAddress", "FieldValueTooLong"),
        ("status.devices[0].networkData.ips[1]", "FieldValueDuplicate"),
        ("status.devices[0].networkData.ips[2]", "FieldValueInvalid"),
        ("status.devices[0].networkData.ips[3]", "FieldValueInvalid"),
        ("status.devices[0].networkData.ips[4]", "FieldValueInvalid"),
    ]
    many = _entry(ips=[f"192.0.2.{i}/24" for i in range(17)])
    with pytest.raises(ApiException) as err:
        patch_status(claims, ns, {"devices": [many]})
    assert causes(err.value) == [("status.devices[0].networkData.ips", "FieldValueTooMany")]


def test_a_deallocation_drops_the_stale_device_status(
    claims: client.ResourceV1Api, ns: str
) -> None:
    entry = _entry(interfaceName="net1", ips=["10.0.0.2/24"])
    patch_status(claims, ns, {"allocation": ALLOCATION, "devices": [entry]})
    patch_status(claims, ns, {"allocation": None})
    claim = claims.read_namespaced_resource_claim_status("c", ns)
    assert claim.status is None or not claim.status.devices


def test_device_status_data_is_bounded(claims: client.ResourceV1Api, ns: str) -> None:
    entry = {"driver": "dra.example.com", "pool": "node-1", "device": "vf-0"}
    patch_status(claims, ns, {"allocation": ALLOCATION, "devices": [{**entry, "data": {"a": "b"}}]})
    with pytest.raises(ApiException) as err:
        patch_status(claims, ns, {"devices": [{**entry, "data": {"a": "x" * 11000}}]})
    assert causes(err.value) == [("status.devices[0].data", "FieldValueTooLong")]
