"""Preparers: the simulated one, the http one against a real HTTP server on 127.0.0.1, and
loading by name, including a third-party preparer through its entry point."""

from __future__ import annotations

import asyncio
import datetime
import importlib
import json
import socket
import textwrap
import time

import pytest
from aiohttp import web

from operators.binding import preparers
from operators.binding.preparers import ConfigError, Outcome, Preparation, Preparer
from operators.binding.preparers.http import HttpPreparer
from operators.binding.preparers.simulated import SimulatedPreparer


def prep(device="gpu-0", pool="node-a", started_ago=0.0, uid="uid-1", node="node-a") -> Preparation:
    now = datetime.datetime.now(datetime.UTC)
    return Preparation(
        driver="gpu.example.com",
        pool=pool,
        device=device,
        share_id=None,
        node=node,
        claim_namespace="ns",
        claim_name="claim",
        claim_uid=uid,
        request="gpu",
        binding_conditions=("gpu.example.com/attached",),
        binding_failure_conditions=("gpu.example.com/failed",),
        started=now - datetime.timedelta(seconds=started_ago),
        deadline=now + datetime.timedelta(seconds=600),
    )


# -- a real attach service ---------------------------------------------------------------------


class AttachServer:
    """An attach service on 127.0.0.1 whose answers are scripted per device.

    Behaviours: ``"ready"``, ``"failed"``, ``"reject"`` (400), ``("slow", s)`` (ready after s
    seconds), ``("error", n)`` (500 n times, then ready), ``("pending", n)`` (pending n times,
    then ready). Every request is recorded in ``calls`` as (path, body)."""

    def __init__(self, behaviours: dict | None = None, default="ready"):
        self.behaviours = dict(behaviours or {})
        self.default = default
        self.calls: list[tuple[str, dict]] = []
        self._counts: dict[tuple[str, str], int] = {}
        self._runner: web.AppRunner | None = None
        self.url = ""

    def prepares(self, device: str | None = None) -> list[dict]:
        return [b for p, b in self.calls if p == "prepare" and (device is None or b["device"] == device)]

    def undos(self, device: str | None = None) -> list[dict]:
        return [b for p, b in self.calls if p == "undo" and (device is None or b["device"] == device)]

    async def _handle(self, request: web.Request) -> web.Response:
        path = request.match_info["op"]
        body = await request.json()
        self.calls.append((path, body))
        if path == "undo":
            return web.json_response({"status": "done"})
        behaviour = self.behaviours.get(body["device"], self.default)
        kind, arg = (behaviour, 0) if isinstance(behaviour, str) else behaviour
        count = self._counts[(kind, body["device"])] = self._counts.get((kind, body["device"]), 0) + 1
        if kind == "slow":
            await asyncio.sleep(arg)
        elif kind == "failed":
            return web.json_response(
                {"status": "failed", "reason": "FabricPortDown", "message": f"port of {body['device']} is down"}
            )
        elif kind == "reject":
            return web.json_response({"error": "unknown device"}, status=400)
        elif kind == "error" and count <= arg:
            return web.Response(status=500, text="attach backend busy")
        elif kind == "pending" and count <= arg:
            return web.json_response({"status": "pending"}, headers={"Retry-After": "0.05"})
        return web.json_response(
            {"status": "ready", "message": f"{body['device']} attached to {body['node']}", "data": {"fabricPort": 7}}
        )

    async def start(self) -> str:
        app = web.Application()
        app.router.add_post("/v1/{op}", self._handle)
        self._runner = web.AppRunner(app)
        await self._runner.setup()
        site = web.TCPSite(self._runner, "127.0.0.1", 0)
        await site.start()
        port = site._server.sockets[0].getsockname()[1]
        self.url = f"http://127.0.0.1:{port}/v1"
        return self.url

    async def stop(self) -> None:
        if self._runner is not None:
            runner, self._runner = self._runner, None
            await runner.cleanup()

    async def __aenter__(self) -> AttachServer:
        await self.start()
        return self

    async def __aexit__(self, *exc) -> None:
        await self.stop()


def closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


# -- http --------------------------------------------------------------------------------------


