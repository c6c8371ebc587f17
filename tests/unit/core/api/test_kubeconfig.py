"""The kubeconfig and in-cluster loading the API client uses (core/api/kubeconfig.py), checked
against what kubectl and client-go do with the same files."""

import base64
import datetime
import json
import os
import sys

import pytest
from aiohttp import web

from operators.core.api import kubeconfig
from operators.core.api.kube import Kube, RetryPolicy
from operators.core.api.kubeconfig import EXEC_TIMEOUT, KubeconfigError, context_namespace, load


def write(path, data):
    path.write_text(json.dumps(data))  # JSON is YAML
    return path


def config(server="https://10.0.0.1:6443", user=None, cluster_extra=None, contexts=None, current="main"):
    return {
        "apiVersion": "v1",
        "kind": "Config",
        "current-context": current,
        "clusters": [
            {"name": "c", "cluster": {"server": server, "insecure-skip-tls-verify": True, **(cluster_extra or {})}}
        ],
        "users": [{"name": "u", "user": user or {"token": "abc"}}],
        "contexts": contexts or [{"name": "main", "context": {"cluster": "c", "user": "u", "namespace": "team"}}],
    }


async def test_a_token_user_and_the_contexts_namespace(tmp_path):
    cluster = load(str(write(tmp_path / "kc", config())))
    assert cluster.host == "https://10.0.0.1:6443" and cluster.namespace == "team"
    assert await cluster.credentials.headers() == {"Authorization": "Bearer abc"}


def test_kubeconfig_lists_merge_as_kubectl_merges_them(tmp_path):
    """The first file to set a name wins; current-context from the first file that has one."""
    first = write(tmp_path / "a", {"contexts": [{"name": "other", "context": {"cluster": "c", "namespace": "x"}}]})
    second = write(
        tmp_path / "b",
        config(
            contexts=[
                {"name": "main", "context": {"cluster": "c", "user": "u", "namespace": "team"}},
                {"name": "other", "context": {"cluster": "c", "namespace": "ignored"}},
            ]
        ),
    )
    listed = os.pathsep.join([str(first), str(tmp_path / "missing"), str(second)])
    assert load(listed).namespace == "team"
    assert load(listed, context="other").namespace == "x"
    assert context_namespace(listed, "other") == "x" and context_namespace(listed, None) == "team"


def test_a_plain_http_server_needs_no_tls(tmp_path):
    cluster = load(str(write(tmp_path / "kc", config(server="http://127.0.0.1:8080"))))
    assert cluster.ssl_context is None


@pytest.mark.parametrize(
    "change,message",
    [
        ({"current": ""}, "no current-context"),
        ({"current": "nope"}, "context 'nope' not found"),
        ({"server": ""}, "has no server"),
        ({"user": {"auth-provider": {"name": "gcp"}}}, "auth-provider 'gcp', which is not supported"),
        (
            {"user": {"exec": {"apiVersion": "client.authentication.k8s.io/v1alpha1", "command": "x"}}},
            "exec apiVersion",
        ),
        ({"cluster_extra": {"insecure-skip-tls-verify": False, "certificate-authority-data": "%%%"}}, "not base64"),
        ({"cluster_extra": {"insecure-skip-tls-verify": False, "certificate-authority": "ca.crt"}}, "ca.crt"),
    ],
)
def test_what_cannot_work_is_named(tmp_path, change, message):
    with pytest.raises(KubeconfigError, match=message):
        load(str(write(tmp_path / "kc", config(**change))))


def test_a_missing_file_and_not_in_a_pod(tmp_path, monkeypatch):
    with pytest.raises(KubeconfigError, match="no such file"):
        load(str(tmp_path / "missing"))
    monkeypatch.delenv("KUBECONFIG", raising=False)
    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    with pytest.raises(KubeconfigError, match="not running in a Pod"):
        load(None)


async def test_in_cluster_reads_the_service_account_and_rereads_its_token(tmp_path, lab_ca):
    (tmp_path / "token").write_text("first")
    (tmp_path / "ca.crt").write_text(lab_ca)
    (tmp_path / "namespace").write_text("dra-system")
    cluster = kubeconfig.in_cluster(tmp_path, {"KUBERNETES_SERVICE_HOST": "fd00::1", "KUBERNETES_SERVICE_PORT": "443"})
    assert cluster.host == "https://[fd00::1]:443" and cluster.namespace == "dra-system"
    assert await cluster.credentials.headers() == {"Authorization": "Bearer first"}
    (tmp_path / "token").write_text("rotated")
    assert await cluster.credentials.headers() == {"Authorization": "Bearer first"}  # cached for a minute
    cluster.credentials.refresh()  # as after a 401
    assert await cluster.credentials.headers() == {"Authorization": "Bearer rotated"}


async def test_a_token_file_relative_to_its_kubeconfig(tmp_path):
    (tmp_path / "tok").write_text("from-file\n")
    cluster = load(str(write(tmp_path / "kc", config(user={"tokenFile": "tok"}))))
    assert await cluster.credentials.headers() == {"Authorization": "Bearer from-file"}


async def test_basic_auth(tmp_path):
    cluster = load(str(write(tmp_path / "kc", config(user={"username": "admin", "password": "pw"}))))
    assert await cluster.credentials.headers() == {"Authorization": "Basic " + base64.b64encode(b"admin:pw").decode()}


