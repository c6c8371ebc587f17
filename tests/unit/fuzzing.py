"""The fuzz tests' shared settings and strategies (tests/unit/fuzz/test_*.py).

Deterministic for CI: ``derandomize`` (the same inputs every run), no example database, no
deadline (a loaded machine must not fail a test by being slow). ``FUZZ_EXAMPLES`` sets the
inputs per decoder for a longer pass; ``FUZZ_REPORT=FILE`` appends "test inputs" lines to FILE.
Every call of a decoder goes through ``bounded``: the process' peak RSS and the CPU time of
one input are checked, so an input that makes a decoder allocate or work without bound fails.
"""

from __future__ import annotations

import inspect
import os
import resource
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

EXAMPLES = int(os.environ.get("FUZZ_EXAMPLES", "100"))
MAX_PEAK = 256 << 20  # bytes of peak RSS the decoders may add (inputs are a few KiB)
MAX_CPU = 10.0  # CPU seconds one input may take (process time: load does not count)

fuzz_settings = settings(
    max_examples=EXAMPLES,
    derandomize=True,
    deadline=None,
    database=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large, HealthCheck.filter_too_much],
)

_counts: dict[str, int] = {}


def _peak_rss() -> int:
    """VmHWM, the process' peak RSS in bytes (ru_maxrss where /proc is not there)."""
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024  # KiB on Linux


def _reset_peak() -> None:
    """Start the peak afresh at the current RSS (Linux: "5" to clear_refs), so that one input is
    judged by what it adds, not by what tests before it in the same process once held (a worker
    that ran test_bounded_memory's 10,000 objects first failed every fuzz input)."""
    try:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")
    except OSError:
        pass  # then the peak is the process' so far: growth under it goes unseen, never a false failure


def bounded(call: Callable[[], Any]) -> Any:
    """``call()``, failing when it takes more than MAX_CPU or adds more than MAX_PEAK to the
    process' peak RSS (the peak is cheap to read; tracemalloc made deep inputs a hundred times
    slower)."""
    _reset_peak()
    start_peak = _peak_rss()
    started = time.process_time()
    try:
        return call()
    finally:
        spent = time.process_time() - started
        grown = _peak_rss() - start_peak
        assert grown < MAX_PEAK, f"one input grew the process' peak RSS by {grown >> 20} MiB"
        assert spent < MAX_CPU, f"one input took {spent:.1f} s of CPU"


def fuzz(**strategies: st.SearchStrategy) -> Callable[[Callable], Callable]:
    """``@given(**strategies)`` with the CI profile, counting the inputs tried (FUZZ_REPORT)."""

    def decorate(test: Callable) -> Callable:
        name = test.__name__

        def counted(*args: Any, **kwargs: Any) -> Any:
            _counts[name] += 1
            return test(*args, **kwargs)

        counted.__signature__ = inspect.signature(test)  # type: ignore[attr-defined]
        run = fuzz_settings(given(**strategies)(counted))

        def reported() -> None:
            _counts[name] = 0
            try:
                run()
            finally:
                if report := os.environ.get("FUZZ_REPORT"):
                    with open(report, "a") as f:
                        f.write(f"{name} {_counts[name]}\n")

        reported.__name__, reported.__qualname__, reported.__doc__ = name, name, test.__doc__
        return reported

    return decorate


# -- strategies ------------------------------------------------------------------------------

scalars = st.none() | st.booleans() | st.integers() | st.floats(allow_nan=True) | st.text(max_size=40)
json_values = st.recursive(
    scalars,
    lambda inner: st.lists(inner, max_size=6) | st.dictionaries(st.text(max_size=20), inner, max_size=6),
    max_leaves=30,
)


def objects_like(*keys: str, values: st.SearchStrategy = json_values) -> st.SearchStrategy:
    """Mappings whose keys are mostly the ones a decoder knows, with any values: reaches deeper
    than random keys would."""
    return st.dictionaries(st.sampled_from(keys) | st.text(max_size=10), values, max_size=len(keys) + 2)


def texts_around(*pieces: str) -> st.SearchStrategy:
    """Text made of the pieces a decoder looks for and arbitrary text between them."""
    return st.lists(st.sampled_from(pieces) | st.text(max_size=12), max_size=8).map("".join)


def scratch() -> Path:
    """A fresh directory for one input's files (fixtures are per test, not per input)."""
    return Path(tempfile.mkdtemp(prefix="fuzz-"))


# JSON nested past Python's recursion limit (json.loads raises RecursionError, not ValueError).
deep_json = st.integers(500, 3_000).map(lambda n: "[" * n + "]" * n) | st.integers(500, 3_000).map(
    lambda n: '{"a":' * n + "1" + "}" * n
)
