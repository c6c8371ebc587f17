"""The YAML documents of the files given to the lint, each with where it came from."""

from __future__ import annotations

import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

YAML_SUFFIXES = (".yaml", ".yml", ".json")


@dataclass
class Document:
    file: str
    index: int          # position in its file, from 0
    body: dict[str, Any]
    line: int = 1       # the line its document starts on

    @property
    def kind(self) -> str:
        return str(self.body.get("kind") or "")

    @property
    def api_version(self) -> str:
        return str(self.body.get("apiVersion") or "")

    @property
    def name(self) -> str:
        return str((self.body.get("metadata") or {}).get("name") or "")

    @property
    def namespace(self) -> str | None:
        return (self.body.get("metadata") or {}).get("namespace")

    @property
    def ref(self) -> str:
        return f"{self.kind or '?'}/{self.name or '?'}"


@dataclass
class Loaded:
    documents: list[Document] = field(default_factory=list)
    errors: list[tuple[str, str]] = field(default_factory=list)  # (file, problem)


def expand(paths: list[str]) -> list[str]:
    """Files as given; a directory stands for its YAML files (not recursive, as kubectl -f)."""
    files = []
    for path in paths:
        p = Path(path)
        if p.is_dir():
            files += sorted(str(f) for f in p.iterdir() if f.is_file() and f.suffix in YAML_SUFFIXES)
        else:
            files.append(path)
    return files


def parse(text: str, file: str) -> Loaded:
    """Every mapping document of ``text`` (a ``List``'s items taken one by one); pure."""
    loaded = Loaded()
    try:
        nodes = list(yaml.compose_all(text, Loader=yaml.SafeLoader))
        bodies = list(yaml.safe_load_all(text))
    except yaml.YAMLError as e:
        loaded.errors.append((file, f"not valid YAML: {' '.join(str(e).split())}"))
        return loaded
    index = 0
    for node, body in zip(nodes, bodies):
        if body is None:
            continue
        line = node.start_mark.line + 1 if node is not None else 1
        items = body.get("items") if isinstance(body, dict) and str(body.get("kind", "")).endswith("List") else [body]
        for item in items or []:
            if not isinstance(item, dict):
                loaded.errors.append((file, f"document {index + 1} (line {line}) is not a mapping"))
            else:
                loaded.documents.append(Document(file, index, item, line))
            index += 1
    return loaded


def load(paths: list[str]) -> Loaded:
    loaded = Loaded()
    for file in expand(paths):
        try:
            text = sys.stdin.read() if file == "-" else Path(file).read_text()
        except (OSError, UnicodeDecodeError) as e:
            loaded.errors.append((file, f"cannot read: {e}"))
            continue
        one = parse(text, file)
        loaded.documents += one.documents
        loaded.errors += one.errors
    return loaded
