"""The checked-in *_pb2 modules are exactly what `dmn generate` produces, and drift is caught."""

from __future__ import annotations

import shutil
from pathlib import Path

from dmn.agent.protos import dra_v1_pb2, nri_api_pb2, ttrpc_request_pb2
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
