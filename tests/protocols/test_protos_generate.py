"""The checked-in *_pb2 modules are exactly what `dmn generate` produces, and drift is caught."""

from __future__ import annotations

import shutil
from pathlib import Path

from dmn.agent.protos import (
    dra_health_v1_pb2,
    dra_health_v1alpha1_pb2,
    dra_v1_pb2,
    nri_api_pb2,
    ttrpc_request_pb2,
)
from dmn.agent.protos.generate import generate

ROOT = Path(__file__).resolve().parents[2]


def test_checked_in_modules_have_no_drift() -> None:
    assert generate(ROOT, check=True) == []


def test_drift_is_reported_then_repaired(tmp_path: Path) -> None:
    shutil.copytree(ROOT / "agent" / "protos", tmp_path / "agent" / "protos")
    (tmp_path / "dmn").mkdir()
    (tmp_path / "dmn" / "agent").symlink_to("../agent")
    target = tmp_path / "agent" / "protos" / "nri_api_pb2.py"
    target.write_text(target.read_text() + "\n# edited by hand\n")
    (tmp_path / "agent" / "protos" / "stale_pb2.py").write_text("")
    assert generate(tmp_path, check=True) == [
        "agent/protos/nri_api_pb2.py",
        "agent/protos/stale_pb2.py",
    ]
    assert generate(tmp_path, check=False) != []
    assert generate(tmp_path, check=True) == []


def test_wire_names_match_upstream() -> None:
    svc = dra_v1_pb2.DESCRIPTOR.services_by_name["DRAPlugin"]
    assert svc.full_name == "k8s.io.kubelet.pkg.apis.dra.v1.DRAPlugin"
    assert nri_api_pb2.DESCRIPTOR.services_by_name["Plugin"].full_name == (
        "nri.pkg.api.v1alpha1.Plugin"
    )
    device = dra_v1_pb2.Device.DESCRIPTOR
    assert {f.name: f.number for f in device.fields} == {
        "request_names": 1,
        "pool_name": 2,
        "device_name": 3,
        "cdi_device_ids": 4,
        "share_id": 5,
    }
    req = ttrpc_request_pb2.Request.DESCRIPTOR
    assert [(f.name, f.number) for f in req.fields] == [
        ("service", 1),
        ("method", 2),
        ("payload", 3),
        ("timeout_nano", 4),
        ("metadata", 5),
    ]
    assert nri_api_pb2.Event.Value("START_CONTAINER") == 6
    assert nri_api_pb2.SynchronizeRequest.DESCRIPTOR.fields_by_name["more"].number == 3
    assert nri_api_pb2.ConfigureResponse.DESCRIPTOR.fields_by_name["events"].number == 2


def test_health_wire_names_match_upstream() -> None:
    """kubernetes v1.37.2 staging/src/k8s.io/kubelet/pkg/apis/dra-health/{v1,v1alpha1}:
    full method "/v1.DRAResourceHealth/NodeWatchResources" (api_grpc.pb.go), field numbers
    of api.proto, HealthStatus values."""
    for pb, package in ((dra_health_v1_pb2, "v1"), (dra_health_v1alpha1_pb2, "v1alpha1")):
        svc = pb.DESCRIPTOR.services_by_name["DRAResourceHealth"]
        assert svc.full_name == f"{package}.DRAResourceHealth"
        method = svc.methods_by_name["NodeWatchResources"]
        assert method.server_streaming and not method.client_streaming
        health = pb.DeviceHealth.DESCRIPTOR
        assert {f.name: f.number for f in health.fields} == {
            "device": 1,
            "health": 2,
            "last_updated_time": 3,
            "health_check_timeout_seconds": 4,
            "message": 5,
        }
        ident = pb.DeviceIdentifier.DESCRIPTOR
        assert {f.name: f.number for f in ident.fields} == {"pool_name": 1, "device_name": 2}
        assert pb.NodeWatchResourcesResponse.DESCRIPTOR.fields_by_name["devices"].number == 1
        assert [(v.name, v.number) for v in pb.HealthStatus.DESCRIPTOR.values] == [
            ("UNKNOWN", 0),
            ("HEALTHY", 1),
            ("UNHEALTHY", 2),
        ]
