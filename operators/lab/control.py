"""The lab's control socket: other processes ask the lab's owner to restart components, compact
etcd or inject network faults.

Why a socket and not the CLI doing it itself: every component is tied to the process that
started it with PR_SET_PDEATHSIG, so that nothing outlives the lab. A component restarted by a
short-lived ``dra-operators lab restart`` would be that CLI process's child and die with it a
moment later (and would not die with the lab). So the process that owns the lab (the supervisor
of a detached ``lab up``, or a pytest process running a ``Lab``) serves ``control.sock`` in the
run directory, and does the work itself: restarted children are its children, like the first
ones, and timed network faults are undone by its timers even after the CLI has exited.

Protocol: one JSON object per connection, one line each way.
``{"op": "restart", "component": "kube-apiserver", "downtime": 0, "kill": false}`` ->
``{"ok": true, "result": ...}`` or ``{"ok": false, "error": "..."}``.
Ops: ``ping``, ``restart``, ``compact``, ``net`` (``verb``: cut, refuse, black-hole, latency,
heal, status; ``seconds``, ``ms``, ``jitter``).
"""

from __future__ import annotations

import contextlib
import json
import os
import socket
import socketserver
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .cluster import Lab

# sockaddr_un holds 108 bytes; deeper run directories are reached through /proc/self/fd.
_MAX_SOCKET_PATH = 100


class ControlError(RuntimeError):
    pass


@contextlib.contextmanager
def _short_path(path: Path) -> Iterator[str]:
    """``path`` itself, or, when too long for a Unix socket address, the same file through an
    open descriptor of its directory (``/proc/self/fd/N/control.sock``)."""
    if len(str(path)) <= _MAX_SOCKET_PATH:
        yield str(path)
        return
    fd = os.open(path.parent, os.O_RDONLY | os.O_DIRECTORY)
    try:
        yield f"/proc/self/fd/{fd}/{path.name}"
    finally:
        os.close(fd)


def handle(lab: Lab, request: dict[str, Any]) -> Any:
    """Run one request against the lab in this (the owning) process."""
    op = request.get("op")
    if op == "ping":
        return {"pid": os.getpid()}
    if op == "restart":
        return lab.restart(
            request["component"], downtime=float(request.get("downtime") or 0), kill=bool(request.get("kill"))
        )
    if op == "compact":
        return lab.compact(restart_apiserver=request.get("restart_apiserver", True))
    if op == "net":
        net, verb = lab.net, request.get("verb")
        seconds = request.get("seconds")
        seconds = float(seconds) if seconds is not None else None
        if verb == "cut":
            net.cut()
        elif verb == "refuse":
            net.refuse(seconds)
        elif verb == "black-hole":
            net.black_hole(seconds)
        elif verb == "latency":
            net.latency(int(request["ms"]), int(request.get("jitter") or 0), seconds)
        elif verb == "heal":
            net.heal()
        elif verb != "status":
            raise ControlError(f"unknown net verb {verb!r}")
        return {"proxy": net.state(), "pending": net.pending()}
    raise ControlError(f"unknown op {op!r}")


class ControlServer:
    """Serves ``control.sock`` for ``lab`` on daemon threads, one per request (requests that
    change processes are serialized by the lab's own lock)."""

    def __init__(self, lab: Lab, path: Path):
        self.lab = lab
        self.path = path
        self._server: socketserver.ThreadingUnixStreamServer | None = None

    def start(self) -> None:
        lab = self.lab

        class Handler(socketserver.StreamRequestHandler):
            def handle(self) -> None:
                try:
                    request = json.loads(self.rfile.readline() or b"{}")
                    answer = {"ok": True, "result": handle(lab, request)}
                except Exception as e:  # noqa: BLE001 - reported to the caller, not fatal here
                    answer = {"ok": False, "error": f"{type(e).__name__}: {e}"}
                try:
                    self.wfile.write(json.dumps(answer).encode() + b"\n")
                except OSError:
                    pass  # the caller gave up

        self.path.unlink(missing_ok=True)
        with _short_path(self.path) as address:
            server = socketserver.ThreadingUnixStreamServer(address, Handler, bind_and_activate=False)
            server.daemon_threads = True
            server.server_bind()
            os.chmod(address, 0o600)  # only the lab's user may connect (before it listens)
            server.server_activate()
        self._server = server
        threading.Thread(
            target=server.serve_forever, kwargs={"poll_interval": 0.2}, name="lab-control", daemon=True
        ).start()

    def stop(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None
        self.path.unlink(missing_ok=True)


def request(run_dir: Path, body: dict[str, Any], timeout: float = 300.0) -> Any:
    """Send ``body`` to the process that owns the lab in ``run_dir``; return its result."""
    path = Path(run_dir) / "control.sock"
    if not path.exists():
        raise ControlError(
            f"no control socket at {path}: is the lab running (and started by this version of dra-operators)?"
        )
    with _short_path(path) as address, socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
        sock.settimeout(timeout)
        try:
            sock.connect(address)
        except OSError as e:
            raise ControlError(f"the lab's owner does not answer on {path}: {e}") from e
        sock.sendall(json.dumps(body).encode() + b"\n")
        with sock.makefile("rb") as answer_file:
            line = answer_file.readline()
    if not line:
        raise ControlError(f"the lab's owner closed {path} without an answer")
    answer = json.loads(line)
    if not answer.get("ok"):
        raise ControlError(answer.get("error", "failed"))
    return answer.get("result")
