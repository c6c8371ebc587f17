"""Deploying the way users do: every kustomize overlay renders and passes a server-side dry run;
the base is applied for real; each operator runs under its own ServiceAccount token with exactly
the kustomize RBAC, without a single 403; the node agent's admission policy holds."""

from __future__ import annotations

import json
import os
import re
from pathlib import Path

import pytest
import yaml

from operators.core.api.kube import ApiError, Kube
from operators.core.api.resources import DEVICE_CLASSES, PODS, RESOURCE_SLICES

from . import objects
from .claims_env import ClaimsEnv
from .operator_process import OperatorProcess
from .test_kubelet_plugin import Node
from .waiting import wait_for, wait_gone

ROOT = Path(__file__).resolve().parents[2]
NAMESPACE = "dra-operators"
OVERLAYS = ("kind", "production", "simulated-devices")


@pytest.fixture(scope="module")
def base(lab):
    result = lab.kubectl("apply", "--server-side", "-k", str(ROOT / "kustomize" / "base"), check=False)
    assert result.returncode == 0, result.stderr
    return result.stdout


def test_base_is_applied_for_real(base, lab):
    for kind_name in (
        "deployment.apps/dra-claims",
        "daemonset.apps/dra-nodeagent",
        "validatingadmissionpolicy.admissionregistration.k8s.io/dra-operators-nodeagent-own-slices",
    ):
        assert kind_name in base
    got = lab.kubectl("get", "-n", NAMESPACE, "deployment/dra-claims", "-o", "json")
    assert json.loads(got.stdout)["spec"]["template"]["spec"]["serviceAccountName"] == "dra-claims"


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_overlay_renders_and_passes_server_side_dry_run(overlay, base, lab):
    path = str(ROOT / "kustomize" / "overlays" / overlay)
    rendered = list(yaml.safe_load_all(lab.kubectl("kustomize", path).stdout))
    kinds = {d["kind"] for d in rendered}
    assert {"Deployment", "DaemonSet", "ClusterRole", "ValidatingAdmissionPolicy"} <= kinds
    for workload in (d for d in rendered if d["kind"] in ("Deployment", "DaemonSet")):
        container = workload["spec"]["template"]["spec"]["containers"][0]
        assert container["securityContext"]["readOnlyRootFilesystem"] is True
        assert container["securityContext"]["allowPrivilegeEscalation"] is False
        assert container["livenessProbe"] and container["resources"]["requests"]
    dry = lab.kubectl("apply", "--server-side", "--dry-run=server", "-k", path, check=False)
    assert dry.returncode == 0, dry.stderr


async def service_account_kubeconfig(
    lab, kube: Kube, account: str, path: Path, bound_pod: dict | None = None, namespace: str = NAMESPACE
) -> Path:
    """A kubeconfig holding a TokenRequest token of ``account`` (bound to a Pod: then the token
    names the Pod's node, as a DaemonSet Pod's projected token does)."""
    spec: dict = {"expirationSeconds": 3600}
    if bound_pod:
        spec["boundObjectRef"] = {
            "apiVersion": "v1",
            "kind": "Pod",
            "name": bound_pod["metadata"]["name"],
            "uid": bound_pod["metadata"]["uid"],
        }
    response = await kube.request(
        "POST",
        f"/api/v1/namespaces/{namespace}/serviceaccounts/{account}/token",
        body={"apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest", "spec": spec},
    )
    config = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": "lab", "cluster": {"server": lab.server, "certificate-authority": str(lab.pki.ca_cert)}}],
        "users": [{"name": account, "user": {"token": response["status"]["token"]}}],
        "contexts": [{"name": account, "context": {"cluster": "lab", "user": account}}],
        "current-context": account,
    }
    path.write_text(yaml.safe_dump(config))
    return path


