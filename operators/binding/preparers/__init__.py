"""Preparers, selected by name (``DRA_BINDING_PREPARER``) with a JSON configuration
(``DRA_BINDING_PREPARER_CONFIG``).

The built-in ones are ``simulated`` and ``http``. A third party adds one by publishing an entry
point in the ``dra_operators.preparers`` group, naming a callable that takes the configuration
dict and returns a ``Preparer``::

    [project.entry-points."dra_operators.preparers"]
    fpga = "acme_fpga.binding:FpgaPreparer"
"""

from __future__ import annotations

import json
from collections.abc import Callable
from importlib.metadata import entry_points
from pathlib import Path
from typing import Any

from .base import ConfigError, Outcome, Preparation, Preparer
from .http import HttpPreparer
from .simulated import SimulatedPreparer

ENTRY_POINT_GROUP = "dra_operators.preparers"
# Also declared as entry points in pyproject.toml; listed here so that they work from a source
# tree that was never installed.
BUILTIN: dict[str, Callable[[dict[str, Any]], Preparer]] = {
    "simulated": SimulatedPreparer,
    "http": HttpPreparer,
}

__all__ = ["ConfigError", "Outcome", "Preparation", "Preparer", "available", "load", "parse_config"]


def available() -> list[str]:
    return sorted({*BUILTIN, *(ep.name for ep in entry_points(group=ENTRY_POINT_GROUP))})


def parse_config(text: str) -> dict[str, Any]:
    """The configuration: a JSON object, or ``@path`` to a JSON or YAML file holding one.

    Errors say where the text is broken, never what it holds: a configuration carries credentials
    (a URL's password, an Authorization header) and the error ends up in logs."""
    text = (text or "").strip()
    if not text:
        return {}
    source = f"file {text[1:]}" if text.startswith("@") else f"(inline, {len(text)} characters, not shown)"
    if text.startswith("@"):
        value = _load_file(Path(text[1:]), source)
    else:
        try:
            value = json.loads(text)
        except json.JSONDecodeError as e:
            raise ConfigError(
                f"preparer configuration {source}: not JSON: {e.msg} at line {e.lineno} column {e.colno}"
            ) from None
        except RecursionError:
            raise ConfigError(f"preparer configuration {source}: nested too deeply") from None
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise ConfigError(f"preparer configuration {source} must be an object, got {type(value).__name__}")
    return value


def _load_file(path: Path, source: str) -> Any:
    import yaml  # YAML is a superset of JSON; imported here as only a file needs it

    try:
        return yaml.safe_load(path.read_text())
    except OSError as e:
        raise ConfigError(f"preparer configuration {source}: cannot read it: {e.strerror or e}") from None
    except UnicodeDecodeError as e:
        raise ConfigError(f"preparer configuration {source}: not UTF-8 text (byte {e.start})") from None
    except yaml.YAMLError as e:
        # Without the snippet of the text PyYAML quotes: the problem and where it is.
        problem = getattr(e, "problem", None) or getattr(e, "context", None) or type(e).__name__
        mark = getattr(e, "problem_mark", None) or getattr(e, "context_mark", None)
        where = f" at line {mark.line + 1} column {mark.column + 1}" if mark else ""
        raise ConfigError(f"preparer configuration {source}: not YAML: {problem}{where}") from None
    except RecursionError:
        raise ConfigError(f"preparer configuration {source}: nested too deeply") from None


def load(name: str, config: dict[str, Any]) -> Preparer:
    """Build the preparer ``name``: a built-in one, else the entry point of that name."""
    factory = BUILTIN.get(name)
    if factory is None:
        matches = [ep for ep in entry_points(group=ENTRY_POINT_GROUP) if ep.name == name]
        if not matches:
            raise ConfigError(f"unknown preparer {name!r}; available: {', '.join(available())}")
        try:
            factory = matches[0].load()
        except Exception as e:  # a broken plugin is a configuration error
            raise ConfigError(f"preparer {name!r} ({matches[0].value}) cannot be loaded: {e}") from e
    preparer = factory(config)
    if not isinstance(preparer, Preparer):
        raise ConfigError(f"preparer {name!r} built a {type(preparer).__name__}, not a Preparer")
    return preparer
