"""The node agent's start-up: it watches only its own Node and its own slices."""

from __future__ import annotations

import datetime

import kopf

from ..core.api.resources import NODES, RESOURCE_SLICES
from ..core.dra.devicemetadata import parse_versions
from ..core.framework.metrics import serve
from ..core.framework.operator import ConfigurationError, OperatorSpec, register
from ..core.framework.runtime import Runtime
from ..core.settings import Settings
from .agent import NodeAgent
from .backends import BackendError, create_backend
from .health import HealthTracker
from .metrics import Metrics

DEFAULT_DRIVERS = {"nvml": "gpu.nvidia.com", "simulated": "gpu.sim.dra-operators.dev"}


def boot_time(proc: str = "/proc") -> datetime.datetime | None:
    """When this node booted (``btime`` in /proc/stat); None where that cannot be read."""
    try:
        with open(f"{proc}/stat") as f:
            for line in f:
                if line.startswith("btime "):
                    return datetime.datetime.fromtimestamp(int(line.split()[1]), datetime.UTC)
    except (OSError, ValueError):
        return None
    return None


def driver_name(config: Settings) -> str:
    return config.nodeagent_driver or DEFAULT_DRIVERS.get(config.nodeagent_backend, "")


def preflight(config: Settings, memo: kopf.Memo) -> None:
    """Fail before kopf starts, with a message that says what to do (the CLI exits non-zero)."""
    if not config.node_name:
        raise BackendError(
            "NODE_NAME is not set: the node agent must know its Node "
            "(the DaemonSet passes spec.nodeName through the downward API)"
        )
    memo.nodeagent_backend = create_backend(
        config.nodeagent_backend,
        node_name=config.node_name,
        driver=driver_name(config),
        inventory_path=config.nodeagent_inventory,
        refresh_interval=config.nodeagent_nvml_refresh,
    )


def check(config: Settings, memo: kopf.Memo) -> None:
    """``kopf run -m`` has not called ``preflight``; ``dra-operators run`` has."""
    if getattr(memo, "nodeagent_backend", None) is None:
        try:
            preflight(config, memo)
        except BackendError as e:
            raise ConfigurationError(str(e)) from e


async def start(runtime: Runtime, config: Settings, memo: kopf.Memo) -> None:
    kube = runtime.kube
    driver = driver_name(config)
    metrics = Metrics()
    ignored = tuple(int(x) for x in config.nodeagent_ignored_xids.split(",") if x.strip())
    agent = NodeAgent(
        kube,
        memo.nodeagent_backend,
        node_name=config.node_name,
        driver=driver,
        sync_delay=config.nodeagent_sync_delay,
        metrics=metrics,
        health=HealthTracker(driver, ignored, config.nodeagent_health_quiet_period, booted_at=boot_time()),
    )
    runtime.on_cleanup(agent.stop)
    runtime.instrument(metrics.registry)
    runtime.informer(NODES, agent.nodes, agent.on_node, field_selector=f"metadata.name={config.node_name}", kind="Node")
    runtime.informer(
        RESOURCE_SLICES, agent.slices, agent.on_slice, field_selector=agent.slice_selector, kind="ResourceSlice"
    )
    await runtime.prime()
    await agent.start(runtime.supervisor, primed=True)
    memo.nodeagent = agent
    if config.nodeagent_kubelet_plugin:
        from .plugin.server import KubeletPlugin  # gRPC is loaded only by an agent that serves it

        plugin = KubeletPlugin(
            agent,
            kube,
            registry_dir=config.nodeagent_registry_dir,
            plugins_dir=config.nodeagent_plugins_dir,
            cdi_root=config.nodeagent_cdi_root,
            toolkit_cdi_dirs=tuple(d.strip() for d in config.nodeagent_toolkit_cdi_dirs.split(",") if d.strip()),
            nvidia_runtime=config.nodeagent_nvidia_container_runtime,
            pod_uid=config.pod_uid,
            device_metadata=parse_versions(config.nodeagent_device_metadata),
        )
        runtime.on_cleanup(plugin.stop)
        await plugin.start(runtime.supervisor)
        memo.nodeagent_plugin = plugin
    await check_itself(runtime, config, memo)
    serve(metrics.registry, config.metrics_port)
    runtime.start_watchdog()


async def check_itself(runtime: Runtime, config: Settings, memo: kopf.Memo) -> None:
    """The kubelet plugin's self-check (when it runs) and the gRPC health service (when a port is
    set), both behind liveness. An agent with neither loads no gRPC at all (about 10 MiB)."""
    plugin = getattr(memo, "nodeagent_plugin", None)
    if plugin is None and not config.nodeagent_grpc_health_port:
        return
    from .plugin.liveness import SelfCheck

    sockets = (lambda: (plugin.registration_socket, plugin.dra_socket)) if plugin is not None else None
    check = SelfCheck(
        sockets,
        runtime.supervisor.problems,
        period=config.nodeagent_self_check_period,
        registered=plugin.registered if plugin is not None else (lambda: True),
    )
    runtime.supervisor.add_check(check.problem)
    if config.nodeagent_grpc_health_port:
        runtime.on_cleanup(check.stop)
        await check.serve(config.nodeagent_grpc_health_port)
    if sockets is not None:
        runtime.supervisor.spawn("kubelet-plugin-self-check", check.run)


register(OperatorSpec("nodeagent", start, check=check, rate_limited=False))