def assert_no_forbidden(process: OperatorProcess) -> None:
    text = process.log.read_text()
    # A status 403, not digits inside a token: a timestamp's ".403" or a UUID's "-403e-" (CI2 of
    # 2026-11-27 failed on the claim UID 9919b751-e9be-403e-...).
    denied = re.compile(r"(?<![\w.])403(?!\w)|forbidden", re.I)
    lines = [line for line in text.splitlines() if denied.search(line)]
    assert not lines, "RBAC denied something:\n" + "\n".join(lines[:10])


def assert_feature_gates_read(process: OperatorProcess) -> None:
    """DRAWorkloadResourceClaims is read from kube-apiserver's /metrics (nonResourceURLs in the
    ClusterRole); without it PodGroup claims would silently be handled as with the gate off."""
    assert "cannot read the API server's feature gates" not in process.log.read_text()


async def test_claims_operator_with_its_own_service_account(base, lab, kube, controllers, tmp_path, unique):
    controllers.use("none")
    kubeconfig = await service_account_kubeconfig(lab, kube, "dra-claims", tmp_path / "claims.kubeconfig")
    operator = OperatorProcess(
        ["claims"],
        kubeconfig,
        tmp_path,
        env={"DRA_LEADER_ELECTION": "true", "DRA_LEADER_ELECTION_NAMESPACE": NAMESPACE},
    )
    operator.start()
    try:
        async with ClaimsEnv(kube, f"rb{unique}") as env:
            await env.template("t")
            await env.pod("p", {"gpu": {"resourceClaimTemplateName": "t"}})
            await env.claim_of("p", "gpu")
            await env.wait_running("p")
            await env.finish("p")
            await env.wait_no_claims()
            await env.pod("waiting", {"gpu": {"resourceClaimTemplateName": "missing"}})
            await env.wait_event("FailedResourceClaimCreation")  # Events are allowed too
        assert "became leader" in operator.log.read_text()
        assert_no_forbidden(operator)
        assert_feature_gates_read(operator)
    finally:
        operator.stop()


async def test_node_agent_with_its_own_service_account(base, lab, kube, tmp_path, unique, namespace):
    async def daemon_pod():
        pods = await kube.list(PODS, NAMESPACE, field_selector="spec.nodeName=lab-node-0")
        return next((p for p in pods if p["metadata"]["name"].startswith("dra-nodeagent-")), None)

    pod = await wait_for(daemon_pod, what="the DaemonSet's Pod on lab-node-0")
    kubeconfig = await service_account_kubeconfig(lab, kube, "dra-nodeagent", tmp_path / "na.kubeconfig", pod)

    node = Node(lab, kube, namespace, unique, tmp_path, suffix="rb")
    node.name = "lab-node-0"
    node.agent.kubeconfig = kubeconfig
    node.agent.extra_env["NODE_NAME"] = "lab-node-0"
    allowed = allow_driver(lab, node.driver)  # as the policy's comment tells users of another driver
    # The API server reads policies through an informer: the patch takes effect a moment later,
    # and a slice published before then is denied (the agent retries, but logs the 403).
    await allowed.wait_admitted(kubeconfig, "lab-node-0", unique)
    node.agent.start()
    try:
        await kube.create(DEVICE_CLASSES, objects.device_class(node.driver, node.driver))
        await wait_for(
            lambda: kube.list(RESOURCE_SLICES, field_selector=f"spec.driver={node.driver}"),
            what="slices published with the node agent's own token",
        )
        await node.kubelet.register()
        claim = await node.allocated_claim("rbac")
        response = await node.kubelet.prepare([claim])
        assert response.claims[claim["metadata"]["uid"]].error == ""
        assert_no_forbidden(node.agent)

        async with await Kube.connect(str(kubeconfig)) as agent_kube:
            # Another node's slice: the admission policy says no.
            other = objects.resource_slice(f"intruder-{unique}", node.driver, "lab-node-1", [objects.device("gpu-0")])
            with pytest.raises(ApiError) as denied:
                await agent_kube.create(RESOURCE_SLICES, other)
            assert denied.value.status in (403, 422)
            assert "may not write ResourceSlices of node lab-node-1" in denied.value.message
            # Pods are none of its business.
            with pytest.raises(ApiError) as forbidden:
                await agent_kube.list(PODS, "default")
            assert forbidden.value.status == 403
            # A slice of a driver the policy does not list: no either.
            foreign = objects.resource_slice(
                f"foreign-{unique}", f"other-{unique}.example.com", "lab-node-0", [objects.device("gpu-0")]
            )
            with pytest.raises(ApiError) as denied:
                await agent_kube.create(RESOURCE_SLICES, foreign)
            assert f"may not write ResourceSlices of driver other-{unique}.example.com" in denied.value.message
    finally:
        await node.kubelet.close()
        node.agent.stop()
        allowed.undo()
        await kube.delete(DEVICE_CLASSES, node.driver)


