"""A DeviceExposurePolicy checked against its strict model, with positions (pure).

The webhook (deny) and the controller (the ``Validated`` condition) make the same check; a
failure is reported at the line and column of the field in the policy as the API server sent
it, rendered as YAML (:mod:`dmn.api.served_yaml`), like plugins and topologies.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from pydantic import ValidationError

from dmn.api.policy import DeviceExposurePolicy
from dmn.api.served_yaml import served_document
from dmn.interpreter.diagnostics import Code, Diagnostic
from dmn.interpreter.source import path_text


def policy_diagnostics(obj: Mapping[str, Any]) -> list[Diagnostic]:
    """Why ``obj`` is not a valid DeviceExposurePolicy (status ignored); empty when it is."""
    try:
        DeviceExposurePolicy.model_validate({k: v for k, v in obj.items() if k != "status"})
    except ValidationError as exc:
        source = served_document(obj, "DeviceExposurePolicy").source
        out: list[Diagnostic] = []
        for err in exc.errors():
            loc = tuple(p for p in err["loc"] if isinstance(p, str | int))
            unknown = err["type"] == "extra_forbidden"
            span = source.key_span(loc) if unknown else source.span(loc)
            code = Code.E_UNKNOWN_FIELD if unknown else Code.E_SCHEMA
            out.append(Diagnostic.at(code, err["msg"], span, path_text(loc)))
        return out
    return []