async def test_http_ready_sends_the_preparation_and_returns_data():
    async with AttachServer() as server:
        preparer = HttpPreparer({"url": server.url})
        try:
            outcome = await preparer.prepare(prep())
        finally:
            await preparer.close()
    assert outcome == Outcome(True, "DevicePrepared", "gpu-0 attached to node-a", {"fabricPort": 7})
    [body] = server.prepares()
    assert body["claim"] == {"namespace": "ns", "name": "claim", "uid": "uid-1"}
    assert (body["driver"], body["pool"], body["device"], body["node"]) == (
        "gpu.example.com",
        "node-a",
        "gpu-0",
        "node-a",
    )
    assert body["bindingConditions"] == ["gpu.example.com/attached"] and body["deadline"].endswith("Z")


async def test_http_failed_answer_is_a_failure_with_the_services_reason():
    async with AttachServer({"gpu-0": "failed"}) as server:
        preparer = HttpPreparer({"url": server.url, "retries": 3})
        outcome = await preparer.prepare(prep())
        await preparer.close()
    assert outcome == Outcome(False, "FabricPortDown", "port of gpu-0 is down")
    assert len(server.prepares()) == 1  # an answer, not an error: no retry


async def test_http_slow_answer_within_the_timeout_is_waited_for():
    async with AttachServer({"gpu-0": ("slow", 0.5)}) as server:
        preparer = HttpPreparer({"url": server.url, "timeout": 5})
        outcome = await preparer.prepare(prep())
        await preparer.close()
    assert outcome.ready and len(server.prepares()) == 1


async def test_http_too_slow_answers_are_retried_then_fail():
    async with AttachServer({"gpu-0": ("slow", 2)}) as server:
        preparer = HttpPreparer({"url": server.url, "timeout": 0.3, "retries": 2, "backoff": 0.01})
        outcome = await preparer.prepare(prep())
        await preparer.close()
    assert not outcome.ready and outcome.reason == "AttachServiceTimeout"
    assert "after 3 attempts" in outcome.message
    assert len(server.prepares()) == 3


async def test_http_server_errors_are_retried():
    async with AttachServer({"gpu-0": ("error", 2), "gpu-1": ("error", 99)}) as server:
        preparer = HttpPreparer({"url": server.url, "retries": 2, "backoff": 0.01})
        recovered = await preparer.prepare(prep("gpu-0"))
        broken = await preparer.prepare(prep("gpu-1"))
        await preparer.close()
    assert recovered.ready and len(server.prepares("gpu-0")) == 3
    assert broken.reason == "AttachServiceError" and "500" in broken.message and len(server.prepares("gpu-1")) == 3


async def test_http_service_down_fails_after_retries():
    preparer = HttpPreparer({"url": f"http://127.0.0.1:{closed_port()}/v1", "retries": 1, "backoff": 0.01})
    outcome = await preparer.prepare(prep())
    await preparer.close()
    assert not outcome.ready and outcome.reason == "AttachServiceUnavailable"
    assert "after 2 attempts" in outcome.message


async def test_http_pending_is_asked_again_without_counting_as_a_failure():
    async with AttachServer({"gpu-0": ("pending", 3)}) as server:
        preparer = HttpPreparer({"url": server.url, "retries": 0})
        outcome = await preparer.prepare(prep())
        await preparer.close()
    assert outcome.ready and len(server.prepares()) == 4


async def test_http_client_error_is_permanent():
    async with AttachServer({"gpu-0": "reject"}) as server:
        preparer = HttpPreparer({"url": server.url, "retries": 3})
        outcome = await preparer.prepare(prep())
        await preparer.close()
    assert outcome.reason == "AttachServiceRejected" and "400" in outcome.message and len(server.prepares()) == 1


async def test_http_undo():
    async with AttachServer() as server:
        preparer = HttpPreparer({"url": server.url})
        await preparer.undo(prep())
        await preparer.close()
    assert [b["device"] for b in server.undos()] == ["gpu-0"]
    down = HttpPreparer({"url": f"http://127.0.0.1:{closed_port()}/v1"})
    with pytest.raises(RuntimeError, match="undo"):
        await down.undo(prep())
    await down.close()