POLICY = "dra-operators-nodeagent-own-slices"
POLICIES = (POLICY, "dra-operators-nodeagent-own-claims")  # both list the node agent's drivers


class allow_driver:
    """Add ``driver`` to the live admission policies' allowedDrivers (undo() restores them)."""

    def __init__(self, lab, driver: str):
        self.lab, self.driver = lab, driver
        self.originals: dict[str, tuple[int, str]] = {}
        # The slices policy last: wait_admitted probes it, and the API server reads every policy
        # from one informer's lister (k8s.io/apiserver generic/policy_source.go
        # calculatePolicyData), updated in order: once it admits, the other patch is in too.
        for name in reversed(POLICIES):
            policy = json.loads(lab.kubectl("get", "validatingadmissionpolicy", name, "-o", "json").stdout)
            [variable] = [i for i, v in enumerate(policy["spec"]["variables"]) if v["name"] == "allowedDrivers"]
            original = policy["spec"]["variables"][variable]["expression"]
            self.originals[name] = (variable, original)
            drivers = yaml.safe_load(original) + [driver]  # a CEL list of strings is a YAML flow list
            self._set(name, variable, json.dumps(drivers))

    def _set(self, name: str, variable: int, expression: str) -> None:
        patch = [{"op": "replace", "path": f"/spec/variables/{variable}/expression", "value": expression}]
        self.lab.kubectl("patch", "validatingadmissionpolicy", name, "--type=json", "-p", json.dumps(patch))

    async def wait_admitted(self, kubeconfig: Path, node: str, unique: str) -> None:
        """Until a dry-run create of a slice of the driver, with the agent's token, is admitted."""
        probe = objects.resource_slice(f"probe-{unique}", self.driver, node, [objects.device("gpu-0")])
        async with await Kube.connect(str(kubeconfig)) as agent_kube:

            async def admitted() -> bool:
                try:
                    await agent_kube.create(RESOURCE_SLICES, probe, dry_run=True)
                except ApiError as e:
                    if "may not write ResourceSlices of driver" not in e.message:
                        raise
                    return False
                return True

            await wait_for(admitted, what=f"the admission policy to admit driver {self.driver}")

    def undo(self) -> None:
        for name, (variable, original) in self.originals.items():
            self._set(name, variable, original)


