"""The claims controller: turns watch events into work-queue keys and syncs each key against
the cache and the API server. Decisions live in ``decisions``; this module only reads and writes.
"""

from __future__ import annotations

from dataclasses import dataclass

import structlog

from ..core.api.kube import APPLY_PATCH, ApiError, ConnectionLost, Kube
from ..core.api.resources import POD_GROUPS, PODS, RESOURCE_CLAIM_TEMPLATES, RESOURCE_CLAIMS
from ..core.dra import podgroup as pg
from ..core.dra import resourceclaim as rc
from ..core.dra.metatime import utcnow
from ..core.machinery import slim
from ..core.machinery.events import WARNING, EventRecorder
from ..core.machinery.store import Store, key_of
from ..core.machinery.uidcache import UidCache
from ..core.machinery.workqueue import RetryableError, WorkQueue
from . import decisions as d
from .metrics import Metrics

log = structlog.stdlib.get_logger("operators.claims")

POD_PREFIX, CLAIM_PREFIX, GROUP_PREFIX = "pod:", "claim:", "podgroup:"
EVENT_COMPONENT = "resource_claim"  # upstream's event recorder component


def _pod_claim_index(pod: d.Obj) -> list[str]:
    """``podResourceClaim``: ns/claim for every claim name the Pod already knows (spec only, as upstream)."""
    return rc.pod_claim_keys(pod, extended=False)


def _pod_template_index(pod: d.Obj) -> list[str]:
    return [
        f"{pod['metadata']['namespace']}/{c['resourceClaimTemplateName']}"
        for c in rc.pod_claims(pod)
        if c.get("resourceClaimTemplateName")
    ]


def _claim_owner_index(claim: d.Obj) -> list[str]:
    """``claimPodOwner``, and ``claimPodGroupOwner``: ns/uid of the controlling Pod or PodGroup
    (UIDs are unique across kinds, so one index serves both)."""
    uid = rc.owning_pod(claim)[1] or pg.owning_group_uid(claim)
    return [f"{claim['metadata']['namespace']}/{uid}"] if uid else []


@dataclass(frozen=True)
class Features:
    admin_access: bool = True
    prioritized_list: bool = True
    # GenericWorkload: the PodGroup API is served, Pods name their PodGroup.
    generic_workload: bool = False
    # DRAWorkloadResourceClaims (KEP-5729): claims of a PodGroup's resourceClaims are the
    # PodGroup's, shared by its Pods and reserved for the PodGroup.
    workload_claims: bool = False


