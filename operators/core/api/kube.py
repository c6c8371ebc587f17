"""Plain-dict access to the Kubernetes API over an aiohttp session of its own.

Where the server is and how to authenticate come from ``kubeconfig`` (a kubeconfig file or the
Pod's ServiceAccount, tokens re-read and exec credentials refreshed). Typed models are never
used: they drop fields they do not know. Every call returns the decoded JSON.

Transient failures are retried here, as client-go's rest client does, so that no caller has to:
429 (any verb: the server refused it before doing anything) after its Retry-After; 5xx,
connection errors and timeouts only for idempotent requests (GET, PUT with a resourceVersion,
DELETE, apply and merge patches). A POST whose connection broke may have been carried out, so it
is never repeated blindly: the caller sees ``ConnectionLost`` and must look before trying again.
"""

from __future__ import annotations

import asyncio
import builtins
import json
import os
import ssl
from collections.abc import AsyncIterator, Callable, Iterable
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Any

import aiohttp
import tenacity

from .. import heap
from ..logging import get_logger
from . import apihealth, wirejson
from . import kubeconfig as kubeconfig_loader
from .apihealth import OUTAGE_STATUSES, ApiHealth
from .kubeconfig import ClusterConfig
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
        self.body: JSON = body if isinstance(body, dict) else {"message": str(body)}
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

    def has_cause(self, cause_type: str) -> bool:
        """The Status names this cause (apimachinery's ``errors.HasStatusCause``)."""
        causes = (self.body.get("details") or {}).get("causes") or []
        return any(isinstance(c, dict) and c.get("type") == cause_type for c in causes)

    @property
    def namespace_terminating(self) -> bool:
        """Refused because the namespace is being deleted (the NamespaceLifecycle admission)."""
        return self.has_cause("NamespaceTerminating")

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


class NotLeader(Exception):
    """A write not sent because this replica may no longer hold its Lease (``Kube.write_gate``)."""

    def __init__(self, method: str, path: str):
        self.method, self.path = method, path
        super().__init__(f"{method} {path}: not sent, this replica may no longer hold its Lease")


READ_METHODS = ("GET", "HEAD")

# What is worth another attempt: the transport failing, or the server saying "not now".
TRANSPORT_ERRORS = (
    aiohttp.ClientConnectionError,
    aiohttp.ClientPayloadError,
    asyncio.TimeoutError,
    ConnectionError,
    OSError,
)
RETRIED_STATUSES = OUTAGE_STATUSES


@dataclass(frozen=True)
class RetryPolicy:
    """client-go retries up to 10 times; we keep the whole wait bounded so a sync that cannot
    succeed hands its key back to the work queue (whose backoff takes over) within seconds."""

    attempts: int = 6
    initial: float = 0.2
    maximum: float = 5.0
    retry_after_cap: float = 10.0
    give_up_after: float = 90.0  # no new attempt after this many seconds (hung connections)
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


PROXY_VARIABLES = ("HTTPS_PROXY", "HTTP_PROXY", "ALL_PROXY", "NO_PROXY", "NETRC")
CONNECTIONS = 100  # concurrent connections to the API server (as kubernetes-asyncio's pool)


def proxy_variables_set() -> bool:
    return any(os.environ.get(v) or os.environ.get(v.lower()) for v in PROXY_VARIABLES)


class DerivedVerbs:
    """The verbs that are built on ``get`` and ``list_with_version`` alone, written once for
    ``Kube`` and for the unit tests' fake API (which answers those two from its tracker)."""

    async def get(self, res: Resource, name: str, namespace: str | None = None, subresource: str | None = None) -> JSON:
        raise NotImplementedError

    async def list_with_version(
        self,
        res: Resource,
        namespace: str | None = None,
        *,
        label_selector: str | None = None,
        field_selector: str | None = None,
        limit: int = 500,
        keep: Callable[[JSON], bool] | None = None,
        trim: Callable[[JSON], JSON] | None = None,
    ) -> tuple[builtins.list[JSON], str]:
        raise NotImplementedError

    async def get_or_none(self, res: Resource, name: str, namespace: str | None = None) -> JSON | None:
        try:
            return await self.get(res, name, namespace)
        except ApiError as e:
            if e.not_found:
                return None
            raise

    async def list(
        self,
        res: Resource,
        namespace: str | None = None,
        *,
        label_selector: str | None = None,
        field_selector: str | None = None,
        limit: int = 500,
        keep: Callable[[JSON], bool] | None = None,
    ) -> builtins.list[JSON]:
        items, _ = await self.list_with_version(
            res, namespace, label_selector=label_selector, field_selector=field_selector, limit=limit, keep=keep
        )
        return items


