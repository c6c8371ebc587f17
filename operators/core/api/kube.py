"""Plain-dict access to the Kubernetes API over kubernetes-asyncio's connection handling.

kubernetes-asyncio brings kubeconfig/in-cluster loading, TLS and token refresh; the typed API
classes are not used because they drop unknown fields. Every call returns the decoded JSON.

Transient failures are retried here, as client-go's rest client does, so that no caller has to:
429 (any verb: the server refused it before doing anything) after its Retry-After; 5xx,
connection errors and timeouts only for idempotent requests (GET, PUT with a resourceVersion,
DELETE, apply and merge patches). A POST whose connection broke may have been carried out, so it
is never repeated blindly: the caller sees ``ConnectionLost`` and must look before trying again.
"""

from __future__ import annotations

import asyncio
import json
import os
from dataclasses import dataclass
from typing import Any, Callable, Iterable
from urllib.parse import urlencode

import aiohttp
import tenacity
from kubernetes_asyncio import client, config

from . import wirejson
from . import apihealth
from .apihealth import OUTAGE_STATUSES, ApiHealth
from ..logging import get_logger
from .ratelimit import TokenBucket
from .resources import Resource

log = get_logger(__name__)

JSON = dict[str, Any]

MERGE_PATCH = "application/merge-patch+json"
JSON_PATCH = "application/json-patch+json"
STRATEGIC_PATCH = "application/strategic-merge-patch+json"
APPLY_PATCH = "application/apply-patch+yaml"


class ApiError(Exception):
    """A non-2xx answer from the API server, with its Status object."""

    def __init__(self, status: int, body: JSON | str, method: str = "", path: str = ""):
        self.status = status
        self.body = body if isinstance(body, dict) else {"message": str(body)}
        self.reason = self.body.get("reason", "")
        self.message = self.body.get("message", "")
        super().__init__(f"{method} {path}: {status} {self.reason}: {self.message}")

    @property
    def not_found(self) -> bool:
        return self.status == 404

    @property
    def conflict(self) -> bool:
        return self.status == 409

    @property
    def already_exists(self) -> bool:
        return self.status == 409 and self.reason == "AlreadyExists"

    @property
    def invalid(self) -> bool:
        return self.status == 422

    @property
    def retry_after(self) -> float | None:
        """Seconds the server asked us to wait (Retry-After, or the Status' retryAfterSeconds)."""
        seconds = (self.body.get("details") or {}).get("retryAfterSeconds") if isinstance(self.body, dict) else None
        return float(seconds) if seconds else self._retry_after_header

    _retry_after_header: float | None = None


class ConnectionLost(Exception):
    """The API server could not be reached, or the connection broke before an answer came.

    For a request that is not idempotent the outcome is unknown: it may have been carried out."""

    def __init__(self, method: str, path: str, cause: BaseException):
        self.method, self.path, self.cause = method, path, cause
        super().__init__(f"{method} {path}: {type(cause).__name__}: {cause or 'no answer'}")


# What is worth another attempt: the transport failing, or the server saying "not now".
TRANSPORT_ERRORS = (aiohttp.ClientConnectionError, aiohttp.ClientPayloadError, asyncio.TimeoutError,
                    ConnectionError, OSError)
RETRIED_STATUSES = OUTAGE_STATUSES


@dataclass(frozen=True)
class RetryPolicy:
    """client-go retries up to 10 times; we keep the whole wait bounded so a sync that cannot
    succeed hands its key back to the work queue (whose backoff takes over) within seconds."""
    attempts: int = 6
    initial: float = 0.2
    maximum: float = 5.0
    retry_after_cap: float = 10.0
    give_up_after: float = 90.0   # no new attempt after this many seconds (hung connections)
    connect_timeout: float = 10.0  # TCP and TLS set-up; a black-holed server must not take a minute


RATE_LIMIT_WAIT = 60.0  # the longest wait for the client-side rate limit of a request without a timeout


def is_idempotent(method: str, content_type: str) -> bool:
    if method in ("GET", "HEAD", "PUT", "DELETE"):
        return True
    return method == "PATCH" and content_type in (APPLY_PATCH, MERGE_PATCH)


def should_retry(error: BaseException, method: str, content_type: str) -> bool:
    if isinstance(error, ApiError):
        if error.status == 429:
            return True
        return error.status in RETRIED_STATUSES and is_idempotent(method, content_type)
    return isinstance(error, ConnectionLost) and is_idempotent(method, content_type)