async def test_admission_policy_holds_in_an_overlay_that_renames_the_namespace(base, lab, kube, tmp_path, unique):
    """kustomize's ``namespace:`` does not rewrite CEL: the policy must not depend on the
    namespace. An overlay renames it; its node agent's token is still held to its own node and
    to the listed drivers."""
    namespace = f"gpu-system-{unique}"

    def render(name: str, **rename) -> dict:
        overlay = tmp_path / name
        overlay.mkdir()
        (overlay / "kustomization.yaml").write_text(
            yaml.safe_dump(
                {
                    "apiVersion": "kustomize.config.k8s.io/v1beta1",
                    "kind": "Kustomization",
                    **rename,
                    "resources": [os.path.relpath(ROOT / "kustomize" / "overlays" / "simulated-devices", overlay)],
                }
            )
        )
        return {
            (d["kind"], d["metadata"]["name"]): d
            for d in yaml.safe_load_all(lab.kubectl("kustomize", str(overlay)).stdout)
        }

    # kustomize's plain `namespace:` leaves ServiceAccount subjects of role bindings behind (it
    # moves only those named "default"): docs/install.md's rename uses the NamespaceTransformer.
    plain = render("plain", namespace=namespace)
    assert plain["ClusterRoleBinding", "dra-operators:nodeagent"]["subjects"][0]["namespace"] == NAMESPACE
    rendered = render(
        "renamed",
        transformers=[
            yaml.safe_dump(
                {
                    "apiVersion": "builtin",
                    "kind": "NamespaceTransformer",
                    "metadata": {"name": "rename", "namespace": namespace},
                    "setRoleBindingSubjects": "allServiceAccounts",
                    "unsetOnly": False,
                }
            )
        ],
        patches=[
            {
                "target": {"kind": "Namespace", "name": NAMESPACE},
                "patch": json.dumps([{"op": "replace", "path": "/metadata/name", "value": namespace}]),
            }
        ],
    )
    assert rendered["ServiceAccount", "dra-nodeagent"]["metadata"]["namespace"] == namespace
    policy = rendered["ValidatingAdmissionPolicy", POLICY]
    live = json.loads(lab.kubectl("get", "validatingadmissionpolicy", POLICY, "-o", "json").stdout)
    assert policy["spec"]["matchConditions"] == live["spec"]["matchConditions"], "the overlay's policy is the base's"
    assert "dra-operators" not in json.dumps(policy["spec"]["matchConditions"])
    # The renamed overlay's node agent identity: its namespace, ServiceAccount and role binding
    # (under a name of this test's own, beside the base's).
    binding = rendered["ClusterRoleBinding", "dra-operators:nodeagent"]
    binding["metadata"]["name"] = f"dra-operators:nodeagent-{unique}"
    assert binding["subjects"][0]["namespace"] == namespace
    for obj in (rendered["Namespace", namespace], rendered["ServiceAccount", "dra-nodeagent"], binding):
        applied = lab.kubectl("apply", "--server-side", "-f", "-", input=yaml.safe_dump(obj), check=False)
        assert applied.returncode == 0, applied.stderr
    try:
        pod = await kube.create(
            PODS,
            {
                **objects.pod("agent", {}),
                "spec": {
                    "serviceAccountName": "dra-nodeagent",
                    "nodeName": "lab-node-0",
                    "containers": [{"name": "agent", "image": "busybox:1.37"}],
                },
            },
            namespace,
        )
        kubeconfig = await service_account_kubeconfig(
            lab, kube, "dra-nodeagent", tmp_path / "renamed.kubeconfig", pod, namespace=namespace
        )
        async with await Kube.connect(str(kubeconfig)) as agent_kube:

            def slice_(name: str, driver: str, node: str) -> dict:
                return objects.resource_slice(f"{name}-{unique}", driver, node, [objects.device("gpu-0")])

            with pytest.raises(ApiError) as denied:
                await agent_kube.create(
                    RESOURCE_SLICES, slice_("other-node", "gpu.sim.dra-operators.dev", "lab-node-1")
                )
            assert "may not write ResourceSlices of node lab-node-1" in denied.value.message
            with pytest.raises(ApiError) as denied:
                await agent_kube.create(RESOURCE_SLICES, slice_("other-driver", f"x{unique}.example.com", "lab-node-0"))
            assert f"may not write ResourceSlices of driver x{unique}.example.com" in denied.value.message
            own = await agent_kube.create(RESOURCE_SLICES, slice_("own", "gpu.sim.dra-operators.dev", "lab-node-0"))
            await agent_kube.delete(RESOURCE_SLICES, own["metadata"]["name"])
    finally:
        lab.kubectl("delete", "clusterrolebinding", binding["metadata"]["name"], "--ignore-not-found", check=False)
        lab.kubectl("delete", "namespace", namespace, "--wait=false", check=False)


