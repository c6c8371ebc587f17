"""The node agent: keeps the node's ResourceSlices equal to its devices and their health."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from typing import Any

import structlog

from ..core import heap
from ..core.api.kube import ApiError, ConnectionLost, Kube
from ..core.api.resources import NODES, RESOURCE_SLICES
from ..core.machinery.events import NORMAL, WARNING, EventRecorder
from ..core.machinery.store import Store
from ..core.machinery.supervisor import Supervisor
from .backends import BackendError, DeviceBackend, Inventory
from .health import HealthEvent, HealthTracker
from .metrics import Metrics
from .publish import PoolPublisher
from .slices import fit_to_cluster, split_into_slices
from .support import SliceSupport, probe_slice_support
from .validation import split_valid

log = structlog.stdlib.get_logger("operators.nodeagent")

EVENT_COMPONENT = "dra-nodeagent"
_RETRY_DELAYS = (1, 2, 5, 10, 30)


class NodeAgent:
    def __init__(
        self,
        kube: Kube,
        backend: DeviceBackend,
        *,
        node_name: str,
        driver: str,
        sync_delay: float,
        health: HealthTracker,
        metrics: Metrics | None = None,
    ):
        self.kube = kube
        self.backend = backend
        self.node_name = node_name
        self.driver = driver
        self.sync_delay = sync_delay
        self.health = health
        self.metrics = metrics or Metrics()
        self.metrics.start_series(driver)
        self.slices = Store()
        self.nodes = Store()  # just this agent's Node; a Store so that relists are checked like any other
        self.publisher = PoolPublisher(kube, self.slices, driver, node_name)
        self.events = EventRecorder(kube, EVENT_COMPONENT)
        self.node: dict[str, Any] | None = None
        self.inventory = Inventory()
        self.support = SliceSupport()  # what the cluster keeps of a slice: probed at start
        self._probe = True  # probe again before the next publication (at start, after a refusal)
        # No discovery has succeeded yet in this process: the slices found are all we know of the
        # devices, so they are left as they are (an empty inventory would delete them).
        self._discovered = False
        self._trimmed = False  # the heap is trimmed after the first publication and each that wrote
        self._reported_errors: list[str] = []
        self._wake = asyncio.Event()
        self._inventory_changed = asyncio.Event()
        self._health_events: asyncio.Queue[HealthEvent] = asyncio.Queue()
        self._timer: asyncio.TimerHandle | None = None
        self._failures = 0
        self._tasks: list[asyncio.Task] = []
        # Told when device health or the inventory changed (kubelet's health stream listens).
        self.health_listeners: list[Callable[[], None]] = []
        self.log = log.bind(node=node_name, driver=driver)

    # -- lifecycle ---------------------------------------------------------------------------

    async def start(self, supervisor: Supervisor | None = None, primed: bool = False) -> None:
        """Start publishing. ``primed``: the operator's informers have already delivered the Node
        and the slices (its one LIST); else they are read here (standalone use, tests)."""
        if not primed:
            node = await self.kube.get_or_none(NODES, self.node_name)
            if node is not None:
                self.on_node(node, deleted=False)
            for found in await self.kube.list(RESOURCE_SLICES, field_selector=self.slice_selector):
                self.slices.upsert(found)
        if self.node is None:
            raise BackendError(
                f"Node {self.node_name!r} does not exist: set NODE_NAME to this node's name "
                "(spec.nodeName through the downward API in the DaemonSet)"
            )
        # Taints published before a restart stay, with their timeAdded.
        self.health.adopt([d for s in self.slices.values() for d in s["spec"].get("devices") or []])
        await self._rediscover()
        loops = {
            "nodeagent-publish": self._publish_loop,
            "nodeagent-backend": lambda: self.backend.watch(self._health_events, self._inventory_changed),
            "nodeagent-health": self._health_loop,
            "nodeagent-inventory": self._inventory_loop,
            "nodeagent-recovery": self._recovery_loop,
        }
        if supervisor is not None:
            self._tasks = [supervisor.spawn(name, loop, node=self.node_name) for name, loop in loops.items()]
        else:
            self._tasks = [asyncio.create_task(loop(), name=name) for name, loop in loops.items()]
        self._wake.set()  # kubelet may have wiped the slices: always publish on start

    @property
    def slice_selector(self) -> str:
        return f"spec.nodeName={self.node_name},spec.driver={self.driver}"

    async def stop(self) -> None:
        for task in self._tasks:
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        self.backend.close()

    def _health_changed(self) -> None:
        for listener in self.health_listeners:
            listener()

    def published_devices(self) -> list[dict[str, Any]]:
        """The devices of the current inventory that pass validation and that this cluster can
        hold (what is published; unhealthy ones withdrawn where it has no taints included)."""
        valid = split_valid(self.inventory.devices, self.inventory.counter_sets)[0]
        return fit_to_cluster(valid, self.inventory.counter_sets, self.support)[0]

    # -- inputs ------------------------------------------------------------------------------

    def on_node(self, node: dict[str, Any], deleted: bool) -> None:
        if node["metadata"].get("name") != self.node_name:
            return
        if deleted:
            self.nodes.delete(node)
            if self.node is not None and self.node["metadata"].get("uid") != node["metadata"].get("uid"):
                return  # a late event of an earlier Node of this name
            # The garbage collector deletes our slices with the Node (they are owned by it).
            self.node = None
            self.log.info("node deleted; its slices go with it")
            return
        if not self.nodes.upsert(node):
            return  # older than what we know, or a deleted Node's late event
        first = self.node is None or self.node["metadata"]["uid"] != node["metadata"]["uid"]
        self.node = node
        self.backend.observe_node(node)
        if first:
            self._wake.set()

    def on_slice(self, slice_: dict[str, Any], deleted: bool) -> None:
        if deleted:
            self.slices.delete(slice_)
        else:
            self.slices.upsert(slice_)
        # Someone else's change (or the echo of ours): check the pool a little later, as
        # upstream's helper does, so that a hand edit is reverted and a deleted slice recreated.
        if self._timer is None:
            self._timer = asyncio.get_running_loop().call_later(self.sync_delay, self._resync)

    def _resync(self) -> None:
        self._timer = None
        self._wake.set()

    # -- loops -------------------------------------------------------------------------------

    async def _rediscover(self) -> None:
        try:
            self.inventory = await asyncio.to_thread(self.backend.discover)
            self._discovered = True
            self._health_changed()
        except BackendError as e:
            # Keep what was published; say what is wrong and where.
            self.log.error("inventory unusable, keeping the devices published before", error=str(e))
            self.inventory.errors = [str(e)]
            await self._report([str(e)])

    async def _inventory_loop(self) -> None:
        while True:
            await self._inventory_changed.wait()
            self._inventory_changed.clear()
            try:
                await self._rediscover()
            except Exception as e:  # a backend bug must not end re-discovery for good
                self.log.error(
                    "re-discovery failed, keeping the devices published before",
                    error=f"{type(e).__name__}: {e}",
                    exc_info=True,
                )
                asyncio.get_running_loop().call_later(_RETRY_DELAYS[-1], self._inventory_changed.set)
            self._wake.set()

    async def _health_loop(self) -> None:
        while True:
            event = await self._health_events.get()
            try:
                await self._on_health_event(event)
            except Exception as e:  # one bad event must not end health tracking
                self.log.error(
                    "health event not handled",
                    health_event=repr(event),
                    error=f"{type(e).__name__}: {e}",
                    exc_info=True,
                )

    async def _on_health_event(self, event: HealthEvent) -> None:
        self.metrics.health_events.labels(self.driver, event.kind, event.value).inc()
        if self.health.record(event):
            self.log.warning("device unhealthy", device=event.device, kind=event.kind, value=event.value)
            if self.node:
                await self.events.event(
                    self.node,
                    WARNING,
                    "DeviceUnhealthy",
                    f"device {event.device} of driver {self.driver}: {event.kind}"
                    f"{'=' + event.value if event.value else ''}; "
                    + ("tainted" if self.support.taints else "withdrawn from its slice (no device taints here)"),
                )
            self._health_changed()
            self._wake.set()

    async def _recovery_loop(self) -> None:
        interval = max(0.5, min(10.0, self.health.quiet_period.total_seconds() / 4))
        while True:
            await asyncio.sleep(interval)
            tainted = self.health.tainted_devices()
            if not tainted:
                continue
            passing = {d for d in tainted if await self._passes(d)}
            for device in self.health.recover(passing.__contains__):
                self._health_changed()
                self.metrics.recoveries.labels(self.driver).inc()
                self.log.info("device recovered, taints removed", device=device)
                if self.node:
                    await self.events.event(
                        self.node,
                        NORMAL,
                        "DeviceRecovered",
                        f"device {device} of driver {self.driver} passes its health check again; taints removed",
                    )
                self._wake.set()

    async def _passes(self, device: str) -> bool:
        try:
            return bool(await asyncio.to_thread(self.backend.healthy, device))
        except Exception as e:  # noqa: BLE001 - a check that fails says "not healthy", not "stop checking"
            self.log.warning("health check failed", device=device, error=f"{type(e).__name__}: {e}")
            return False

    async def _publish_loop(self) -> None:
        while True:
            await self._wake.wait()
            self._wake.clear()
            if self.node is None:
                continue
            started = time.monotonic()
            try:
                await self.publish()
            except asyncio.CancelledError:
                raise
            except Exception as e:  # API away, garbage, a bug: retry, never stop publishing
                if isinstance(e, ApiError) and e.invalid:
                    self._probe = True  # the API server was upgraded, or its gates changed
                delay = _RETRY_DELAYS[min(self._failures, len(_RETRY_DELAYS) - 1)]
                self._failures += 1
                self.metrics.errors.labels(self.driver).inc()
                self.metrics.consecutive_failures.labels(self.driver).set(self._failures)
                self.log.warning(
                    "publishing failed, will retry",
                    error=f"{type(e).__name__}: {e}",
                    retry_in=delay,
                    exc_info=not isinstance(e, (ApiError, ConnectionLost)),
                )
                asyncio.get_running_loop().call_later(delay, self._wake.set)
                continue
            self._failures = 0
            self.metrics.consecutive_failures.labels(self.driver).set(0)
            self.metrics.last_success.labels(self.driver).set(time.time())
            self.metrics.duration.labels(self.driver).observe(time.monotonic() - started)

    async def probe(self) -> None:
        """Ask the API server which slice rules it applies (release and feature gates)."""
        support, why = await probe_slice_support(self.kube, self.driver, self.node_name)
        self._probe = False
        if support != self.support or why:
            self.support = support
            if why:
                self.log.warning("cluster's ResourceSlice rules unknown", support=support.describe(), reason=why)
            else:
                self.log.info("cluster's ResourceSlice rules", support=support.describe())

    async def publish(self) -> None:
        if self._probe:
            await self.probe()
        valid, problems = split_valid(self.inventory.devices, self.inventory.counter_sets)
        valid, counter_sets, unfit = fit_to_cluster(valid, self.inventory.counter_sets, self.support)
        problems = self.inventory.errors + problems + unfit
        self.metrics.invalid.labels(self.driver).set(len(problems))
        if problems != self._reported_errors:
            await self._report(problems)
        if not self._discovered:
            return  # started with an unusable inventory: keep what an earlier run published
        devices = self.health.apply(valid)
        if not self.support.taints:  # no taints in this cluster: an unhealthy device is withdrawn
            devices = [d for d in devices if not d.get("taints")]
        desired = split_into_slices(devices, counter_sets, inline=self.support.counters_inline)
        if self.node is None:  # deleted while this call awaited: the loop's retry waits for it
            raise RuntimeError(f"Node {self.node_name!r} went away while publishing")
        owner = {"name": self.node["metadata"]["name"], "uid": self.node["metadata"]["uid"]}
        # Devices that went or came (MIG reconfigured, a GPU off the bus or back): a new pool
        # generation, even where one slice changes in place.
        published = {d["name"] for s in self.publisher.existing() for d in s["spec"].get("devices") or []}
        hardware_changed = bool(published) and published != {d["name"] for d in devices}
        result = await self.publisher.publish(desired, owner, new_generation=hardware_changed)
        self.metrics.devices.labels(self.driver).set(len(devices))
        self.metrics.set_device_states(self.driver, self.node_name, devices, self.health.tainted_devices())
        self.metrics.slices.labels(self.driver).set(len(desired))
        if result.deleted or result.updated or result.created:
            self.log.info(
                "published",
                devices=len(valid),
                slices=len(desired),
                generation=result.generation,
                deleted=result.deleted,
                updated=result.updated,
                created=result.created,
            )
        if result.deleted or result.updated or result.created or not self._trimmed:
            heap.trim()  # what the burst freed goes back to the system instead of staying in our RSS
            self._trimmed = True

    async def _report(self, problems: list[str]) -> None:
        self._reported_errors = list(problems)
        for problem in problems:
            self.log.error("device not published", problem=problem)
        if problems and self.node:
            await self.events.event(
                self.node,
                WARNING,
                "InvalidDevice",
                f"{len(problems)} inventory problem(s): " + "; ".join(problems)[:900],
            )