class _Wait(tenacity.wait.wait_base):
    """Exponential backoff with jitter, or the server's Retry-After when it gave one."""

    def __init__(self, policy: RetryPolicy):
        self.policy = policy
        self.backoff = tenacity.wait_random_exponential(multiplier=policy.initial, max=policy.maximum)

    def __call__(self, retry_state: tenacity.RetryCallState) -> float:
        error = retry_state.outcome.exception() if retry_state.outcome else None
        if isinstance(error, ApiError) and error.retry_after:
            return min(error.retry_after, self.policy.retry_after_cap)
        return self.backoff(retry_state)


class Kube:
    """One connection pool to one API server."""

    def __init__(self, api_client: client.ApiClient, retry: RetryPolicy = RetryPolicy(),
                 limiter: TokenBucket | None = None, health: ApiHealth | None = None):
        self._api = api_client
        self.retry = retry
        self.limiter = limiter
        self.health = health or apihealth.PROCESS

    @classmethod
    async def connect(cls, kubeconfig: str | None = None, context: str | None = None, *,
                      qps: float = 0.0, burst: int = 0) -> "Kube":
        """From a kubeconfig (KUBECONFIG or the path given), else the in-cluster ServiceAccount.
        ``qps`` > 0: at most that many requests a second, ``burst`` at once (client-go's
        client-side limit; DRA_API_QPS, DRA_API_BURST); watches are kopf's and not limited."""
        configuration = client.Configuration()
        try:
            await config.load_kube_config(
                config_file=kubeconfig, context=context, client_configuration=configuration
            )
        except config.ConfigException:
            if kubeconfig:
                raise
            config.load_incluster_config(client_configuration=configuration)
        limiter = TokenBucket(qps, max(1, burst or int(qps))) if qps > 0 else None
        api = _ApiClient(configuration)
        _trust_env_only_for_proxies(api)
        return cls(api, limiter=limiter)

    @classmethod
    def with_token(cls, host: str, token: str, ca_file: str) -> "Kube":
        """A client that authenticates with a bearer token (for ServiceAccount-token tests)."""
        configuration = client.Configuration(host=host)
        configuration.api_key = {"BearerToken": token}
        configuration.api_key_prefix = {"BearerToken": "Bearer"}
        configuration.ssl_ca_cert = ca_file
        return cls(_ApiClient(configuration))

    def for_leader_election(self) -> "Kube":
        """A client of its own for leader election, as kube-controller-manager builds its
        ``leaderElectionClient`` from a separate rest config (cmd/kube-controller-manager/app/
        controllermanager.go): its own connection pool and no client-side rate limit, so a renewal
        never queues behind the workers' requests (DRA_API_QPS) or connections. Each request is
        tried once (see ``without_retries``). Close it when done."""
        api = _ApiClient(self._api.configuration)
        _trust_env_only_for_proxies(api)
        return Kube(api, RetryPolicy(attempts=1), None, self.health)

    def without_retries(self) -> "Kube":
        """The same connection pool, each request tried once (for callers with their own
        schedule, such as leader election, whose every try must fit in its renew deadline)."""
        return Kube(self._api, RetryPolicy(attempts=1), self.limiter, self.health)

    @property
    def host(self) -> str:
        return self._api.configuration.host

    async def close(self) -> None:
        await self._api.close()

    async def __aenter__(self) -> "Kube":
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    async def request(
        self,
        method: str,
        path: str,
        *,
        params: Iterable[tuple[str, Any]] | None = None,
        body: Any = None,
        content_type: str = "application/json",
        timeout: float | None = 60,
        retry: bool = True,
        raw: bool = False,
        stop_at: str | None = None,
    ) -> Any:
        """One API call, retried as the module docstring says unless ``retry`` is False.
        ``raw``: return the body as text (a watch's stream of events); ``stop_at``: with ``raw``,
        stop reading (and drop the connection) once the body holds this text, instead of waiting
        for the server to end a watch at its ``timeoutSeconds``."""
        if not retry or self.retry.attempts <= 1:
            return await self._request_once(method, path, params, body, content_type, timeout, raw, stop_at)
        retrying = tenacity.AsyncRetrying(
            stop=tenacity.stop_after_attempt(self.retry.attempts) | tenacity.stop_after_delay(self.retry.give_up_after),
            wait=_Wait(self.retry),
            retry=tenacity.retry_if_exception(lambda e: should_retry(e, method, content_type)),
            before_sleep=lambda state: log.info(
                "API request failed, retrying", method=method, path=path, attempt=state.attempt_number,
                error=str(state.outcome.exception()), wait=round(state.next_action.sleep, 2)),
            reraise=True)
        async for attempt in retrying:
            with attempt:
                return await self._request_once(method, path, params, body, content_type, timeout, raw, stop_at)

    async def _request_once(self, method: str, path: str, params: Iterable[tuple[str, Any]] | None,
                            body: Any, content_type: str, timeout: float | None, raw_text: bool = False,
                            stop_at: str | None = None) -> Any:
        query = [(k, v) for k, v in (params or []) if v is not None]
        if self.limiter is not None and not await self.limiter.take(max_wait=timeout or RATE_LIMIT_WAIT):
            # client-go's rate.Limiter.Wait fails the same way when the wait would pass the
            # request's deadline; nothing was sent, so it is retried as the server's 429 is.
            raise ApiError(429, {"reason": "TooManyRequests", "message": (
                f"client-side rate limit (DRA_API_QPS={self.limiter.rate:g}): the request would wait "
                f"longer than its timeout of {timeout or RATE_LIMIT_WAIT:g}s")}, method, path)
        try:
            response = await self._api.call_api(
                path,
                method,
                query_params=query,
                header_params={"Accept": "application/json", "Content-Type": content_type},
                body=body,
                auth_settings=["BearerToken"],
                _preload_content=False,
                _request_timeout=aiohttp.ClientTimeout(total=timeout, connect=min(
                    self.retry.connect_timeout, timeout or self.retry.connect_timeout)),
            )
            try:
                if raw_text and stop_at and 200 <= response.status <= 299:
                    raw = await _read_until(response, stop_at.encode())
                else:
                    raw = await response.read()
            finally:
                response.release()
        except TRANSPORT_ERRORS as e:
            self.health.failed(f"{method} {path}: {type(e).__name__}: {e}")
            raise ConnectionLost(method, path, e) from e
        if response.status in OUTAGE_STATUSES:
            self.health.failed(f"{method} {path}: HTTP {response.status}")
        else:
            self.health.answered()
        text = raw.decode(errors="replace") if raw else ""
        if raw_text and 200 <= response.status <= 299:
            return text
        try:
            data = json.loads(text) if text else {}
        except json.JSONDecodeError:
            data = text
        if not 200 <= response.status <= 299:
            error = ApiError(response.status, data, method, path)
            error._retry_after_header = _parse_retry_after(response.headers.get("Retry-After"))
            raise error
        if not isinstance(data, (dict, list)) and text:
            # A proxy or a broken server answering 2xx with something that is not JSON.
            raise ApiError(502, {"reason": "BadResponse", "message": f"not JSON: {text[:200]!r}"}, method, path)
        return data

    # -- verbs over Resource descriptors -----------------------------------------------------

    async def get(self, res: Resource, name: str, namespace: str | None = None,
                  subresource: str | None = None) -> JSON:
        return await self.request("GET", res.path(namespace, name, subresource))

    async def get_or_none(self, res: Resource, name: str, namespace: str | None = None) -> JSON | None:
        try:
            return await self.get(res, name, namespace)
        except ApiError as e:
            if e.not_found:
                return None
            raise

    async def list(self, res: Resource, namespace: str | None = None, *,
                   label_selector: str | None = None, field_selector: str | None = None,
                   limit: int = 500, keep: Callable[[JSON], bool] | None = None) -> list[JSON]:
        items, _ = await self.list_with_version(res, namespace, label_selector=label_selector,
                                                field_selector=field_selector, limit=limit, keep=keep)
        return items

    async def list_with_version(self, res: Resource, namespace: str | None = None, *,
                                label_selector: str | None = None, field_selector: str | None = None,
                                limit: int = 500, keep: Callable[[JSON], bool] | None = None,
                                ) -> tuple[list[JSON], str]:
        """All objects, paged, and the resourceVersion of the (consistent) list: the first page's,
        as client-go's pager keeps it (k8s.io/client-go tools/pager/pager.go ``ListPager.list``).
        ``keep``: only the objects it accepts are collected, page by page, so a list of every Pod
        of the cluster costs one page plus the kept ones, not the cluster (client-go's
        ``EachListItem`` hands a caller each page's items the same way). A continue token that
        expired (410 while paging, after a compaction) restarts the list from its first page, as
        client-go's reflector does after an expired list (``Reflector.list``: a fresh consistent
        list); what the broken attempt kept is dropped, so the result is still one list at one
        resourceVersion. Not the pager's fallback to one unpaged list: that holds the cluster."""
        for attempt in range(3):
            items: list[JSON] = []
            token: str | None = None
            version = ""
            try:
                while True:
                    page = await self.request("GET", res.path(namespace), params=[
                        ("labelSelector", label_selector), ("fieldSelector", field_selector),
                        ("limit", limit), ("continue", token)])
                    if not isinstance(page, dict) or not isinstance(page.get("items") or [], list):
                        raise ApiError(502, {"reason": "BadResponse", "message": "a list without items"},
                                       "GET", res.path(namespace))
                    found = page.get("items") or []
                    items.extend(found if keep is None else (obj for obj in found if keep(obj)))
                    meta = page.get("metadata") or {}
                    version = version or meta.get("resourceVersion", "")
                    token = meta.get("continue")
                    del page, found  # the page is not kept while the next one is read
                    if not token:
                        return items, version
            except ApiError as e:
                if e.status != 410 or token is None or attempt == 2:
                    raise
                log.info("list continuation expired, listing again", resource=res.plural)
        raise AssertionError("unreachable")

    async def create(self, res: Resource, body: JSON, namespace: str | None = None, *,
                     field_manager: str | None = None, dry_run: bool = False) -> JSON:
        namespace = namespace or body.get("metadata", {}).get("namespace")
        return await self.request("POST", res.path(namespace), body=body, params=[
            ("fieldManager", field_manager), ("dryRun", "All" if dry_run else None)])

    async def replace(self, res: Resource, body: JSON, *, subresource: str | None = None,
                      field_manager: str | None = None) -> JSON:
        """PUT with the body's resourceVersion: a stale body gives a 409 conflict."""
        meta = body["metadata"]
        return await self.request(
            "PUT", res.path(meta.get("namespace"), meta["name"], subresource), body=body,
            params=[("fieldManager", field_manager)])

    async def patch(self, res: Resource, name: str, patch: Any, namespace: str | None = None, *,
                    content_type: str = MERGE_PATCH, subresource: str | None = None,
                    field_manager: str | None = None) -> JSON:
        return await self.request("PATCH", res.path(namespace, name, subresource), body=patch,
                                  content_type=content_type, params=[("fieldManager", field_manager)])

    async def apply(self, res: Resource, body: JSON, *, field_manager: str, force: bool = False,
                    subresource: str | None = None) -> JSON:
        """Server-side apply (the body is sent as JSON, which is valid YAML)."""
        meta = body["metadata"]
        return await self.request(
            "PATCH", res.path(meta.get("namespace"), meta["name"], subresource), body=body,
            content_type=APPLY_PATCH,
            params=[("fieldManager", field_manager), ("force", "true" if force else None)])

    async def delete(self, res: Resource, name: str, namespace: str | None = None, *,
                     uid: str | None = None, resource_version: str | None = None,
                     grace_period_seconds: int | None = None,
                     propagation_policy: str | None = None) -> JSON:
        options: JSON = {"kind": "DeleteOptions", "apiVersion": "v1"}
        preconditions = {k: v for k, v in (("uid", uid), ("resourceVersion", resource_version)) if v}
        if preconditions:
            options["preconditions"] = preconditions
        if grace_period_seconds is not None:
            options["gracePeriodSeconds"] = grace_period_seconds
        if propagation_policy:
            options["propagationPolicy"] = propagation_policy
        return await self.request("DELETE", res.path(namespace, name), body=options)

    # -- discovery ---------------------------------------------------------------------------

    async def server_version(self) -> JSON:
        return await self.request("GET", "/version")

    async def served_versions(self, group: str, plural: str) -> list[str]:
        """Versions of ``group`` that serve ``plural``, the server's preferred version first."""
        try:
            info = await self.request("GET", f"/apis/{group}")
        except ApiError as e:
            if e.not_found:
                return []
            raise
        preferred = (info.get("preferredVersion") or {}).get("version")
        versions = [v["version"] for v in info.get("versions") or []]
        versions.sort(key=lambda v: v != preferred)
        served = []
        for version in versions:
            listing = await self.request("GET", f"/apis/{group}/{version}")
            if any(r.get("name") == plural for r in listing.get("resources") or []):
                served.append(version)
        return served

    async def preferred_version(self, res: Resource) -> Resource | None:
        """``res`` at the version the cluster prefers for it, or None if it is not served."""
        versions = await self.served_versions(res.group, res.plural)
        return res.with_version(versions[0]) if versions else None


