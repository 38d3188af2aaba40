"""IPPool documents the IPAM tests share."""

from __future__ import annotations

from typing import Any

from dmn.api.identity import API_VERSION


def pool(name: str, *subnets: dict[str, Any]) -> dict[str, Any]:
    return {
        "apiVersion": API_VERSION,
        "kind": "IPPool",
        "metadata": {"name": name},
        "spec": {"subnets": list(subnets)},
    }


_DEFAULT: Any = object()


def v4(
    cidr: str = "10.56.0.0/24",
    *,
    gateway: Any = _DEFAULT,
    ranges: Any = _DEFAULT,
    reserved: Any = _DEFAULT,
    exclude: list[tuple[str, str]] | None = None,
    routes: list[dict[str, str]] | None = None,
) -> dict[str, Any]:
    """An IPv4 subnet; 10.56.0.0/24 gets dynamic .10-.199 and reserved .200-.249 unless
    told otherwise (gateway .1), any other subnet its whole host range and no gateway."""
    lab = cidr == "10.56.0.0/24"
    if gateway is _DEFAULT:
        gateway = "10.56.0.1" if lab else None
    if ranges is _DEFAULT:
        ranges = [("10.56.0.10", "10.56.0.199")] if lab else None
    if reserved is _DEFAULT:
        reserved = [("10.56.0.200", "10.56.0.249")] if lab else None
    return subnet(cidr, gateway, ranges, reserved, exclude, routes)


def subnet(
    cidr: str,
    gateway: str | None = None,
    ranges: Any = None,
    reserved: Any = None,
    exclude: Any = None,
    routes: list[dict[str, str]] | None = None,
) -> dict[str, Any]:
    out: dict[str, Any] = {"cidr": cidr}
    if gateway is not None:
        out["gateway"] = gateway
    for key, value in (("ranges", ranges), ("reserved", reserved), ("exclude", exclude)):
        if value is not None:
            out[key] = [{"start": s, "end": e} for s, e in value]
    if routes is not None:
        out["routes"] = routes
    return out
