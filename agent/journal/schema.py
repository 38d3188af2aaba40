"""The journal's layout version and the migration of older stores to it.

Why: coordinator records are kept across agent upgrades, so a change of their shape needs a
version number an older agent refuses (:mod:`.store` refuses a newer store, changing
nothing) and a migration the newer agent applies once, in one synced commit, before it
reads anything.

Versions:

* **1** — preparations held ``revision`` (a name) and ``contractDigest`` side by side and
  ``devices`` as the prepared-device dataclass's ``__dict__`` (``share_id`` in snake case);
  attachments held ``claims`` as free-form objects (documented with ``claimUID`` and
  ``fingerprint``, written with ``namespace`` and ``name`` too) and ``revision`` as the
  claims' revision names joined by commas.
* **2** — typed records (:mod:`.records`): ``revision`` is a ``{name, uid, digest}`` object
  on each preparation and on each attached claim; devices use ``shareID``.

Contract of :func:`migrate`: a pure function from the stored values of one store to the
values to write; keys never change (the key layout is the same in both versions), records
the migration does not know are returned untouched, and a record that does not have the
older shape raises ``ValueError`` naming the key (the store reports it as corrupt and
writes nothing). A version-1 store keeps no revision uid; it migrates as ``""``.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

SCHEMA_VERSION = 2

OLDEST_MIGRATABLE = 1


def _v1_preparation(d: Mapping[str, Any]) -> dict[str, Any]:
    out = {k: v for k, v in d.items() if k not in ("contractDigest", "revision", "devices")}
    out["revision"] = {
        "name": str(d.get("revision", "")),
        "uid": "",
        "digest": str(d.get("contractDigest", "")),
    }
    out["devices"] = [
        {
            "request": dev["request"],
            "pool": dev["pool"],
            "device": dev["device"],
            "shareID": dev.get("share_id", ""),
        }
        for dev in d.get("devices", ())
    ]
    return out


def _v1_attachment(
    d: Mapping[str, Any], preparations: Mapping[tuple[str, str], Mapping[str, Any]]
) -> dict[str, Any]:
    claims = list(d.get("claims", ()))
    joined = str(d.get("revision", ""))
    names = joined.split(",") if joined else []
    if names and len(names) != len(claims):
        raise ValueError(f"{len(claims)} claims but {len(names)} revision names {joined!r}")
    out = {k: v for k, v in d.items() if k not in ("revision", "claims")}
    out["claims"] = []
    for i, c in enumerate(claims):
        prep = preparations.get((str(c["claimUID"]), str(c["fingerprint"])), {})
        out["claims"].append(
            {
                "claimUID": c["claimUID"],
                "fingerprint": c["fingerprint"],
                "namespace": c.get("namespace", ""),
                "name": c.get("name", ""),
                "revision": {
                    "name": names[i] if names else str(prep.get("revision", "")),
                    "uid": "",
                    "digest": str(prep.get("contractDigest", "")),
                },
            }
        )
    return out


def migrate(version: int, records: Mapping[bytes, Any]) -> dict[bytes, Any]:
    """The values (decoded JSON) to store so that ``records`` of a ``version`` store have
    the :data:`SCHEMA_VERSION` shape; only changed keys are returned."""
    if not OLDEST_MIGRATABLE <= version < SCHEMA_VERSION:
        raise ValueError(f"no migration from schema version {version}")
    changed: dict[bytes, Any] = {}
    preparations: dict[tuple[str, str], Mapping[str, Any]] = {}
    for family in (b"prep/", b"att/"):  # attachments read their claims' preparations
        for k, v in records.items():
            if not k.startswith(family):
                continue
            try:
                if family == b"prep/":
                    changed[k] = _v1_preparation(v)
                    preparations[(str(v["claimUID"]), str(v["allocationFingerprint"]))] = v
                else:
                    changed[k] = _v1_attachment(v, preparations)
            except (KeyError, TypeError, AttributeError, ValueError) as exc:
                raise ValueError(f"record {k!r} is not a version-{version} record: {exc}") from None
    return changed