class _ApiClient(client.ApiClient):
    """kubernetes-asyncio's client, with bodies written as Go clients write them (``wirejson``):
    its own ``json.dumps`` puts spaces into raw-extension fields, which the API server then sees
    as changed. And without its deep copy of every body (``sanitize_for_serialization`` walks a
    dict in Python to turn typed models into JSON types; the suite sends plain dicts, and the copy
    was a seventh of the claims operator's CPU while it created claims: py-spy, bench). A body
    that is not plain JSON (a datetime, a model) still goes the long way. Every request of
    ``Kube`` reads its response itself (``_preload_content=False``)."""

    def sanitize_for_serialization(self, obj: Any) -> Any:
        return obj if isinstance(obj, (dict, list)) else super().sanitize_for_serialization(obj)

    def request(self, method, url, query_params=None, headers=None, post_params=None, body=None,
                _preload_content=True, _request_timeout=None):
        if body is None or _preload_content:
            return super().request(method, url, query_params=query_params, headers=headers,
                                   post_params=post_params, body=body, _preload_content=_preload_content,
                                   _request_timeout=_request_timeout)
        try:
            data = wirejson.dumps(body)
        except TypeError:
            data = wirejson.dumps(super().sanitize_for_serialization(body))
        return self._send(method, url, query_params, headers or {}, data, _request_timeout)

    async def _send(self, method: str, url: str, query_params: Any, headers: dict, data: bytes,
                    timeout: Any) -> aiohttp.ClientResponse:
        rest = self.rest_client
        if query_params:
            url += "?" + urlencode(query_params)
        args: dict[str, Any] = {
            "method": method, "url": url, "headers": headers, "data": data,
            "timeout": timeout if isinstance(timeout, aiohttp.ClientTimeout) else aiohttp.ClientTimeout(total=timeout)}
        if rest.proxy:
            args["proxy"] = rest.proxy
        if rest.proxy_headers:
            args["proxy_headers"] = rest.proxy_headers
        if rest.server_hostname:
            args["server_hostname"] = rest.server_hostname
        return await rest.pool_manager.request(**args)


