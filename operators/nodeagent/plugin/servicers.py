"""kubelet's gRPC services of the plugin, thin: each turns kubelet's protobuf messages into plain
data, asks ``DeviceState`` (or the plugin, for its registration) and turns the answer back
(dra-example-driver's driver.go to our ``state``'s state.go)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from grpclib.const import Status
from grpclib.exceptions import GRPCError

from . import health_service
from .checkpoint import PreparedDevice
from .kubeletapi import (
    dra_v1_grpc,
    dra_v1_pb2,
    dra_v1beta1_grpc,
    dra_v1beta1_pb2,
    pluginregistration_v1_grpc,
    pluginregistration_v1_pb2,
)
from .state import ClaimRef, DeviceState

PLUGIN_TYPE = "DRAPlugin"
# kubelet takes the first entry of ours it knows: v1 first; v1beta1 for kubelets that still ask for it.
# The health services are optional; kubelet 1.37 watches health only where they are listed.
SUPPORTED_SERVICES = ["v1.DRAPlugin", "v1beta1.DRAPlugin", *health_service.SERVICES]


def _claims(request: Any) -> list[ClaimRef]:
    return [{"namespace": c.namespace, "uid": c.uid, "name": c.name} for c in request.claims]


class _Dra:
    """The DRA service, for either version: each version's class names its messages (``pb2``)
    and takes its gRPC method paths from its own generated base, which must come after this one."""

    pb2: Any = dra_v1_pb2

    def __init__(self, state: DeviceState):
        self.state = state

    def _device(self, d: PreparedDevice):
        device = self.pb2.Device(
            request_names=d.requestNames, pool_name=d.pool, device_name=d.device, cdi_device_ids=d.cdiDeviceIDs
        )
        if d.shareID:
            device.share_id = d.shareID
        return device

    async def NodePrepareResources(self, stream) -> None:
        request = await stream.recv_message()
        response = self.pb2.NodePrepareResourcesResponse()
        for uid, result in (await self.state.prepare(_claims(request))).items():
            entry = response.claims[uid]
            if result.error:
                entry.error = result.error
            else:
                entry.devices.extend(self._device(d) for d in result.devices)
        await stream.send_message(response)

    async def NodeUnprepareResources(self, stream) -> None:
        request = await stream.recv_message()
        response = self.pb2.NodeUnprepareResourcesResponse()
        for uid, error in (await self.state.unprepare(_claims(request))).items():
            response.claims[uid].error = error  # an empty entry is success
        await stream.send_message(response)


class DraV1(_Dra, dra_v1_grpc.DRAPluginBase):
    pb2 = dra_v1_pb2


class DraV1beta1(_Dra, dra_v1beta1_grpc.DRAPluginBase):
    """Same service for kubelets that ask for v1beta1 (no share_id there)."""

    pb2 = dra_v1beta1_pb2

    def _device(self, d: PreparedDevice):
        return self.pb2.Device(
            request_names=d.requestNames, pool_name=d.pool, device_name=d.device, cdi_device_ids=d.cdiDeviceIDs
        )


class Registration(pluginregistration_v1_grpc.RegistrationBase):
    """What kubelet's plugin watcher asks on the registration socket: who we are and where the
    DRA service is; then it tells whether it registered us (``on_status(registered, error)``)."""

    def __init__(self, driver: str, endpoint: str, on_status: Callable[[bool, str], None]):
        self.driver, self.endpoint, self.on_status = driver, endpoint, on_status

    async def GetInfo(self, stream) -> None:
        await stream.recv_message()
        await stream.send_message(
            pluginregistration_v1_pb2.PluginInfo(
                type=PLUGIN_TYPE, name=self.driver, endpoint=self.endpoint, supported_versions=SUPPORTED_SERVICES
            )
        )

    async def NotifyRegistrationStatus(self, stream) -> None:
        request = await stream.recv_message()
        self.on_status(request.plugin_registered, request.error)
        if not request.plugin_registered:
            raise GRPCError(Status.UNKNOWN, f"registration failed: {request.error}")
        await stream.send_message(pluginregistration_v1_pb2.RegistrationStatusResponse())