def exec_plugin(tmp_path, token="t1", expires=None, exit_code=0):
    """A credential plugin that counts its runs and prints an ExecCredential."""
    script = tmp_path / "plugin.py"
    status = {"token": token}
    if expires:
        status["expirationTimestamp"] = expires
    script.write_text(f"""import json, os, sys
info = json.loads(os.environ["KUBERNETES_EXEC_INFO"])
with open({str(tmp_path / "runs")!r}, "a") as f:
    f.write(json.dumps(info) + "\\n")
print(json.dumps({{"apiVersion": info["apiVersion"], "kind": "ExecCredential", "status": {status!r}}}))
sys.exit({exit_code})
""")
    return {
        "exec": {
            "apiVersion": "client.authentication.k8s.io/v1",
            "command": sys.executable,
            "args": [str(script)],
            "env": [{"name": "X", "value": "1"}],
            "provideClusterInfo": True,
        }
    }


def runs(tmp_path):
    return [json.loads(line) for line in (tmp_path / "runs").read_text().splitlines()]


async def test_an_exec_plugin_runs_once_until_its_credential_expires(tmp_path):
    later = (datetime.datetime.now(datetime.UTC) + datetime.timedelta(hours=1)).strftime("%Y-%m-%dT%H:%M:%SZ")
    cluster = load(str(write(tmp_path / "kc", config(user=exec_plugin(tmp_path, expires=later)))))
    assert await cluster.credentials.headers() == {"Authorization": "Bearer t1"}
    assert await cluster.credentials.headers() == {"Authorization": "Bearer t1"}
    assert len(runs(tmp_path)) == 1
    info = runs(tmp_path)[0]
    assert info["kind"] == "ExecCredential" and info["spec"]["interactive"] is False
    assert info["spec"]["cluster"]["server"] == "https://10.0.0.1:6443"
    cluster.credentials.refresh()
    await cluster.credentials.headers()
    assert len(runs(tmp_path)) == 2


async def test_a_failing_exec_plugin_says_so(tmp_path):
    cluster = load(str(write(tmp_path / "kc", config(user=exec_plugin(tmp_path, exit_code=3)))))
    with pytest.raises(KubeconfigError, match="exited with 3"):
        await cluster.credentials.headers()


async def test_a_hanging_exec_plugin_is_killed_and_named(tmp_path):
    """A plugin that never answers (it waits for a login in a browser) fails the request after the
    timeout instead of holding the operator, and the next request runs it again."""
    cluster = load(str(write(tmp_path / "kc", config(user=exec_plugin(tmp_path)))))
    plugin = cluster.credentials
    plugin.args = ["-c", "import time; time.sleep(60)"]
    plugin.timeout = 0.5
    with pytest.raises(KubeconfigError, match="could not run: TimeoutExpired"):  # raised once it is killed
        await plugin.headers()
    # The answering plugin gets the default timeout: a Python start on a loaded CI machine can
    # take longer than the 0.5 s that is only meant to end the hanging one quickly.
    plugin.args, plugin.timeout = exec_plugin(tmp_path)["exec"]["args"], EXEC_TIMEOUT
    assert await plugin.headers() == {"Authorization": "Bearer t1"}


async def test_a_401_fetches_fresh_credentials_and_tries_once_more(tmp_path):
    """A rotated token file: the request that gets 401 with the old token succeeds with the new
    one, as client-go's transport does after refreshing."""
    seen = []

    async def handle(request: web.Request) -> web.Response:
        seen.append(request.headers.get("Authorization"))
        if request.headers.get("Authorization") != "Bearer new":
            return web.json_response({"kind": "Status", "code": 401, "reason": "Unauthorized"}, status=401)
        return web.json_response({"kind": "Pod", "metadata": {"name": "p"}})

    app = web.Application()
    app.router.add_get("/{tail:.*}", handle)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]
    (tmp_path / "tok").write_text("old")
    kube = Kube(
        load(str(write(tmp_path / "kc", config(server=f"http://127.0.0.1:{port}", user={"tokenFile": "tok"})))),
        RetryPolicy(attempts=1),
    )
    try:
        await kube.cluster.credentials.headers()  # the old token is read and cached
        (tmp_path / "tok").write_text("new")
        assert (await kube.request("GET", "/api/v1/namespaces/ns/pods/p"))["metadata"]["name"] == "p"
        assert seen == ["Bearer old", "Bearer new"]
    finally:
        await kube.close()
        await runner.cleanup()


def test_client_certificates_are_loaded_from_data_without_leaving_a_file(tmp_path, lab_pki):
    ca, cert, key = lab_pki
    user = {
        "client-certificate-data": base64.b64encode(cert).decode(),
        "client-key-data": base64.b64encode(key).decode(),
    }
    extra = {"insecure-skip-tls-verify": False, "certificate-authority-data": base64.b64encode(ca).decode()}
    before = set(os.listdir(os.environ.get("TMPDIR", "/tmp")))
    cluster = load(str(write(tmp_path / "kc", config(user=user, cluster_extra=extra))))
    assert cluster.ssl_context is not None and cluster.ssl_context.verify_mode.name == "CERT_REQUIRED"
    after = set(os.listdir(os.environ.get("TMPDIR", "/tmp")))
    assert not [name for name in after - before if name.startswith("dra-operators-tls-")]


@pytest.fixture
def lab_pki(tmp_path):
    """A CA and a client certificate, made with the lab's own PKI helper."""
    from operators.lab.pki import Pki

    made = Pki(tmp_path / "pki")
    made.create({"admin": ("admin", "system:masters")})
    cert, key = made.client("admin")
    return made.ca_cert.read_bytes(), cert.read_bytes(), key.read_bytes()


@pytest.fixture
def lab_ca(lab_pki):
    return lab_pki[0].decode()
