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
import json
import math
from typing import Any

import aiohttp
import yarl

from ...core.api import wirejson
from ...core.logging import get_logger
from ...core.redact import Redactor, redact_url
from .base import ConfigError, Outcome, Preparation, Preparer

log = get_logger("operators.binding.preparers.http")

_RETRYABLE_STATUS = {408, 429}
_MAX_BACKOFF = 30.0
# An answer holds a status, a message and at most 10 KiB of data; anything this large is not one,
# and reading it whole would let the service fill the operator's memory.
MAX_ANSWER_BYTES = 1 << 20
_SHOWN = 500  # characters of an answer quoted in a message
# k8s.io/kubernetes v1.37.1 pkg/apis/resource/types.go AllocatedDeviceStatusDataMaxLength: the API
# server refuses more in status.devices[].data (validation.go validateDeviceStatus).
DATA_MAX_BYTES = 10 * 1024
_MAX_RETRY_AFTER = 60.0  # a service asking to wait longer is asked again then (the deadline bounds it all)


class _Transient(Exception):
    def __init__(self, reason: str, message: str):
        super().__init__(message)
        self.reason = reason


class AnswerTooLarge(Exception):
    """The service's answer is longer than ``MAX_ANSWER_BYTES``."""


def decode_answer(raw: bytes) -> tuple[dict[str, Any], str]:
    """The answer's JSON object ({} when it is none: not JSON, not an object, too deeply nested)
    and its text (undecodable bytes replaced), as the service sent it."""
    text = raw.decode("utf-8", errors="replace")
    try:
        body = json.loads(text, parse_constant=_no_constant) if text.strip() else {}
    except (ValueError, RecursionError):
        body = {}
    return (body if isinstance(body, dict) else {}), text


def _no_constant(name: str) -> Any:
    # NaN and Infinity are not JSON (Python reads them; the API server, and wirejson, do not).
    raise ValueError(f"{name} is not JSON")


class HttpPreparer(Preparer):
    name = "http"

    def __init__(self, config: dict[str, Any] | None = None):
        config = dict(config or {})
        unknown = set(config) - {"url", "timeout", "retries", "backoff", "pollInterval", "headers"}
        if unknown:
            raise ConfigError(f"http preparer: unknown settings {sorted(unknown)}")
        headers = config.get("headers") or {}
        if not isinstance(headers, dict):
            raise ConfigError("http preparer: headers must be a mapping")
        self.headers = {str(k): str(v) for k, v in headers.items()}
        url = config.get("url")
        # Built first: every message below, about the URL or the headers, goes through it.
        self.redact = Redactor.of(url.rstrip("/") if isinstance(url, str) else "", self.headers)
        if not isinstance(url, str) or not url.startswith(("http://", "https://")):
            shown = redact_url(url) if isinstance(url, str) else repr(url)
            raise ConfigError(f"http preparer: url must be an http(s) URL, got {shown}")
        self.url = url.rstrip("/")
        try:
            parsed = yarl.URL(self.url)
        except ValueError as e:
            raise ConfigError(f"http preparer: url {self.redact.url} is not a valid URL: {self.redact(e)}") from None
        if not parsed.host:
            raise ConfigError(f"http preparer: url {self.redact.url} names no host")
        if parsed.query_string or parsed.fragment:
            # POSTs go to <url>/prepare: a query would swallow the path.
            raise ConfigError(
                f"http preparer: url {self.redact.url} has a query or fragment; give the base URL "
                "the service's /prepare and /undo are under (credentials in a header)"
            )
        for k, v in self.headers.items():
            if any(c in k + v for c in "\r\n\0"):
                raise ConfigError(f"http preparer: header {self.redact(k)!r} holds a line break or NUL")
        if (parsed.user is not None or parsed.password is not None) and "authorization" in {
            k.lower() for k in self.headers
        }:
            raise ConfigError(
                "http preparer: give credentials either in the url or in an Authorization header, not both"
            )
        try:
            self.timeout = float(config.get("timeout", 10))
            self.retries = int(config.get("retries", 3))
            self.backoff = float(config.get("backoff", 0.5))
            self.poll_interval = float(config.get("pollInterval", 2))
        except (TypeError, ValueError, OverflowError) as e:
            raise ConfigError(f"http preparer: {e}") from None
        if not (self.timeout > 0 and self.retries >= 0 and self.backoff >= 0 and self.poll_interval > 0):
            raise ConfigError("http preparer: timeout and pollInterval must be > 0, retries and backoff >= 0")
        self._session: aiohttp.ClientSession | None = None

    def _client(self) -> aiohttp.ClientSession:
        if self._session is None or self._session.closed:
            self._session = aiohttp.ClientSession(
                headers=self.headers, timeout=aiohttp.ClientTimeout(total=self.timeout)
            )
        return self._session

    async def close(self) -> None:
        if self._session is not None:
            await self._session.close()

    async def _post(self, path: str, p: Preparation) -> tuple[int, dict[str, Any], str, str | None]:
        """One request: (status, JSON body or {}, its text, Retry-After). Network trouble is
        _Transient, an answer over MAX_ANSWER_BYTES AnswerTooLarge; both say the URL redacted."""
        where = f"{self.redact.url}/{path}"
        try:
            async with self._client().post(f"{self.url}/{path}", json=p.to_json()) as response:
                raw = await _read_at_most(response, MAX_ANSWER_BYTES)
                if raw is None:
                    raise AnswerTooLarge(
                        f"{where} answered {response.status} with more than {MAX_ANSWER_BYTES} "
                        "bytes, the most an answer may hold; the answer was not read"
                    )
                body, text = decode_answer(raw)
                return response.status, body, text, response.headers.get("Retry-After")
        except TimeoutError:
            raise _Transient("AttachServiceTimeout", f"no answer from {where} within {self.timeout:g}s") from None
        except aiohttp.ClientError as e:
            # The library's message may quote the URL as configured: only the redacted text goes on.
            raise _Transient("AttachServiceUnavailable", f"{where}: {type(e).__name__}: {self.redact(e)}") from None

    def _quote(self, text: str) -> str:
        return self.redact(text[:_SHOWN])

    async def prepare(self, p: Preparation) -> Outcome:
        failures = 0
        while True:
            try:
                status, body, text, retry_after = await self._post("prepare", p)
                if status >= 500 or status in _RETRYABLE_STATUS:
                    raise _Transient(
                        "AttachServiceError", f"{self.redact.url}/prepare answered {status}: {self._quote(text)}"
                    )
            except AnswerTooLarge as e:
                return Outcome.failed("AttachServiceAnswerTooLarge", str(e))
            except _Transient as e:
                failures += 1
                if failures > self.retries:
                    return Outcome.failed(e.reason, f"{e} (after {failures} attempts)")
                delay = min(_MAX_BACKOFF, self.backoff * 2 ** (failures - 1))
                log.info(
                    "attach service request failed, retrying",
                    device=p.device_id,
                    claim=p.claim,
                    node=p.node,
                    error=str(e),
                    attempt=failures,
                    retry_in=delay,
                )
                await asyncio.sleep(delay)
                continue
            outcome = judge(status, body, text, self.redact)
            if outcome is None:
                await asyncio.sleep(_seconds(retry_after, self.poll_interval))
                continue
            return outcome

    async def undo(self, p: Preparation) -> None:
        try:
            status, _, text, _ = await self._post("undo", p)
        except (_Transient, AnswerTooLarge) as e:
            raise RuntimeError(str(e)) from None
        if not (200 <= status < 300 or status == 404):
            raise RuntimeError(f"{self.redact.url}/undo answered {status}: {self._quote(text)}")