@pytest.mark.parametrize(
    "config",
    [
        {},
        {"url": "ftp://x"},
        {"url": "http://x", "timeout": 0},
        {"url": "http://x", "retries": -1},
        {"url": "http://x", "colour": "red"},
        {"url": "http://x", "timeout": "soon"},
    ],
)
def test_http_config_errors(config):
    with pytest.raises(ConfigError):
        HttpPreparer(config)


# -- simulated ---------------------------------------------------------------------------------


async def test_simulated_delays_fails_and_resumes():
    sim = SimulatedPreparer({"delay": 0.2, "delays": {"node-b/*": 0.0}, "fail": ["gpu-3"], "reason": "Broken"})
    started = time.monotonic()
    assert (await sim.prepare(prep("gpu-0"))).ready
    assert time.monotonic() - started >= 0.19
    # Done at once, counted in loop steps rather than time (a loaded machine can take 0.2 s
    # anyway): a pool whose delay is 0, and a preparation started before a restart, longer ago
    # than the delay.
    for at_once in (prep("gpu-0", pool="node-b"), prep("gpu-0", started_ago=5)):
        task = asyncio.ensure_future(sim.prepare(at_once))
        for _ in range(3):
            await asyncio.sleep(0)
        assert task.done() and task.result().ready
    failed = await sim.prepare(prep("gpu-3", started_ago=5))
    assert not failed.ready and failed.reason == "Broken" and "gpu-3" in failed.message


async def test_simulated_failure_probability_is_a_stable_fraction():
    sim = SimulatedPreparer({"delay": 0, "failProbability": 0.25, "seed": "s"})
    outcomes = [not (await sim.prepare(prep(f"gpu-{i}", started_ago=1))).ready for i in range(2000)]
    assert 0.20 < sum(outcomes) / len(outcomes) < 0.30
    again = [not (await sim.prepare(prep(f"gpu-{i}", started_ago=1))).ready for i in range(2000)]
    assert again == outcomes  # asked again after a restart: the same answer
    other_seed = SimulatedPreparer({"delay": 0, "failProbability": 0.25, "seed": "t"})
    assert [not (await other_seed.prepare(prep(f"gpu-{i}", started_ago=1))).ready for i in range(2000)] != outcomes


@pytest.mark.parametrize(
    "config",
    [{"delay": -1}, {"delay": "1"}, {"failProbability": 2}, {"fail": "gpu-0"}, {"delays": ["gpu-0"]}, {"speed": 1}],
)
def test_simulated_config_errors(config):
    with pytest.raises(ConfigError):
        SimulatedPreparer(config)


# -- loading -----------------------------------------------------------------------------------


def test_load_builtin_and_unknown():
    assert isinstance(preparers.load("simulated", {"delay": 0}), SimulatedPreparer)
    assert isinstance(preparers.load("http", {"url": "http://127.0.0.1:1"}), HttpPreparer)
    with pytest.raises(ConfigError, match="unknown preparer 'nope'.*http.*simulated"):
        preparers.load("nope", {})


def test_parse_config(tmp_path):
    assert preparers.parse_config("") == {}
    assert preparers.parse_config(' {"delay": 2} ') == {"delay": 2}
    (tmp_path / "c.yaml").write_text("delay: 3\nfail: [gpu-1]\n")
    assert preparers.parse_config(f"@{tmp_path / 'c.yaml'}") == {"delay": 3, "fail": ["gpu-1"]}
    (tmp_path / "c.json").write_text(json.dumps({"url": "http://x"}))
    assert preparers.parse_config(f"@{tmp_path / 'c.json'}") == {"url": "http://x"}
    for bad in ("{nope", "[1, 2]", f"@{tmp_path / 'missing.yaml'}"):
        with pytest.raises(ConfigError):
            preparers.parse_config(bad)


