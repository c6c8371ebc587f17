"""A fake kubelet: registers DRA plugins from a registry directory and calls them over the same
Unix sockets and gRPC services a real kubelet uses."""

from __future__ import annotations

import asyncio
from pathlib import Path

import grpc

from operators.nodeagent.plugin.kubeletapi import dra_v1_pb2, dra_v1beta1_pb2, pluginregistration_v1_pb2
from tests.grpcio_stubs import dra_v1_pb2_grpc, dra_v1beta1_pb2_grpc, pluginregistration_v1_pb2_grpc

KNOWN_SERVICES = ["v1.DRAPlugin", "v1beta1.DRAPlugin"]  # what a 1.37 kubelet knows


class FakeKubelet:
    def __init__(self, registry_dir: Path):
        self.registry_dir = Path(registry_dir)
        self.info = None
        self._channels: list[grpc.aio.Channel] = []
        self._v1 = self._v1beta1 = None

    async def register(self, timeout: float = 20) -> pluginregistration_v1_pb2.PluginInfo:
        """Like kubelet's plugin watcher: find the socket, GetInfo, validate, notify."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        while True:
            sockets = (
                [p for p in self.registry_dir.glob("*-reg.sock") if not p.name.startswith(".")]
                if self.registry_dir.is_dir()
                else []
            )
            if sockets:
                break
            if loop.time() > deadline:
                raise AssertionError(f"no registration socket appeared in {self.registry_dir}")
            await asyncio.sleep(0.1)
        channel = grpc.aio.insecure_channel(f"unix://{sockets[0]}")
        self._channels.append(channel)
        registration = pluginregistration_v1_pb2_grpc.RegistrationStub(channel)
        while True:
            # kubelet gives GetInfo 1 s (operation_generator.go, GenerateRegisterPluginFunc) and its
            # reconciler tries again after a failure; so does this fake, or a slow answer on a
            # loaded machine would fail a test that kubelet would have passed.
            try:
                info = await registration.GetInfo(pluginregistration_v1_pb2.InfoRequest(), timeout=1)
                break
            except grpc.aio.AioRpcError as e:
                if e.code() != grpc.StatusCode.DEADLINE_EXCEEDED or loop.time() > deadline:
                    raise
        chosen = next((v for v in info.supported_versions if v in KNOWN_SERVICES), None)
        ok = info.type == "DRAPlugin" and chosen is not None and bool(info.endpoint)
        await registration.NotifyRegistrationStatus(
            pluginregistration_v1_pb2.RegistrationStatus(plugin_registered=ok, error="" if ok else "validation failed"),
            timeout=5,
        )
        assert ok, f"plugin rejected: {info}"
        endpoint = grpc.aio.insecure_channel(f"unix://{info.endpoint}")
        self._channels.append(endpoint)
        self._v1 = dra_v1_pb2_grpc.DRAPluginStub(endpoint)
        self._v1beta1 = dra_v1beta1_pb2_grpc.DRAPluginStub(endpoint)
        self.info = info
        return info

    @staticmethod
    def _claims(module, claims: list[dict]):
        return [
            module.Claim(namespace=c["metadata"]["namespace"], name=c["metadata"]["name"], uid=c["metadata"]["uid"])
            if "metadata" in c
            else module.Claim(**c)
            for c in claims
        ]

    async def prepare(self, claims: list[dict], version: str = "v1", timeout: float = 45):
        """``timeout``: kubelet's deadline for the call (gRPC cancels it on the plugin's side too)."""
        module, stub = (dra_v1_pb2, self._v1) if version == "v1" else (dra_v1beta1_pb2, self._v1beta1)
        return await stub.NodePrepareResources(
            module.NodePrepareResourcesRequest(claims=self._claims(module, claims)), timeout=timeout
        )

    async def unprepare(self, claims: list[dict], version: str = "v1"):
        module, stub = (dra_v1_pb2, self._v1) if version == "v1" else (dra_v1beta1_pb2, self._v1beta1)
        return await stub.NodeUnprepareResources(
            module.NodeUnprepareResourcesRequest(claims=self._claims(module, claims)), timeout=45
        )

    async def close(self) -> None:
        for channel in self._channels:
            await channel.close()
        self._channels = []
