"""Device backends: where the node agent learns which devices a node has and how healthy they are."""

from .base import BackendError, DeviceBackend, Inventory

__all__ = ["BackendError", "DeviceBackend", "Inventory", "create_backend"]


def create_backend(
    name: str,
    *,
    node_name: str,
    driver: str,
    inventory_path: str | None = None,
    nvml_module=None,
    refresh_interval: float = 30.0,
) -> DeviceBackend:
    """The backend named in the settings (``simulated`` or ``nvml``)."""
    if name == "simulated":
        from .simulated import SimulatedBackend

        if not inventory_path:
            raise BackendError("the simulated backend needs an inventory file: set DRA_NODEAGENT_INVENTORY")
        return SimulatedBackend(inventory_path, node_name=node_name, driver=driver)
    if name == "nvml":
        from .nvml import NvmlBackend

        return NvmlBackend(driver=driver, nvml=nvml_module, refresh_interval=refresh_interval)
    raise BackendError(f"unknown device backend {name!r}: choose 'nvml' or 'simulated' (DRA_NODEAGENT_BACKEND)")
