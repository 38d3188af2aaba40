"""Validation of a CDI spec the agent writes: the CDI JSON schema (structure; a copy of the
upstream schema in ``tests/fixtures/cdi_schema``, see its SOURCE.md) plus the name rules
the CDI library enforces and the schema does not (its ``parser`` package: a kind is
``<vendor>/<class>``, a vendor a domain-like name, a class and device names from a small
alphabet; an env edit is ``NAME=value``)."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

from jsonschema import Draft7Validator
from referencing import Registry, Resource
from referencing.jsonschema import DRAFT7

SCHEMA_DIR = Path(__file__).resolve().parents[1] / "fixtures" / "cdi_schema"
_VENDOR = re.compile(r"^[A-Za-z0-9]([A-Za-z0-9._-]*[A-Za-z0-9])?$")
_CLASS = re.compile(r"^[A-Za-z0-9]([A-Za-z0-9_-]*[A-Za-z0-9])?$")
_DEVICE = re.compile(r"^[A-Za-z0-9]([A-Za-z0-9_.:-]*[A-Za-z0-9])?$")
_ENV = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*=.*$")


def _validator() -> Draft7Validator:
    schema = json.loads((SCHEMA_DIR / "schema.json").read_text())
    defs = json.loads((SCHEMA_DIR / "defs.json").read_text())
    registry: Registry[Any] = Registry().with_resource(
        "defs.json", Resource.from_contents(defs, default_specification=DRAFT7)
    )
    return Draft7Validator(schema, registry=registry)


VALIDATOR = _validator()


def problems(spec: dict[str, Any]) -> list[str]:
    """Everything wrong with ``spec`` as a CDI spec; empty when it is valid."""
    out = [f"{'/'.join(map(str, e.path))}: {e.message}" for e in VALIDATOR.iter_errors(spec)]
    vendor, _, cls = str(spec.get("kind", "")).partition("/")
    if not _VENDOR.match(vendor) or not _CLASS.match(cls):
        out.append(f"kind {spec.get('kind')!r} is not <vendor>/<class>")
    for device in spec.get("devices") or []:
        if not _DEVICE.match(str(device.get("name", ""))):
            out.append(f"device name {device.get('name')!r}")
        for env in (device.get("containerEdits") or {}).get("env") or []:
            if not _ENV.match(env):
                out.append(f"env {env!r} is not NAME=value")
    return out
