"""One supervisor for every long-running task of an operator process.

asyncio forgets a task that raised: nothing is logged until the task object is collected, and
the work it did simply stops while the process looks healthy. Here every loop (work-queue
workers, leader election, the node agent's loops, gRPC servers, the NVML event thread's reader,
the informers' watchdog) runs under ``Supervisor.spawn``:

- an unexpected exception is logged with the task's name and context and the task is started
  again after a backoff (1 s doubling to 30 s);
- a task that keeps failing (``max_failures`` in a row, each after less than ``healthy_after``
  seconds of running) or that must not be restarted is *dead*: liveness fails, and the process
  exits non-zero so that Kubernetes restarts it (a dead half of an operator must not idle on);
- a task ending by itself counts as a failure too: these loops are meant to run forever.

``problems()`` is what the liveness probe reports.
"""

from __future__ import annotations

import asyncio
import os
import sys
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

from ..logging import get_logger

log = get_logger(__name__)

Factory = Callable[[], Awaitable[Any]]


def exit_process(code: int = 1) -> None:
    """End the process at once: a broken operator must not go on half-working."""
    sys.stderr.flush()
    os._exit(code)


@dataclass
class _Supervised:
    name: str
    factory: Factory
    restart: bool
    context: dict[str, Any]
    task: asyncio.Task | None = None
    failures: int = 0
    dead: str = ""
    started_at: float = 0.0
    history: list[float] = field(default_factory=list)


class Supervisor:
    def __init__(
        self,
        name: str,
        *,
        max_failures: int = 5,
        healthy_after: float = 60.0,
        backoff: tuple[float, ...] = (1, 2, 4, 8, 16, 30),
        on_dead: Callable[[str], None] | None = None,
    ):
        """``on_dead(reason)`` runs when a task dies for good; the default exits the process."""
        self.name = name
        self.max_failures = max_failures
        self.healthy_after = healthy_after
        self.backoff = backoff
        self.on_dead = on_dead if on_dead is not None else (lambda reason: exit_process(1))
        self._tasks: dict[str, _Supervised] = {}
        self._stopping = False
        self._checks: list[Callable[[], str]] = []
        self.log = log.bind(supervisor=name)

    def spawn(self, name: str, factory: Factory, *, restart: bool = True, **context: Any) -> asyncio.Task:
        """Run ``factory()`` as a task named ``name``; restart it when it fails (unless
        ``restart`` is False: then its failure is fatal)."""
        existing = self._tasks.get(name)
        if existing is not None and existing.task and not existing.task.done():
            raise RuntimeError(f"task {name} is already supervised")
        entry = _Supervised(name, factory, restart, context)
        self._tasks[name] = entry
        entry.task = asyncio.get_running_loop().create_task(self._run(entry), name=name)
        return entry.task

    def add_check(self, check: Callable[[], str]) -> None:
        """A liveness check: returns a problem, or "" while all is well."""
        self._checks.append(check)

    def problems(self) -> list[str]:
        found = [f"task {e.name} is dead: {e.dead}" for e in self._tasks.values() if e.dead]
        found += [
            f"task {e.name} is not running"
            for e in self._tasks.values()
            if not e.dead and (e.task is None or e.task.done()) and not self._stopping
        ]
        found += [p for check in self._checks if (p := check())]
        return found

    def running(self) -> list[str]:
        return [e.name for e in self._tasks.values() if e.task is not None and not e.task.done()]

    async def stop(self) -> None:
        self._stopping = True
        tasks = [e.task for e in self._tasks.values() if e.task is not None]
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)

    async def _run(self, entry: _Supervised) -> None:
        while not self._stopping:
            entry.started_at = time.monotonic()
            try:
                await entry.factory()
                error: BaseException | None = None
                reason = "ended although it should run until stopped"
            except asyncio.CancelledError:
                raise
            except Exception as e:  # noqa: BLE001 - the whole point: nothing dies unseen
                error, reason = e, f"{type(e).__name__}: {e}"
            if self._stopping:
                return
            ran = time.monotonic() - entry.started_at
            entry.failures = 1 if ran >= self.healthy_after else entry.failures + 1
            self.log.error(
                "supervised task failed",
                task=entry.name,
                error=reason,
                ran_seconds=round(ran, 1),
                failures=entry.failures,
                exc_info=error,
                **entry.context,
            )
            if not entry.restart or entry.failures >= self.max_failures:
                entry.dead = reason
                self.log.critical(
                    "supervised task cannot run, the process exits", task=entry.name, error=reason, **entry.context
                )
                self.on_dead(f"{entry.name}: {reason}")
                return
            delay = self.backoff[min(entry.failures - 1, len(self.backoff) - 1)]
            self.log.info("restarting supervised task", task=entry.name, retry_in=delay)
            await asyncio.sleep(delay)
