"""Lean imports for the operators' processes: what an operator never uses is never loaded.

kubernetes-asyncio's ``client`` package imports its 66 API classes and 768 model classes at
once (about 45 MiB of a process's RSS); kopf imports it as soon as it is installed (to recognise
its ``V1ObjectMeta``), and our client uses only ``ApiClient``, ``Configuration`` and the config
loaders. ``lazy_kubernetes_client()`` puts module objects for ``kubernetes_asyncio``, its
``client``, ``client.api`` and ``client.models`` into ``sys.modules`` before anything imports
them: each runs its ``__init__``'s statements except the imports of its own submodules, which
become names loaded on first use (PEP 562 ``__getattr__``). Every public name resolves to the
very object the eager package would give (tests/unit/core/test_leanimports.py compares them).

kubernetes-asyncio's ``configuration`` module imports urllib3 (about 2 MiB with what urllib3
alone pulls in: its HTTP/2 probe's importlib.metadata, zipfile) for one call, the basic-auth
header, which our client never makes: ``urllib3`` becomes a module that imports the real one on
its first attribute.

structlog's console renderer imports rich (about 16 MiB) when it is installed; an operator's
process logs JSON or plain lines and never renders with rich (``without_rich()``); the
kubectl plugin's tables still use it, in their own processes.

Both must run before the first import of the packages (``dra-operators run`` does, first thing);
afterwards they change nothing.
"""

from __future__ import annotations

import ast
import importlib
import importlib.machinery
import importlib.util
import sys
import types
from pathlib import Path

# Packages made lazy, parents first: the generated ones whose ``__init__`` imports everything.
LAZY_PACKAGES = ("kubernetes_asyncio", "kubernetes_asyncio.client", "kubernetes_asyncio.client.api",
                 "kubernetes_asyncio.client.models")
# Modules those import at the top and use only in calls we never make: loaded on first use.
LAZY_DEPENDENCIES = ("urllib3",)


def lazy_kubernetes_client() -> bool:
    """Install the lazy packages; False (nothing done) when kubernetes_asyncio is already
    imported or not installed."""
    if any(name in sys.modules for name in LAZY_PACKAGES):
        return False
    spec = importlib.util.find_spec("kubernetes_asyncio")  # finds it without running it
    if spec is None or not spec.submodule_search_locations:
        return False
    root = Path(list(spec.submodule_search_locations)[0])
    modules = []
    for name in LAZY_PACKAGES:
        directory = root.joinpath(*name.split(".")[1:])
        modules.append(_lazy_package(name, directory))
    for module in modules:  # parents hold their children, as the import system does
        parent, _, child = module.__name__.rpartition(".")
        if parent:
            setattr(sys.modules[parent], child, module)
    for module in modules:
        _run_statements(module, Path(module.__file__))
    for name in LAZY_DEPENDENCIES:
        if name not in sys.modules and importlib.util.find_spec(name) is not None:
            _lazy_module(name)
    return True


def without_rich() -> None:
    """Make ``import rich`` fail in this process unless something already imported it."""
    sys.modules.setdefault("rich", None)  # type: ignore[arg-type] - None means "not importable"


def _lazy_package(name: str, directory: Path) -> types.ModuleType:
    init = directory / "__init__.py"
    spec = importlib.machinery.ModuleSpec(name, None, origin=str(init), is_package=True)
    spec.submodule_search_locations = [str(directory)]
    spec.has_location = True
    module = importlib.util.module_from_spec(spec)
    module.__file__ = str(init)
    module.__lazy__ = {}
    module.__getattr__ = _getattr_of(module, directory)
    module.__dir__ = lambda: sorted(set(vars(module)) | set(module.__lazy__))
    sys.modules[name] = module
    return module


def _run_statements(module: types.ModuleType, init: Path) -> None:
    """Run ``__init__.py`` but for the imports from the package's own tree, which are recorded
    as lazy names instead."""
    tree = ast.parse(init.read_text(encoding="utf-8"), str(init))
    root = module.__name__.split(".")[0]
    kept: list[ast.stmt] = []
    lazy: dict[str, tuple[str, str | None]] = module.__lazy__
    for node in tree.body:
        if isinstance(node, ast.ImportFrom) and node.level == 0 and (node.module or "").startswith(root + "."):
            for alias in node.names:
                lazy[alias.asname or alias.name] = (node.module, alias.name)
        elif isinstance(node, ast.Import) and all(a.name.startswith(root + ".") for a in node.names):
            for alias in node.names:
                if alias.asname is None:
                    continue  # ``import a.b.c`` binds ``a``: the root, already there
                lazy[alias.asname] = (alias.name, None)
        else:
            kept.append(node)
    code = compile(ast.Module(body=kept, type_ignores=[]), str(init), "exec")
    exec(code, vars(module))  # noqa: S102 - the package's own __init__, minus its imports


def _getattr_of(module: types.ModuleType, directory: Path):
    def __getattr__(name: str):
        target = module.__lazy__.get(name)
        if target is not None:
            source, attribute = target
            imported = importlib.import_module(source)
            value = imported if attribute is None else getattr(imported, attribute)
        elif (directory / f"{name}.py").is_file() or (directory / name / "__init__.py").is_file():
            value = importlib.import_module(f"{module.__name__}.{name}")
        else:
            raise AttributeError(f"module {module.__name__!r} has no attribute {name!r}")
        setattr(module, name, value)
        return value

    return __getattr__


def _lazy_module(name: str) -> types.ModuleType:
    """A stand-in for module ``name`` in ``sys.modules``: its first attribute looked up (an
    ``import name.sub``, a ``from name import x`` or ``name.x``) imports the real module, which
    takes its place in ``sys.modules``; those who hold the stand-in reach the real module's names
    through it."""
    stub = types.ModuleType(name, f"{name}, imported on first use (operators.core.leanimports)")

    def __getattr__(attribute: str):
        if sys.modules.get(name) is stub:
            del sys.modules[name]
        return getattr(importlib.import_module(name), attribute)

    stub.__getattr__ = __getattr__  # type: ignore[method-assign]
    sys.modules[name] = stub
    return stub
