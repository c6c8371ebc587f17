"""The toolchain's own guarantees: the locks agree, every import is declared, the import contracts bite.

`make lint` runs the checks themselves (ruff, mypy, lint-imports) on the repository; these tests
check what the checks and the locks are for.
"""

from __future__ import annotations

import ast
import importlib.metadata
import os
import re
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

from tests.paths import ROOT

_PIN = re.compile(r"^([A-Za-z0-9][A-Za-z0-9._-]*)==(\S+) \\$", re.M)


def _normal(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def _pins(lock: str) -> dict[str, str]:
    text = (ROOT / lock).read_text()
    pins = {_normal(name): version for name, version in _PIN.findall(text)}
    assert pins, f"{lock} pins nothing"
    # pip-compile --generate-hashes: each pin is followed by its hashes, nothing is left unhashed.
    for block in re.split(r"\n(?=[A-Za-z0-9])", text):
        if block.strip() and not block.startswith(("#", "-")):
            assert "--hash=sha256:" in block, f"{lock}: no hash for {block.splitlines()[0]}"
    assert "--find-links" not in text and "--index-url" not in text and "-e " not in text
    return pins


def test_dev_lock_pins_exactly_the_runtime_versions():
    """What the tests run on is what the image ships: requirements-dev.lock holds every pin of
    requirements.lock at the same version (`make lock` compiles it with requirements.lock as its
    constraint), plus the test and lint tools."""
    runtime, dev = _pins("requirements.lock"), _pins("requirements-dev.lock")
    assert {name: dev.get(name) for name in runtime} == runtime
    extras = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"]
    for requirement in extras["test"] + extras["dev"]:
        name = _normal(re.split(r"[<>=!~ \[;]", requirement, maxsplit=1)[0])
        assert name in dev, f"{name} (an extra) is not pinned in requirements-dev.lock"


def _imported_top_level_names(*folders: str) -> dict[str, str]:
    """Top-level names of the non-stdlib modules imported anywhere under the folders, each with one
    file that imports it."""
    found: dict[str, str] = {}
    for path in sorted(p for folder in folders for p in (ROOT / folder).rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                names = [node.module]
            else:
                continue
            for name in names:
                top = name.split(".")[0]
                if top not in sys.stdlib_module_names:
                    found.setdefault(top, str(path.relative_to(ROOT)))
    return found


def _declared(*extras: str) -> set[str]:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    requirements = project["dependencies"] + [r for extra in extras for r in project["optional-dependencies"][extra]]
    return {_normal(re.split(r"[<>=!~ \[;]", r, maxsplit=1)[0]) for r in requirements}


@pytest.mark.parametrize(
    ("folders", "extras"),
    [(("operators",), ()), (("tests", "bench"), ("test",))],
    ids=["operators: runtime dependencies", "tests and bench: runtime and test dependencies"],
)
def test_every_third_party_import_is_a_declared_dependency(folders, extras):
    """An import that works only because another dependency happens to pull its package in breaks
    the day that dependency drops it: every distribution imported by operators/ is in
    pyproject.toml's runtime dependencies, and one imported by the tests or the benchmarks there
    or in the test extra."""
    declared = _declared(*extras)
    distributions = importlib.metadata.packages_distributions()
    undeclared = {}
    for name, where in _imported_top_level_names(*folders).items():
        if name in ("operators", "tests", "bench"):  # the project's own (bench/scale.py imports bench/bench.py)
            continue
        providers = {_normal(d) for d in distributions.get(name, [])}
        assert providers, f"{name} (imported by {where}) is not installed"
        if not providers & declared:
            undeclared[name] = (sorted(providers), where)
    assert not undeclared, f"imported but not declared in pyproject.toml: {undeclared}"


# -- import contracts: they fail when broken ---------------------------------------------------------


def _lint_imports_on_a_copy(tmp_path: Path, module: str, source: str) -> subprocess.CompletedProcess[str]:
    """lint-imports with the project's contracts on a copy of operators/ where ``module`` (new, or
    one that exists) ends with ``source``."""
    shutil.copytree(ROOT / "operators", tmp_path / "operators", ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy(ROOT / "pyproject.toml", tmp_path)
    path = (tmp_path / Path(*module.split("."))).with_suffix(".py")
    path.write_text((path.read_text() if path.exists() else "") + source)
    lint_imports = Path(sys.executable).parent / "lint-imports"
    # The copy comes first on the path (the editable install's finder only answers after it).
    return subprocess.run(
        [str(lint_imports), "--no-cache", "--no-logo"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "PYTHONPATH": str(tmp_path)},
    )


def _verdicts(output: str) -> dict[str, str]:
    return dict(re.findall(r"^(.+?) (KEPT|BROKEN)(?: \(.*\))?$", output, re.M))


@pytest.mark.parametrize(
    ("source", "broken"),
    [
        # A pure module that imports kopf itself.
        (
            "import kopf\n",
            {
                "core.dra is pure: no I/O, no event loop, no framework, no other core layer",
                "kopf only in core.framework, the operator modules and the CLI",
            },
        ),
        # ... or the framework layer above it (and so, indirectly, kopf and asyncio).
        (
            "from operators.core.framework import runtime\n",
            {
                "core is layered: framework > machinery > api > dra",
                "core.dra is pure: no I/O, no event loop, no framework, no other core layer",
            },
        ),
    ],
)
def test_the_core_contracts_fail_when_a_pure_module_imports_kopf(tmp_path, source, broken):
    result = _lint_imports_on_a_copy(tmp_path, "operators.core.dra._scratch", source)
    verdicts = _verdicts(result.stdout)
    assert result.returncode == 1, result.stdout + result.stderr
    assert {name for name, verdict in verdicts.items() if verdict == "BROKEN"} == broken, result.stdout
    assert "operators.core.dra._scratch ->" in result.stdout  # the copy was analysed, not the installed tree


@pytest.mark.parametrize(
    ("module", "source", "contract"),
    [
        (
            "operators.taints._scratch",
            "import operators.claims.decisions\n",
            "the operators are independent of each other",
        ),
        (
            "operators.lab._scratch",
            "from operators.core.dra import quantity\n",
            "the lab imports nothing else of operators",
        ),
        (
            "operators.claims.decisions",
            "from operators.core.api import kube\n",
            "an operator's decisions import only core.dra and the base modules",
        ),
    ],
    ids=["one operator imports another", "the lab imports core", "decisions import the API client"],
)
def test_the_other_contracts_fail_when_broken(tmp_path, module, source, contract):
    result = _lint_imports_on_a_copy(tmp_path, module, source)
    assert result.returncode == 1, result.stdout + result.stderr
    assert _verdicts(result.stdout)[contract] == "BROKEN", result.stdout