def test_third_party_preparer_through_its_entry_point(tmp_path, monkeypatch):
    """A package installed next to ours (a dist-info on sys.path) adds the preparer ``acme``."""
    (tmp_path / "acme_preparer.py").write_text(
        textwrap.dedent("""
        from operators.binding.preparers import Outcome, Preparer

        class AcmePreparer(Preparer):
            name = "acme"
            def __init__(self, config):
                self.port = config["port"]
            async def prepare(self, p):
                return Outcome.prepared(f"programmed {p.device} on port {self.port}")
            async def undo(self, p):
                pass

        def not_a_preparer(config):
            return object()
    """)
    )
    dist = tmp_path / "acme_preparer-1.0.dist-info"
    dist.mkdir()
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: acme-preparer\nVersion: 1.0\n")
    (dist / "entry_points.txt").write_text(
        f"[{preparers.ENTRY_POINT_GROUP}]\nacme = acme_preparer:AcmePreparer\nbroken = acme_preparer:not_a_preparer\n"
        "missing = acme_preparer_gone:Nothing\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    importlib.invalidate_caches()
    assert {"acme", "broken", "http", "simulated"} <= set(preparers.available())
    acme = preparers.load("acme", {"port": 3})
    assert isinstance(acme, Preparer) and type(acme).__module__ == "acme_preparer"
    assert asyncio.run(acme.prepare(prep())) == Outcome.prepared("programmed gpu-0 on port 3")
    with pytest.raises(ConfigError, match="not a Preparer"):
        preparers.load("broken", {})
    with pytest.raises(ConfigError, match="cannot be loaded"):
        preparers.load("missing", {})


# -- hostile input: credentials, oversized and malformed answers -------------------------------

PASSWORD, HEADER_TOKEN, QUERY_TOKEN = "pw-s3cret", "hdr-t0ken", "q-t0ken"


class EchoServer:
    """An attach service that quotes the request's headers back in every answer (as a debugging
    proxy might), with the status and answer form given per path."""

    def __init__(self, answers: dict[str, tuple[int, str]]):
        self.answers = answers

    async def _handle(self, request: web.Request) -> web.StreamResponse:
        status, form = self.answers[request.match_info["op"]]
        echo = json.dumps(dict(request.headers))
        if form == "failed":
            return web.json_response({"status": "failed", "reason": "Denied", "message": f"headers {echo}"})
        if form == "ready":
            return web.json_response({"status": "ready", "message": f"ok {echo}"})
        if form == "huge":  # chunked: no Content-Length to refuse it by
            response = web.StreamResponse(status=status)
            await response.prepare(request)
            for _ in range(3 * 1024):
                await response.write(b"x" * 1024)
            return response
        if form == "huge-length":
            return web.Response(status=status, body=b"{" + b" " * (2 << 20) + b"}")
        if form == "big-data":
            return web.json_response({"status": "ready", "data": {"blob": "y" * (11 * 1024)}})
        return web.Response(status=status, text=f"error, you sent {echo}")

    async def __aenter__(self) -> str:
        app = web.Application()
        app.router.add_post("/v1/{op}", self._handle)
        self._runner = web.AppRunner(app)
        await self._runner.setup()
        site = web.TCPSite(self._runner, "127.0.0.1", 0)
        await site.start()
        return f"127.0.0.1:{site._server.sockets[0].getsockname()[1]}"

    async def __aexit__(self, *exc) -> None:
        await self._runner.cleanup()


def assert_no_secret(text: str) -> None:
    for secret in (PASSWORD, HEADER_TOKEN, QUERY_TOKEN, "YXR0YWNoOnB3LXMzY3JldA=="):  # the last: Basic attach:pw-s3cret
        assert secret not in text, text


@pytest.mark.parametrize("form,status", [("failed", 200), ("ready", 200), ("text", 400), ("text", 503)])
async def test_http_credentials_never_reach_an_outcome(form, status):
    """Conditions and Events quote the outcome's message: no password, query token or header value
    in it, even when the service quotes the request back; the URL is shown with ``***``."""
    async with EchoServer({"prepare": (status, form), "undo": (status, form)}) as host:
        with_user = HttpPreparer({"url": f"http://attach:{PASSWORD}@{host}/v1", "retries": 0})
        with_header = HttpPreparer(
            {"url": f"http://{host}/v1", "retries": 0, "headers": {"Authorization": f"Bearer {HEADER_TOKEN}"}}
        )
        try:
            for preparer in (with_user, with_header):
                outcome = await preparer.prepare(prep())
                assert_no_secret(outcome.message + outcome.reason)
                if form == "text":
                    with pytest.raises(RuntimeError) as undo:
                        await preparer.undo(prep())
                    assert_no_secret(str(undo.value))
            if form == "text":
                assert f"http://***@{host}/v1/prepare answered {status}" in (await with_user.prepare(prep())).message
        finally:
            await with_user.close()
            await with_header.close()


async def test_http_unreachable_service_message_has_no_credentials():
    port = closed_port()
    preparer = HttpPreparer({"url": f"http://attach:{PASSWORD}@127.0.0.1:{port}/v1", "retries": 0})
    outcome = await preparer.prepare(prep())
    await preparer.close()
    assert outcome.reason == "AttachServiceUnavailable" and f"http://***@127.0.0.1:{port}/v1/prepare" in outcome.message
    assert_no_secret(outcome.message)


@pytest.mark.parametrize(
    "config",
    [
        {"url": f"ftp://attach:{PASSWORD}@x"},
        {"url": f"http://attach:{PASSWORD}@x:99999/v1"},
        {"url": f"http://attach:{PASSWORD}@[::1/v1"},
        {"url": f"http://attach:{PASSWORD}@/v1"},
        {"url": f"http://x/v1?token={QUERY_TOKEN}"},
        {"url": f"http://attach:{PASSWORD}@x", "headers": {"Authorization": f"Bearer {HEADER_TOKEN}"}},
        {"url": "http://x", "headers": {"X-Key": f"{HEADER_TOKEN}\r\nX-Injected: 1"}},
    ],
)
def test_http_config_errors_name_the_url_without_credentials(config):
    with pytest.raises(ConfigError) as error:
        HttpPreparer(config)
    assert_no_secret(str(error.value))


def test_parse_config_errors_do_not_quote_the_configuration(tmp_path):
    inline = '{"url": "http://attach:' + PASSWORD + '@x", "headers": {"Authorization": "Bearer ' + HEADER_TOKEN + '"}'
    with pytest.raises(ConfigError, match=r"inline, \d+ characters, not shown\): not JSON: .* at line 1 column") as e:
        preparers.parse_config(inline)
    assert_no_secret(str(e.value))
    (tmp_path / "c.yaml").write_text(f"headers: {{Authorization: Bearer {HEADER_TOKEN}\nurl: [\n")
    with pytest.raises(ConfigError, match=r"c.yaml: not YAML: .* at line 2 column") as e:
        preparers.parse_config(f"@{tmp_path / 'c.yaml'}")
    assert_no_secret(str(e.value))


@pytest.mark.parametrize("form", ["huge", "huge-length"])
async def test_http_answer_larger_than_the_limit_is_refused_unread(form):
    from operators.binding.preparers.http import MAX_ANSWER_BYTES

    async with EchoServer({"prepare": (200, form), "undo": (200, form)}) as host:
        preparer = HttpPreparer({"url": f"http://attach:{PASSWORD}@{host}/v1", "retries": 3})
        try:
            outcome = await preparer.prepare(prep())
            with pytest.raises(RuntimeError, match=f"more than {MAX_ANSWER_BYTES} bytes"):
                await preparer.undo(prep())
        finally:
            await preparer.close()
    assert outcome.reason == "AttachServiceAnswerTooLarge" and not outcome.ready
    assert f"http://***@{host}/v1/prepare answered 200 with more than {MAX_ANSWER_BYTES} bytes" in outcome.message
    assert_no_secret(outcome.message)


async def test_http_data_larger_than_the_api_server_keeps_is_a_failure():
    async with EchoServer({"prepare": (200, "big-data")}) as host:
        preparer = HttpPreparer({"url": f"http://{host}/v1"})
        outcome = await preparer.prepare(prep())
        await preparer.close()
    assert outcome.reason == "AttachServiceDataTooLarge" and "at most 10240" in outcome.message


def test_http_answers_python_reads_but_json_does_not():
    from operators.binding.preparers.http import _seconds, decode_answer

    assert decode_answer(b'{"status": "ready", "data": {"x": NaN}}')[0] == {}  # the API server would refuse it
    assert decode_answer(b"[" * 100_000 + b"]" * 100_000)[0] == {}  # nested past the recursion limit
    assert decode_answer(b'{"status": "\xff"}')[0] == {"status": "\ufffd"}
    assert (_seconds("inf", 2), _seconds("nan", 2), _seconds("-5", 2), _seconds("Wed, 21 Oct", 2)) == (60, 2, 0, 2)
