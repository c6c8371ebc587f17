"""Where an operator's memory goes, on demand: Python's ``tracemalloc``, off unless
``DRA_TRACEMALLOC`` names how many frames to keep per allocation, then read at
``GET /debug/tracemalloc`` on the metrics port (``core/metrics.serve``).

The answer is the allocations alive now, grouped by their call stack (innermost frame first),
largest first; ``?limit=N`` keeps the N largest. A full garbage collection runs first, so cycles
nobody can reach are not counted as alive; how much they held is said (``garbage_bytes``): a
process whose RSS grows while its live memory does not may just be waiting for that collection.
Nothing is kept between requests: whoever wants growth (``bench/soak.py``) compares two answers.
Tracing costs memory (with 10 frames, the operators' RSS nearly doubles) and CPU, hence off by
default.
"""

from __future__ import annotations

import gc
import json
import os
import sys
import tracemalloc
from collections.abc import Callable, Iterable
from typing import Any
from urllib.parse import parse_qs

PATH = "/debug/tracemalloc"
_IGNORED = (
    tracemalloc.__file__,
    "<frozen importlib._bootstrap>",
    "<frozen importlib._bootstrap_external>",
    "<unknown>",
)
_PREFIXES = sorted({p for p in sys.path if p and os.path.isdir(p)}, key=len, reverse=True)


def start(frames: int) -> bool:
    """Start tracing with ``frames`` frames per allocation (0: off). Returns whether it traces."""
    if frames > 0 and not tracemalloc.is_tracing():
        tracemalloc.start(frames)
    return tracemalloc.is_tracing()


def short(filename: str) -> str:
    """A source path without the import path it was found on (site-packages, the checkout)."""
    for prefix in _PREFIXES:
        if filename.startswith(prefix + os.sep):
            return filename[len(prefix) + 1 :]
    return filename


def report(limit: int | None = None) -> dict[str, Any]:
    """The live allocations by call stack, largest first (raises RuntimeError when not tracing)."""
    if not tracemalloc.is_tracing():
        raise RuntimeError("tracemalloc is off: start the operator with DRA_TRACEMALLOC=<frames>, e.g. 10")
    before, _ = tracemalloc.get_traced_memory()
    collected = gc.collect()
    after, _ = tracemalloc.get_traced_memory()
    snapshot = tracemalloc.take_snapshot().filter_traces([tracemalloc.Filter(False, pattern) for pattern in _IGNORED])
    stats = snapshot.statistics("traceback")
    current, peak = tracemalloc.get_traced_memory()
    return {
        "traced_bytes": current,
        "peak_traced_bytes": peak,
        "garbage_bytes": max(0, before - after),
        "garbage_objects": collected,
        "tracemalloc_overhead_bytes": tracemalloc.get_tracemalloc_memory(),
        "frames": tracemalloc.get_traceback_limit(),
        "sites_total": len(stats),
        "sites": [
            {
                "traceback": [f"{short(f.filename)}:{f.lineno}" for f in reversed(s.traceback)],
                "size": s.size,
                "count": s.count,
            }
            for s in stats[:limit]
        ],
    }


def growth(before: dict[str, Any], after: dict[str, Any], top: int = 10) -> list[dict[str, Any]]:
    """The ``top`` call stacks whose live size grew most from one ``report`` to a later one."""

    def by_stack(answer: dict[str, Any]) -> dict[tuple[str, ...], dict[str, Any]]:
        return {tuple(site["traceback"]): site for site in answer.get("sites") or []}

    old, new = by_stack(before), by_stack(after)
    grown = []
    for stack in set(old) | set(new):
        a, b = old.get(stack, {}), new.get(stack, {})
        grown.append(
            {
                "traceback": list(stack),
                "size_diff": b.get("size", 0) - a.get("size", 0),
                "count_diff": b.get("count", 0) - a.get("count", 0),
                "size": b.get("size", 0),
            }
        )
    grown.sort(key=lambda g: g["size_diff"], reverse=True)
    return [g for g in grown[:top] if g["size_diff"] > 0]


def wsgi(app: Callable) -> Callable:
    """``app`` (the Prometheus exposition) with ``PATH`` answered by ``report``."""

    def routed(environ: dict[str, Any], start_response: Callable) -> Iterable[bytes]:
        if environ.get("PATH_INFO") != PATH:
            return app(environ, start_response)
        query = parse_qs(environ.get("QUERY_STRING", ""))
        try:
            limit = int(query["limit"][0]) if "limit" in query else None
            body, status = json.dumps(report(limit)).encode(), "200 OK"
        except ValueError:
            body, status = (
                json.dumps({"error": f"limit={query['limit'][0]!r} is not a whole number"}).encode(),
                "400 Bad Request",
            )
        except RuntimeError as e:
            body, status = json.dumps({"error": str(e)}).encode(), "404 Not Found"
        start_response(status, [("Content-Type", "application/json"), ("Content-Length", str(len(body)))])
        return [body]

    return routed
