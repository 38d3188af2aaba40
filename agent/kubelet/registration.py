"""pluginregistration.Registration: how the kubelet's plugin watcher learns about us.

Facts: kubernetes staging/src/k8s.io/kubelet/pkg/apis/pluginregistration/v1/api.proto and
constants.go (type "DRAPlugin"); staging/src/k8s.io/kubelet/pkg/apis/dra/v1/types.go
(supported version string "v1.DRAPlugin"; v1beta1 likewise "v1beta1.DRAPlugin"). We list
v1 first so a kubelet that knows both picks v1.

The same list names the optional services the plugin serves on its DRA socket: the
kubelet (v1.37 pkg/kubelet/cm/dra/plugin/dra_plugin_manager.go ``pickHealthService``)
watches device health only if it finds "v1.DRAResourceHealth" or
"v1alpha1.DRAResourceHealth" there; entries it does not know are ignored.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from typing import Any

import grpc

from dmn.agent.kubelet.health import HEALTH_SERVICES
from dmn.agent.protos import pluginregistration_v1_pb2 as reg_pb
from dmn.agent.protos import pluginregistration_v1_pb2_grpc as reg_grpc

log = logging.getLogger(__name__)

PLUGIN_TYPE = "DRAPlugin"
SUPPORTED_VERSIONS = ("v1.DRAPlugin", "v1beta1.DRAPlugin", *HEALTH_SERVICES)


class RegistrationServicer(reg_grpc.RegistrationServicer):
    def __init__(
        self,
        driver_name: str,
        endpoint: str,
        on_status: Callable[[bool, str], None] | None = None,
    ) -> None:
        self.driver_name = driver_name
        self.endpoint = endpoint
        self.on_status = on_status
        self.registered = threading.Event()
        self.last_error = ""

    def GetInfo(self, request: Any, context: grpc.ServicerContext) -> Any:
        return reg_pb.PluginInfo(
            type=PLUGIN_TYPE,
            name=self.driver_name,
            endpoint=self.endpoint,
            supported_versions=list(SUPPORTED_VERSIONS),
        )

    def NotifyRegistrationStatus(self, request: Any, context: grpc.ServicerContext) -> Any:
        self.last_error = request.error
        if request.plugin_registered:
            log.info("kubelet registered driver=%s", self.driver_name)
            self.registered.set()
        else:
            log.error(
                "kubelet rejected registration driver=%s error=%s", self.driver_name, request.error
            )
            self.registered.clear()
        if self.on_status is not None:
            self.on_status(request.plugin_registered, request.error)
        return reg_pb.RegistrationStatusResponse()