def judge(status: int, body: dict[str, Any], text: str, redact: Redactor) -> Outcome | None:
    """What an answer of ``/prepare`` that is not a transient error means; None: ask again. The
    service's own words are redacted too (one that echoes the request's headers)."""
    answer = str(body.get("status", "")).lower()
    if status == 202 or answer == "pending":
        return None
    if 200 <= status < 300 and answer == "ready":
        data = body.get("data") if isinstance(body.get("data"), dict) else None
        if data is not None and (size := len(wirejson.dumps(data))) > DATA_MAX_BYTES:
            return Outcome.failed(
                "AttachServiceDataTooLarge",
                f"{redact.url}/prepare answered ready with data of "
                f"{size} bytes; a claim's status.devices[].data holds at most {DATA_MAX_BYTES}",
            )
        return Outcome.prepared(redact(str(body.get("message", ""))[: _SHOWN * 2]), data=data)
    if 200 <= status < 300 and answer == "failed":
        return Outcome.failed(
            redact(str(body.get("reason") or "AttachFailed")[:128]), redact(str(body.get("message", ""))[: _SHOWN * 2])
        )
    return Outcome.failed(
        "AttachServiceRejected", f"{redact.url}/prepare answered {status}: {redact(text[:_SHOWN]) or 'no body'}"
    )


async def _read_at_most(response: aiohttp.ClientResponse, limit: int) -> bytes | None:
    """The body, or None when it is longer than ``limit`` (then no more of it is read)."""
    length = response.content_length
    if length is not None and length > limit:
        return None
    chunks: list[bytes] = []
    size = 0
    while True:
        chunk = await response.content.read(limit + 1 - size)
        if not chunk:
            return b"".join(chunks)
        chunks.append(chunk)
        size += len(chunk)
        if size > limit:
            return None


def _seconds(header: str | None, default: float) -> float:
    """Retry-After in seconds (an HTTP date, NaN or nonsense: the default), at most a minute."""
    try:
        seconds = float(header) if header else default
    except ValueError:
        return default
    return default if math.isnan(seconds) else min(_MAX_RETRY_AFTER, max(0.0, seconds))