class Kube(DerivedVerbs):
    """One connection pool to one API server (an aiohttp session of its own)."""

    def __init__(
        self,
        cluster: ClusterConfig,
        retry: RetryPolicy = RetryPolicy(),
        limiter: TokenBucket | None = None,
        health: ApiHealth | None = None,
        *,
        session: aiohttp.ClientSession | None = None,
        connections: int = CONNECTIONS,
    ):
        self.cluster = cluster
        self.connections = connections
        self.retry = retry
        self.limiter = limiter
        self.health = health or apihealth.PROCESS
        self._session = session
        self._owns_session = session is None
        # Asked right before each write (each attempt) is sent: a leader whose Lease may have
        # passed to another replica sends nothing more, even from a sync that began while it led
        # (its retries and rate-limit waits can outlast the Lease). Reads are never held back.
        self.write_gate: Callable[[], bool] | None = None

    @classmethod
    async def connect(
        cls,
        kubeconfig: str | None = None,
        context: str | None = None,
        *,
        qps: float = 0.0,
        burst: int = 0,
        connections: int = CONNECTIONS,
    ) -> Kube:
        """From a kubeconfig (KUBECONFIG or the path given), else the in-cluster ServiceAccount
        (``kubeconfig.load``). ``qps`` > 0: at most that many requests a second, ``burst`` at once
        (client-go's client-side limit; DRA_API_QPS, DRA_API_BURST); watches are not limited."""
        limiter = TokenBucket(qps, max(1, burst or int(qps))) if qps > 0 else None
        return cls(kubeconfig_loader.load(kubeconfig, context), limiter=limiter, connections=connections)

    @classmethod
    def for_host(
        cls, host: str, *, token: str | None = None, ca_file: str | None = None, retry: RetryPolicy = RetryPolicy()
    ) -> Kube:
        """A client of ``host`` with an optional bearer token (tests, ServiceAccount-token checks)."""
        context = ssl.create_default_context(cafile=ca_file) if host.startswith("https://") else None
        credentials = kubeconfig_loader.StaticToken(token) if token else kubeconfig_loader.Credentials()
        return cls(ClusterConfig(host=host.rstrip("/"), ssl_context=context, credentials=credentials), retry)

    @classmethod
    def with_token(cls, host: str, token: str, ca_file: str) -> Kube:
        """A client that authenticates with a bearer token (for ServiceAccount-token tests)."""
        return cls.for_host(host, token=token, ca_file=ca_file)

    def for_leader_election(self) -> Kube:
        """A client of its own for leader election, as kube-controller-manager builds its
        ``leaderElectionClient`` from a separate rest config (cmd/kube-controller-manager/app/
        controllermanager.go): its own connection pool and no client-side rate limit, so a renewal
        never queues behind the workers' requests (DRA_API_QPS) or connections. Each request is
        tried once (see ``without_retries``). Close it when done."""
        return Kube(self.cluster, RetryPolicy(attempts=1), None, self.health, connections=self.connections)

    def without_retries(self) -> Kube:
        """The same connection pool, each request tried once (for callers with their own
        schedule, such as leader election, whose every try must fit in its renew deadline)."""
        return Kube(self.cluster, RetryPolicy(attempts=1), self.limiter, self.health, session=self.session)

    @property
    def host(self) -> str:
        return self.cluster.host

    @property
    def session(self) -> aiohttp.ClientSession:
        """Made on first use, inside the event loop that will use it."""
        if self._session is None:
            connector = aiohttp.TCPConnector(limit=self.connections, ssl=self.cluster.ssl_context or False)
            # Without a proxy variable there is nothing to find in the environment: a session that
            # trusts it reads ~/.netrc for every request, in a thread (a tenth of the taints
            # operator's CPU while it evicts: bench/RESULTS.md). With one, as client-go honours
            # HTTPS_PROXY, it does.
            self._session = aiohttp.ClientSession(
                connector=connector, trust_env=proxy_variables_set(), auto_decompress=True
            )
        return self._session

    @property
    def closed(self) -> bool:
        return self._session is not None and self._session.closed

    async def close(self) -> None:
        if self._session is not None and self._owns_session:
            await self._session.close()

    async def __aenter__(self) -> Kube:
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
                "API request failed, retrying",
                method=method,
                path=path,
                attempt=state.attempt_number,
                error=str(state.outcome.exception() if state.outcome else None),
                wait=round(state.next_action.sleep if state.next_action else 0.0, 2),
            ),
            reraise=True,
        )
        async for attempt in retrying:
            with attempt:
                return await self._request_once(method, path, params, body, content_type, timeout, raw, stop_at)

    async def _request_once(
        self,
        method: str,
        path: str,
        params: Iterable[tuple[str, Any]] | None,
        body: Any,
        content_type: str,
        timeout: float | None,
        raw_text: bool = False,
        stop_at: str | None = None,
    ) -> Any:
        query = [(k, v) for k, v in (params or []) if v is not None]
        if self.limiter is not None and not await self.limiter.take(max_wait=timeout or RATE_LIMIT_WAIT):
            # client-go's rate.Limiter.Wait fails the same way when the wait would pass the
            # request's deadline; nothing was sent, so it is retried as the server's 429 is.
            raise ApiError(
                429,
                {
                    "reason": "TooManyRequests",
                    "message": (
                        f"client-side rate limit (DRA_API_QPS={self.limiter.rate:g}): the request would wait "
                        f"longer than its timeout of {timeout or RATE_LIMIT_WAIT:g}s"
                    ),
                },
                method,
                path,
            )
        if self.write_gate is not None and method not in READ_METHODS and not self.write_gate():
            raise NotLeader(method, path)
        try:
            response = await self._send(
                method,
                path,
                query,
                body,
                content_type,
                aiohttp.ClientTimeout(
                    total=timeout, connect=min(self.retry.connect_timeout, timeout or self.retry.connect_timeout)
                ),
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

    async def _send(
        self,
        method: str,
        path: str,
        query: list[tuple[str, Any]],
        body: Any,
        content_type: str,
        timeout: aiohttp.ClientTimeout,
    ) -> aiohttp.ClientResponse:
        """One HTTP exchange; after a 401 the credentials are fetched afresh and it is sent once
        more (a rotated token file, an expired exec credential: client-go does the same)."""
        data = None if body is None else wirejson.dumps(body)
        for attempt in range(2):
            headers = {"Accept": "application/json", **await self.cluster.credentials.headers()}
            if data is not None:
                headers["Content-Type"] = content_type
            response = await self.session.request(
                method,
                self.cluster.host + path,
                params=[(k, str(v)) for k, v in query],
                headers=headers,
                data=data,
                timeout=timeout,
                proxy=self.cluster.proxy,
                server_hostname=self.cluster.tls_server_name,
            )
            if response.status != 401 or attempt:
                return response
            response.release()
            self.cluster.credentials.refresh()
        raise AssertionError("unreachable")

    @asynccontextmanager
    async def stream(
        self,
        path: str,
        params: Iterable[tuple[str, Any]],
        *,
        read_timeout: float,
    ) -> AsyncIterator[AsyncIterator[bytes]]:
        """A watch: the response's lines as they come (each one event, JSON), for as long as the
        server keeps the request open. Non-2xx answers raise ``ApiError``; a connection that
        breaks or stays silent for ``read_timeout`` seconds raises ``ConnectionLost``. Not rate
        limited and not retried: the reflector decides what follows."""
        query = [(k, v) for k, v in params if v is not None]
        timeout = aiohttp.ClientTimeout(total=None, connect=self.retry.connect_timeout, sock_read=read_timeout)
        try:
            response = await self._send("GET", path, query, None, "application/json", timeout)
        except TRANSPORT_ERRORS as e:
            self.health.failed(f"WATCH {path}: {type(e).__name__}: {e}")
            raise ConnectionLost("WATCH", path, e) from e
        try:
            if not 200 <= response.status <= 299:
                text = (await response.read()).decode(errors="replace")
                try:
                    body = json.loads(text) if text else {}
                except json.JSONDecodeError:
                    body = text
                if response.status in OUTAGE_STATUSES:
                    self.health.failed(f"WATCH {path}: HTTP {response.status}")
                raise ApiError(response.status, body, "WATCH", path)
            self.health.answered()
            yield _lines(response, path)
        except TRANSPORT_ERRORS as e:
            raise ConnectionLost("WATCH", path, e) from e
        finally:
            response.close()  # a watch left early: its connection is not reused

    # -- verbs over Resource descriptors -----------------------------------------------------

    async def get(self, res: Resource, name: str, namespace: str | None = None, subresource: str | None = None) -> JSON:
        answer: JSON = await self.request("GET", res.path(namespace, name, subresource))
        return answer

    async def list_with_version(
        self,
        res: Resource,
        namespace: str | None = None,
        *,
        label_selector: str | None = None,
        field_selector: str | None = None,
        limit: int = 500,
        keep: Callable[[JSON], bool] | None = None,
        trim: Callable[[JSON], JSON] | None = None,
    ) -> tuple[builtins.list[JSON], str]:
        """All objects, paged, and the resourceVersion of the (consistent) list: the first page's,
        as client-go's pager keeps it (k8s.io/client-go tools/pager/pager.go ``ListPager.list``).
        ``keep``: only the objects it accepts are collected, page by page, so a list of every Pod
        of the cluster costs one page plus the kept ones, not the cluster (client-go's
        ``EachListItem`` hands a caller each page's items the same way). A continue token that
        expired (410 while paging, after a compaction) restarts the list from its first page, as
        client-go's reflector does after an expired list (``Reflector.list``: a fresh consistent
        list); what the broken attempt kept is dropped, so the result is still one list at one
        resourceVersion. Not the pager's fallback to one unpaged list: that holds the cluster.
        ``trim``: what is collected of each kept object, as it comes (an informer's store keeps
        only that much, and the whole objects of a large list held at once were most of an
        operator's memory: their freed memory stays with the process). The cyclic collector is
        paused meanwhile (``heap.bulk``)."""
        with heap.bulk():
            return await self._list_pages(res, namespace, label_selector, field_selector, limit, keep, trim)

    async def _list_pages(
        self,
        res: Resource,
        namespace: str | None,
        label_selector: str | None,
        field_selector: str | None,
        limit: int,
        keep: Callable[[JSON], bool] | None,
        trim: Callable[[JSON], JSON] | None,
    ) -> tuple[builtins.list[JSON], str]:
        for attempt in range(3):
            items: list[JSON] = []
            token: str | None = None
            version = ""
            try:
                while True:
                    page = await self.request(
                        "GET",
                        res.path(namespace),
                        params=[
                            ("labelSelector", label_selector),
                            ("fieldSelector", field_selector),
                            ("limit", limit),
                            ("continue", token),
                        ],
                    )
                    if not isinstance(page, dict) or not isinstance(page.get("items") or [], list):
                        raise ApiError(
                            502,
                            {"reason": "BadResponse", "message": "a list without items"},
                            "GET",
                            res.path(namespace),
                        )
                    found = page.get("items") or []
                    kept = found if keep is None else (obj for obj in found if keep(obj))
                    items.extend(kept if trim is None else map(trim, kept))
                    meta = page.get("metadata") or {}
                    version = version or meta.get("resourceVersion", "")
                    token = meta.get("continue")
                    del page, found, kept  # the page is not kept while the next one is read
                    if not token:
                        return items, version
            except ApiError as e:
                if e.status != 410 or token is None or attempt == 2:
                    raise
                log.info("list continuation expired, listing again", resource=res.plural)
        raise AssertionError("unreachable")

    async def create(
        self,
        res: Resource,
        body: JSON,
        namespace: str | None = None,
        *,
        field_manager: str | None = None,
        dry_run: bool = False,
    ) -> JSON:
        namespace = namespace or body.get("metadata", {}).get("namespace")
        answer: JSON = await self.request(
            "POST",
            res.path(namespace),
            body=body,
            params=[("fieldManager", field_manager), ("dryRun", "All" if dry_run else None)],
        )
        return answer

    async def replace(
        self, res: Resource, body: JSON, *, subresource: str | None = None, field_manager: str | None = None
    ) -> JSON:
        """PUT with the body's resourceVersion: a stale body gives a 409 conflict."""
        meta = body["metadata"]
        answer: JSON = await self.request(
            "PUT",
            res.path(meta.get("namespace"), meta["name"], subresource),
            body=body,
            params=[("fieldManager", field_manager)],
        )
        return answer

    async def patch(
        self,
        res: Resource,
        name: str,
        patch: Any,
        namespace: str | None = None,
        *,
        content_type: str = MERGE_PATCH,
        subresource: str | None = None,
        field_manager: str | None = None,
    ) -> JSON:
        answer: JSON = await self.request(
            "PATCH",
            res.path(namespace, name, subresource),
            body=patch,
            content_type=content_type,
            params=[("fieldManager", field_manager)],
        )
        return answer

    async def apply(
        self, res: Resource, body: JSON, *, field_manager: str, force: bool = False, subresource: str | None = None
    ) -> JSON:
        """Server-side apply (the body is sent as JSON, which is valid YAML)."""
        meta = body["metadata"]
        answer: JSON = await self.request(
            "PATCH",
            res.path(meta.get("namespace"), meta["name"], subresource),
            body=body,
            content_type=APPLY_PATCH,
            params=[("fieldManager", field_manager), ("force", "true" if force else None)],
        )
        return answer

    async def delete(
        self,
        res: Resource,
        name: str,
        namespace: str | None = None,
        *,
        uid: str | None = None,
        resource_version: str | None = None,
        grace_period_seconds: int | None = None,
        propagation_policy: str | None = None,
    ) -> JSON:
        options: JSON = {"kind": "DeleteOptions", "apiVersion": "v1"}
        preconditions = {k: v for k, v in (("uid", uid), ("resourceVersion", resource_version)) if v}
        if preconditions:
            options["preconditions"] = preconditions
        if grace_period_seconds is not None:
            options["gracePeriodSeconds"] = grace_period_seconds
        if propagation_policy:
            options["propagationPolicy"] = propagation_policy
        answer: JSON = await self.request("DELETE", res.path(namespace, name), body=options)
        return answer

    # -- discovery ---------------------------------------------------------------------------

    async def server_version(self) -> JSON:
        answer: JSON = await self.request("GET", "/version")
        return answer

    async def served_versions(self, group: str, plural: str) -> builtins.list[str]:
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


async def _lines(response: aiohttp.ClientResponse, path: str) -> AsyncIterator[bytes]:
    """Split the body into lines by hand: aiohttp's ``readline`` fails on a line longer than its
    buffer, and one ResourceSlice can be hundreds of KiB."""
    pending = b""
    try:
        async for chunk in response.content.iter_any():
            pending += chunk
            if b"\n" not in chunk:
                continue
            *lines, pending = pending.split(b"\n")
            for line in lines:
                if line.strip():
                    yield line
    except TRANSPORT_ERRORS as e:
        raise ConnectionLost("WATCH", path, e) from e
    if pending.strip():
        yield pending


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
        tail = chunk[-len(marker) :]
    return b"".join(chunks)


def _parse_retry_after(value: str | None) -> float | None:
    try:
        return max(0.0, float(value)) if value else None
    except ValueError:  # an HTTP date: rare from kube-apiserver, a short default will do
        return 1.0
