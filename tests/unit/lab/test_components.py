from pathlib import Path

import pytest

from operators.lab import components
from operators.lab.components import Files, Ports

PORTS = Ports(etcd_client=1001, etcd_peer=1002, apiserver=1003, controller_manager=1004, scheduler=1005, kwok=1006)
FILES = Files(Path("/run/lab"))

HELP = """
      --feature-gates colonSeparatedMultimapStringString
                kube:AllAlpha=true|false (ALPHA - default=false)
                kube:DRAAdminAccess=true|false (BETA - default=true)
                kube:DRAConsumableCapacity=true|false (BETA - default=true)
                DRADeviceTaintRules=true|false (ALPHA - default=false)
                DRAExtendedResource=true|false (LOCKED - default=true)
                DynamicResourceAllocation=true|false (LOCKED - default=true)
                SomethingElse=true|false (BETA - default=true)
"""


def test_dra_gates_from_help_skip_locked_and_unrelated():
    assert components.dra_feature_gates(HELP) == ["DRAAdminAccess", "DRAConsumableCapacity", "DRADeviceTaintRules"]


def test_gate_dependencies_and_their_apis_follow():
    gates = components.dra_feature_gates("  kube:DRAWorkloadResourceClaims=true|false (BETA - default=false)\n")
    assert gates == ["DRAWorkloadResourceClaims", "GenericWorkload"]
    assert components.runtime_apis(gates)[-1] == "scheduling.k8s.io/v1beta1"


def test_controller_manager_disables_upstream_dra_controllers_by_default():
    args = components.build_controller_manager_args(Path("/b/kcm"), FILES, PORTS, ["DRAX"], False)
    assert (
        "--controllers=*,-resourceclaim-controller,-device-taint-eviction-controller,-resourcepoolstatusrequest-controller"
        in args
    )
    assert "--feature-gates=DRAX=true" in args
    assert "--leader-elect=false" in args


@pytest.mark.parametrize(
    ("minor", "scheduling"),
    [
        (34, None),
        (35, "scheduling.k8s.io/v1alpha1"),
        (36, "scheduling.k8s.io/v1alpha2"),
        (37, "scheduling.k8s.io/v1beta1"),
    ],
)
def test_each_release_gets_the_scheduling_version_it_serves(minor, scheduling):
    # (kube-apiserver refuses to start on a --runtime-config version it does not have.)
    apis = components.runtime_apis(["GenericWorkload"], minor)
    assert [a for a in apis if a.startswith("scheduling.")] == ([scheduling] if scheduling else [])


def test_release_minor_and_known_controllers_from_the_binaries():
    assert components.release_minor("Kubernetes v1.35.8\n") == 35
    with pytest.raises(ValueError, match="not a Kubernetes version"):
        components.release_minor("")
    help_text = (
        "      --controllers strings   A list of controllers to enable.\n"
        "                              All controllers: cronjob-controller, device-taint-eviction-controller, "
        "resourceclaim-controller\n"
        "                              Disabled-by-default controllers: bootstrap-signer-controller\n"
    )
    known = components.known_controllers(help_text)
    assert known == {"cronjob-controller", "device-taint-eviction-controller", "resourceclaim-controller"}
    # 1.34 and 1.35 have no resourcepoolstatusrequest-controller and refuse its name, even as -name.
    args = components.build_controller_manager_args(Path("/b/kcm"), FILES, PORTS, [], False, known=known)
    assert "--controllers=*,-resourceclaim-controller,-device-taint-eviction-controller" in args


def test_controller_manager_upstream_controllers_on():
    args = components.build_controller_manager_args(Path("/b/kcm"), FILES, PORTS, [], True)
    assert "--controllers=*" in args


def test_controller_manager_extra_flags_come_last():
    args = components.build_controller_manager_args(
        Path("/b/kcm"), FILES, PORTS, [], True, extra=("--node-monitor-grace-period=1h",)
    )
    assert args[-1] == "--node-monitor-grace-period=1h"


def test_apiserver_serves_every_resource_api_version_and_loopback_only():
    args = components.build_apiserver_args(Path("/b/apiserver"), FILES, PORTS, ["DRAA", "DRAB"])
    assert (
        "--runtime-config=resource.k8s.io/v1=true,resource.k8s.io/v1beta2=true,"
        "resource.k8s.io/v1beta1=true,resource.k8s.io/v1alpha3=true" in args
    )
    assert "--bind-address=127.0.0.1" in args and "--secure-port=1003" in args
    assert "--feature-gates=DRAA=true,DRAB=true" in args
    assert "--authorization-mode=Node,RBAC" in args
    assert any(a.startswith("--service-account-signing-key-file=") for a in args)


