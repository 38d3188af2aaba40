"""A tainted device's slice as the API server stores it: ``timeAdded`` is stamped when the
node writes a taint without one, and the node's next pass carries that time forward, so an
unchanged slice is not written again (the lab API server stamps as the real one does; the
upstream lab proves the real one in ``tests/e2e/test_upstream.py``)."""

from __future__ import annotations

import copy

from dmn.agent.slices.device_health import UNHEALTHY_TAINT_KEY
from dmn.agent.slices.node_publisher import _stored_as_planned, _with_taint_times
from dmn.api.cluster import Cluster, connect
from dmn.api.cluster import resources as r
from dmn.api.identity import DRIVER
from dmn.lab.apiserver import LabApiServer


def _slice(taints: list[dict[str, str]]) -> dict[str, object]:
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceSlice",
        "metadata": {"name": "n1-network-devices-0"},
        "spec": {
            "driver": DRIVER,
            "nodeName": "n1",
            "pool": {"name": "n1", "generation": 1, "resourceSliceCount": 1},
            "devices": [{"name": "d0", "taints": taints}, {"name": "d1"}],
        },
    }


def test_a_stamped_taint_keeps_its_time_and_compares_equal() -> None:
    taint = {"key": UNHEALTHY_TAINT_KEY, "effect": "NoSchedule"}
    planned = _slice([taint])
    with LabApiServer() as server, Cluster(connect(url=server.url)) as cluster:
        stored = cluster.create(r.RESOURCE_SLICES, copy.deepcopy(planned))
        (stamped,) = stored["spec"]["devices"][0]["taints"]
        assert stamped["timeAdded"] and stamped["key"] == UNHEALTHY_TAINT_KEY
        assert not _stored_as_planned(stored, planned)  # the server added the time
        again = _with_taint_times(planned, stored)
        assert _stored_as_planned(stored, again)
        # written again with the carried time, the time stays; a new taint gets its own
        other = {"key": f"{DRIVER}/other", "effect": "None"}
        body = _with_taint_times(_slice([taint, other]), stored)
        body["metadata"]["resourceVersion"] = stored["metadata"]["resourceVersion"]
        updated = cluster.replace(r.RESOURCE_SLICES, body)
        first, second = updated["spec"]["devices"][0]["taints"]
        assert first["timeAdded"] == stamped["timeAdded"] and second["timeAdded"]
        # a device that is healthy again loses its taint
        untainted = _with_taint_times(_slice([]), updated)
        assert untainted["spec"]["devices"][0]["taints"] == []
