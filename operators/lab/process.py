"""Child processes that cannot outlive the process that started them."""

from __future__ import annotations

import ctypes
import os
import queue
import signal
import subprocess
import threading
import time
from collections.abc import Callable
from concurrent.futures import Future
from pathlib import Path

_PR_SET_PDEATHSIG = 1

# Looked up once in the parent: the child only calls the function between fork and exec (no
# dlopen there, whose loader lock another thread may have held at fork time).
_prctl: Callable[..., int] | None
try:
    _prctl = ctypes.CDLL("libc.so.6", use_errno=True).prctl
except OSError:  # not glibc Linux: children are not tied to the parent
    _prctl = None


def _die_with(parent: int):
    def tie() -> None:  # runs in the child between fork and exec
        if _prctl is not None:
            _prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)
        # The parent may have died before prctl took effect: then no signal would ever come.
        if os.getppid() != parent:
            os._exit(1)

    return tie


class _Spawner:
    """The one thread that forks every tied child of this process.

    PR_SET_PDEATHSIG fires when the *thread* that forked the child ends, not when the process
    does (prctl(2)). A child started from a short-lived thread (a ``threading.Timer``, a
    request thread of the lab's control socket, ``asyncio.to_thread``) would be killed as soon
    as that thread returns. Forking from a daemon thread that lives as long as the process
    ties children to the process itself.
    """

    def __init__(self) -> None:
        self._requests: queue.SimpleQueue = queue.SimpleQueue()
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()

    def run(self, fn, *args, **kwargs):
        with self._lock:
            if self._thread is None or not self._thread.is_alive():
                self._thread = threading.Thread(target=self._loop, name="lab-spawner", daemon=True)
                self._thread.start()
        if threading.current_thread() is self._thread:
            return fn(*args, **kwargs)
        future: Future = Future()
        self._requests.put((future, fn, args, kwargs))
        return future.result()

    def _loop(self) -> None:
        while True:
            future, fn, args, kwargs = self._requests.get()
            try:
                future.set_result(fn(*args, **kwargs))
            except BaseException as e:  # noqa: BLE001 - handed to the caller
                future.set_exception(e)


_spawner = _Spawner()


def spawn(
    args: list[str], log_file: Path, env: dict[str, str] | None = None, tie_to_parent: bool = True
) -> subprocess.Popen:
    """Start ``args`` with output appended to ``log_file``, in its own process group.

    With ``tie_to_parent`` the kernel kills the child when this process dies, even by SIGKILL,
    so a crashed test run or supervisor leaves no process behind (whichever thread calls this).
    """
    log_file.parent.mkdir(parents=True, exist_ok=True)

    def start() -> subprocess.Popen:
        with open(log_file, "ab") as log:
            return subprocess.Popen(
                args,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                env=env,
                start_new_session=True,
                preexec_fn=_die_with(os.getpid()) if tie_to_parent else None,
            )

    return _spawner.run(start) if tie_to_parent else start()


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    # A zombie still answers kill(0); read its state.
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
        return state != "Z"
    except (OSError, IndexError):
        return True


def parent_pid(pid: int) -> int | None:
    try:
        return int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[1])
    except (OSError, IndexError, ValueError):
        return None


def terminate(pid: int, timeout: float = 10.0, kill: bool = False) -> None:
    """SIGTERM the process group, then SIGKILL it after ``timeout``; ``kill``: SIGKILL at once
    (a crash: no shutdown handler runs)."""
    for sig in (signal.SIGKILL,) if kill else (signal.SIGTERM, signal.SIGKILL):
        try:
            os.killpg(pid, sig)
        except ProcessLookupError:
            return
        except PermissionError:
            os.kill(pid, sig)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            try:
                os.waitpid(pid, os.WNOHANG)
            except ChildProcessError:
                pass
            if not alive(pid):
                return
            time.sleep(0.05)