def test_scheduler_config_keeps_user_profiles_and_forces_lab_connection():
    user = {
        "profiles": [
            {
                "schedulerName": "default-scheduler",
                "pluginConfig": [{"name": "DynamicResources", "args": {"bindingTimeout": "5s"}}],
            }
        ],
        "clientConnection": {"kubeconfig": "/elsewhere", "qps": 7},
    }
    config = components.build_scheduler_config(Path("/run/lab/s.kubeconfig"), user)
    assert config["kind"] == "KubeSchedulerConfiguration"
    assert config["clientConnection"] == {"qps": 7, "burst": 1000, "kubeconfig": "/run/lab/s.kubeconfig"}
    assert config["leaderElection"] == {"leaderElect": False}
    assert config["profiles"] == user["profiles"]


def test_kwok_manages_only_annotated_nodes_with_upstream_and_lab_stages():
    args = components.build_kwok_args(Path("/b/kwok"), FILES, PORTS, Path("/stages"))
    assert "--manage-nodes-with-annotation-selector=kwok.x-k8s.io/node=fake" in args
    assert "--config=/stages/pod/fast" in args
    assert f"--config={FILES.kwok_stages}" in args


@pytest.mark.parametrize("phase,code", [("Succeeded", 0), ("Failed", 1)])
def test_finish_stages_select_on_annotation(phase, code):
    stage = {s["metadata"]["name"]: s for s in components.build_kwok_lab_stages()}[f"lab-pod-{phase.lower()}-on-demand"]
    expressions = stage["spec"]["selector"]["matchExpressions"]
    assert {
        "key": f'.metadata.annotations["{components.FINISH_ANNOTATION}"]',
        "operator": "In",
        "values": [phase],
    } in expressions
    assert f"exitCode: {code}" in stage["spec"]["next"]["statusTemplate"]
    assert f"phase: {phase}" in stage["spec"]["next"]["statusTemplate"]


def test_kwok_options_go_in_a_kwok_configuration_beside_the_stages():
    assert [d["kind"] for d in components.build_kwok_lab_stages()] == ["Stage", "Stage"]
    documents = components.build_kwok_lab_stages({"podPlayStageParallelism": 32})
    assert documents[-1]["kind"] == "KwokConfiguration"
    options = documents[-1]["options"]
    assert options["podPlayStageParallelism"] == 32
    assert options["nodeLeaseParallelism"] == 4 and options["podsOnNodeSyncParallelism"] == 1  # kwok's defaults


def test_node_is_kwok_managed_and_untainted():
    node = components.build_node("n1", {"gpu": "true"})
    assert node["metadata"]["annotations"][components.KWOK_NODE_ANNOTATION] == "fake"
    assert node["metadata"]["labels"]["gpu"] == "true"
    assert node["metadata"]["labels"]["kubernetes.io/hostname"] == "n1"
    assert "taints" not in node.get("spec", {})
    assert node["status"]["allocatable"]["pods"] == "250"


def test_kubeconfig_names_files_by_path():
    config = components.build_kubeconfig("https://127.0.0.1:1", Path("/ca"), Path("/c"), Path("/k"))
    assert config["clusters"][0]["cluster"] == {"server": "https://127.0.0.1:1", "certificate-authority": "/ca"}
    assert config["users"][0]["user"] == {"client-certificate": "/c", "client-key": "/k"}


def test_lab_down_of_a_lab_that_is_not_running_says_so(tmp_path):
    """A stale state (the lab died, or the user's lab lives in another --run-dir) must not read as
    "stopped": the message names the state it found."""
    from click.testing import CliRunner

    from operators.lab.cli import lab
    from operators.lab.cluster import LabState

    LabState(name="gone", run_dir=str(tmp_path), kubeconfig="k", server="s", ports={}, pids={"etcd": 2**22 + 1}).save()
    result = CliRunner().invoke(lab, ["down", "--name", "gone", "--run-dir", str(tmp_path)])
    assert result.exit_code == 0, result.output
    assert "lab 'gone' was not running" in result.output and str(tmp_path) in result.output


def test_free_ports_are_not_handed_out_twice_across_processes(tmp_path, monkeypatch):
    """Two pytest-xdist workers start labs side by side: a port one of them chose (free, not yet
    bound) must not go to the other. The record lives in a file, so it holds across processes."""
    from operators.lab import cluster

    monkeypatch.setattr(cluster, "_HANDED_OUT", tmp_path / "ports.json")
    picks = iter([20001, 20002, 20001, 20002, 20003])
    monkeypatch.setattr(cluster.random, "randrange", lambda low, high: next(picks))
    assert cluster.free_ports(2) == [20001, 20002]
    assert cluster.free_ports(1) == [20003]  # 20001 and 20002 were skipped, though free again


def test_an_unreadable_controller_list_switches_all_of_ours_off():
    assert components.replaced_controllers(frozenset()) == list(components.REPLACED_CONTROLLERS)
    assert components.replaced_controllers(None) == list(components.REPLACED_CONTROLLERS)
