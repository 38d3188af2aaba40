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


def v4(
    cidr: str = "10.56.0.0/24",
    *,
    gateway: str | None = "10.56.0.1",
    ranges: list[tuple[str, str]] | None = (("10.56.0.10", "10.56.0.199"),),  # type: ignore[assignment]
    reserved: list[tuple[str, str]] | None = (("10.56.0.200", "10.56.0.249"),),  # type: ignore[assignment]
    exclude: list[tuple[str, str]] | None = None,
    routes: list[dict[str, str]] | None = None,
) -> dict[str, Any]:
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
