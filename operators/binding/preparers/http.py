"""A preparer that asks an external attach service over HTTP.

Configuration::

    {"url": "http://attach.example:8000/v1",   # required; POSTs go to <url>/prepare and <url>/undo
     "timeout": 10,          # seconds per request
     "retries": 3,           # further attempts after a request failed (timeout, refused, 5xx, 408, 429)
     "backoff": 0.5,         # seconds before the first retry, doubled each time (capped at 30)
     "pollInterval": 2,      # seconds between asks while the service answers "pending"
     "headers": {"Authorization": "Bearer ..."}}

Protocol. The request body is ``Preparation.to_json()``: driver, pool, device, shareID, node,
request, claim {namespace, name, uid}, bindingConditions, bindingFailureConditions, started,
deadline. ``/prepare`` answers 200 with ``{"status": "ready", "message": ..., "data": {...}}`` or
``{"status": "failed", "reason": "CamelCase", "message": ...}``; ``{"status": "pending"}`` or
202 means "working on it, ask again" (honouring ``Retry-After``). The service must treat a
repeated request for the same claim UID and device as the same preparation: the operator asks
again after it restarts. ``/undo`` answers 2xx (or 404: nothing to undo) when the device is
detached. Any other 4xx is a permanent failure. The operator's deadline bounds everything.
"""

from __future__ import annotations

import asyncio
from typing import Any

import aiohttp

from ...core.logging import get_logger
from .base import ConfigError, Outcome, Preparation, Preparer

log = get_logger("operators.binding.preparers.http")

_RETRYABLE_STATUS = {408, 429}
_MAX_BACKOFF = 30.0


class _Transient(Exception):
    def __init__(self, reason: str, message: str):
        super().__init__(message)
        self.reason = reason


class HttpPreparer(Preparer):
    name = "http"

    def __init__(self, config: dict[str, Any] | None = None):
        config = dict(config or {})
        unknown = set(config) - {"url", "timeout", "retries", "backoff", "pollInterval", "headers"}
        if unknown:
            raise ConfigError(f"http preparer: unknown settings {sorted(unknown)}")
        url = config.get("url")
        if not isinstance(url, str) or not url.startswith(("http://", "https://")):
            raise ConfigError(f"http preparer: url must be an http(s) URL, got {url!r}")
        self.url = url.rstrip("/")
        try:
            self.timeout = float(config.get("timeout", 10))
            self.retries = int(config.get("retries", 3))
            self.backoff = float(config.get("backoff", 0.5))
            self.poll_interval = float(config.get("pollInterval", 2))
        except (TypeError, ValueError) as e:
            raise ConfigError(f"http preparer: {e}") from e
        if self.timeout <= 0 or self.retries < 0 or self.backoff < 0 or self.poll_interval <= 0:
            raise ConfigError("http preparer: timeout and pollInterval must be > 0, retries and backoff >= 0")
        headers = config.get("headers") or {}
        if not isinstance(headers, dict):
            raise ConfigError("http preparer: headers must be a mapping")
        self.headers = {str(k): str(v) for k, v in headers.items()}
        self._session: aiohttp.ClientSession | None = None

    def _client(self) -> aiohttp.ClientSession:
        if self._session is None or self._session.closed:
            self._session = aiohttp.ClientSession(headers=self.headers,
                                                  timeout=aiohttp.ClientTimeout(total=self.timeout))
        return self._session

    async def close(self) -> None:
        if self._session is not None:
            await self._session.close()

    async def _post(self, path: str, p: Preparation) -> tuple[int, dict[str, Any], str | None]:
        """One request: (status, JSON body or {}, Retry-After). Network trouble is _Transient."""
        try:
            async with self._client().post(f"{self.url}/{path}", json=p.to_json()) as response:
                text = await response.text()
                try:
                    body = await response.json(content_type=None) if text else {}
                except ValueError:
                    body = {}
                if not isinstance(body, dict):
                    body = {}
                body.setdefault("_text", text[:500])
                return response.status, body, response.headers.get("Retry-After")
        except asyncio.TimeoutError as e:
            raise _Transient("AttachServiceTimeout", f"no answer from {self.url}/{path} within {self.timeout:g}s") from e
        except aiohttp.ClientError as e:
            raise _Transient("AttachServiceUnavailable", f"{self.url}/{path}: {e}") from e

    async def prepare(self, p: Preparation) -> Outcome:
        failures = 0
        while True:
            try:
                status, body, retry_after = await self._post("prepare", p)
                if status >= 500 or status in _RETRYABLE_STATUS:
                    raise _Transient("AttachServiceError", f"{self.url}/prepare answered {status}: {body['_text']}")
            except _Transient as e:
                failures += 1
                if failures > self.retries:
                    return Outcome.failed(e.reason, f"{e} (after {failures} attempts)")
                delay = min(_MAX_BACKOFF, self.backoff * 2 ** (failures - 1))
                log.info("attach service request failed, retrying", device=p.device_id, claim=p.claim,
                         node=p.node, error=str(e), attempt=failures, retry_in=delay)
                await asyncio.sleep(delay)
                continue
            answer = str(body.get("status", "")).lower()
            if status == 202 or answer == "pending":
                await asyncio.sleep(_seconds(retry_after, self.poll_interval))
                continue
            if 200 <= status < 300 and answer == "ready":
                data = body.get("data") if isinstance(body.get("data"), dict) else None
                return Outcome.prepared(str(body.get("message", "")), data=data)
            if 200 <= status < 300 and answer == "failed":
                return Outcome.failed(str(body.get("reason") or "AttachFailed"), str(body.get("message", "")))
            return Outcome.failed("AttachServiceRejected",
                                  f"{self.url}/prepare answered {status}: {body['_text'] or 'no body'}")

    async def undo(self, p: Preparation) -> None:
        try:
            status, body, _ = await self._post("undo", p)
        except _Transient as e:
            raise RuntimeError(str(e)) from e
        if not (200 <= status < 300 or status == 404):
            raise RuntimeError(f"{self.url}/undo answered {status}: {body['_text']}")


def _seconds(header: str | None, default: float) -> float:
    try:
        return max(0.0, float(header)) if header else default
    except ValueError:
        return default
