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
    index: int  # position in its file, from 0
    body: dict[str, Any]
    line: int = 1  # the line its document starts on

    @property
    def kind(self) -> str:
        return str(self.body.get("kind") or "")

    @property
    def api_version(self) -> str:
        return str(self.body.get("apiVersion") or "")

    @property
    def metadata(self) -> dict[str, Any]:
        meta = self.body.get("metadata")
        return meta if isinstance(meta, dict) else {}  # a file may hold anything there

    @property
    def name(self) -> str:
        return str(self.metadata.get("name") or "")

    @property
    def namespace(self) -> str | None:
        namespace = self.metadata.get("namespace")
        return None if namespace is None else str(namespace)

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
    """Every mapping document of ``text`` (a ``List``'s items taken one by one); pure. A document
    that cannot be used (not a mapping, a List whose items are no list, aliases that expand
    beyond what kubectl decodes) is an error naming its file and line, and the others are kept."""
    loaded = Loaded()
    loader = yaml.SafeLoader(text)
    index = 0
    try:
        while loader.check_node():
            node = loader.get_node()
            if node is None:  # cannot happen: check_node said there is one
                break
            line = node.start_mark.line + 1
            problem = aliasing_problem(node)
            if problem:
                loaded.errors.append((file, f"document {index + 1} (line {line}) {problem}"))
                index += 1
                continue
            body = loader.construct_document(node)
            if body is None:
                continue
            is_list = isinstance(body, dict) and str(body.get("kind", "")).endswith("List")
            items = (body.get("items") or []) if is_list else [body]
            if not isinstance(items, list):
                loaded.errors.append(
                    (
                        file,
                        f"document {index + 1} (line {line}): items of a {body.get('kind')} "
                        f"must be a list of objects, not {type(items).__name__}",
                    )
                )
                index += 1
                continue
            for item in items:
                if not isinstance(item, dict):
                    loaded.errors.append((file, f"document {index + 1} (line {line}) is not a mapping"))
                else:
                    loaded.documents.append(Document(file, index, item, line))
                index += 1
    except yaml.YAMLError as e:
        loaded.errors.append((file, f"not valid YAML: {' '.join(str(e).split())}"))
    except RecursionError:
        mark = loader.get_mark()
        loaded.errors.append((file, f"nested too deeply (near line {mark.line + 1}): not a Kubernetes object"))
    finally:
        loader.dispose()
    return loaded


# kubectl reads YAML with sigs.k8s.io/yaml, which decodes with go.yaml.in/yaml/v2; its decoder
# refuses a document that expands through aliases far beyond its own size (decode.go v2.4.3
# allowedAliasRatio and unmarshal: "document contains excessive aliasing"). The same limits here:
# PyYAML shares the aliased objects, so loading is cheap, but sending the document (JSON) or
# walking it expands every alias.
_ALIAS_RATIO_LOW, _ALIAS_RATIO_HIGH = 400_000, 4_000_000


def _allowed_alias_ratio(decodes: int) -> float:
    if decodes <= _ALIAS_RATIO_LOW:
        return 0.99
    if decodes >= _ALIAS_RATIO_HIGH:
        return 0.10
    return 0.99 - 0.89 * (decodes - _ALIAS_RATIO_LOW) / (_ALIAS_RATIO_HIGH - _ALIAS_RATIO_LOW)


def _children(node: yaml.Node) -> list[yaml.Node]:
    if isinstance(node, yaml.MappingNode):
        return [n for pair in node.value for n in pair]
    if isinstance(node, yaml.SequenceNode):
        return list(node.value)
    return []


def aliasing_problem(root: yaml.Node) -> str | None:
    """Why the document ``root`` (a composed node graph, aliases shared) must not be expanded, or
    None. Counts as go-yaml decodes, in time linear in the graph: every node of the expanded
    tree is a decode; those reached through an alias (a node met again) are alias decodes."""
    size: dict[int, int] = {}  # expanded size of each node done
    open_: set[int] = set()  # nodes whose children are being counted: met again, a cycle
    aliased = 0
    stack: list[tuple[yaml.Node, bool]] = [(root, False)]
    while stack:
        node, counted = stack.pop()
        key = id(node)
        if counted:
            size[key] = 1 + sum(size[id(c)] for c in _children(node))
            open_.discard(key)
        elif key in open_:
            return "refers to itself through an alias (an anchor inside its own value)"
        elif key in size:
            aliased += size[key]  # an alias: the whole anchored value is decoded again
        else:
            open_.add(key)
            stack.append((node, True))
            stack.extend((c, False) for c in reversed(_children(node)))
    decodes = size[id(root)]
    if aliased > 100 and decodes > 1000 and aliased / decodes > _allowed_alias_ratio(decodes):
        return (
            f"contains excessive aliasing: its aliases expand it to {decodes:,} values "
            f"({aliased:,} of them through aliases); kubectl refuses it too"
        )
    return None


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
