"""Per-kind storage rules of the lab API server, as pure functions over wire-form dicts.

What a create sets or drops, which metadata is valid, how a CRD is checked and what status
it gets, which finalizers hold an object, how long a delete waits, and delete
preconditions. The store applies these; nothing here touches shared state.
"""

from __future__ import annotations

import copy
import datetime as dt
import ipaddress
import json
import re
from typing import Any

from . import errors, kinds
from .errors import Cause
from .kinds import ResourceType
from .selectors import LABEL_KEY, LABEL_VALUE

Obj = dict[str, Any]

CRD_CLEANUP_FINALIZER = "customresourcecleanup.apiextensions.k8s.io"
FOREGROUND = "foregroundDeletion"
NAMESPACE_FINALIZER = "kubernetes"

_DNS_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
_DNS_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")


def now_rfc3339() -> str:
    return dt.datetime.now(dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def meta_of(obj: Obj) -> Obj:
    meta = obj.get("metadata")
    if not isinstance(meta, dict):
        meta = {}
        obj["metadata"] = meta
    return meta


def non_metadata(obj: Obj, *, skip_status: bool) -> Obj:
    skip = {"metadata", "apiVersion", "kind"} | ({"status"} if skip_status else set())
    return {k: v for k, v in obj.items() if k not in skip}


def group_of(api_version: str) -> str:
    return api_version.rsplit("/", 1)[0] if "/" in api_version else ""


def stamp_device_taints(rt: ResourceType, obj: Obj) -> None:
    """A ResourceSlice device taint written without ``timeAdded`` gets the current time, on
    create and on update, as the real API server stamps it."""
    if (rt.group, rt.plural) != ("resource.k8s.io", "resourceslices"):
        return
    spec = obj.get("spec")
    devices = spec.get("devices") if isinstance(spec, dict) else None
    for device in devices if isinstance(devices, list) else ():
        taints = device.get("taints") if isinstance(device, dict) else None
        for taint in taints if isinstance(taints, list) else ():
            if isinstance(taint, dict) and not taint.get("timeAdded"):
                taint["timeAdded"] = now_rfc3339()


def prepare_create(rt: ResourceType, obj: Obj) -> None:
    """Kind-specific fields a create sets or drops (status, namespace finalizer, CRD status)."""
    stamp_device_taints(rt, obj)
    if rt.status_subresource and (rt.custom or rt.plural == "resourceclaims"):
        obj.pop("status", None)
    if rt.group == "" and rt.plural == "pods":
        obj["status"] = {"phase": "Pending"}
    elif rt.group == "" and rt.plural == "namespaces":
        obj["status"] = {"phase": "Active"}
        obj.setdefault("spec", {})["finalizers"] = [NAMESPACE_FINALIZER]
    elif rt is kinds.CRD or (rt.group, rt.plural) == kinds.CRD.storage_key:
        meta = meta_of(obj)
        finalizers = list(meta.get("finalizers") or [])
        if CRD_CLEANUP_FINALIZER not in finalizers:
            finalizers.append(CRD_CLEANUP_FINALIZER)
        meta["finalizers"] = finalizers
        obj["status"] = crd_status(obj)


def grace_period(rt: ResourceType, obj: Obj, options: Obj) -> int:
    """Seconds a delete waits: only Pods bound to a node and not finished are graceful."""
    if rt.group != "" or rt.plural != "pods":
        return 0
    requested = options.get("gracePeriodSeconds")
    if requested is not None:
        return max(0, int(requested))
    spec = obj.get("spec") or {}
    phase = (obj.get("status") or {}).get("phase")
    if not spec.get("nodeName") or phase in ("Succeeded", "Failed"):
        return 0
    return int(spec.get("terminationGracePeriodSeconds", 30))


def finalizers_of(rt: ResourceType, obj: Obj) -> list[str]:
    result = list(meta_of(obj).get("finalizers") or [])
    if rt.group == "" and rt.plural == "namespaces":
        result += list((obj.get("spec") or {}).get("finalizers") or [])
    return result


def check_preconditions(rt: ResourceType, current: Obj, options: Obj) -> None:
    pre = options.get("preconditions") or {}
    meta = meta_of(current)
    if pre.get("uid") and pre["uid"] != meta.get("uid"):
        raise errors.conflict(
            rt.qualified,
            meta["name"],
            f"Precondition failed: UID in precondition: {pre['uid']}, UID in object meta: "
            f"{meta.get('uid')}",
            rt.group,
        )
    if pre.get("resourceVersion") and pre["resourceVersion"] != meta.get("resourceVersion"):
        raise errors.conflict(
            rt.qualified,
            meta["name"],
            f"Precondition failed: ResourceVersion in precondition: {pre['resourceVersion']}, "
            f"ResourceVersion in object meta: {meta.get('resourceVersion')}",
            rt.group,
        )


def validate_metadata(rt: ResourceType, obj: Obj) -> list[Cause]:
    meta = meta_of(obj)
    causes: list[Cause] = []
    name = meta.get("name")
    if not name:
        causes.append(errors.required("metadata.name", "name or generateName is required"))
    elif not isinstance(name, str):
        causes.append(errors.invalid("metadata.name", name, "must be a string"))
    else:
        label_only = rt.group == "" and rt.plural == "namespaces"
        pattern, limit = (_DNS_LABEL, 63) if label_only else (_DNS_SUBDOMAIN, 253)
        if len(name) > limit or not pattern.match(name):
            kind = "RFC 1123 label" if label_only else "RFC 1123 subdomain"
            causes.append(
                errors.invalid(
                    "metadata.name",
                    name,
                    f"a lowercase {kind} must consist of lower case alphanumeric characters, "
                    "'-' or '.', and must start and end with an alphanumeric character",
                )
            )
    labels = meta.get("labels") or {}
    if not isinstance(labels, dict):
        causes.append(errors.invalid("metadata.labels", labels, "must be a map of strings"))
    else:
        for key, value in labels.items():
            if not LABEL_KEY.match(key):
                causes.append(
                    errors.invalid(
                        "metadata.labels",
                        key,
                        "name part must consist of alphanumeric characters, '-', '_' or '.'",
                    )
                )
            if not isinstance(value, str) or not LABEL_VALUE.match(value):
                causes.append(
                    errors.invalid(
                        "metadata.labels",
                        value,
                        "a valid label must be an empty string or consist of alphanumeric "
                        "characters, '-', '_' or '.', and must start and end with an "
                        "alphanumeric character",
                    )
                )
    annotations = meta.get("annotations") or {}
    if not isinstance(annotations, dict) or not all(
        isinstance(v, str) for v in annotations.values()
    ):
        causes.append(errors.invalid("metadata.annotations", "object", "must be a map of strings"))
    refs = meta.get("ownerReferences") or []
    controllers = 0
    for i, ref in enumerate(refs if isinstance(refs, list) else []):
        for required_field in ("apiVersion", "kind", "name", "uid"):
            if not (isinstance(ref, dict) and ref.get(required_field)):
                causes.append(errors.required(f"metadata.ownerReferences[{i}].{required_field}"))
        if isinstance(ref, dict) and ref.get("controller"):
            controllers += 1
    if controllers > 1:
        causes.append(
            errors.invalid(
                "metadata.ownerReferences",
                "array",
                "Only one reference can have Controller set to true",
            )
        )
    return causes


def validate_crd(obj: Obj, old: Obj | None) -> list[Cause]:
    causes: list[Cause] = []
    spec = obj.get("spec")
    if not isinstance(spec, dict):
        return [errors.required("spec")]
    group = spec.get("group")
    names = spec.get("names") or {}
    if not group:
        causes.append(errors.required("spec.group"))
    elif "." not in group or not _DNS_SUBDOMAIN.match(group):
        causes.append(
            errors.invalid("spec.group", group, "should be a domain with at least one dot")
        )
    for name_field in ("plural", "kind"):
        if not names.get(name_field):
            causes.append(errors.required(f"spec.names.{name_field}"))
    if group and names.get("plural") and meta_of(obj).get("name") != f"{names['plural']}.{group}":
        causes.append(
            errors.invalid(
                "metadata.name",
                meta_of(obj).get("name"),
                'must be spec.names.plural+"."+spec.group',
            )
        )
    scope = spec.get("scope")
    if scope not in ("Namespaced", "Cluster"):
        causes.append(errors.not_supported("spec.scope", scope, ["Cluster", "Namespaced"]))
    elif old is not None and (old.get("spec") or {}).get("scope") != scope:
        causes.append(errors.invalid("spec.scope", scope, "field is immutable"))
    versions = spec.get("versions")
    if not isinstance(versions, list) or not versions:
        causes.append(
            errors.required(
                "spec.versions", "must have exactly one version marked as storage version"
            )
        )
        return causes
    if sum(1 for v in versions if isinstance(v, dict) and v.get("storage")) != 1:
        causes.append(
            errors.invalid(
                "spec.versions", "array", "must have exactly one version marked as storage version"
            )
        )
    for i, version in enumerate(versions):
        if not isinstance(version, dict) or not version.get("name"):
            causes.append(errors.required(f"spec.versions[{i}].name"))
            continue
        if not ((version.get("schema") or {}).get("openAPIV3Schema")):
            causes.append(
                errors.required(
                    f"spec.versions[{i}].schema.openAPIV3Schema", "schemas are required"
                )
            )
    return causes


def set_condition(
    conditions: list[Obj], type_: str, status: str, reason: str, message: str
) -> list[Obj]:
    result = [c for c in conditions if c.get("type") != type_]
    result.append(
        {
            "type": type_,
            "status": status,
            "reason": reason,
            "message": message,
            "lastTransitionTime": now_rfc3339(),
        }
    )
    return result


def crd_status(crd: Obj) -> Obj:
    spec = crd.get("spec") or {}
    storage = [
        v.get("name")
        for v in spec.get("versions") or []
        if isinstance(v, dict) and v.get("storage")
    ]
    conditions = set_condition([], "NamesAccepted", "True", "NoConflicts", "no conflicts found")
    conditions = set_condition(
        conditions,
        "Established",
        "True",
        "InitialNamesAccepted",
        "the initial names have been accepted",
    )
    return {
        "acceptedNames": copy.deepcopy(spec.get("names") or {}),
        "conditions": conditions,
        "storedVersions": storage,
    }


RESERVED_FOR_MAX = 256


def _request_names(claim: Obj) -> set[str]:
    names: set[str] = set()
    for request in ((claim.get("spec") or {}).get("devices") or {}).get("requests") or []:
        if not isinstance(request, dict):
            continue
        name = str(request.get("name", ""))
        names.add(name)
        for sub in request.get("firstAvailable") or []:
            if isinstance(sub, dict):
                names.add(f"{name}/{sub.get('name', '')}")
    return names


NETWORK_INTERFACE_NAME_MAX = 256
NETWORK_HARDWARE_ADDRESS_MAX = 128
NETWORK_IPS_MAX = 16
DEVICE_STATUS_DATA_MAX = 10 * 1024


def _interface_address_problem(value: Any) -> str | None:
    """Go's ``IsValidInterfaceAddress``: an address with its prefix, in canonical form."""
    if not isinstance(value, str):
        return "must be a valid address in CIDR form, (e.g. 10.9.8.7/24 or 2001:db8::1/64)"
    try:
        iface = ipaddress.ip_interface(value)
    except ValueError:
        return "must be a valid address in CIDR form, (e.g. 10.9.8.7/24 or 2001:db8::1/64)"
    if "/" not in value:
        return "must be a valid address in CIDR form, (e.g. 10.9.8.7/24 or 2001:db8::1/64)"
    if str(iface) != value:
        return f"must be in canonical form ({str(iface)!r})"
    return None


def _validate_network_data(data: Any, path: str) -> list[Cause]:
    causes: list[Cause] = []
    if not isinstance(data, dict):
        return causes
    if len(str(data.get("interfaceName") or "").encode()) > NETWORK_INTERFACE_NAME_MAX:
        causes.append(errors.too_long(f"{path}.interfaceName", NETWORK_INTERFACE_NAME_MAX))
    if len(str(data.get("hardwareAddress") or "").encode()) > NETWORK_HARDWARE_ADDRESS_MAX:
        causes.append(errors.too_long(f"{path}.hardwareAddress", NETWORK_HARDWARE_ADDRESS_MAX))
    ips = data.get("ips") or []
    if len(ips) > NETWORK_IPS_MAX:
        causes.append(errors.too_many(f"{path}.ips", len(ips), NETWORK_IPS_MAX))
        return causes
    seen: set[str] = set()
    for i, value in enumerate(ips):
        problem = _interface_address_problem(value)
        if problem is not None:
            causes.append(errors.invalid(f"{path}.ips[{i}]", value, problem))
        elif value in seen:
            causes.append(errors.duplicate(f"{path}.ips[{i}]", value))
        seen.add(str(value))
    return causes


def _device_key(entry: Obj) -> tuple[str, str, str, str]:
    """driver, pool, device and shareID: what names one allocated device (share)."""
    return (
        str(entry.get("driver", "")),
        str(entry.get("pool", "")),
        str(entry.get("device", "")),
        str(entry.get("shareID") or ""),
    )


def _allocated_device_ids(allocation: Any) -> set[tuple[str, str, str, str]]:
    results = (
        ((allocation.get("devices") or {}).get("results") or [])
        if isinstance(allocation, dict)
        else []
    )
    return {_device_key(r) for r in results if isinstance(r, dict)}


def drop_deallocated_status_devices(claim: Obj, old: Obj) -> None:
    """What a status write of a ResourceClaim loses before validation, as upstream: the
    ``status.devices`` entries of devices the old claim had allocated and the new one no
    longer has (stale entries go with a deallocation; clients need not remove them)."""
    status = claim.get("status")
    if not isinstance(status, dict) or not status.get("devices"):
        return
    gone = _allocated_device_ids((old.get("status") or {}).get("allocation")) - (
        _allocated_device_ids(status.get("allocation"))
    )
    if not gone:
        return
    kept = [e for e in status["devices"] if not isinstance(e, dict) or _device_key(e) not in gone]
    if kept:
        status["devices"] = kept
    else:
        status.pop("devices")


def validate_claim_device_status(claim: Obj) -> list[Cause]:
    """``status.devices``: each entry names an allocated device of the claim (with its
    shareID), and its ``networkData`` keeps the API's limits."""
    status = claim.get("status") or {}
    allocated = _allocated_device_ids(status.get("allocation"))
    causes: list[Cause] = []
    for i, entry in enumerate(status.get("devices") or []):
        if not isinstance(entry, dict):
            continue
        path = f"status.devices[{i}]"
        key = _device_key(entry)
        if key not in allocated:
            device = "/".join(key[:3]) + (f"/{key[3]}" if key[3] else "")
            causes.append(errors.invalid(path, device, "must be an allocated device in the claim"))
        causes += _validate_network_data(entry.get("networkData"), f"{path}.networkData")
        if "data" in entry and entry["data"] is not None:
            raw = json.dumps(entry["data"], separators=(",", ":"))
            if len(raw.encode()) > DEVICE_STATUS_DATA_MAX:
                causes.append(errors.too_long(f"{path}.data", DEVICE_STATUS_DATA_MAX))
    return causes


def validate_resource_claim_update(claim: Obj, old: Obj) -> list[Cause]:
    """The Go-side update rules of ``resource.k8s.io`` ResourceClaims the lab reproduces.

    Spec is immutable; ``status.allocation`` cannot change once set; ``reservedFor`` needs an
    allocation, unique consumer uids (each entry with resource, name and uid), at most 256
    entries, and no new entries once the claim is being deleted; allocation results name a
    request of the claim.
    """
    causes: list[Cause] = []
    if claim.get("spec") != old.get("spec"):
        causes.append(errors.invalid("spec", claim.get("spec"), "field is immutable"))
    causes += validate_claim_device_status(claim)
    status = claim.get("status") or {}
    old_status = old.get("status") or {}
    allocation, old_allocation = status.get("allocation"), old_status.get("allocation")
    reserved = status.get("reservedFor") or []
    if len(reserved) > RESERVED_FOR_MAX:
        causes.append(errors.too_many("status.reservedFor", len(reserved), RESERVED_FOR_MAX))
    seen: set[str] = set()
    for i, consumer in enumerate(reserved):
        consumer = consumer if isinstance(consumer, dict) else {}
        for field in ("resource", "name", "uid"):
            if not consumer.get(field):
                causes.append(errors.required(f"status.reservedFor[{i}].{field}"))
        uid = str(consumer.get("uid", ""))
        if uid and uid in seen:
            causes.append(errors.duplicate(f"status.reservedFor[{i}]", consumer))
        seen.add(uid)
    if reserved and not allocation:
        causes.append(
            errors.forbidden(
                "status.reservedFor", "may not be specified when `allocated` is not set"
            )
        )
    elif reserved and meta_of(claim).get("deletionTimestamp"):
        old_uids = {
            str(c.get("uid")) for c in old_status.get("reservedFor") or [] if isinstance(c, dict)
        }
        if any(str(c.get("uid")) not in old_uids for c in reserved if isinstance(c, dict)):
            causes.append(
                errors.forbidden(
                    "status.reservedFor",
                    "new entries may not be added while `deallocationRequested` or "
                    "`deletionTimestamp` are set",
                )
            )
    if old_allocation and allocation and allocation != old_allocation:
        causes.append(errors.invalid("status.allocation", allocation, "field is immutable"))
    elif allocation and not old_allocation:
        names = _request_names(claim)
        results = (
            ((allocation.get("devices") or {}).get("results") or [])
            if isinstance(allocation, dict)
            else []
        )
        for i, result in enumerate(results):
            request = result.get("request") if isinstance(result, dict) else None
            if request not in names:
                causes.append(
                    errors.invalid(
                        f"status.allocation.devices.results[{i}].request",
                        request,
                        "must be the name of a request in the claim",
                    )
                )
    return causes
