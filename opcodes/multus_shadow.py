"""What proves a shadow NetworkAttachmentDefinition ours, and the JSON patches that change
one object of the recorded UID only (design §6.8). Shared by the ``multus/*`` executors and
the node agent's pre-check of shadow names (which may not import an opcode family).

Ownership is the object this node recorded, never a name or an annotation alone: the
recorded UID once the create's outcome is journaled; before that (a create whose response
was lost) the complete recorded identity and content — namespace and name, every label and
annotation of ours with its value, the exact frozen ``spec`` and the owner reference to
the verified Pod's UID. Labels, annotations and finalizers other writers add are left alone
and do not matter; anything that changes what Multus would run, or whom the object
belongs to, does.

Pure: these functions read the object dicts they are given.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

Obj = Mapping[str, Any]


def meta(obj: Obj) -> Mapping[str, Any]:
    value = obj.get("metadata")
    return value if isinstance(value, Mapping) else {}


def uid_of(obj: Obj) -> str:
    return str(meta(obj).get("uid") or "")


def deleting(obj: Obj) -> bool:
    return bool(meta(obj).get("deletionTimestamp"))


def finalizers(obj: Obj) -> list[str]:
    value = meta(obj).get("finalizers")
    return [str(f) for f in value] if isinstance(value, list) else []


def owner_uid(body: Obj) -> str:
    """The verified Pod's UID the recorded shadow names as its owner."""
    refs = meta(body).get("ownerReferences") or []
    return str(refs[0]["uid"]) if refs else ""


def protection(body: Obj) -> str:
    """The finalizer the recorded shadow was created with (this node's)."""
    found = finalizers(body)
    return found[0] if found else ""


def problems(live: Obj, body: Obj, *, uid: str = "", releasing: bool = False) -> list[str]:
    """Why ``live`` is not the recorded shadow ``body`` (of ``uid`` when one is recorded);
    empty when it is. ``releasing``: an owner reference that is gone is accepted (orphan
    deletion propagation removes it legitimately), one to any other object never is."""
    lm, bm = meta(live), meta(body)
    out: list[str] = []
    if (lm.get("namespace"), lm.get("name")) != (bm.get("namespace"), bm.get("name")):
        out.append("another namespace or name")
    if uid and uid_of(live) != uid:
        out.append(f"UID {uid_of(live)} is not the recorded {uid}")
    for field in ("labels", "annotations"):
        have = lm.get(field) or {}
        for key, value in (bm.get(field) or {}).items():
            if have.get(key) != value:
                out.append(f"{field[:-1]} {key} is not the recorded value")
    if live.get("spec") != body.get("spec"):
        out.append("spec is not the frozen configuration")
    owner = owner_uid(body)
    owners = [str(r.get("uid")) for r in lm.get("ownerReferences") or []]
    if any(u != owner for u in owners):
        out.append(f"owned by {', '.join(u for u in owners if u != owner)}, not Pod {owner}")
    elif not releasing and owner not in owners:
        out.append(f"not owned by Pod {owner}")
    return out


def escape(key: str) -> str:
    """``key`` as one RFC 6901 JSON pointer token."""
    return key.replace("~", "~0").replace("/", "~1")


def preconditions(live: Obj) -> list[dict[str, Any]]:
    """JSON patch ``test`` operations that hold only for this exact version of ``live``."""
    m = meta(live)
    return [
        {"op": "test", "path": "/metadata/uid", "value": m.get("uid")},
        {"op": "test", "path": "/metadata/resourceVersion", "value": m.get("resourceVersion")},
    ]


def drop_finalizer(live: Obj, finalizer: str) -> list[dict[str, Any]] | None:
    """The JSON patch that removes only ``finalizer`` from this version of ``live`` (None
    when it does not carry it): every other finalizer stays."""
    present = finalizers(live)
    if finalizer not in present:
        return None
    path = f"/metadata/finalizers/{present.index(finalizer)}"
    return [
        *preconditions(live),
        {"op": "test", "path": path, "value": finalizer},
        {"op": "remove", "path": path},
    ]


def annotation_patch(live: Obj, values: Mapping[str, str | None]) -> list[dict[str, Any]] | None:
    """The JSON patch that sets (or, for None, removes) these annotations on this version of
    ``live``, creating the map when there is none; None when nothing changes."""
    current = meta(live).get("annotations")
    ops: list[dict[str, Any]] = []
    if not isinstance(current, Mapping):
        added = {k: v for k, v in values.items() if v is not None}
        if added:
            ops.append({"op": "add", "path": "/metadata/annotations", "value": added})
    else:
        for key, value in values.items():
            path = f"/metadata/annotations/{escape(key)}"
            if value is None:
                if key in current:
                    ops.append({"op": "remove", "path": path})
            elif current.get(key) != value:
                ops.append({"op": "add", "path": path, "value": value})
    return [*preconditions(live), *ops] if ops else None


def reserved_for(claim: Obj, pod_uid: str) -> bool:
    """Whether ``claim`` is reserved for exactly the one Pod of ``pod_uid``."""
    status = claim.get("status")
    entries: Sequence[Any] = (
        (status or {}).get("reservedFor") or [] if isinstance(status, Mapping) else []
    )
    return (
        len(entries) == 1
        and isinstance(entries[0], Mapping)
        and entries[0].get("resource") == "pods"
        and not entries[0].get("apiGroup")
        and entries[0].get("uid") == pod_uid
    )
