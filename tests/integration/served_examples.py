"""config/examples as a user of the lab's release applies them, as their READMEs say: the files
of an example's ``kubernetes-1.N/`` folder, for releases up to 1.N, instead of the same-named
ones, and DeviceTaintRules at the version the release serves (``resource.k8s.io/v1`` from 1.37;
the spec is the same in v1alpha3 and v1beta2)."""

from __future__ import annotations

import re
import shutil
from pathlib import Path

EXAMPLES = Path(__file__).resolve().parents[2] / "config" / "examples"
_RULE = re.compile(r"apiVersion: resource\.k8s\.io/v1\n(kind: DeviceTaintRule)")


def _release(folder: Path) -> int:
    return int(folder.name.rsplit(".", 1)[1])


def served_copy(path: Path, root: Path, minor: int, taint_rules: str) -> Path:
    """``path`` (an example, or a folder or file in one) in ``root``'s copy of its example,
    made on first use."""
    relative = path.relative_to(EXAMPLES)
    copy = root / relative.parts[0]
    if not copy.exists():
        shutil.copytree(EXAMPLES / relative.parts[0], copy)
        for folder in sorted(copy.glob("kubernetes-1.*"), key=_release, reverse=True):
            if minor <= _release(folder):  # the nearest release comes last and wins
                for file in folder.iterdir():
                    shutil.copy(file, copy / file.name)
            shutil.rmtree(folder)
        for file in copy.rglob("*.yaml"):
            file.write_text(_RULE.sub(rf"apiVersion: {taint_rules}\n\1", file.read_text()))
    return root / relative