PROXY_VARIABLES = ("HTTPS_PROXY", "HTTP_PROXY", "ALL_PROXY", "NO_PROXY", "NETRC")


def _trust_env_only_for_proxies(api: client.ApiClient) -> None:
    """kubernetes-asyncio's aiohttp session trusts the environment, so every request looks for
    proxy variables and reads ~/.netrc in a thread of the default executor: a tenth of the
    taints operator's CPU while it evicts (bench/RESULTS.md, profile). Without any proxy or
    NETRC variable there is nothing to find; then the session stops looking. With one, as
    client-go honours HTTPS_PROXY, it keeps looking."""
    if any(os.environ.get(v) or os.environ.get(v.lower()) for v in PROXY_VARIABLES):
        return
    session = getattr(api.rest_client, "pool_manager", None)
    if session is not None and hasattr(session, "_trust_env"):
        session._trust_env = False


async def _read_until(response: aiohttp.ClientResponse, marker: bytes) -> bytes:
    """The body as far as the chunk that holds ``marker`` (all of it when none does); a
    response left unfinished is closed, its connection with it."""
    chunks: list[bytes] = []
    tail = b""
    async for chunk in response.content.iter_any():
        chunks.append(chunk)
        if marker in tail + chunk:
            response.close()
            break
        tail = chunk[-len(marker):]
    return b"".join(chunks)


def _parse_retry_after(value: str | None) -> float | None:
    try:
        return max(0.0, float(value)) if value else None
    except ValueError:  # an HTTP date: rare from kube-apiserver, a short default will do
        return 1.0