class ClaimsController:
    def __init__(self, kube: Kube, workers: int = 50, features: Features = Features(), metrics: Metrics | None = None):
        self.kube = kube
        self.features = features
        self.metrics = metrics or Metrics()
        self.pods = Store(
            {"claim": _pod_claim_index, "template": _pod_template_index, "group": pg.member_keys}, transform=slim.pod
        )
        self.claims = Store({"owner": _claim_owner_index})
        self.templates = Store()
        self.pod_groups = Store({"claim": pg.group_claim_keys, "template": pg.group_template_keys})
        self.deleted_pods = UidCache()  # upstream's deletedObjects: Pods and PodGroups
        # Owner (Pod, PodGroup) UID -> its claims (pod claim names) whose create lost its answer:
        # looked for before creating again. An entry goes once that claim is seen or made, or its
        # owner is deleted; nothing else would ever remove it.
        self._uncertain_creates: dict[str, set[str]] = {}
        # Pod UIDs whose last sync failed (a template missing, an API error): read afresh before
        # the next one. What unblocks such a Pod (its template, seen by a watch event or a GET)
        # can reach us before the Pod's own later changes on the Pod watch: a status entry that
        # says no claim is needed, written before the template was created, would otherwise be
        # missed and a claim created (seen in test_claims_vs_upstream status_entry_without_name).
        self._stale_pods: set[str] = set()
        self.events = EventRecorder(kube, EVENT_COMPONENT)
        self.queue = WorkQueue("resource_claim", self.sync, workers=workers)

    # -- event handlers (from watches) -------------------------------------------------------

    def on_pod(self, pod: d.Obj, deleted: bool) -> None:
        if deleted:
            self.pods.delete(pod)
            self._stale_pods.discard(pod["metadata"].get("uid"))
            self._uncertain_creates.pop(pod["metadata"].get("uid"), None)
        else:
            self.pods.upsert(pod)
        self._enqueue_pod(pod, deleted)

    def on_claim(self, claim: d.Obj, deleted: bool) -> None:
        if deleted:
            self.claims.delete(claim)
        else:
            self.claims.upsert(claim)
            # Startup and updates: stale reservations are found by syncing every claim.
            self.queue.add(CLAIM_PREFIX + key_of(claim))
        for pod in self.pods.by_index("claim", key_of(claim)):
            self._enqueue_pod(pod, False)
        if self.features.workload_claims:
            for group in self.pod_groups.by_index("claim", key_of(claim)):
                self._enqueue_pod_group(group, False)

    def on_template(self, template: d.Obj, deleted: bool) -> None:
        if deleted:
            self.templates.delete(template)
            return
        key = key_of(template)
        self.templates.upsert(template)
        # A template that appears after its Pods unblocks them now, not at their next event
        # (nor at their retry, by then up to 1,000 s away: kubernetes#135835).
        waiting = sum(self._enqueue_pod(pod, False) for pod in self.pods.by_index("template", key))
        if waiting:
            log.info("template seen, syncing the Pods waiting for it", template=key, pods=waiting)
        if self.features.workload_claims:
            for group in self.pod_groups.by_index("template", key):
                self._enqueue_pod_group(group, False)

    def on_pod_group(self, pod_group: d.Obj, deleted: bool) -> None:
        """With the gate off the cache only answers ``getPodGroup`` (upstream: a lister, no handlers)."""
        if deleted:
            self.pod_groups.delete(pod_group)
            self._uncertain_creates.pop(pod_group["metadata"].get("uid"), None)
        else:
            self.pod_groups.upsert(pod_group)
        if self.features.workload_claims:
            self._enqueue_pod_group(pod_group, deleted)

    def _enqueue_pod_group(self, pod_group: d.Obj, deleted: bool) -> None:
        """``enqueuePodGroup``."""
        if not pg.group_claims(pod_group):
            return
        if deleted:
            self.deleted_pods.add(pod_group["metadata"]["uid"])
            for key in pg.group_claim_keys(pod_group):  # release the gone PodGroup's reservations
                self.queue.add(CLAIM_PREFIX + key)
        if d.pod_group_needs_work(pod_group, self.claims.get):
            self.queue.add(GROUP_PREFIX + pg.group_key(pod_group))
        # The PodGroup's claim may now be there for its Pods to record and reserve.
        for pod in self.pods.by_index("group", pg.group_key(pod_group)):
            self._enqueue_pod(pod, False)

    def _enqueue_pod(self, pod: d.Obj, deleted: bool) -> bool:
        """Returns whether the Pod itself needs a sync (and got one)."""
        if not rc.pod_claims(pod) and not rc.extended_claim_name(pod):
            return False
        if deleted:
            self.deleted_pods.add(pod["metadata"]["uid"])
        if not d.pod_needs_claims(pod, deleted):
            for key in rc.pod_claim_keys(pod):  # the scheduler-made extended-resource claim too
                self.queue.add(CLAIM_PREFIX + key)
        if not deleted and d.pod_needs_work(
            pod,
            self.claims.get,
            self.pod_groups.get,
            generic_workload=self.features.generic_workload,
            workload_claims=self.features.workload_claims,
        ):
            self.queue.add(POD_PREFIX + rc.pod_key(pod))
            return True
        return False

    # -- sync --------------------------------------------------------------------------------

    async def sync(self, key: str) -> None:
        prefix, _, object_key = key.partition(":")
        namespace, _, name = object_key.partition("/")
        if prefix + ":" == POD_PREFIX:
            await self.sync_pod(namespace, name)
        elif prefix + ":" == CLAIM_PREFIX:
            await self.sync_claim(namespace, name)
        elif prefix + ":" == GROUP_PREFIX:
            await self.sync_pod_group(namespace, name)
        else:
            log.error("unexpected work queue key", key=key)

    async def sync_pod(self, namespace: str, name: str) -> None:
        pod = self.pods.get(f"{namespace}/{name}")
        logger = log.bind(pod=f"{namespace}/{name}")
        if pod is not None and pod["metadata"]["uid"] in self._stale_pods:
            pod = await self._fresh_pod(pod)
        if pod is None or pod["metadata"].get("deletionTimestamp") or rc.is_terminal(pod):
            return
        try:
            group = d.pod_group_of(pod, self.pod_groups.get, self.features.generic_workload)
        except d.GroupLookupError as e:
            if not e.retry:
                logger.error("work item failed, will not retry", error=str(e))
                return
            raise RetryableError(f"get PodGroup for Pod {namespace}/{name}: {e}") from e
        if group is not None:
            logger = logger.bind(podgroup=pg.group_key(group))
        new_claims: dict[str, str] = {}
        for pod_claim in rc.pod_claims(pod):
            try:
                created = await self._handle_claim(pod, group, pod_claim, logger)
            except (ClaimError, ApiError) as e:
                self._stale_pods.add(pod["metadata"]["uid"])
                message = f"PodResourceClaim {pod_claim.get('name')}: {e}"
                await self.events.event(pod, WARNING, "FailedResourceClaimCreation", message)
                if isinstance(e, ClaimError) and not e.retry:
                    logger.error("work item failed, will not retry", error=message)
                    return
                raise RetryableError(f"pod {namespace}/{name}, {message}") from e
            if created is not None:
                new_claims[pod_claim["name"]] = created

        if new_claims:
            statuses = d.merge_claim_statuses(pod, new_claims)
            try:
                updated = await self.kube.request(
                    "PATCH",
                    PODS.path(namespace, name, "status"),
                    body=d.build_pod_status_apply(pod, statuses),
                    content_type=APPLY_PATCH,
                    params=[("fieldManager", d.FIELD_MANAGER), ("force", "true")],
                )
            except ApiError as e:
                if e.not_found:
                    return
                raise RetryableError(f"update pod {namespace}/{name} ResourceClaimStatuses: {e}") from e
            self.pods.upsert(updated)
            pod = updated
            logger.info("pod claim statuses updated", statuses=statuses)

        if not pod["spec"].get("nodeName"):
            return  # the scheduler reserves claims for Pods it schedules
        for pod_claim in rc.pod_claims(pod):
            claim_name, check_owner = rc.claim_name(pod, pod_claim)
            if claim_name is None:
                continue
            claim = self.claims.get(f"{namespace}/{claim_name}")
            if claim is None:
                return
            accept_group = self.features.workload_claims
            if check_owner and (problem := pg.is_for_pod_or_group(pod, claim, accept_group)):
                raise RetryableError(problem)
            if rc.is_allocated(claim) and not pg.is_reserved_for_pod_or_group(pod, claim, accept_group):
                try:
                    consumer = pg.bind_to(pod, group, pod_claim)
                except pg.BindError as e:
                    raise RetryableError(str(e)) from e
                if pg.is_group_entry(consumer) and not accept_group:
                    # Allocated but unreserved because of the gate: said at info level, as upstream (V(3)).
                    logger.info(
                        "not reserving PodGroup ResourceClaim because feature is disabled",
                        feature="DRAWorkloadResourceClaims",
                        claim=key_of(claim),
                    )
                    continue
                await self._reserve(consumer, claim, logger)

    async def _fresh_pod(self, cached: d.Obj) -> d.Obj | None:
        """The Pod as the API server has it now (None: gone, or another Pod by that name)."""
        namespace, name = cached["metadata"]["namespace"], cached["metadata"]["name"]
        try:
            pod = await self.kube.get_or_none(PODS, name, namespace)
        except (ApiError, ConnectionLost) as e:
            raise RetryableError(f"get pod {namespace}/{name}: {e}") from e
        self._stale_pods.discard(cached["metadata"]["uid"])
        if pod is None or pod["metadata"].get("uid") != cached["metadata"]["uid"]:
            return None
        self.pods.upsert(pod)
        return self.pods.get(f"{namespace}/{name}")

    async def _handle_claim(self, pod: d.Obj, group: d.Obj | None, pod_claim: d.Obj, logger) -> str | None:
        """Make sure the pod claim has its claim; return the name to record in the Pod status
        (an existing generated claim found by owner and annotation, or a new one; for a claim
        shared with the Pod's PodGroup, the PodGroup's claim once it exists)."""
        namespace = pod["metadata"]["namespace"]
        try:
            name, check_owner = rc.claim_name(pod, pod_claim)
        except rc.ClaimNotCreatedYet:
            name, check_owner = "", True
        except rc.UnsupportedPodClaim as e:
            raise ClaimError(f"checking for claim before creating it: {e}") from e
        else:
            if name is None:
                return None
        if name:

            def owned_by_pod(claim: d.Obj) -> str | None:
                return pg.is_for_pod_or_group(pod, claim, self.features.workload_claims)

            if await self._claim_exists(namespace, name, check_owner, owned_by_pod, "pod", logger):
                return None
        template_name = pod_claim.get("resourceClaimTemplateName")
        if not template_name:
            return None

        try:
            consumer = pg.bind_to(pod, group, pod_claim)
        except pg.BindError as e:
            raise ClaimError(str(e)) from e
        if group is not None and pg.is_group_entry(consumer):
            if not self.features.workload_claims:
                raise ClaimError(
                    f"claim {pod_claim['name']} is a PodGroup claim but the DRAWorkloadResourceClaims "
                    "feature is disabled",
                    retry=False,
                )
            # The PodGroup's claim (sync_pod_group creates it): recorded once it exists.
            owned = self.claims.by_index("owner", f"{namespace}/{group['metadata']['uid']}")
            claim = d.find_generated_claim(owned, pod_claim["name"])
            return claim["metadata"]["name"] if claim else None
        claim = await self._generated_claim(
            namespace,
            pod,
            pod_claim["name"],
            template_name,
            lambda template: d.build_claim(pod, pod_claim, template),
            logger,
        )
        return claim["metadata"]["name"]

    async def _generated_claim(
        self, namespace: str, owner: d.Obj, claim_key: str, template_name: str, build, logger
    ) -> d.Obj:
        """The claim generated for ``claim_key`` of ``owner`` (a Pod or a PodGroup): one it
        already controls (``findPodResourceClaim``, ``findPodGroupResourceClaim``), or a new one."""
        # A claim created before a crash (or a moment ago, before its watch event) is reused.
        owner_uid = owner["metadata"]["uid"]
        owned = self.claims.by_index("owner", f"{namespace}/{owner_uid}")
        claim = d.find_generated_claim(owned, claim_key)
        if claim is None and claim_key in self._uncertain_creates.get(owner_uid, ()):
            # A create whose answer was lost may have been carried out: look before creating again.
            owned = [
                c
                for c in await self.kube.list(
                    RESOURCE_CLAIMS,
                    namespace,
                    keep=lambda c: owner_uid in (rc.owning_pod(c)[1], pg.owning_group_uid(c)),
                )
            ]
            claim = d.find_generated_claim(owned, claim_key)
            if claim is not None:
                self.claims.upsert(claim)
                logger.info(
                    "found the claim of a create whose answer was lost",
                    claim=f"{namespace}/{claim['metadata']['name']}",
                )
        self._settled(owner_uid, claim_key)  # found, or known not to exist: created below
        if claim is not None:
            return claim
        template = self.templates.get(f"{namespace}/{template_name}") or await self._template(namespace, template_name)
        if template is None:
            raise ClaimError(
                f'resource claim template "{template_name}": resourceclaimtemplates.resource.k8s.io '
                f'"{template_name}" not found (create it in namespace {namespace}; the claim is '
                "created as soon as it exists)"
            )
        if problem := d.template_problem(template, self.features.admin_access, self.features.prioritized_list):
            raise ClaimError(problem)
        body = build(template)
        try:
            claim = await self.kube.create(RESOURCE_CLAIMS, body, namespace)
        except (ApiError, ConnectionLost) as e:
            self.metrics.claim_created(body, "failure")
            if isinstance(e, ConnectionLost) or e.status >= 500:
                self._uncertain_creates.setdefault(owner_uid, set()).add(claim_key)
                raise RetryableError(
                    f"create ResourceClaim for {owner.get('kind') or 'Pod'} "
                    f"{namespace}/{owner['metadata']['name']}: "
                    f"outcome unknown ({e}); will look for it before trying again"
                ) from e
            raise ClaimError(f"create ResourceClaim : {e.message or e}") from e
        self.metrics.claim_created(claim, "success")
        self.metrics.creation_latency.observe(d.age_seconds(owner, utcnow()))
        self.claims.upsert(claim)
        logger.info(
            "created ResourceClaim",
            claim=f"{namespace}/{claim['metadata']['name']}",
            template=template_name,
            claim_name=claim_key,
        )
        return claim

    def _settled(self, owner_uid: str, claim_key: str) -> None:
        """The outcome of ``claim_key``'s lost create is known (its claim found or not there)."""
        keys = self._uncertain_creates.get(owner_uid)
        if keys is not None:
            keys.discard(claim_key)
            if not keys:
                del self._uncertain_creates[owner_uid]

    async def _claim_exists(
        self, namespace: str, name: str, check_owner: bool, owner_problem, owner_kind: str, logger
    ) -> bool:
        """``claimExists``: the named claim exists and (if ``check_owner``) is still the owner's."""
        claim = self.claims.get(f"{namespace}/{name}")
        if claim is None:
            # Not cached (or not yet): the API server decides.
            claim = await self.kube.get_or_none(RESOURCE_CLAIMS, name, namespace)
            if claim is None:
                logger.info("generated claim is gone, creating it again", claim=f"{namespace}/{name}")
                return False
        if check_owner and (problem := owner_problem(claim)):
            logger.error(
                f"claim that was created for the {owner_kind} is no longer owned by the {owner_kind}, "
                "creating a new one",
                claim=f"{namespace}/{name}",
                problem=problem,
            )
            return False
        return True

    async def _reserve(self, consumer: d.Obj, claim: d.Obj, logger) -> None:
        """``reserveFor``: append the consumer (the Pod, or its PodGroup) to ``reservedFor``."""
        updated = dict(claim)
        status = dict(claim.get("status") or {})
        status["reservedFor"] = [*(status.get("reservedFor") or []), consumer]
        updated["status"] = status
        try:
            result = await self.kube.replace(RESOURCE_CLAIMS, updated, subresource="status")
        except ApiError as e:
            raise RetryableError(f"reserve claim {key_of(claim)}: {e}") from e
        self.claims.upsert(result)
        logger.info("reserved claim for pre-scheduled pod", claim=key_of(claim), consumer=consumer.get("resource"))

    async def sync_pod_group(self, namespace: str, name: str) -> None:
        """``syncPodGroup``: create the claims of the PodGroup's templates and record them in its status."""
        group = self.pod_groups.get(f"{namespace}/{name}")
        if group is None or group["metadata"].get("deletionTimestamp"):
            return
        logger = log.bind(podgroup=f"{namespace}/{name}")
        new_claims: dict[str, str] = {}
        for group_claim in pg.group_claims(group):
            try:
                found = await self._handle_group_claim(group, group_claim, logger)
            except (ClaimError, ApiError) as e:
                message = f"PodGroupResourceClaim {group_claim.get('name')}: {e}"
                involved = {"apiVersion": pg.API_VERSION, "kind": pg.KIND, **group}
                await self.events.event(involved, WARNING, "FailedResourceClaimCreation", message)
                raise RetryableError(f"PodGroup {namespace}/{name}, {message}") from e
            if found is not None:
                new_claims[group_claim["name"]] = found
        if not new_claims:
            return
        try:
            updated = await self.kube.request(
                "PATCH",
                POD_GROUPS.path(namespace, name, "status"),
                body=d.build_group_status_apply(group, new_claims),
                content_type=APPLY_PATCH,
                params=[("fieldManager", d.FIELD_MANAGER), ("force", "true")],
            )
        except ApiError as e:
            if e.not_found:
                return
            raise RetryableError(f"update PodGroup {namespace}/{name} ResourceClaimStatuses: {e}") from e
        self.pod_groups.upsert(updated)
        logger.info("PodGroup claim statuses updated", claims=new_claims)

    async def _handle_group_claim(self, group: d.Obj, group_claim: d.Obj, logger) -> str | None:
        """``handlePodGroupClaim``: the name to record in the PodGroup status, or None."""
        namespace = group["metadata"]["namespace"]
        try:
            name, check_owner = pg.claim_name_from_group(group, group_claim)
        except rc.ClaimNotCreatedYet:
            name, check_owner = "", True
        except rc.UnsupportedPodClaim as e:
            raise ClaimError(f"checking for claim before creating it: {e}") from e
        else:
            if name is None:
                return None
        if name:

            def owned_by_group(claim: d.Obj) -> str | None:
                return pg.is_for_pod_group(group, claim)

            if await self._claim_exists(namespace, name, check_owner, owned_by_group, "PodGroup", logger):
                return None
        template_name = group_claim.get("resourceClaimTemplateName")
        if not template_name:
            return None
        claim = await self._generated_claim(
            namespace,
            {"kind": pg.KIND, **group},
            group_claim["name"],
            template_name,
            lambda template: d.build_group_claim(group, group_claim, template),
            logger,
        )
        return claim["metadata"]["name"]

    async def _keep_group_entry(self, namespace: str, entry: d.Obj) -> bool:
        check = d.check_group_reservation(
            entry, self.pod_groups.get(f"{namespace}/{entry.get('name')}"), self.deleted_pods
        )
        if not check.needs_api_check:
            return check.keep
        # Maybe just created and not yet in the cache: only the API server is sure.
        live = await self.kube.get_or_none(POD_GROUPS, entry["name"], namespace)
        return live is not None and live["metadata"]["uid"] == entry.get("uid")

    async def sync_claim(self, namespace: str, name: str) -> None:
        claim = self.claims.get(f"{namespace}/{name}")
        if claim is None:
            return
        logger = log.bind(claim=f"{namespace}/{name}")
        reserved = (claim.get("status") or {}).get("reservedFor") or []
        remaining = []
        for entry in reserved:
            if self.features.workload_claims and pg.is_group_entry(entry):
                if await self._keep_group_entry(namespace, entry):
                    remaining.append(entry)
                else:
                    logger.info(
                        "removing reservation", podgroup=f"{namespace}/{entry.get('name')}", uid=entry.get("uid")
                    )
                continue
            if not rc.is_pod_entry(entry):
                remaining.append(entry)  # consumers we cannot check are kept (1.36+)
                continue
            check = d.check_pod_reservation(entry, self.pods.get(f"{namespace}/{entry.get('name')}"), self.deleted_pods)
            keep = check.keep
            if check.needs_api_check:
                # Maybe just created and not yet in the cache: only the API server is sure.
                live = await self.kube.get_or_none(PODS, entry["name"], namespace)
                keep = live is not None and live["metadata"]["uid"] == entry.get("uid")
            if keep:
                remaining.append(entry)
            else:
                logger.info("removing reservation", pod=f"{namespace}/{entry.get('name')}", uid=entry.get("uid"))

        try:
            if len(remaining) < len(reserved):
                claim = await self.kube.replace(
                    RESOURCE_CLAIMS, d.released_claim_status(claim, remaining), subresource="status"
                )
                self.claims.upsert(claim)
                logger.info("removed consumers", remaining=len(remaining), allocated=rc.is_allocated(claim))
                if d.has_finalizer(claim) and not rc.is_allocated(claim):
                    claim = await self.kube.replace(RESOURCE_CLAIMS, d.without_finalizer(claim))
                    self.claims.upsert(claim)
                    logger.info("removed finalizer after removing consumers")
            elif d.has_finalizer(claim) and claim["metadata"].get("deletionTimestamp") and not remaining:
                if rc.is_allocated(claim):
                    claim = await self.kube.replace(
                        RESOURCE_CLAIMS, d.released_claim_status(claim, []), subresource="status"
                    )
                    self.claims.upsert(claim)
                    logger.info("removed allocation because not needed")
                claim = await self.kube.replace(RESOURCE_CLAIMS, d.without_finalizer(claim))
                self.claims.upsert(claim)
                logger.info("removed finalizer because not needed")
        except ApiError as e:
            if e.not_found:
                return
            raise RetryableError(f"claim {namespace}/{name}: {e}") from e

        if remaining:
            return
        pod_name, pod_uid = rc.owning_pod(claim)
        if not pod_name:
            return  # not generated for a Pod (a PodGroup's claim goes with its PodGroup, by the garbage collector)
        pod = self.pods.get(f"{namespace}/{pod_name}")
        if pod is None:
            return  # maybe not known yet; a Pod that is really gone is the garbage collector's
        if pod["metadata"]["uid"] != pod_uid or rc.is_pod_done(pod):
            try:
                await self.kube.delete(RESOURCE_CLAIMS, name, namespace)
            except ApiError as e:
                if not e.not_found:
                    raise RetryableError(f"delete unused generated claim {namespace}/{name}: {e}") from e
            logger.info("deleted unused generated claim", pod=f"{namespace}/{pod_name}")

    async def _template(self, namespace: str, name: str) -> dict | None:
        """A template the cache does not have (yet): asked of the API server before it is reported
        missing. Its watch event may simply trail the Pod's (created just before it, arriving on
        another stream): a Warning Event then would be false. Upstream reads only its lister."""
        try:
            template = await self.kube.get(RESOURCE_CLAIM_TEMPLATES, name, namespace)
        except ApiError as e:
            if e.not_found:
                return None
            raise RetryableError(f"get ResourceClaimTemplate {namespace}/{name}: {e}") from e
        except ConnectionLost as e:
            raise RetryableError(f"get ResourceClaimTemplate {namespace}/{name}: {e}") from e
        self.templates.upsert(template)
        return template


class ClaimError(Exception):
    """A pod claim that cannot be satisfied now; reported as an Event and retried unless
    ``retry`` is False (upstream's nonRetryableError)."""

    def __init__(self, message: str, retry: bool = True):
        super().__init__(message)
        self.retry = retry
