"""kopf's login goes where the operators' client goes: in a Pod, the Service's address from the
environment, never ``kubernetes.default.svc``, which needs cluster DNS (without it kopf stopped
the node agent a minute after every start on the lab's real nodes)."""

from __future__ import annotations

import kopf
import pytest

from operators.core.framework.login import connection, in_cluster_server

POD = {"KUBERNETES_SERVICE_HOST": "10.96.0.1", "KUBERNETES_SERVICE_PORT": "443"}


def service_account(**_):
    return kopf.ConnectionInfo(server="https://kubernetes.default.svc", token="t", ca_path="/ca.crt")


def kubeconfig(**_):
    return kopf.ConnectionInfo(server="https://from-kubeconfig:6443")


@pytest.fixture
def no_kubeconfig(monkeypatch, tmp_path):
    monkeypatch.delenv("KUBECONFIG", raising=False)
    monkeypatch.setenv("HOME", str(tmp_path))  # no ~/.kube/config


@pytest.mark.parametrize(
    ("env", "server"),
    [
        (POD, "https://10.96.0.1:443"),
        ({"KUBERNETES_SERVICE_HOST": "fd00::1", "KUBERNETES_SERVICE_PORT": "6443"}, "https://[fd00::1]:6443"),
        ({}, None),
        ({"KUBERNETES_SERVICE_HOST": "10.96.0.1"}, None),
    ],
)
def test_the_server_of_a_pod(env, server):
    assert in_cluster_server(env) == server


def test_in_a_pod_the_service_account_at_the_services_address(no_kubeconfig):
    info = connection(kopf.OperatorSettings(), env=POD, service_account=service_account, kubeconfig=kubeconfig)
    assert info is not None
    assert (info.server, info.token, info.ca_path) == ("https://10.96.0.1:443", "t", "/ca.crt")


def test_a_kubeconfig_wins_as_it_does_for_the_client(no_kubeconfig):
    env = {**POD, "KUBECONFIG": "/some/kubeconfig"}
    info = connection(kopf.OperatorSettings(), env=env, service_account=service_account, kubeconfig=kubeconfig)
    assert info is not None and info.server == "https://from-kubeconfig:6443"


def test_neither_a_pod_nor_a_kubeconfig(no_kubeconfig):
    info = connection(kopf.OperatorSettings(), env={}, service_account=lambda **_: None, kubeconfig=kubeconfig)
    assert info is None
