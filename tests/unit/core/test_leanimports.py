"""The lazy kubernetes-asyncio packages give what the eager ones give, and leave out the rest.

Each check runs in a fresh interpreter: the packages can be made lazy only before their first
import."""

import json
import subprocess
import sys

from operators.core.leanimports import LAZY_PACKAGES

# Every public name of the packages, described by what it is (a module's name, or a class's
# module and qualified name, or a value's repr), eager or lazy as the argument says.
_DESCRIBE = """
import importlib, json, sys, types
if sys.argv[1] == "lazy":
    from operators.core import leanimports
    assert leanimports.lazy_kubernetes_client()
out = {}
for package in %r:
    module = importlib.import_module(package)
    names = sorted(n for n in dir(module) if not n.startswith("_")) + ["__version__"] * hasattr(module, "__version__")
    described = {}
    for name in names:
        value = getattr(module, name)
        if isinstance(value, types.ModuleType):
            described[name] = "module " + value.__name__
        elif isinstance(value, type):
            described[name] = "class " + value.__module__ + "." + value.__qualname__
        else:
            described[name] = repr(value)
    out[package] = described
print(json.dumps(out))
""" % (LAZY_PACKAGES,)

# What an operator's process imports before its first request, and its RSS then.
_FOOTPRINT = """
import json, sys
if sys.argv[1] == "lazy":
    from operators.core import leanimports
    assert leanimports.lazy_kubernetes_client()
    leanimports.without_rich()
import kopf, structlog
from operators.core.api import kube
import kubernetes_asyncio.config
from kubernetes_asyncio.client import ApiClient
rss = next(int(line.split()[1]) for line in open("/proc/self/status") if line.startswith("VmRSS")) / 1024
models = [m for m in sys.modules if m.startswith("kubernetes_asyncio.client.models.")]
print(json.dumps({"rss": rss, "models": len(models), "rich": "rich.console" in sys.modules,
                  "urllib3": "urllib3.connectionpool" in sys.modules,
                  "meta": kopf._cogs.helpers.thirdparty.V1ObjectMetaAsync.__name__}))
"""

# urllib3, loaded on first use, is the real one for every way of reaching it.
_URLLIB3 = """
import json, sys
from operators.core import leanimports
assert leanimports.lazy_kubernetes_client()
from kubernetes_asyncio.client import configuration
before = "urllib3.connectionpool" in sys.modules
token = configuration.Configuration(username="a", password="b").get_basic_auth_token()  # through the stand-in
import urllib3.util
from urllib3 import PoolManager
import urllib3
print(json.dumps({"before": before, "token": token, "real": sys.modules["urllib3"] is urllib3,
                  "same": configuration.urllib3.util is urllib3.util and PoolManager is urllib3.PoolManager}))
"""


def _run(script: str, mode: str) -> dict:
    out = subprocess.run([sys.executable, "-c", script, mode], capture_output=True, text=True, check=True)
    return json.loads(out.stdout)


def test_every_public_name_is_the_same_object_as_when_imported_eagerly():
    eager, lazy = _run(_DESCRIBE, "eager"), _run(_DESCRIBE, "lazy")
    assert set(eager) == set(lazy) == set(LAZY_PACKAGES)
    for package in LAZY_PACKAGES:
        assert len(eager[package]) > 5, package
        assert lazy[package] == eager[package], package


def test_an_operator_process_loads_no_model_it_does_not_use_and_no_rich():
    eager, lazy = _run(_FOOTPRINT, "eager"), _run(_FOOTPRINT, "lazy")
    assert eager["models"] > 700 and eager["rich"]  # shows what the lazy packages leave out
    # kopf still recognises the client's objects: the two classes it imports, loaded on use.
    assert lazy["meta"] == eager["meta"] == "V1ObjectMeta"
    assert lazy["models"] <= 5 and not lazy["rich"] and not lazy["urllib3"] and eager["urllib3"]
    assert lazy["rss"] < eager["rss"] - 30, (lazy["rss"], eager["rss"])


def test_it_changes_nothing_once_the_package_is_imported():
    script = ("import kubernetes_asyncio.client, sys\n"
              "from operators.core import leanimports\n"
              "print(leanimports.lazy_kubernetes_client(), type(sys.modules['kubernetes_asyncio.client'].__dict__.get('__getattr__')).__name__)")
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, check=True)
    assert out.stdout.split() == ["False", "NoneType"]


def test_urllib3_loads_on_first_use_and_is_the_real_one():
    out = subprocess.run([sys.executable, "-c", _URLLIB3], capture_output=True, text=True, check=True)
    assert json.loads(out.stdout) == {"before": False, "token": "Basic YTpi", "real": True, "same": True}


def test_operators_load_no_engine_until_they_need_it():
    # CEL only for v1alpha3 rules (taints) and gRPC only for the kubelet plugin (node agent).
    script = ("import sys, operators.claims.operator, operators.taints.operator, operators.nodeagent.operator\n"
              "print(sorted({m.split('.')[0] for m in sys.modules} & {'cel_expr_python', 'grpclib', 'grpc'}))")
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


def test_the_kubelet_plugin_serves_with_grpclib_never_grpcio():
    # grpcio (C core, its threads) is 10 MiB more RSS than grpclib for the same servers: the
    # tests' clients use it, the agent must not (bench/RESULTS.md, P4).
    script = ("import sys, operators.nodeagent.plugin.server, operators.nodeagent.plugin.liveness\n"
              "print(sorted({m.split('.')[0] for m in sys.modules} & {'grpclib', 'grpc', 'grpc_health'}))")
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "['grpclib']"
