"""IP allocation on a contended pool: the allocation client beside one-create-per-address.

N requester threads (each its own connection) allocate concurrently from one pool on a lab
API server, every allocation for a distinct owner, until each has made ``--per``
allocations. Side by side, each on a fresh pool of ``--size`` dynamic addresses:

* ``client``: :class:`dmn.api.ipam.client.AllocationClient` — one snapshot of the pool's
  allocations, then creates from a position derived from the owner, skipping addresses the
  snapshot shows taken;
* ``lowest-first``: what the client avoids — every requester walks the pool from its lowest
  address and sends one create per address until one succeeds (no snapshot).

Reported per strategy: allocations per second (wall clock of the whole run), API requests
per allocation (every request the connections sent) and creates per allocation (1.0 means
no create lost a race). Distinct addresses are checked, not timed.

    .venv/bin/python benchmarks/ipam.py [--requesters 8] [--per 25] [--size 512] [--json]
"""

from __future__ import annotations

import argparse
import json
import threading
import time
import uuid
from pathlib import Path
from typing import Any

import yaml

from dmn.api.cluster import AlreadyExists, Cluster, connect
from dmn.api.cluster import resources as r
from dmn.api.identity import API_VERSION
from dmn.api.ipam.addresses import to_text
from dmn.api.ipam.allocator import AddressRequest
from dmn.api.ipam.client import Allocation, AllocationClient
from dmn.api.ipam.ipallocation import Owner, allocation_manifest
from dmn.lab.apiserver import LabApiServer

CRD_DIR = Path(__file__).resolve().parents[1] / "charts" / "dra-multi-network" / "crds"
BASE = int.from_bytes(bytes([10, 100, 0, 0]), "big")


class CountingCluster(Cluster):
    """A :class:`Cluster` that counts the requests it sends."""

    requests = 0

    def request(self, *args: Any, **kwargs: Any) -> Any:
        self.requests += 1
        return super().request(*args, **kwargs)


def make_pool(cluster: Cluster, name: str, size: int) -> None:
    cluster.create(
        r.IP_POOLS,
        {
            "apiVersion": API_VERSION,
            "kind": "IPPool",
            "metadata": {"name": name},
            "spec": {
                "subnets": [
                    {
                        "cidr": "10.100.0.0/16",
                        "ranges": [{"start": to_text(BASE + 1, 4), "end": to_text(BASE + size, 4)}],
                    }
                ]
            },
        },
    )


def lowest_first(cluster: Cluster, pool: str, owner: Owner, size: int) -> tuple[str, int]:
    creates = 0
    for offset in range(1, size + 1):
        address = to_text(BASE + offset, 4)
        creates += 1
        try:
            cluster.create(
                r.IP_ALLOCATIONS, allocation_manifest(pool, address, 4, "Dynamic", owner)
            )
            return address, creates
        except AlreadyExists:
            continue
    raise RuntimeError("pool exhausted")


def run(url: str, strategy: str, requesters: int, per: int, size: int) -> dict[str, Any]:
    pool = f"bench-{strategy}"
    with Cluster(connect(url=url)) as admin:
        make_pool(admin, pool, size)
    addresses: list[str] = []
    counts = {"requests": 0, "creates": 0}
    lock = threading.Lock()
    barrier = threading.Barrier(requesters + 1)

    def requester(i: int) -> None:
        cluster = CountingCluster(connect(url=url))
        client = AllocationClient(cluster)
        mine: list[str] = []
        creates = 0
        barrier.wait()
        for j in range(per):
            owner = Owner("bench", f"c{i}-{j}", str(uuid.uuid4()), "node", "op")
            if strategy == "client":
                got = client.allocate(pool, AddressRequest(4), owner)
                assert isinstance(got, Allocation), got
                mine.append(got.address)
            else:
                address, n = lowest_first(cluster, pool, owner, size)
                creates += n
                mine.append(address)
        cluster.close()
        with lock:
            addresses.extend(mine)
            counts["requests"] += cluster.requests
            counts["creates"] += client.creates + creates

    threads = [threading.Thread(target=requester, args=(i,)) for i in range(requesters)]
    for t in threads:
        t.start()
    barrier.wait()
    start = time.perf_counter()
    for t in threads:
        t.join()
    seconds = time.perf_counter() - start
    total = requesters * per
    assert len(addresses) == total and len(set(addresses)) == total, "an address was shared"
    return {
        "strategy": strategy,
        "allocations": total,
        "allocations_per_second": round(total / seconds, 1),
        "requests_per_allocation": round(counts["requests"] / total, 2),
        "creates_per_allocation": round(counts["creates"] / total, 2),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--requesters", type=int, default=8)
    parser.add_argument("--per", type=int, default=25)
    parser.add_argument("--size", type=int, default=512)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    assert args.requesters * args.per <= args.size, "more allocations than the pool holds"
    with LabApiServer() as server:
        with Cluster(connect(url=server.url)) as admin:
            for path in sorted(CRD_DIR.glob("ip*.yaml")):
                admin.create(r.CUSTOM_RESOURCE_DEFINITIONS, yaml.safe_load(path.read_text()))
        rows = [
            run(server.url, s, args.requesters, args.per, args.size)
            for s in ("client", "lowest-first")
        ]
    if args.json:
        print(json.dumps(rows, indent=2))
        return
    print(f"{args.requesters} requesters x {args.per} allocations, pool of {args.size} addresses")
    print(f"{'strategy':<14}{'alloc/s':>10}{'requests/alloc':>16}{'creates/alloc':>15}")
    for row in rows:
        print(
            f"{row['strategy']:<14}{row['allocations_per_second']:>10}"
            f"{row['requests_per_allocation']:>16}{row['creates_per_allocation']:>15}"
        )


if __name__ == "__main__":
    main()
