"""Handlers are registered by an operator's ``operator`` module only: importing a package (for a
decision, a tool, another operator's helper) must not make a process run that operator."""

import json
import subprocess
import sys

# Every kopf handler in the default registry: (the module of its function, its id).
_COUNT = """
import importlib, json, sys
import kopf
for name in sys.argv[1:]:
    importlib.import_module(name)
registry = kopf.get_default_registry()
modules = [[h.fn.__module__, h.id] for part in vars(registry).values() if hasattr(part, "get_all_handlers")
           for h in part.get_all_handlers()]
print(json.dumps(modules))
"""


def _handler_modules(*modules: str) -> list[str]:
    out = subprocess.run([sys.executable, "-c", _COUNT, *modules], capture_output=True, text=True, check=True)
    return json.loads(out.stdout)


def _ours(handlers: list[list[str]]) -> list[str]:
    return [handler_id for module, handler_id in handlers if module.split(".")[0] == "operators"]


# Packages, and the modules other code imports from them (tools, controllers, decisions).
_IMPORTED = (
    "operators",
    "operators.cli",
    "operators.devices",
    "operators.demo",
    "operators.core",
    "operators.claims",
    "operators.claims.controller",
    "operators.taints",
    "operators.taints.controller",
    "operators.taints.cli",
    "operators.taints.preview",
    "operators.binding",
    "operators.binding.controller",
    "operators.binding.rbac",
    "operators.nodeagent",
    "operators.nodeagent.agent",
)


def test_importing_packages_registers_no_handler():
    assert _ours(_handler_modules(*_IMPORTED)) == []


def test_the_operator_modules_register_their_handlers():
    # Shows that the check above would see a handler: kopf run -m operators.<name>.operator.
    names = ("claims", "taints", "binding", "nodeagent", "poolstatus")
    found = set(_ours(_handler_modules(*(f"operators.{n}.operator" for n in names))))
    # Each through the one declarative start-up (core/framework/operator.py): start, stop, probe;
    # and kopf's login, once for the process.
    assert found == {f"{n}{suffix}" for n in names for suffix in ("-start", "-stop", "")} | {"dra-operators-login"}