async def test_taints_operator_with_its_own_service_account(
    base, lab, kube, controllers, tmp_path, unique, namespace, cluster_objects
):
    from operators.core.api.resources import DEVICE_TAINT_RULES, RESOURCE_CLAIMS

    controllers.use("none")
    driver = f"rbt-{unique}.lab.dra-operators.dev"
    await cluster_objects.create(DEVICE_CLASSES, objects.device_class(driver, driver))
    await cluster_objects.create(
        RESOURCE_SLICES, objects.resource_slice(f"rbt-{unique}", driver, "lab-node-0", [objects.device("gpu-0")])
    )
    await kube.create(RESOURCE_CLAIMS, objects.resource_claim("c", driver), namespace)
    await kube.create(PODS, objects.pod("victim", {"gpu": {"resourceClaimName": "c"}}), namespace)
    await wait_for(lambda: _phase(kube, namespace, "victim", "Running"), what="victim Running")
    rules = await kube.preferred_version(DEVICE_TAINT_RULES)
    await cluster_objects.create(
        rules,
        {
            "apiVersion": rules.group_version,
            "kind": "DeviceTaintRule",
            "metadata": {"name": f"rbt-{unique}"},
            "spec": {
                "deviceSelector": {"driver": driver},
                "taint": {"key": "example.com/broken", "effect": "NoExecute"},
            },
        },
    )

    kubeconfig = await service_account_kubeconfig(lab, kube, "dra-taints", tmp_path / "taints.kubeconfig")
    operator = OperatorProcess(
        ["taints"],
        kubeconfig,
        tmp_path,
        env={"DRA_LEADER_ELECTION": "true", "DRA_LEADER_ELECTION_NAMESPACE": NAMESPACE},
    )
    operator.start()
    try:
        await wait_gone(kube, PODS, "victim", namespace, timeout=60)

        async def status():
            rule = await kube.get(rules, f"rbt-{unique}")
            return [c for c in (rule.get("status") or {}).get("conditions") or [] if c["type"] == "EvictionInProgress"]

        await wait_for(status, timeout=30, what="rule status written")
        assert "became leader" in operator.log.read_text()
        assert_no_forbidden(operator)
        assert_feature_gates_read(operator)
    finally:
        operator.stop()


async def _phase(kube, namespace, name, phase):
    pod = await kube.get_or_none(PODS, name, namespace)
    return pod is not None and pod["status"].get("phase") == phase


LEASE_HOLDERS = {
    "dra-claims": "claims",
    "dra-taints": "taints",
    "dra-binding": "binding",
    "dra-poolstatus": "poolstatus",
}


def _can(lab, account: str, verb: str, resource: str) -> bool:
    answer = lab.kubectl(
        "auth",
        "can-i",
        verb,
        resource,
        "-n",
        NAMESPACE,
        f"--as=system:serviceaccount:{NAMESPACE}:{account}",
        check=False,
    )
    assert answer.stdout.strip() in ("yes", "no"), answer.stderr
    return answer.stdout.strip() == "yes"


def test_each_operator_may_hold_its_own_lease_only(base, lab):
    """The leader-election Roles name their Lease (resourceNames): a compromised operator cannot
    take or renew another's Lease. create cannot be limited by name in RBAC, so it stays."""
    for account, operator in LEASE_HOLDERS.items():
        for other in LEASE_HOLDERS.values():
            lease = f"leases.coordination.k8s.io/dra-operators-{other}"
            assert _can(lab, account, "update", lease) == (other == operator), (account, "update", lease)
            assert _can(lab, account, "get", lease) == (other == operator), (account, "get", lease)
        assert _can(lab, account, "create", "leases.coordination.k8s.io")
        assert not _can(lab, account, "delete", f"leases.coordination.k8s.io/dra-operators-{operator}")
