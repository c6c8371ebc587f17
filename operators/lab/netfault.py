"""Network faults between chosen clients and kube-apiserver, through toxiproxy.

Every lab runs toxiproxy-server with one proxy, ``kube-apiserver``, on its own loopback port
forwarding to kube-apiserver. Clients given a kubeconfig whose server is the proxy (``Lab.
kubeconfig_via_proxy``) suffer the faults; everything else (the control plane, the test itself
with the direct kubeconfig) does not. TLS passes through untouched: the proxy is on 127.0.0.1,
which the serving certificate names.

How each fault maps onto toxiproxy (github.com/Shopify/toxiproxy, proxy.go and toxics/):

- ``cut``: disable then enable the proxy. Disabling closes the listener and every open client
  and upstream connection; enabling listens again on the same port, so clients reconnect.
- ``refuse``: the proxy disabled: nothing listens, connecting gets ECONNREFUSED.
- ``black_hole``: a ``timeout`` toxic with timeout 0 on both directions: connections are
  accepted and data is dropped, nothing is ever answered and nothing is closed. Removing the
  toxic (heal) closes the connections that lived through it (the toxic's cleanup closes its
  stub), so after a black hole clients reconnect on fresh connections.
- ``latency``: a ``latency`` toxic on the downstream (server to client) direction: every chunk
  of every answer is held ``ms`` (plus or minus ``jitter``) before it is passed on.
- ``heal``: toxiproxy's ``POST /reset``: every toxic removed, the proxy enabled.

Faults with a duration return at once and undo themselves with a timer in the process that owns
the lab (the pytest process, or the supervisor of a detached ``lab up``, which the CLI asks
through the control socket): a CLI that exits, or a test that fails, cannot leave the fault
behind for longer than asked, and when the owner dies toxiproxy dies with it. A new fault of
the same kind replaces the previous one and its timer; ``heal`` cancels every timer.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import ssl
import threading
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

PROXY_NAME = "kube-apiserver"
BLACK_HOLE = ("black-hole-upstream", "black-hole-downstream")
LATENCY = "latency"


class NetFaultError(RuntimeError):
    pass


# -- pure builders (unit-tested) -------------------------------------------------------------


def proxy_config(listen_port: int, upstream_port: int, name: str = PROXY_NAME) -> list[dict[str, Any]]:
    """toxiproxy-server's ``-config`` file: the proxies it creates at start (and again after a
    restart of toxiproxy itself)."""
    return [
        {"name": name, "listen": f"127.0.0.1:{listen_port}", "upstream": f"127.0.0.1:{upstream_port}", "enabled": True}
    ]


def node_api_proxy(node: str, node_ip: str, upstream_port: int) -> dict[str, Any]:
    """kube-apiserver at a real node's address (its bridge's gateway), for the node's Pods: with no
    kube-proxy, in-cluster clients are pointed here (``KUBERNETES_SERVICE_HOST`` = the node's
    address, as the lab's deploy overlay sets it). Not faulted by ``lab net``."""
    return {
        "name": f"kube-apiserver-{node}",
        "listen": f"{node_ip}:{upstream_port}",
        "upstream": f"127.0.0.1:{upstream_port}",
        "enabled": True,
    }


def black_hole_toxics() -> list[dict[str, Any]]:
    """Data in both directions dropped; timeout 0: the connection is never closed by the toxic."""
    return [
        {"name": name, "type": "timeout", "stream": stream, "toxicity": 1.0, "attributes": {"timeout": 0}}
        for name, stream in zip(BLACK_HOLE, ("upstream", "downstream"), strict=True)
    ]


def latency_toxic(ms: int, jitter: int = 0) -> dict[str, Any]:
    if ms < 0 or jitter < 0 or jitter > ms:
        raise ValueError(f"latency {ms} ms with jitter {jitter} ms: both >= 0 and jitter <= latency")
    return {
        "name": LATENCY,
        "type": "latency",
        "stream": "downstream",
        "toxicity": 1.0,
        "attributes": {"latency": int(ms), "jitter": int(jitter)},
    }


def describe(proxy: dict[str, Any]) -> str:
    """One line for ``lab status`` / ``lab net status``: listen address, state, toxics."""
    toxics = proxy.get("toxics") or []
    faults = []
    for toxic in toxics:
        attrs = toxic.get("attributes", {})
        if toxic.get("type") == "latency":
            faults.append(f"latency {attrs.get('latency')}ms±{attrs.get('jitter', 0)}ms")
        elif toxic.get("type") == "timeout":
            faults.append(f"black hole ({toxic.get('stream')})")
        else:
            faults.append(f"{toxic.get('type')} {toxic.get('stream')}")
    state = "enabled" if proxy.get("enabled") else "DISABLED (refusing connections)"
    return f"{proxy.get('listen')} -> {proxy.get('upstream')} {state}" + (
        f", {', '.join(faults)}" if faults else ", no fault"
    )


# -- the proxy ---------------------------------------------------------------------------------


class NetProxy:
    """The lab's toxiproxy proxy in front of kube-apiserver. Methods return at once; with
    ``seconds`` the fault undoes itself after that long (timer in this process)."""

    def __init__(self, api_port: int, listen_port: int, name: str = PROXY_NAME):
        self.api = f"http://127.0.0.1:{api_port}"
        self.name = name
        self.listen_port = listen_port
        self._timers: dict[str, threading.Timer] = {}
        self._lock = threading.Lock()

    @property
    def server(self) -> str:
        """The API server's URL through the proxy."""
        return f"https://127.0.0.1:{self.listen_port}"

    # faults

    def cut(self) -> None:
        """Close every open connection through the proxy; new ones work at once."""
        self._cancel("refuse")
        self._set_enabled(False)
        self._set_enabled(True)

    def refuse(self, seconds: float | None = None) -> None:
        """Refuse new connections (and close open ones) for ``seconds``, or until ``heal``."""
        self._cancel("refuse")
        self._set_enabled(False)
        self._schedule("refuse", seconds, lambda: self._set_enabled(True))

    def black_hole(self, seconds: float | None = None) -> None:
        """Accept connections but forward nothing either way, for ``seconds`` or until ``heal``."""
        self._cancel("black-hole")
        self._remove_toxics(BLACK_HOLE)
        for toxic in black_hole_toxics():
            self._call("POST", f"/proxies/{self.name}/toxics", toxic)
        self._schedule("black-hole", seconds, lambda: self._remove_toxics(BLACK_HOLE))

    def latency(self, ms: int, jitter: int = 0, seconds: float | None = None) -> None:
        """Hold every answer ``ms`` ± ``jitter`` milliseconds, for ``seconds`` or until ``heal``."""
        toxic = latency_toxic(ms, jitter)
        self._cancel("latency")
        self._remove_toxics((LATENCY,))
        self._call("POST", f"/proxies/{self.name}/toxics", toxic)
        self._schedule("latency", seconds, lambda: self._remove_toxics((LATENCY,)))

    def heal(self) -> None:
        """Every fault undone: toxics removed, the proxy enabled, pending timers cancelled."""
        with self._lock:
            timers, self._timers = list(self._timers.values()), {}
        for timer in timers:
            timer.cancel()
        self._call("POST", "/reset", None)

    # context managers for tests: the fault lasts for the block, healed even if it raises

    @contextlib.contextmanager
    def refusing(self) -> Iterator[None]:
        self.refuse()
        try:
            yield
        finally:
            self.heal()

    @contextlib.contextmanager
    def black_holed(self) -> Iterator[None]:
        self.black_hole()
        try:
            yield
        finally:
            self.heal()

    @contextlib.contextmanager
    def slowed(self, ms: int, jitter: int = 0) -> Iterator[None]:
        self.latency(ms, jitter)
        try:
            yield
        finally:
            self.heal()

    # state

    def state(self) -> dict[str, Any]:
        """toxiproxy's view: ``{"name", "listen", "upstream", "enabled", "toxics": [...]}``."""
        return self._call("GET", f"/proxies/{self.name}", None)

    def pending(self) -> list[str]:
        """Faults that will undo themselves (names of running timers)."""
        with self._lock:
            return sorted(name for name, timer in self._timers.items() if timer.is_alive())

    def close(self) -> None:
        """Cancel the timers (the lab is stopping; toxiproxy goes with it)."""
        with self._lock:
            timers, self._timers = list(self._timers.values()), {}
        for timer in timers:
            timer.cancel()

    # internals

    def _set_enabled(self, enabled: bool) -> None:
        self._call("POST", f"/proxies/{self.name}", {"enabled": enabled})

    def _remove_toxics(self, names: tuple[str, ...]) -> None:
        for name in names:
            try:
                self._call("DELETE", f"/proxies/{self.name}/toxics/{name}", None)
            except NetFaultError as e:
                if "404" not in str(e):
                    raise

    def _cancel(self, kind: str) -> None:
        with self._lock:
            timer = self._timers.pop(kind, None)
        if timer:
            timer.cancel()

    def _schedule(self, kind: str, seconds: float | None, undo) -> None:
        if seconds is None:
            return
        if seconds <= 0:
            raise ValueError("seconds must be positive (or None: until heal)")

        def fire() -> None:
            with self._lock:
                if self._timers.get(kind) is not timer:  # replaced or healed meanwhile
                    return
                del self._timers[kind]
            try:
                undo()
            except (NetFaultError, OSError):
                pass  # toxiproxy already gone: the lab stopped

        timer = threading.Timer(seconds, fire)
        timer.daemon = True
        timer.name = f"lab-net-{kind}"
        with self._lock:
            self._timers[kind] = timer
        timer.start()

    def _call(self, method: str, path: str, body: Any) -> Any:
        data = json.dumps(body).encode() if body is not None else None
        request = urllib.request.Request(
            self.api + path, data=data, method=method, headers={"Content-Type": "application/json"}
        )
        try:
            with urllib.request.urlopen(request, timeout=10) as response:
                raw = response.read()
        except urllib.error.HTTPError as e:
            raise NetFaultError(
                f"toxiproxy {method} {path}: {e.code} {e.read().decode(errors='replace').strip()}"
            ) from e
        except urllib.error.URLError as e:
            raise NetFaultError(f"toxiproxy {method} {path}: {e.reason}") from e
        return json.loads(raw) if raw.strip() else None


# -- an HTTP proxy that can answer 503 -----------------------------------------------------------

HOP_BY_HOP = frozenset(
    {
        "connection",
        "keep-alive",
        "proxy-connection",
        "transfer-encoding",
        "upgrade",
        "te",
        "trailer",
        "host",
        "content-length",
    }
)


def unavailable_status(message: str) -> dict[str, Any]:
    """The body of a 503: a Kubernetes Status, as kube-apiserver's own 503s carry."""
    return {
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Failure",
        "message": message,
        "reason": "ServiceUnavailable",
        "code": 503,
    }


class HttpFaultProxy:
    """An HTTPS reverse proxy in front of kube-apiserver (a load balancer, an API gateway) that
    can answer every request with 503 for a while, as such a proxy does when its backend is away:
    toxiproxy works below HTTP and cannot. TLS ends here (the lab's serving certificate, which
    names 127.0.0.1); the proxy reaches kube-apiserver with ``client_cert`` (so every client of it
    acts as that identity) and passes the rest of each request and its streamed answer (watches)
    through. Runs its own event loop in a thread, like toxiproxy a process of its own.

    ``fail(seconds)``: from now on every request is answered 503 and every open answer (watches)
    is cut, for ``seconds`` or until ``heal()``. ``hold_answers`` and ``refuse`` do the same for
    some requests only (a slow answer to one write; one kind of request failing)."""

    def __init__(
        self, upstream: str, ca_file: Path, serving: tuple[Path, Path], client_cert: tuple[Path, Path], port: int = 0
    ):
        self.upstream = upstream.rstrip("/")
        self._ca_file, self._serving, self._client_cert, self._port = ca_file, serving, client_cert, port
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, name="lab-http-fault-proxy", daemon=True)
        self._failing = False
        self._open: set[Any] = set()  # transports of answers being streamed
        self._timer: threading.Timer | None = None
        self._lock = threading.Lock()
        self.requests = self.refused = self.held = 0
        self._hold: tuple[Callable[[str, str], bool], float] | None = None
        self._refuse: Callable[[str, str], bool] | None = None
        self._handlers: set[asyncio.Task] = set()

    @property
    def server(self) -> str:
        return f"https://127.0.0.1:{self._port}"

    def kubeconfig(self, source: Path, destination: Path) -> Path:
        """A copy of ``source`` (any lab kubeconfig) whose server is this proxy."""
        import yaml

        from .components import with_server

        destination.write_text(yaml.safe_dump(with_server(yaml.safe_load(source.read_text()), self.server)))
        return destination

    def start(self) -> HttpFaultProxy:
        self._thread.start()
        asyncio.run_coroutine_threadsafe(self._start(), self._loop).result(30)
        return self

    def stop(self) -> None:
        self._cancel_timer()
        if self._thread.is_alive():
            asyncio.run_coroutine_threadsafe(self._stop(), self._loop).result(30)
            self._loop.call_soon_threadsafe(self._loop.stop)
            self._thread.join(10)

    def fail(self, seconds: float | None = None) -> None:
        """Answer 503 from now on (open answers cut), for ``seconds`` or until ``heal``."""
        if seconds is not None and seconds <= 0:
            raise ValueError("seconds must be positive (or None: until heal)")
        self._cancel_timer()
        self._failing = True
        self._loop.call_soon_threadsafe(self._cut_open)
        if seconds is not None:
            with self._lock:
                self._timer = threading.Timer(seconds, self.heal)
                self._timer.daemon = True
                self._timer.start()

    def heal(self) -> None:
        self._failing = False
        self._hold = self._refuse = None

    def hold_answers(self, match: Callable[[str, str], bool], seconds: float) -> None:
        """Requests ``match(method, path)`` accepts reach kube-apiserver at once; their answers are
        written ``seconds`` later (``held`` counts them). Until ``heal``."""
        self._hold = (match, seconds)

    def refuse(self, match: Callable[[str, str], bool]) -> None:
        """Answer 503 to the requests ``match(method, path)`` accepts, until ``heal``."""
        self._refuse = match

    @property
    def failing(self) -> bool:
        return self._failing

    def _cancel_timer(self) -> None:
        with self._lock:
            timer, self._timer = self._timer, None
        if timer is not None:
            timer.cancel()

    def _cut_open(self) -> None:
        for transport in list(self._open):
            transport.close()
        self._open.clear()

    async def _start(self) -> None:
        import aiohttp
        from aiohttp import web

        upstream_tls = ssl.create_default_context(cafile=str(self._ca_file))
        upstream_tls.load_cert_chain(*map(str, self._client_cert))
        self._session = aiohttp.ClientSession(
            connector=aiohttp.TCPConnector(ssl=upstream_tls, limit=0),
            auto_decompress=False,
            timeout=aiohttp.ClientTimeout(total=None),
        )
        serving_tls = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        serving_tls.load_cert_chain(*map(str, self._serving))
        app = web.Application(client_max_size=64 * 1024 * 1024)
        app.router.add_route("*", "/{tail:.*}", self._handle)
        self._runner = web.AppRunner(app, access_log=None, handle_signals=False)
        await self._runner.setup()
        if not self._port:
            from .cluster import free_ports

            [self._port] = free_ports(1)
        await web.TCPSite(self._runner, "127.0.0.1", self._port, ssl_context=serving_tls).start()

    async def _stop(self) -> None:
        self._cut_open()
        # An answer streamed to a client that is gone (a killed operator's watch) waits for the
        # next chunk from kube-apiserver, a bookmark a minute away: the runner's cleanup would wait
        # for it.
        for handler in list(self._handlers):
            handler.cancel()
        await self._session.close()  # ends the handlers still streaming (watches) first
        await self._runner.cleanup()

    async def _handle(self, request: Any) -> Any:
        from aiohttp import web

        self.requests += 1
        refuse = self._refuse
        if self._failing or (refuse is not None and refuse(request.method, request.path)):
            self.refused += 1
            return web.json_response(
                unavailable_status("the lab's HTTP proxy answers 503 (HttpFaultProxy.fail)"), status=503
            )
        headers = {k: v for k, v in request.headers.items() if k.lower() not in HOP_BY_HOP}
        body = await request.read()
        try:
            upstream = await self._session.request(
                request.method,
                self.upstream + request.path_qs,
                headers=headers,
                data=body or None,
                allow_redirects=False,
            )
        except Exception as e:  # noqa: BLE001 - the backend is away: a proxy says 503
            return web.json_response(
                unavailable_status(f"the lab's HTTP proxy cannot reach kube-apiserver: {e}"), status=503
            )
        hold = self._hold
        if hold is not None and hold[0](request.method, request.path):
            self.held += 1
            await asyncio.sleep(hold[1])
        answer = web.StreamResponse(
            status=upstream.status, headers={k: v for k, v in upstream.headers.items() if k.lower() not in HOP_BY_HOP}
        )
        transport = request.transport
        self._open.add(transport)
        handler = asyncio.current_task()
        if handler is not None:
            self._handlers.add(handler)
            handler.add_done_callback(self._handlers.discard)
        try:
            await answer.prepare(request)
            async for chunk in upstream.content.iter_any():
                if self._failing:
                    break
                await answer.write(chunk)
            if not self._failing:
                await answer.write_eof()
        except Exception:  # noqa: BLE001, S110 - either side went away: the answer ends there
            pass
        finally:
            self._open.discard(transport)
            upstream.release()
        return answer
